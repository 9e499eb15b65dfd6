"""core.identify.retrieval: FAISS search equals brute-force numpy ranking; HNSW recall; edge cases."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

import core.identify.retrieval as retrieval
from core.identify.retrieval import EmptyGalleryError, build_index, rank_gallery
from core.similarity import l2_normalize, lift_to_hyperboloid, lorentz_distance, pairwise_scores


@pytest.fixture()
def one_thread():
    """FAISS on one thread: OpenMP spin-waits make 2-thread builds slower when the machine is busy."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def clustered(n: int, dim: int, *, n_clusters: int, spread: float = 1.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters, dim))
    x = centres[rng.integers(n_clusters, size=n)] + spread * rng.standard_normal((n, dim))
    return l2_normalize(x)


def brute_force(q: np.ndarray, g: np.ndarray, k: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
    if metric == "cosine":
        sim = pairwise_scores(l2_normalize(q), l2_normalize(g), metric="cosine")
        return rank_gallery(sim, k)
    d = lorentz_distance(q, g)
    order = np.argsort(d, axis=1, kind="stable")[:, :k]
    return np.exp(-np.take_along_axis(d, order, axis=1)), order


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flat_cosine_equals_brute_force(seed: int, dtype: type) -> None:
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((400, 24)).astype(dtype)
    q = rng.standard_normal((30, 24)).astype(dtype)
    index = build_index(g, metric="cosine")
    assert index.kind == "flat" and index.metric == "cosine" and len(index) == 400
    scores, idx = index.search(q, 10)
    ref_scores, ref_idx = brute_force(q, g, 10, "cosine")
    assert scores.shape == idx.shape == (30, 10)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_allclose(scores, ref_scores, atol=1e-5)
    assert np.all(np.diff(scores, axis=1) <= 0)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flat_lorentz_equals_brute_force(seed: int, dtype: type) -> None:
    rng = np.random.default_rng(seed)
    g = lift_to_hyperboloid(0.7 * rng.standard_normal((300, 12))).astype(dtype)
    q = lift_to_hyperboloid(0.7 * rng.standard_normal((25, 12))).astype(dtype)
    index = build_index(g, metric="lorentz")
    scores, idx = index.search(q, 8)
    ref_scores, ref_idx = brute_force(q.astype(np.float64), g.astype(np.float64), 8, "lorentz")
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5)


def test_lorentz_order_monotone_in_distance_and_scores_match_similarity() -> None:
    rng = np.random.default_rng(5)
    g = lift_to_hyperboloid(rng.standard_normal((200, 6)))
    q = lift_to_hyperboloid(rng.standard_normal((10, 6)))
    scores, idx = build_index(g, metric="lorentz").search(q, 50)
    d = lorentz_distance(q, g)
    picked = np.take_along_axis(d, idx, axis=1)
    assert np.all(np.diff(picked, axis=1) >= 0)  # nearest first
    expected = np.take_along_axis(pairwise_scores(q, g, metric="lorentz"), idx, axis=1)
    np.testing.assert_allclose(scores, expected, rtol=1e-6)
    np.testing.assert_allclose(scores, np.exp(-picked), rtol=1e-6)


def test_lorentz_close_points_far_from_origin_are_ordered_exactly() -> None:
    """At radius ~4, float32 -<q,g>_L cannot separate points 1e-3 apart; the float64 re-sort must."""
    rng = np.random.default_rng(3)
    centre = np.full(8, 4.0 / np.sqrt(8))
    near = centre + 1e-3 * rng.standard_normal((20, 8))
    far = 3.0 * rng.standard_normal((300, 8))
    g = lift_to_hyperboloid(np.concatenate([far[:150], near, far[150:]]))
    q = lift_to_hyperboloid(centre[None, :] + 1e-3 * rng.standard_normal((3, 8)))
    _, idx = build_index(g, metric="lorentz").search(q, 5)
    _, ref_idx = brute_force(q, g, 5, "lorentz")
    np.testing.assert_array_equal(idx, ref_idx)


