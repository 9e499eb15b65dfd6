"""How a pipeline's scorers are combined, chosen by cross-validation grouped by individual.

Each scorer is first calibrated into P(same animal) (:mod:`core.identify.spots.fusion`); a :class:`Fusion`
(``single``, ``mean`` or ``logistic``) turns one pair's calibrated probabilities into one score.
:func:`choose_fusion` keeps the candidate with the best out-of-fold macro mAP and CMC@1, folds being whole
individuals so no animal is scored by a fit that saw it; a logistic fit that does not converge is not trusted and
the best single scorer is kept instead.

The candidates and the cross-validation protocol: docs/spots.md."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.identify.calibration import Calibrator
from core.metrics import retrieval_metrics
from core.identify.spots.fusion import (
    GLOBAL,
    fit_scorer_calibrations,
    fuse_probabilities,
    ranking_scores,
    shortlist_ranks,
)

SINGLE = "single"
MEAN = "mean"
LOGISTIC = "logistic"
FUSION_KINDS = (SINGLE, MEAN, LOGISTIC)
CV_FOLDS = 5
#: a probability is clipped this far from 0 and 1 before its log-odds are taken (isotonic steps reach 0 and 1)
LOGIT_CLIP = 1e-4
MAX_ITER = 1000
#: fewer same-animal pairs than this in the calibration set and no fusion (or calibration) is fitted at all
MIN_SAME_PAIRS = 20


class FusionNotConverged(RuntimeError):
    """The logistic fusion's solver stopped before converging."""


@dataclass(frozen=True)
class Fusion:
    """One way of combining calibrated probabilities, with its fitted weights (logistic), storable as JSON."""

    kind: str
    scorers: tuple[str, ...]
    uses_ranks: bool = False
    features: tuple[str, ...] = ()
    center: tuple[float, ...] = ()
    scale: tuple[float, ...] = ()
    weights: tuple[float, ...] = ()
    intercept: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in FUSION_KINDS:
            raise ValueError(f"unknown fusion {self.kind!r}; expected one of {FUSION_KINDS}")
        if not self.scorers:
            raise ValueError("a fusion needs at least one scorer")
        if self.kind == SINGLE and len(self.scorers) != 1:
            raise ValueError("a single-scorer fusion names exactly one scorer")
        if self.kind == LOGISTIC and not (len(self.features) == len(self.center) == len(self.scale)
                                          == len(self.weights)):
            raise ValueError("a logistic fusion needs one centre, scale and weight per feature")

    @property
    def fitted(self) -> bool:
        """Whether it can combine (a logistic fusion before :func:`fit_logistic` has no weights yet)."""
        return self.kind != LOGISTIC or bool(self.weights)

    @property
    def name(self) -> str:
        if self.kind == SINGLE:
            return self.scorers[0]
        if self.kind == MEAN:
            return "mean: " + "+".join(self.scorers)
        return "logistic: log-odds" + (" + ranks" if self.uses_ranks else "")

    @property
    def needs(self) -> tuple[str, ...]:
        """The scorers whose probabilities it reads (the global one always, for pairs nothing else judges)."""
        return tuple(dict.fromkeys((GLOBAL, *self.scorers)))

    def combine(self, probabilities: Mapping[str, np.ndarray], applies: Mapping[str, np.ndarray] | None = None,
                ranks: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """The fused probability of each pair from its scorers' calibrated probabilities (arrays of one shape),
        where each applies (default everywhere; the global scorer always) and, for a fusion on ranks, each
        pair's rank within its query's shortlist by that scorer (1 = first)."""
        shape = np.asarray(probabilities[GLOBAL]).shape
        use = {s: _applies(probabilities, applies, s, shape) for s in self.needs}
        if self.kind == SINGLE:
            s = self.scorers[0]
            return np.where(use[s], np.asarray(probabilities[s], np.float64),
                            np.asarray(probabilities[GLOBAL], np.float64))
        if self.kind == MEAN:
            return fuse_probabilities({s: probabilities[s] for s in self.scorers},
                                      {s: use[s] for s in self.scorers})
        if not self.fitted:
            raise ValueError(f"the fusion {self.name!r} has not been fitted")
        x = fusion_features(self.scorers, probabilities, use, ranks if self.uses_ranks else None)
        z = (x - np.asarray(self.center)) / np.asarray(self.scale)
        logit = z @ np.asarray(self.weights) + self.intercept
        return (1.0 / (1.0 + np.exp(-logit))).reshape(shape)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "scorers": list(self.scorers), "uses_ranks": self.uses_ranks,
                "features": list(self.features), "center": list(self.center), "scale": list(self.scale),
                "weights": list(self.weights), "intercept": self.intercept}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fusion:
        return cls(kind=str(data["kind"]), scorers=tuple(data["scorers"]), uses_ranks=bool(data.get("uses_ranks")),
                   features=tuple(data.get("features") or ()), center=tuple(map(float, data.get("center") or ())),
                   scale=tuple(map(float, data.get("scale") or ())),
                   weights=tuple(map(float, data.get("weights") or ())), intercept=float(data.get("intercept", 0.0)))


