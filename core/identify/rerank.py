"""Optional re-ranking of retrieval scores (all switches off by default).

Every function returns a new similarity matrix (higher = better) with the shape of the input ranking, so metrics
and the match view read it exactly like a plain :func:`core.similarity.pairwise_scores` matrix: average query
expansion (Chum et al. 2007), k-reciprocal re-ranking (Zhong et al. 2017) and ID-Sim patch transport
(``patch_ot``). Nothing is on by default because none raised macro mAP on nyala with frozen features; re-measure
on a trained head before enabling one.

The formulas, their sources and the measurements: docs/retrieval.md."""

from __future__ import annotations

import numpy as np

from core.registry import Registry
from core.similarity import METRICS, l2_normalize, pairwise_scores

rerankers: Registry = Registry("re-ranking method")


def _finite_matrix(x: np.ndarray, *, what: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"{what} must be a 2-D matrix, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what} contains NaN or inf; pass raw scores and exclude pairs with a mask instead")
    return a


def _top_neighbours(similarity: np.ndarray, k: int) -> np.ndarray:
    """Column indices of the k best scores per row, best first, ties by index."""
    return np.argsort(-similarity, axis=1, kind="stable")[:, :k]


def lorentz_centroid(points: np.ndarray, *, axis: int = 0) -> np.ndarray:
    """Lorentzian centroid c = s / sqrt(-<s, s>_L), s = sum of the points along ``axis`` (on the hyperboloid)."""
    import torch

    from core.lorentz import minkowski_norm_sq  # lazy: imports torch (start-up time)

    s = torch.as_tensor(np.sum(np.asarray(points, dtype=np.float64), axis=axis))
    return (s / minkowski_norm_sq(s).clamp_min(1e-12).sqrt()[..., None]).numpy()