def test_hnsw_recall_at_10_on_20k(one_thread: None) -> None:
    data = clustered(20_200, 32, n_clusters=200, seed=11)
    g, q = data[:20_000], data[20_000:]  # queries: fresh draws around the same centres
    approx = build_index(g, metric="cosine", approximate=True, hnsw_m=16, ef_search=64)
    assert approx.kind == "hnsw"
    _, got = approx.search(q, 10)
    _, exact = build_index(g, metric="cosine", approximate=False).search(q, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, exact)])
    assert recall >= 0.95, recall


def test_hnsw_lorentz_recall_small(one_thread: None) -> None:
    rng = np.random.default_rng(4)
    g = lift_to_hyperboloid(0.5 * rng.standard_normal((3000, 16)))
    q = lift_to_hyperboloid(0.5 * rng.standard_normal((100, 16)))
    _, got = build_index(g, metric="lorentz", approximate=True).search(q, 10)
    _, exact = brute_force(q, g, 10, "lorentz")
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, exact)])
    assert recall >= 0.95, recall


def test_ivf_recall_cosine_and_lorentz(one_thread: None) -> None:
    data = clustered(8_100, 32, n_clusters=80, seed=13)
    g, q = data[:8_000], data[8_000:]
    index = build_index(g, approximate=True, approximate_kind="ivf", nlist=64, nprobe=16)
    assert index.kind == "ivf" and len(index) == 8_000
    _, got = index.search(q, 10)
    _, exact = brute_force(q, g, 10, "cosine")
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, exact)]) >= 0.95
    rng = np.random.default_rng(14)
    lg = lift_to_hyperboloid(0.5 * rng.standard_normal((4000, 16)))
    lq = lift_to_hyperboloid(0.5 * rng.standard_normal((50, 16)))
    lindex = build_index(lg, metric="lorentz", approximate=True, approximate_kind="ivf", nlist=32, nprobe=16)
    scores, got = lindex.search(lq, 10)
    ref_scores, exact = brute_force(lq, lg, 10, "lorentz")
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, exact)]) >= 0.95
    hit = got == exact
    np.testing.assert_allclose(scores[hit], ref_scores[hit], rtol=1e-6)  # exact float64 scores


def test_ivf_with_too_few_hits_marks_missing_slots(one_thread: None) -> None:
    data = clustered(2_000, 8, n_clusters=40, seed=15)
    index = build_index(data, approximate=True, approximate_kind="ivf", nlist=50, nprobe=1)
    scores, idx = index.search(data[:5], 1_500)  # one list holds far fewer than 1,500 rows
    assert idx.shape == (5, 1_500)
    missing = idx < 0
    assert missing.any() and np.all(np.isneginf(scores[missing]))
    assert np.all(missing[:, 1:] >= missing[:, :-1])  # missing slots come last


def test_auto_choice_follows_thresholds(monkeypatch: pytest.MonkeyPatch, one_thread: None) -> None:
    g = clustered(300, 8, n_clusters=5)
    wide = clustered(300, 128, n_clusters=5)
    assert build_index(g).kind == "flat"
    # the threshold is a gallery size at 256-d; wider embeddings switch proportionally earlier
    monkeypatch.setattr(retrieval, "APPROXIMATE_THRESHOLD", 200)  # 200 x 256 = 51,200 cells
    assert build_index(g).kind == "flat"  # 300 x 8 = 2,400
    assert build_index(clustered(300, 256, n_clusters=5)).kind == "hnsw"  # 76,800
    assert build_index(wide).kind == "flat"  # 38,400
    monkeypatch.setattr(retrieval, "APPROXIMATE_THRESHOLD", 100)
    assert build_index(wide).kind == "hnsw"
    assert build_index(wide, approximate=False).kind == "flat"
    monkeypatch.setattr(retrieval, "IVF_THRESHOLD", 200)
    assert build_index(wide).kind == "ivf"
    assert build_index(wide, approximate_kind="hnsw").kind == "hnsw"
    with pytest.raises(ValueError, match="approximate_kind"):
        build_index(g, approximate_kind="lsh")


def test_single_query_flat_search_restores_thread_count() -> None:
    before = faiss.omp_get_max_threads()
    build_index(clustered(50, 8, n_clusters=3)).search(np.ones(8), 3)
    assert faiss.omp_get_max_threads() == before


