"""core.identify.rerank: query expansion and k-reciprocal re-ranking on hand cases, identities and a reference port."""

from __future__ import annotations

import numpy as np
import pytest

from core.registry import UnknownComponentError
from core.identify.rerank import (
    all_vs_all_rerank,
    average_query_expansion,
    k_reciprocal_rerank,
    lorentz_centroid,
    rerankers,
)
from core.similarity import l2_normalize, lift_to_hyperboloid, minkowski_inner, pairwise_scores


def separated_clusters(n_clusters: int, per_cluster: int, dim: int = 16, seed: int = 0):
    """Unit vectors whose every within-cluster cosine beats every cross-cluster cosine."""
    rng = np.random.default_rng(seed)
    centres = l2_normalize(rng.standard_normal((n_clusters, dim)))
    labels = np.repeat(np.arange(n_clusters), per_cluster)
    x = l2_normalize(centres[labels] + 0.05 * rng.standard_normal((len(labels), dim)))
    return x, labels


def is_perfect(similarity: np.ndarray, query_labels: np.ndarray, gallery_labels: np.ndarray, *, skip_self=False):
    """Every positive scores above every negative for every query."""
    for i, row in enumerate(similarity):
        pos = gallery_labels == query_labels[i]
        if skip_self:
            pos = pos.copy()
            pos[i] = False
            neg = gallery_labels != query_labels[i]
        else:
            neg = ~pos
        if pos.any() and neg.any() and row[pos].min() <= row[neg].max():
            return False
    return True


# ---------------------------------------------------------------- query expansion


def test_aqe_hand_case_top1() -> None:
    q = np.array([[1.0, 0.0]])
    g = np.array([[0.8, 0.6], [0.0, 1.0], [-1.0, 0.0]])
    out = average_query_expansion(q, g, top_k=1)
    m = np.array([1.8, 0.6]) / np.linalg.norm([1.8, 0.6])  # midpoint of q and its best match g0
    np.testing.assert_allclose(out, [[m @ g[0], m @ g[1], m @ g[2]]], atol=1e-6)
    np.testing.assert_allclose(out[0, 0], 0.9486833, atol=1e-6)


def test_aqe_top0_is_identity_and_top1_keeps_best_match() -> None:
    rng = np.random.default_rng(1)
    q = l2_normalize(rng.standard_normal((20, 8)))
    g = l2_normalize(rng.standard_normal((50, 8)))
    base = pairwise_scores(q, g)
    np.testing.assert_allclose(average_query_expansion(q, g, top_k=0), base, atol=1e-6)
    out = average_query_expansion(q, g, top_k=1)
    assert out.shape == (20, 50) and np.isfinite(out).all()
    np.testing.assert_array_equal(out.argmax(1), base.argmax(1))
    assert not np.allclose(out, base)  # it does change the other scores


def test_aqe_lorentz_uses_the_lorentz_centroid() -> None:
    rng = np.random.default_rng(2)
    q = lift_to_hyperboloid(rng.standard_normal((5, 4)))
    g = lift_to_hyperboloid(rng.standard_normal((30, 4)))
    np.testing.assert_allclose(
        average_query_expansion(q, g, top_k=0, metric="lorentz"), pairwise_scores(q, g, metric="lorentz"), rtol=1e-6
    )
    out = average_query_expansion(q, g, top_k=2, metric="lorentz")
    assert out.shape == (5, 30) and np.all((out > 0) & (out <= 1))
    c = lorentz_centroid(np.stack([q[0], g[3], g[7]]))
    np.testing.assert_allclose(-minkowski_inner(c[None], c[None]), [[1.0]], atol=1e-9)  # on the hyperboloid
    # the centroid of two points lies on their geodesic: d(a, c) + d(c, b) = d(a, b), and d(a, c) = d(c, b)
    a, b = g[0], g[1]
    mid = lorentz_centroid(np.stack([a, b]))
    d = lambda x, y: np.arccosh(max(-minkowski_inner(x[None], y[None])[0, 0], 1.0))  # noqa: E731
    assert d(a, mid) + d(mid, b) == pytest.approx(d(a, b), rel=1e-9)
    assert d(a, mid) == pytest.approx(d(mid, b), rel=1e-9)


def test_aqe_clusters_stay_perfect() -> None:
    x, labels = separated_clusters(6, 5)
    out = average_query_expansion(x[::5], x, top_k=3)
    assert is_perfect(out, labels[::5], labels)


# ---------------------------------------------------------------- k-reciprocal