def _applies(probabilities: Mapping[str, np.ndarray], applies: Mapping[str, np.ndarray] | None, scorer: str,
             shape: tuple[int, ...]) -> np.ndarray:
    p = np.asarray(probabilities[scorer], np.float64)
    use = np.ones(shape, bool) if applies is None or scorer not in applies or scorer == GLOBAL \
        else np.asarray(applies[scorer], bool)
    return use & np.isfinite(p)


def feature_names(scorers: Sequence[str], *, uses_ranks: bool) -> tuple[str, ...]:
    names: list[str] = []
    for s in scorers:
        names.append(f"log-odds {s}")
        if s != GLOBAL:
            names.append(f"applies {s}")
        if uses_ranks:
            names.append(f"log rank {s}")
    return tuple(names)


def fusion_features(scorers: Sequence[str], probabilities: Mapping[str, np.ndarray],
                    use: Mapping[str, np.ndarray], ranks: Mapping[str, np.ndarray] | None) -> np.ndarray:
    """Columns of :func:`feature_names` for each pair (flattened): a scorer's calibrated log-odds where it
    applies (0 elsewhere), whether it applies (local scorers), the log of its shortlist rank (0 elsewhere)."""
    cols: list[np.ndarray] = []
    for s in scorers:
        u = np.asarray(use[s], bool).reshape(-1)
        p = np.clip(np.nan_to_num(np.asarray(probabilities[s], np.float64).reshape(-1), nan=0.5),
                    LOGIT_CLIP, 1.0 - LOGIT_CLIP)
        cols.append(np.where(u, np.log(p / (1.0 - p)), 0.0))
        if s != GLOBAL:
            cols.append(u.astype(np.float64))
        if ranks is not None:
            r = np.asarray(ranks[s], np.float64).reshape(-1)
            cols.append(np.where(u & np.isfinite(r), np.log(np.maximum(np.nan_to_num(r, nan=1.0), 1.0)), 0.0))
    return np.column_stack(cols)


def fit_logistic(scorers: Sequence[str], probabilities: Mapping[str, np.ndarray], use: Mapping[str, np.ndarray],
                 ranks: Mapping[str, np.ndarray] | None, same: np.ndarray, *, max_iter: int = MAX_ITER) -> Fusion:
    """Logistic regression (L2, C = 1) of same (1) / not (0) on :func:`fusion_features` of the pairs (flat
    arrays); raises :class:`FusionNotConverged` when the solver stops at ``max_iter`` without converging."""
    from sklearn.exceptions import ConvergenceWarning  # lazy: scikit-learn is heavy to import
    from sklearn.linear_model import LogisticRegression

    x = fusion_features(scorers, probabilities, use, ranks)
    y = np.asarray(same).reshape(-1).astype(int)
    if np.unique(y).size < 2:
        raise ValueError("the fusion needs same-animal and different-animal pairs to fit on")
    center = x.mean(axis=0)
    scale = x.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    model = LogisticRegression(C=1.0, max_iter=max_iter)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit((x - center) / scale, y)
    if any(issubclass(w.category, ConvergenceWarning) for w in caught) or int(np.max(model.n_iter_)) >= max_iter:
        raise FusionNotConverged(f"the logistic fusion did not converge in {max_iter} iterations "
                                 f"({x.shape[0]} pairs, {x.shape[1]} features)")
    return Fusion(kind=LOGISTIC, scorers=tuple(scorers), uses_ranks=ranks is not None,
                  features=feature_names(scorers, uses_ranks=ranks is not None),
                  center=tuple(map(float, center)), scale=tuple(map(float, scale)),
                  weights=tuple(map(float, model.coef_[0])), intercept=float(model.intercept_[0]))