@pytest.mark.parametrize("approximate", [False, True])
def test_k_larger_than_gallery_is_clamped(approximate: bool) -> None:
    g = clustered(7, 4, n_clusters=2)
    scores, idx = build_index(g, approximate=approximate).search(g[:2], 50)
    assert idx.shape == (2, 7)
    assert sorted(idx[0].tolist()) == list(range(7))
    assert idx[0, 0] == 0 and idx[1, 0] == 1  # each query finds itself first
    assert np.all(np.diff(scores, axis=1) <= 1e-7)


def test_empty_gallery_is_a_clear_error() -> None:
    with pytest.raises(EmptyGalleryError, match="empty gallery"):
        build_index(np.zeros((0, 16), np.float32))
    with pytest.raises(EmptyGalleryError):
        rank_gallery(np.zeros((3, 0)), 5)


def test_cosine_input_is_normalised_and_zero_rows_rejected() -> None:
    rng = np.random.default_rng(8)
    g = rng.standard_normal((50, 10))
    q = rng.standard_normal((5, 10))
    scaled = build_index(g * rng.uniform(0.1, 30, size=(50, 1))).search(q * 7.0, 5)
    plain = build_index(l2_normalize(g)).search(l2_normalize(q), 5)
    np.testing.assert_array_equal(scaled[1], plain[1])
    np.testing.assert_allclose(scaled[0], plain[0], atol=1e-6)
    assert np.all(scaled[0] <= 1.0 + 1e-6)
    g[3] = 0.0
    with pytest.raises(ValueError, match="row 3 has zero norm"):
        build_index(g)


def test_bad_inputs_are_rejected() -> None:
    g = clustered(20, 6, n_clusters=2)
    index = build_index(g)
    with pytest.raises(ValueError, match="dimension"):
        index.search(np.ones((1, 5)), 3)
    with pytest.raises(ValueError, match="k must be"):
        index.search(g[:1], 0)
    bad = g.copy()
    bad[4, 2] = np.nan
    with pytest.raises(ValueError, match="row 4"):
        build_index(bad)
    with pytest.raises(ValueError, match="not on the unit hyperboloid"):
        build_index(np.ones((5, 3)), metric="lorentz")
    with pytest.raises(ValueError, match="unknown metric"):
        build_index(g, metric="euclid")


def test_single_query_vector_and_empty_query_batch() -> None:
    g = clustered(30, 6, n_clusters=3)
    index = build_index(g)
    scores, idx = index.search(g[4], 3)
    assert idx.shape == (1, 3) and idx[0, 0] == 4
    scores, idx = index.search(np.zeros((0, 6)), 3)
    assert idx.shape == (0, 3)


def test_rank_gallery_is_stable_on_ties() -> None:
    sim = np.array([[1.0, 3.0, 3.0, 2.0], [0.5, 0.5, 0.5, 0.9]])
    scores, idx = rank_gallery(sim, 3)
    np.testing.assert_array_equal(idx, [[1, 2, 3], [3, 0, 1]])
    np.testing.assert_array_equal(scores, [[3.0, 3.0, 2.0], [0.9, 0.5, 0.5]])
    assert rank_gallery(sim, 10)[1].shape == (2, 4)
    with pytest.raises(ValueError, match="NaN"):
        rank_gallery(np.array([[np.nan, 1.0]]), 1)


def test_flat_search_ties_break_by_index() -> None:
    g = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    scores, idx = build_index(g).search(np.array([[1.0, 0.0]]), 4)
    np.testing.assert_array_equal(idx, [[0, 2, 3, 1]])


def test_retrieval_survives_pml_patching_faiss():
    """pytorch-metric-learning's samplers import faiss.contrib.torch_utils, which replaces faiss.Index.search
    process-wide; exact and approximate search must still work afterwards."""
    import numpy as np
    from pytorch_metric_learning import samplers  # noqa: F401  (patches faiss)

    from core.identify.retrieval import build_index

    rng = np.random.default_rng(0)
    g = rng.normal(size=(300, 16)).astype("float32")
    for kind in ("flat", "hnsw"):
        idx = build_index(g, metric="cosine", approximate=kind == "hnsw", approximate_kind="hnsw")
        scores, hits = idx.search(g[:2], 3)
        assert hits[0, 0] == 0 and hits[1, 0] == 1