def average_query_expansion(
    query_emb: np.ndarray,
    gallery_emb: np.ndarray,
    *,
    top_k: int = 3,
    metric: str = "cosine",
) -> np.ndarray:
    """Q x G similarity after average query expansion with the ``top_k`` best gallery rows (see module doc)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}")
    q = np.asarray(query_emb, dtype=np.float64)
    g = np.asarray(gallery_emb, dtype=np.float64)
    if metric == "cosine":
        q, g = l2_normalize(q), l2_normalize(g)
    base = pairwise_scores(q, g, metric=metric)
    k = min(int(top_k), g.shape[0])
    if k == 0 or q.shape[0] == 0:
        return base
    nn = _top_neighbours(base, k)  # Q x k
    stacked = np.concatenate([np.asarray(q, np.float64)[:, None, :], np.asarray(g, np.float64)[nn]], axis=1)
    if metric == "cosine":
        expanded = l2_normalize(stacked.sum(axis=1))
    else:
        expanded = lorentz_centroid(stacked, axis=1)
    return pairwise_scores(expanded, g, metric=metric)


def _k_reciprocal_sets(rank: np.ndarray, k: int) -> np.ndarray:
    """Boolean N x N: [p, g] is True when g is among the k+1 nearest of p and p among the k+1 nearest of g."""
    n = rank.shape[0]
    in_top = np.zeros((n, n), dtype=bool)
    rows = np.repeat(np.arange(n), min(k + 1, n))
    in_top[rows, rank[:, : k + 1].ravel()] = True
    return in_top & in_top.T


def _k_reciprocal_distance(dist: np.ndarray, n_query: int, *, k1: int, k2: int, lambda_value: float) -> np.ndarray:
    """Zhong et al. final distance of the first ``n_query`` rows of the pooled N x N distance ``dist`` to all N."""
    n = dist.shape[0]
    rank = np.argsort(dist, axis=1, kind="stable")
    r_full = _k_reciprocal_sets(rank, k1)
    r_half = _k_reciprocal_sets(rank, int(np.around(k1 / 2.0)))
    half_sizes = r_half.sum(axis=1)
    weights = np.zeros((n, n), dtype=np.float64)
    for p in range(n):
        members = r_full[p].copy()
        cand = np.flatnonzero(members)
        if cand.size:
            overlap = (r_half[cand] & members).sum(axis=1)
            grow = cand[overlap > (2.0 / 3.0) * half_sizes[cand]]
            if grow.size:
                members |= r_half[grow].any(axis=0)
        idx = np.flatnonzero(members)
        w = np.exp(-dist[p, idx])
        weights[p, idx] = w / w.sum()
    if k2 > 1:
        weights = weights[rank[:, :k2]].mean(axis=1)
    # d_J numerator sum_h min(V[p,h], V[g,h]) only needs the columns h where V[p] is non-zero
    jaccard = np.empty((n_query, n), dtype=np.float64)
    by_column = np.ascontiguousarray(weights.T, dtype=np.float32)  # row h = V[:, h]: contiguous gathers
    for p in range(n_query):
        nz = np.flatnonzero(weights[p])
        shared = np.minimum(weights[p, nz, None].astype(np.float32), by_column[nz]).sum(axis=0, dtype=np.float64)
        jaccard[p] = 1.0 - shared / (2.0 - shared)
    return (1.0 - lambda_value) * jaccard + lambda_value * dist[:n_query]


def _normalised_distance(similarity: np.ndarray) -> np.ndarray:
    """d = 1 - s, diagonal forced to 0 (every point is its own nearest), each row divided by its maximum."""
    d = np.maximum(1.0 - similarity, 0.0)
    np.fill_diagonal(d, 0.0)
    row_max = d.max(axis=1, keepdims=True)
    return d / np.where(row_max > 0, row_max, 1.0)


def _check_k_reciprocal_options(k1: int, k2: int, lambda_value: float) -> None:
    if k1 < 1 or k2 < 1:
        raise ValueError(f"k1 and k2 must be >= 1, got k1={k1}, k2={k2}")
    if not 0.0 <= lambda_value <= 1.0:
        raise ValueError(f"lambda_value must be in [0, 1], got {lambda_value}")


def k_reciprocal_rerank(
    similarity_qg: np.ndarray,
    similarity_qq: np.ndarray,
    similarity_gg: np.ndarray,
    *,
    k1: int = 20,
    k2: int = 6,
    lambda_value: float = 0.3,
) -> np.ndarray:
    """Q x G similarity 1 - d* after k-reciprocal re-ranking (Zhong et al. 2017; see module doc).

    Inputs are raw similarities (cosine or exp(-d)), Q x G, Q x Q and G x G,
    including the self-similarities on the diagonals. Cost: O(N^2) memory and
    about O(N^2 (k1 + k2)) time for N = Q + G, fine up to a few thousand images.
    """
    _check_k_reciprocal_options(k1, k2, lambda_value)
    qg = _finite_matrix(similarity_qg, what="similarity_qg")
    qq = _finite_matrix(similarity_qq, what="similarity_qq")
    gg = _finite_matrix(similarity_gg, what="similarity_gg")
    nq, ng = qg.shape
    if qq.shape != (nq, nq) or gg.shape != (ng, ng):
        raise ValueError(f"shapes do not match: qg {qg.shape}, qq {qq.shape}, gg {gg.shape}")
    if ng == 0:
        return np.zeros((nq, 0), dtype=np.float32)
    pooled = np.block([[qq, qg], [qg.T, gg]])
    dist = _normalised_distance(pooled)
    final = _k_reciprocal_distance(dist, nq, k1=k1, k2=k2, lambda_value=lambda_value)
    return (1.0 - final[:, nq:]).astype(np.float32)


@rerankers.register("none", description="no re-ranking: the scores as they are")
def _none(similarity_nn: np.ndarray, valid: np.ndarray) -> np.ndarray:
    return similarity_nn.astype(np.float32)


@rerankers.register("aqe", description="average query expansion with the top_k best other images")
def _aqe_all(similarity_nn: np.ndarray, valid: np.ndarray, *, top_k: int = 3) -> np.ndarray:
    """Row i becomes the mean of rows {i} + top_k valid neighbours of i.

    For cosine this is exactly AQE without the final renormalisation, which
    rescales each query's row by a positive constant and so never changes its
    ranking: <q + sum g_j, g> = s(q, g) + sum s(g_j, g).
    """
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0, got {top_k}")
    k = min(int(top_k), similarity_nn.shape[1] - 1)
    if k <= 0:
        return similarity_nn.astype(np.float32)
    masked = np.where(valid, similarity_nn, -np.inf)
    nn = _top_neighbours(masked, k)
    usable = np.take_along_axis(valid, nn, axis=1)  # fewer than k valid neighbours: skip the rest
    summed = similarity_nn + np.einsum("ik,ikn->in", usable.astype(np.float64), similarity_nn[nn])
    return (summed / (1.0 + usable.sum(axis=1, keepdims=True))).astype(np.float32)


@rerankers.register("k_reciprocal", description="k-reciprocal re-ranking (Zhong et al. 2017)")
def _k_reciprocal_all(
    similarity_nn: np.ndarray, valid: np.ndarray, *, k1: int = 20, k2: int = 6, lambda_value: float = 0.3
) -> np.ndarray:
    """The N images are at once queries and gallery; excluded pairs are pushed to the maximal distance."""
    _check_k_reciprocal_options(k1, k2, lambda_value)
    lowest = similarity_nn.min() - 1.0
    masked = np.where(valid | np.eye(len(valid), dtype=bool), similarity_nn, lowest)
    dist = _normalised_distance(masked)
    final = _k_reciprocal_distance(dist, len(dist), k1=k1, k2=k2, lambda_value=lambda_value)
    return (1.0 - final).astype(np.float32)


@rerankers.register("patch_ot", description="patch transport: the global cosine fused with the idsim head's Sinkhorn "
                                             "patch similarity on each query's top 20 (needs an idsim model)")
def _patch_ot_all(similarity_nn: np.ndarray, valid: np.ndarray, *, patches: np.ndarray | None = None,
                  shortlist: int = 20, weight: float = 0.5) -> np.ndarray:
    """(1 - weight) cosine + weight (1 + patch similarity) on the shortlist, kept above the rest of the row."""
    if patches is None:
        raise ValueError("patch_ot re-ranking needs each photo's patch embeddings: a model trained with --head idsim")
    from core.identify.patch_transport import patch_ot_scores  # lazy: torch and geomloss

    return patch_ot_scores(similarity_nn, valid, patches=patches, shortlist=shortlist, weight=weight)


def all_vs_all_rerank(
    similarity_nn: np.ndarray, *, method: str, valid: np.ndarray | None = None, **opts: object
) -> np.ndarray:
    """Re-rank an N x N all-vs-all similarity with ``method`` in :data:`rerankers` ("none", "aqe", "k_reciprocal",
    "patch_ot" -- which needs ``patches=`` N x T x P).

    ``valid`` (N x N bool, symmetric, e.g. "not from the same sighting") marks
    which pairs may be used as neighbours; the diagonal is never used as a
    neighbour. The output still has a diagonal and still scores invalid pairs:
    the caller must keep self (and same-sighting pairs) excluded when ranking.
    For ``k_reciprocal`` invalid pairs are set to the largest distance for
    everyone's neighbourhoods (a symmetric approximation of per-query galleries).
    """
    s = _finite_matrix(similarity_nn, what="similarity_nn")
    n = s.shape[0]
    if s.shape != (n, n):
        raise ValueError(f"similarity_nn must be square, got shape {s.shape}")
    if valid is None:
        ok = np.ones((n, n), dtype=bool)
    else:
        ok = np.asarray(valid, dtype=bool)
        if ok.shape != (n, n):
            raise ValueError(f"valid must be {n} x {n}, got shape {ok.shape}")
    ok = ok & ~np.eye(n, dtype=bool)
    if n == 0:
        return s.astype(np.float32)
    factory, _ = rerankers.resolve(method)
    return factory(s, ok, **opts)