def reference_re_ranking(q_g_dist, q_q_dist, g_g_dist, k1=20, k2=6, lambda_value=0.3):
    """Loop port of Zhong et al.'s published re_ranking.py (distances in, distances out)."""
    original_dist = np.concatenate(
        [np.concatenate([q_q_dist, q_g_dist], axis=1), np.concatenate([q_g_dist.T, g_g_dist], axis=1)], axis=0
    )
    original_dist = np.transpose(1.0 * original_dist / np.max(original_dist, axis=0))
    V = np.zeros_like(original_dist)
    initial_rank = np.argsort(original_dist, kind="stable").astype(np.int32)
    query_num = q_g_dist.shape[0]
    all_num = original_dist.shape[0]
    for i in range(all_num):
        forward_k_neigh_index = initial_rank[i, : k1 + 1]
        backward_k_neigh_index = initial_rank[forward_k_neigh_index, : k1 + 1]
        fi = np.where(backward_k_neigh_index == i)[0]
        k_reciprocal_index = forward_k_neigh_index[fi]
        k_reciprocal_expansion_index = k_reciprocal_index
        for j in range(len(k_reciprocal_index)):
            candidate = k_reciprocal_index[j]
            half = int(np.around(k1 / 2.0))
            cf = initial_rank[candidate, : half + 1]
            cb = initial_rank[cf, : half + 1]
            fi_candidate = np.where(cb == candidate)[0]
            candidate_k_reciprocal_index = cf[fi_candidate]
            if len(np.intersect1d(candidate_k_reciprocal_index, k_reciprocal_index)) > 2.0 / 3 * len(
                candidate_k_reciprocal_index
            ):
                k_reciprocal_expansion_index = np.append(k_reciprocal_expansion_index, candidate_k_reciprocal_index)
        k_reciprocal_expansion_index = np.unique(k_reciprocal_expansion_index)
        weight = np.exp(-original_dist[i, k_reciprocal_expansion_index])
        V[i, k_reciprocal_expansion_index] = 1.0 * weight / np.sum(weight)
    original_dist = original_dist[:query_num,]
    if k2 != 1:
        V_qe = np.zeros_like(V)
        for i in range(all_num):
            V_qe[i, :] = np.mean(V[initial_rank[i, :k2], :], axis=0)
        V = V_qe
    invIndex = [np.where(V[:, i] != 0)[0] for i in range(all_num)]
    jaccard_dist = np.zeros_like(original_dist)
    for i in range(query_num):
        temp_min = np.zeros(shape=[1, all_num])
        indNonZero = np.where(V[i, :] != 0)[0]
        indImages = [invIndex[ind] for ind in indNonZero]
        for j in range(len(indNonZero)):
            temp_min[0, indImages[j]] = temp_min[0, indImages[j]] + np.minimum(
                V[i, indNonZero[j]], V[indImages[j], indNonZero[j]]
            )
        jaccard_dist[i] = 1 - temp_min / (2.0 - temp_min)
    final_dist = jaccard_dist * (1 - lambda_value) + original_dist * lambda_value
    return final_dist[:query_num, query_num:]


@pytest.mark.parametrize("k1,k2,lam", [(20, 6, 0.3), (5, 1, 0.5), (7, 3, 0.0)])
def test_k_reciprocal_matches_reference_port(k1: int, k2: int, lam: float) -> None:
    rng = np.random.default_rng(k1)
    centres = rng.standard_normal((8, 12))
    x = l2_normalize(centres[rng.integers(8, size=70)] + 0.8 * rng.standard_normal((70, 12)))
    q, g = x[:15], x[15:]
    qg, qq, gg = pairwise_scores(q, g), pairwise_scores(q, q), pairwise_scores(g, g)
    ours = k_reciprocal_rerank(qg, qq, gg, k1=k1, k2=k2, lambda_value=lam)
    # our distance convention: d = 1 - s with a zero diagonal
    dq, dg = 1.0 - qq.astype(np.float64), 1.0 - gg.astype(np.float64)
    np.fill_diagonal(dq, 0.0)
    np.fill_diagonal(dg, 0.0)
    ref = reference_re_ranking(1.0 - qg.astype(np.float64), dq, dg, k1=k1, k2=k2, lambda_value=lam)
    np.testing.assert_allclose(ours, 1.0 - ref, atol=1e-5)


