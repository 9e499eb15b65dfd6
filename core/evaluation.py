"""Evaluation over arrays: the all-vs-all score matrix of a set of embeddings (optionally re-ranked) and the
retrieval metrics of a benchmark split, same-sighting pairs excluded (docs/DESIGN.md section 4).

The catalogue side (embedding a benchmark's photos, storing the figures) lives in ``db.evaluation``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.metrics import all_vs_all_metrics, all_vs_all_valid, retrieval_metrics
from core.rerank import all_vs_all_rerank, rerankers
from core.similarity import pairwise_scores


def _rerank_methods() -> tuple[str, ...]:
    return ("none", *(n for n in rerankers.names() if n != "none"))


RERANK_METHODS = _rerank_methods()  # the one list of re-ranking names: core.rerank's registry


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
                        patches: np.ndarray | None = None) -> dict[str, Any]:
    """Retrieval metrics of ``emb`` all-vs-all (same-sighting pairs excluded when sightings are known), with the
    figures that include them under ``with_same_sighting``."""
    has_sightings = any(s for s in sightings)
    valid = all_vs_all_valid(len(labels), sightings=sightings if has_sightings else None, exclude_same_sighting=True)
    sim = similarity_for(emb, metric=metric, rerank=rerank, valid=valid, patches=patches)
    main = retrieval_metrics(sim, labels, labels, valid=valid)  # the same mask re-ranking used
    if not labels:
        raise ValueError("the benchmark's test split is empty")
    out = main.to_dict()
    out["same_sighting_excluded"] = has_sightings
    if has_sightings:
        out["with_same_sighting"] = all_vs_all_metrics(sim, labels, exclude_same_sighting=False).to_dict()
    return out
