"""Evaluation over arrays: the all-vs-all score matrix of a set of embeddings (optionally re-ranked) and the
retrieval metrics of a benchmark split, same-sighting pairs excluded (docs/DESIGN.md section 4).

Per-flank figures (``rosette eval --flank``): ``any`` ranks every other photo; ``same`` restricts each query's
gallery to photos of its own flank (what curators review), ``cross`` to the other flank (left <-> right, what the
jaguar paper reports on its own). A query or gallery photo without a left/right flank (front, other, unknown) takes
no part in ``same`` / ``cross``. The flank masks are :func:`core.inspect.diagnostics.flank_masks`, the ones the flank
diagnostic uses; the figures are the same AP / CMC of :mod:`core.metrics` over the masked gallery.

The catalogue side (embedding a benchmark's photos, storing the figures) lives in ``db.identify.evaluation``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collections.abc import Sequence

from core.inspect.diagnostics import flank_codes, flank_masks
from core.metrics import RetrievalResult, all_vs_all_valid, retrieval_metrics
from core.identify.rerank import all_vs_all_rerank, rerankers
from core.similarity import pairwise_scores


def _rerank_methods() -> tuple[str, ...]:
    return ("none", *(n for n in rerankers.names() if n != "none"))


RERANK_METHODS = _rerank_methods()  # the one list of re-ranking names: core.identify.rerank's registry
FLANK_SETTINGS = ("any", "same", "cross")  # rosette eval --flank: which side of the animal the gallery shows


def check_flank(flank: str) -> str:
    """``flank`` if it is a known setting, else a ValueError naming the known ones."""
    if flank not in FLANK_SETTINGS:
        raise ValueError(f"unknown flank setting {flank!r}; expected one of {', '.join(FLANK_SETTINGS)}")
    return flank


def flank_gallery(valid: np.ndarray, flanks: Sequence | None, flank: str = "any") -> np.ndarray:
    """The all-vs-all gallery mask ``valid`` (N x N) restricted per query to its own flank (``same``) or to the
    other one (``cross``); ``any`` returns ``valid`` itself. Rows and columns of photos without a left/right flank
    are all False under ``same`` / ``cross`` (such queries drop out of the figures)."""
    check_flank(flank)
    if flank == "any":
        return valid
    if flanks is None or len(flanks) != valid.shape[0]:
        raise ValueError(f"--flank {flank} needs the flank of every photo")
    return valid & flank_masks(flanks)["within" if flank == "same" else "cross"]


def flank_retrieval(similarity: np.ndarray, labels: Sequence, flanks: Sequence | None, *, flank: str = "any",
                    valid: np.ndarray | None = None) -> RetrievalResult:
    """All-vs-all retrieval metrics of an N x N score matrix with each query's gallery restricted by ``flank``
    (:func:`flank_gallery`); ``valid`` (default: every other photo) is the protocol's mask before the flank."""
    sim = np.asarray(similarity)
    base = all_vs_all_valid(sim.shape[0]) if valid is None else np.asarray(valid, dtype=bool)
    return retrieval_metrics(sim, labels, labels, valid=flank_gallery(base, flanks, flank))


def flank_counts(flanks: Sequence | None, flank: str) -> dict[str, Any]:
    """What a per-flank evaluation says about its queries: the setting, and under ``same`` / ``cross`` how many
    photos are left, right, and left out for want of a left/right flank."""
    out: dict[str, Any] = {"flank": check_flank(flank)}
    if flank != "any":
        code = flank_codes(flanks or [])
        out["flank_counts"] = {"left": int(np.sum(code == 0)), "right": int(np.sum(code == 1)),
                               "no_side": int(np.sum(code < 0))}
    return out


def similarity_for(emb: np.ndarray, *, metric: str = "cosine", rerank: str = "none",
                   valid: np.ndarray | None = None, patches: np.ndarray | None = None) -> np.ndarray:
    """All-vs-all score matrix, optionally re-ranked (k-reciprocal, average query expansion, or patch transport
    with ``patches``); ``valid`` marks the pairs re-ranking may use as neighbours (e.g. not from the same
    sighting)."""
    sim = pairwise_scores(emb, emb, metric=metric)
    if rerank in ("none", "", None):
        return sim
    opts = {"patches": patches} if rerank == "patch_ot" else {}
    return all_vs_all_rerank(sim, method=rerank, valid=valid, **opts)


def evaluate_embeddings(emb: np.ndarray, labels: list[str], sightings: list[str | None], *,
                        metric: str = "cosine", rerank: str = "none",
                        patches: np.ndarray | None = None, flanks: Sequence | None = None,
                        flank: str = "any") -> dict[str, Any]:
    """Retrieval metrics of ``emb`` all-vs-all (same-sighting pairs excluded when sightings are known), with the
    figures that include them under ``with_same_sighting``; ``flank`` (with ``flanks``) restricts each query's
    gallery to its own flank or the other one (:func:`flank_gallery`; re-ranking still sees every photo)."""
    check_flank(flank)
    has_sightings = any(s for s in sightings)
    valid = all_vs_all_valid(len(labels), sightings=sightings if has_sightings else None, exclude_same_sighting=True)
    sim = similarity_for(emb, metric=metric, rerank=rerank, valid=valid, patches=patches)
    main = flank_retrieval(sim, labels, flanks, flank=flank, valid=valid)  # the same mask re-ranking used
    if not labels:
        raise ValueError("the benchmark's test split is empty")
    out = main.to_dict()
    out["same_sighting_excluded"] = has_sightings
    if has_sightings:
        out["with_same_sighting"] = flank_retrieval(sim, labels, flanks, flank=flank).to_dict()
    out.update(flank_counts(flanks, flank))
    return out