def test_k_reciprocal_keeps_a_perfect_ranking() -> None:
    x, labels = separated_clusters(8, 6, seed=3)
    qi = np.arange(0, 48, 3)
    gi = np.setdiff1d(np.arange(48), qi)
    q, g = x[qi], x[gi]
    base = pairwise_scores(q, g)
    assert is_perfect(base, labels[qi], labels[gi])
    for k1, k2 in [(20, 6), (4, 2)]:
        out = k_reciprocal_rerank(base, pairwise_scores(q, q), pairwise_scores(g, g), k1=k1, k2=k2)
        assert out.shape == (len(qi), len(gi))
        assert np.isfinite(out).all() and out.min() >= 0 and out.max() <= 1 + 1e-6
        assert is_perfect(out, labels[qi], labels[gi]), (k1, k2)


def test_k_reciprocal_lambda_one_is_the_original_ranking() -> None:
    rng = np.random.default_rng(4)
    x = l2_normalize(rng.standard_normal((40, 6)))
    q, g = x[:10], x[10:]
    qg = pairwise_scores(q, g)
    out = k_reciprocal_rerank(qg, pairwise_scores(q, q), pairwise_scores(g, g), lambda_value=1.0)
    # 1 - d / max over the pooled row: same order as the raw similarity
    np.testing.assert_array_equal(np.argsort(-out, axis=1, kind="stable"), np.argsort(-qg, axis=1, kind="stable"))


def test_k_reciprocal_rejects_bad_input() -> None:
    s = np.eye(3)
    with pytest.raises(ValueError, match="shapes"):
        k_reciprocal_rerank(np.ones((2, 3)), np.eye(2), np.eye(4))
    with pytest.raises(ValueError, match="NaN"):
        k_reciprocal_rerank(np.full((3, 3), np.nan), s, s)
    with pytest.raises(ValueError, match="lambda"):
        k_reciprocal_rerank(s, s, s, lambda_value=2.0)


# ---------------------------------------------------------------- all-vs-all


def test_all_vs_all_methods_shapes_and_registry() -> None:
    assert {"none", "aqe", "k_reciprocal"} <= set(rerankers.names())
    x, labels = separated_clusters(5, 4, seed=6)
    s = pairwise_scores(x, x)
    for method in ("none", "aqe", "k_reciprocal"):
        out = all_vs_all_rerank(s, method=method)
        assert out.shape == s.shape and np.isfinite(out).all()
        assert is_perfect(out, labels, labels, skip_self=True), method
    np.testing.assert_allclose(all_vs_all_rerank(s, method="none"), s)
    with pytest.raises(UnknownComponentError, match="aqe"):
        all_vs_all_rerank(s, method="dba")


def test_all_vs_all_aqe_ranks_like_embedding_aqe_without_self() -> None:
    rng = np.random.default_rng(7)
    x = l2_normalize(rng.standard_normal((25, 5)))
    s = pairwise_scores(x, x).astype(np.float64)
    out = all_vs_all_rerank(s, method="aqe", top_k=2)
    for i in range(len(x)):
        others = np.argsort(-np.where(np.arange(25) == i, -np.inf, s[i]), kind="stable")[:2]
        expanded = x[i] + x[others].sum(0)
        want = x @ (expanded / np.linalg.norm(expanded))
        keep = np.arange(25) != i
        # the similarity version is the embedding version times a positive constant: same order
        np.testing.assert_array_equal(
            np.argsort(-out[i, keep], kind="stable"), np.argsort(-want[keep], kind="stable")
        )
        np.testing.assert_allclose(out[i, keep] * 3.0, want[keep] * np.linalg.norm(expanded), atol=1e-5)


def test_all_vs_all_aqe_never_expands_with_excluded_pairs() -> None:
    rng = np.random.default_rng(8)
    x = l2_normalize(rng.standard_normal((12, 4)))
    s = pairwise_scores(x, x).astype(np.float64)
    best = int(np.argsort(-np.where(np.eye(12, dtype=bool), -np.inf, s))[0, 0])
    valid = np.ones((12, 12), dtype=bool)
    valid[0, best] = valid[best, 0] = False
    out = all_vs_all_rerank(s, method="aqe", top_k=1, valid=valid)
    masked = np.where(valid & ~np.eye(12, dtype=bool), s, -np.inf)
    second = int(np.argmax(masked[0]))
    assert second != best
    np.testing.assert_allclose(out[0], (s[0] + s[second]) / 2, atol=1e-6)


def test_all_vs_all_rejects_non_square() -> None:
    with pytest.raises(ValueError, match="square"):
        all_vs_all_rerank(np.ones((2, 3)), method="none")
