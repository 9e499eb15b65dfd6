"""Flank suggestions: which side of the animal a photo shows, from a model's features.

Features of a photo x and of its mirror image flip(x) are combined as [f(x) + f(flip x), f(x) - f(flip x)]:
the first half does not change when the photo is mirrored, the second changes sign. A mirror-blind model
(mirror similarity near 1) carries almost no orientation in f(x) itself, but the difference still holds
what little there is, and mirroring a left flank makes it look like a right one, which the classifier sees
as a sign flip. A multinomial logistic regression (scikit-learn) on the labelled photos predicts
left / right / other (``front`` counts as other); its accuracy is measured on a seeded held-out 20 %.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FLANK_CLASSES = ("left", "right", "other")


def flank_class(flank: str) -> str | None:
    """left / right / other (front and other), None for unknown."""
    f = (flank or "").lower()
    if f in ("left", "right"):
        return f
    if f in ("front", "other"):
        return "other"
    return None


def orientation_features(emb: np.ndarray, emb_flipped: np.ndarray) -> np.ndarray:
    """[f(x) + f(flip x), f(x) - f(flip x)] per row."""
    a = np.asarray(emb, dtype=np.float64)
    b = np.asarray(emb_flipped, dtype=np.float64)
    return np.concatenate([a + b, a - b], axis=1)


@dataclass
class FlankClassifier:
    model: object
    classes: tuple[str, ...]
    accuracy: float | None
    n_train: int
    n_test: int

    def predict(self, features: np.ndarray) -> tuple[list[str], np.ndarray]:
        """(suggested flank, confidence = predicted probability of it) per row."""
        proba = self.model.predict_proba(features)
        best = proba.argmax(axis=1)
        return [str(self.model.classes_[i]) for i in best], proba[np.arange(len(best)), best]


def fit_flank_classifier(features: np.ndarray, flanks: list[str], *, seed: int = 0,
                         test_fraction: float = 0.2) -> FlankClassifier:
    """Logistic regression on labelled photos; accuracy on a stratified held-out share, then refit on all."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split

    y = np.array([flank_class(f) for f in flanks], dtype=object)
    keep = np.array([c is not None for c in y], dtype=bool)  # an empty list must still index as a mask
    x, y = np.asarray(features)[keep], y[keep].astype(str)
    classes = tuple(sorted(set(y)))
    if len(classes) < 2 or len(y) < 10:
        raise ValueError(f"flank suggestions need at least 10 photos with a flank and two sides among them; "
                         f"there are {len(y)} ({', '.join(classes) or 'none'})")
    make = lambda: LogisticRegression(max_iter=2000, C=1.0)  # noqa: E731
    accuracy, n_test = None, 0
    counts = {c: int((y == c).sum()) for c in classes}
    if len(y) >= 20 and min(counts.values()) >= 2:
        xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=y)
        accuracy = float((make().fit(xtr, ytr).predict(xte) == yte).mean())
        n_test = len(yte)
    return FlankClassifier(model=make().fit(x, y), classes=classes, accuracy=accuracy, n_train=len(y), n_test=n_test)