def candidate_fusions(scorers: Sequence[str]) -> list[Fusion]:
    """Every fusion compared (unfitted): each scorer alone, the mean of the global one with each subset of the
    local ones, and the logistic fusion without and with ranks. Simplest first (the order that breaks ties)."""
    scorers = tuple(dict.fromkeys((GLOBAL, *scorers)))
    local = [s for s in scorers if s != GLOBAL]
    out = [Fusion(SINGLE, (s,)) for s in scorers]
    subsets = [(GLOBAL, s) for s in local] + ([tuple(scorers)] if len(local) > 1 else [])
    out += [Fusion(MEAN, sub) for sub in subsets]
    if local:
        out += [Fusion(LOGISTIC, scorers, uses_ranks=False), Fusion(LOGISTIC, scorers, uses_ranks=True)]
    return out


def individual_folds(labels: Sequence[str], n_folds: int, *, seed: int = 0) -> np.ndarray:
    """Fold number of each photo: individuals in seeded random order dealt round-robin into ``n_folds`` folds,
    so every photo of one individual is in one fold."""
    if n_folds < 2:
        raise ValueError(f"cross-validation needs at least 2 folds, got {n_folds}")
    names = sorted({str(v) for v in labels})
    if len(names) < n_folds:
        raise ValueError(f"{len(names)} individuals cannot fill {n_folds} folds")
    order = np.random.default_rng(seed).permutation(len(names))
    fold_of = {names[i]: n % n_folds for n, i in enumerate(order)}
    return np.array([fold_of[str(v)] for v in labels], dtype=int)


@dataclass
class FusionChoice:
    """The fusion kept, every candidate's cross-validated figures, and why."""

    fusion: Fusion
    cv: dict[str, dict[str, float]]
    why: str
    fitted: dict[str, Fusion] = field(default_factory=dict)
    n_folds: int = 0
    fell_back: bool = False
    not_converged: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"kept": self.fusion.name, "fusion": self.fusion.to_dict(), "cv": self.cv, "why": self.why,
                "n_folds": self.n_folds, "fell_back": self.fell_back, "not_converged": list(self.not_converged)}


def _short_probabilities(raw: Mapping[str, np.ndarray], calibrators: Mapping[str, Calibrator]
                         ) -> dict[str, np.ndarray]:
    return {s: calibrators[s].probability(np.nan_to_num(np.asarray(raw[s], np.float64), nan=0.0).reshape(-1))
            .reshape(np.shape(raw[s])) for s in raw if s in calibrators}


def fused_on_shortlist(fusion: Fusion, raw: Mapping[str, np.ndarray], applies: Mapping[str, np.ndarray],
                       calibrators: Mapping[str, Calibrator], shortlist: np.ndarray) -> np.ndarray:
    """Q x G fused probabilities of a fitted ``fusion`` (meaningful on the ``shortlist`` only)."""
    probs = _short_probabilities({s: raw[s] for s in fusion.needs}, calibrators)
    ranks = ({s: shortlist_ranks(raw[s], shortlist, applies.get(s)) for s in fusion.scorers}
             if fusion.uses_ranks else None)
    return fusion.combine(probs, applies, ranks)


def _fit(candidate: Fusion, raw: Mapping[str, np.ndarray], applies: Mapping[str, np.ndarray],
         calibrators: Mapping[str, Calibrator], pairs: np.ndarray, shortlist: np.ndarray, same: np.ndarray, *,
         max_iter: int) -> Fusion:
    if candidate.kind != LOGISTIC:
        return candidate
    probs = _short_probabilities({s: raw[s] for s in candidate.needs}, calibrators)
    use = {s: _applies(probs, applies, s, same.shape) for s in candidate.scorers}
    ranks = ({s: shortlist_ranks(raw[s], shortlist, applies.get(s)) for s in candidate.scorers}
             if candidate.uses_ranks else None)
    sel = np.asarray(pairs, bool)
    return fit_logistic(candidate.scorers, {s: probs[s][sel] for s in candidate.scorers},
                        {s: use[s][sel] for s in candidate.scorers},
                        {s: ranks[s][sel] for s in candidate.scorers} if ranks is not None else None,
                        same[sel], max_iter=max_iter)


