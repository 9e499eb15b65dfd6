"""The probability that a query's animal is not in the gallery ("a new animal"), calibrated and measured.

A query is read by two numbers: its best score against any gallery individual (an individual's score is its best
photo's) and the gap from that to the second-best individual's. A logistic regression (Platt scaling, as
:func:`core.identify.calibration.fit_platt` for same / not same) of "new" on the two standardised numbers gives p(new).

It is fitted and measured on a protocol that makes new animals out of known ones (:func:`novelty_queries`): a
random share (a third) of the identities is set aside; one photo of each is a query and their other photos leave
the gallery; every photo of the other identities is a query against the rest. Photos of the query's own sighting
are never its gallery (they would make a match too easy), and a query with no photo of its animal left in its
gallery counts as new. The expected calibration error of p(new) is :func:`core.identify.calibration.reliability`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.identify.calibration import reliability

DEFAULT_SHARE = 1 / 3
MIN_QUERIES = 10


@dataclass(frozen=True)
class NoveltyQueries:
    """Per query: its photo's index, its best individual score, the gap to the second best, and whether its
    animal is absent from its gallery."""

    query: np.ndarray
    top1: np.ndarray
    gap: np.ndarray
    is_new: np.ndarray
    new_identities: tuple[Any, ...] = ()


def best_per_individual(sim: np.ndarray, valid: np.ndarray, gallery_labels: Sequence[Any]
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Queries x individuals: each individual's best valid score (-inf where it has no valid photo), and the
    individuals (sorted)."""
    labels = np.asarray(gallery_labels, dtype=object)
    names, codes = np.unique(labels.astype(str), return_inverse=True)
    order = np.argsort(codes, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
    masked = np.where(valid, np.asarray(sim, dtype=np.float64), -np.inf)[:, order]
    return np.maximum.reduceat(masked, starts, axis=1), names


def top_two(best: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(best individual score, its gap to the second best) per row; a gallery of one individual has gap 0 to
    itself. Rows with no valid individual get -1 and 0."""
    if best.shape[1] == 0:
        return np.full(best.shape[0], -1.0), np.zeros(best.shape[0])
    part = -np.sort(-best, axis=1)[:, :2]
    top1 = part[:, 0]
    second = part[:, 1] if best.shape[1] > 1 else part[:, 0]
    top1_f = np.where(np.isfinite(top1), top1, -1.0)
    gap = np.where(np.isfinite(second), top1_f - second, 0.0) if best.shape[1] > 1 else np.zeros_like(top1_f)
    return top1_f, np.where(np.isfinite(gap), gap, 0.0)


def novelty_queries(sim: np.ndarray, labels: Sequence[Any], *, sightings: Sequence[Any] | None = None,
                    query_pool: np.ndarray | None = None, share: float = DEFAULT_SHARE, seed: int = 0
                    ) -> NoveltyQueries:
    """The protocol of the module notes over an all-vs-all score matrix ``sim`` of photos with ``labels``:
    ``query_pool`` (default: every photo) says which photos' identities take part as queries; a ``share`` of
    those identities become new animals (seeded)."""
    if not 0 < share < 1:
        raise ValueError(f"the share of identities made new must be between 0 and 1, got {share!r}")
    lab = np.asarray([str(x) for x in labels], dtype=object)
    n = lab.size
    pool = np.ones(n, dtype=bool) if query_pool is None else np.asarray(query_pool, dtype=bool)
    rng = np.random.default_rng(seed)
    pool_ids = np.unique(lab[pool])
    n_new = int(round(share * pool_ids.size))
    new_ids = set(rng.choice(pool_ids, size=n_new, replace=False).tolist()) if n_new else set()
    is_new_photo = np.array([x in new_ids for x in lab])
    queries = []
    for ident in sorted(new_ids):
        members = np.flatnonzero((lab == ident) & pool)
        queries.append(int(rng.choice(members)))
    queries += np.flatnonzero(pool & ~is_new_photo).tolist()
    q = np.asarray(sorted(queries), dtype=np.int64)
    valid = ~is_new_photo[None, :] & (np.arange(n)[None, :] != q[:, None])
    if sightings is not None:
        sg = np.asarray([None if s in (None, "") else str(s) for s in sightings], dtype=object)
        same = (sg[q][:, None] == sg[None, :]) & np.array([s is not None for s in sg[q]])[:, None]
        valid &= ~same
    best, names = best_per_individual(np.asarray(sim)[q], valid, lab)
    top1, gap = top_two(best)
    own = np.searchsorted(names, lab[q].astype(str))
    has_own = np.isfinite(best[np.arange(q.size), np.minimum(own, names.size - 1)]) & (names[np.minimum(
        own, names.size - 1)] == lab[q])
    return NoveltyQueries(query=q, top1=top1, gap=gap, is_new=~has_own, new_identities=tuple(sorted(new_ids)))


def _features(top1: np.ndarray, gap: np.ndarray) -> np.ndarray:
    return np.column_stack([np.asarray(top1, dtype=np.float64), np.asarray(gap, dtype=np.float64)])


@dataclass
class NewAnimalCalibrator:
    """p(new) from a query's best score and gap, with what it rests on."""

    model: Any
    n_queries: int
    n_new: int
    sources: dict[str, int] = field(default_factory=dict)

    def probability(self, top1: np.ndarray | Sequence[float], gap: np.ndarray | Sequence[float]) -> np.ndarray:
        return self.model.predict_proba(_features(np.ravel(top1), np.ravel(gap)))[:, 1]


def fit_new_animal(queries: NoveltyQueries, *, strength: float = 1.0,
                   sources: dict[str, int] | None = None) -> NewAnimalCalibrator:
    """Platt scaling of "new" on (best score, gap), with an L2 prior of ``strength``; refused (ValueError) without
    :data:`MIN_QUERIES` queries and both outcomes among them."""
    from sklearn.linear_model import LogisticRegression  # lazy: scikit-learn is heavy to import
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    y = queries.is_new.astype(int)
    if y.size < MIN_QUERIES or len(np.unique(y)) < 2:
        raise ValueError(f"p(new) needs at least {MIN_QUERIES} queries with both new and known animals among them; "
                         f"there are {y.size} ({int(y.sum())} new)")
    model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0 / strength))
    model.fit(_features(queries.top1, queries.gap), y)
    return NewAnimalCalibrator(model=model, n_queries=int(y.size), n_new=int(y.sum()), sources=dict(sources or {}))


def measure(cal: NewAnimalCalibrator, queries: NoveltyQueries, *, n_bins: int = 10) -> dict[str, Any]:
    """The reliability diagram and ECE of p(new) on ``queries`` (not the ones it was fitted on, for an honest
    figure)."""
    return reliability(cal.probability(queries.top1, queries.gap), queries.is_new.astype(int), n_bins=n_bins)