def choose_fusion(raw: Mapping[str, np.ndarray], applies: Mapping[str, np.ndarray], valid: np.ndarray,
                  shortlist: np.ndarray, labels: Sequence[str], scorers: Sequence[str], *,
                  calibrators: Mapping[str, Calibrator], n_folds: int = CV_FOLDS, seed: int = 0,
                  max_iter: int = MAX_ITER) -> FusionChoice:
    """Compare :func:`candidate_fusions` of ``scorers`` by cross-validation grouped by individual on one
    all-vs-all calibration set (``raw``/``applies`` Q x Q per scorer, ``valid`` pairs, the global
    ``shortlist``, ``labels`` its individuals) and keep the best; ``calibrators`` are the isotonic curves fitted
    on all its pairs, with which the kept fusion is refitted on all pairs."""
    labels_arr = np.asarray([str(v) for v in labels])
    same = labels_arr[:, None] == labels_arr[None, :]
    valid = np.asarray(valid, bool)
    short = np.asarray(shortlist, bool) & valid
    n_same = int((short & same).sum())
    if n_same < MIN_SAME_PAIRS:
        raise ValueError(f"the calibration set gives {n_same} same-animal pairs in the shortlists, fewer than "
                         f"{MIN_SAME_PAIRS}")
    n_ind = len(set(labels_arr.tolist()))
    folds = individual_folds(labels_arr, min(n_folds, n_ind), seed=seed)
    k = int(folds.max()) + 1
    candidates = candidate_fusions(scorers)
    local_applies = {s: v for s, v in applies.items() if s != GLOBAL}
    g = np.asarray(raw[GLOBAL], np.float64)
    oof = {c.name: np.full(g.shape, np.nan) for c in candidates}
    dropped: dict[str, str] = {}
    for f in range(k):
        train = folds != f
        pairs = short & train[:, None] & train[None, :]  # both photos of the other folds' individuals
        cals = fit_scorer_calibrations({s: raw[s] for s in raw if s in (GLOBAL, *scorers)}, same, pairs,
                                       local_applies, source=f"fold {f + 1}")
        rows = folds == f
        for c in candidates:
            if c.name in dropped:
                continue
            if not all(s in cals for s in c.needs):
                dropped[c.name] = f"fold {f + 1} had too few pairs to calibrate {', '.join(set(c.needs) - set(cals))}"
                continue
            try:
                fitted = _fit(c, raw, applies, cals, pairs, short, same, max_iter=max_iter)
            except FusionNotConverged as exc:
                dropped[c.name] = f"{exc} in fold {f + 1}"
                continue
            except ValueError as exc:
                dropped[c.name] = f"fold {f + 1}: {exc}"
                continue
            sub = {s: np.asarray(v)[rows] for s, v in raw.items()}
            sub_applies = {s: np.asarray(v)[rows] for s, v in applies.items()}
            oof[c.name][rows] = fused_on_shortlist(fitted, sub, sub_applies, cals, short[rows])
    cv: dict[str, dict[str, float]] = {}
    for c in candidates:
        if c.name in dropped:
            continue
        sim = ranking_scores(g, valid, short, oof[c.name])
        m = retrieval_metrics(sim, labels_arr, labels_arr, valid=valid)
        cv[c.name] = {"map_macro": float(m.map_macro), "cmc1_macro": float(m.cmc_macro[1])}
    not_converged = [n for n, why in dropped.items() if "did not converge" in why]

    def merit(name: str) -> float:
        return (cv[name]["map_macro"] + cv[name]["cmc1_macro"]) / 2.0

    singles = [c for c in candidates if c.kind == SINGLE and c.name in cv]
    if not singles:
        raise ValueError("no scorer could be calibrated within the cross-validation folds: too few pairs")
    best_single = max(singles, key=lambda c: merit(c.name))  # max keeps the first of equals: the simplest
    ranked = sorted((c for c in candidates if c.name in cv), key=lambda c: -merit(c.name))  # stable: simplest first
    winner = ranked[0]
    fitted: dict[str, Fusion] = {}
    every = short
    for c in candidates:
        if c.name not in cv:
            continue
        try:
            fitted[c.name] = _fit(c, raw, applies, calibrators, every, short, same, max_iter=max_iter)
        except FusionNotConverged as exc:
            not_converged.append(c.name)
            dropped[c.name] = f"{exc} on all calibration pairs"
    figures = (lambda n: f"mAP {cv[n]['map_macro']:.3f}, CMC@1 {cv[n]['cmc1_macro']:.3f}")
    runner = next((c for c in ranked[1:]), None)
    if not_converged:
        kept = fitted[best_single.name]
        why = (f"{'; '.join(dropped[n] for n in dict.fromkeys(not_converged))}: fell back to the best single scorer, "
               f"{best_single.name} ({figures(best_single.name)} cross-validated)")
        return FusionChoice(kept, cv, why, fitted, k, fell_back=True, not_converged=list(dict.fromkeys(not_converged)))
    kept = fitted[winner.name]
    why = (f"{winner.name} has the best cross-validated mean of macro mAP and CMC@1 ({figures(winner.name)}, "
           f"{k} folds of whole individuals)"
           + (f"; next {runner.name} ({figures(runner.name)})" if runner is not None else ""))
    for name, reason in dropped.items():
        why += f"; {name} left out: {reason}"
    return FusionChoice(kept, cv, why, fitted, k)
