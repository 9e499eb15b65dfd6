"""Top-k retrieval over a gallery of embeddings with FAISS.

Scores follow :mod:`core.similarity` (higher = better): ``cosine`` on L2-normalised rows, ``lorentz`` = exp(-d)
with d the geodesic distance on the hyperboloid, each turned into an inner-product or nearest-neighbour search and
re-sorted exactly. Index kinds: ``flat`` (exact) up to :data:`APPROXIMATE_THRESHOLD`, ``hnsw`` up to
:data:`IVF_THRESHOLD`, ``ivf`` above. Results are sorted by decreasing score, ties by increasing gallery index,
and k is clamped to the gallery size.

How each metric becomes a search, why the thresholds are where they are, and the measurements: docs/retrieval.md."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import faiss
import numpy as np

from core.similarity import METRICS

#: Gallery size (at 256-d) above which ``build_index(approximate=None)``
#: builds an approximate index instead of an exact flat one; the rule is
#: ``n * dim > APPROXIMATE_THRESHOLD * 256``, so a 1280-d gallery switches at 10k.
#: Measured with ``tests/benchmarks/bench_retrieval.py`` on this shared 2-core
#: machine (256-d float32, one query per call, load average ~5): flat p50 is
#: 0.5 ms at 10k, 1.1 ms at 20k, 4.3 ms at 50k and 13.8 ms at 100k (~0.1 us per
#: stored 256-d vector, memory-bound), while HNSW (M=32, efSearch=128) answers in
#: 0.45 ms with recall@10 0.991 at 100k. 50k is where exact search passes "a few ms".
APPROXIMATE_THRESHOLD: int = 50_000

#: Default HNSW efSearch (candidate list size while searching); raised to k if
#: k is larger. See the benchmark for the recall / latency trade-off.
DEFAULT_EF_SEARCH: int = 128
#: Default HNSW efConstruction (candidate list size while building).
DEFAULT_EF_CONSTRUCTION: int = 40
#: Gallery size above which ``approximate_kind="auto"`` builds IVF instead of HNSW.
IVF_THRESHOLD: int = 200_000
#: Default number of IVF lists visited per query. With ~500 vectors per list
#: (:func:`default_nlist`) a query scans ~24k vectors whatever the gallery size.
#: Measured at 1M (256-d, nlist 2048): nprobe 32 -> p50 1.4 ms, recall@10 0.961;
#: nprobe 64 -> 3.1 ms, 0.978; 48 sits between.
DEFAULT_NPROBE: int = 48
#: IVF k-means trains on at most this many points per list (sampled with the seed).
IVF_TRAIN_PER_LIST: int = 40


#: Flat searches with fewer queries than this run FAISS on one OpenMP thread.
#: FAISS splits even a single query's scan over threads; on a busy 2-core
#: machine the second thread waits for a CPU and one query took ~24 ms instead
#: of ~0.4 ms (10k x 256-d, measured); one thread is also no slower when idle.
SINGLE_THREAD_BELOW: int = 16

_omp_lock = threading.Lock()


@contextmanager
def _single_omp_thread() -> Iterator[None]:
    """Run FAISS on one OpenMP thread inside the block (process-wide setting, restored after).

    Concurrent searches from other Python threads may briefly run on one
    thread too; that only affects their speed, never their results.
    """
    with _omp_lock:
        before = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            yield
        finally:
            faiss.omp_set_num_threads(before)


class EmptyGalleryError(ValueError):
    """Raised when an index is built from, or searched against, zero gallery rows."""


def _as_matrix(x: np.ndarray, *, what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise ValueError(f"{what} must be a 2-D array (rows = items), got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.number):
        raise ValueError(f"{what} must be numeric, got dtype {a.dtype}")
    if a.size and not np.all(np.isfinite(a)):
        bad = int(np.flatnonzero(~np.all(np.isfinite(a), axis=1))[0])
        raise ValueError(f"{what} row {bad} contains NaN or inf")
    return a


def prepare_cosine(x: np.ndarray, *, what: str = "embeddings") -> np.ndarray:
    """Rows scaled to unit L2 norm (float32); a zero-norm row is an error (its cosine is undefined)."""
    a = _as_matrix(x, what=what)
    norms = np.sqrt(np.einsum("ij,ij->i", a, a, dtype=np.float64))  # no float64 copy of a float32 gallery
    if a.shape[0] and np.any(norms <= 1e-12):
        bad = int(np.flatnonzero(norms <= 1e-12)[0])
        raise ValueError(f"{what} row {bad} has zero norm; cosine similarity is undefined for it")
    if a.dtype == np.float64:
        return np.ascontiguousarray((a / norms[:, None]).astype(np.float32))
    return np.ascontiguousarray(a.astype(np.float32, copy=False) / norms[:, None].astype(np.float32))


def faiss_search(index: Any, queries: np.ndarray, k: int, *, params: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """``index.search`` on numpy arrays, with search parameters.

    ``faiss.contrib.torch_utils`` (imported by pytorch-metric-learning's samplers) replaces ``Index.search`` in
    every process that imports it with a torch-aware wrapper that takes no ``params``; the original is kept as
    ``search_numpy``, which is called here so retrieval works whatever was imported before.
    """
    search = getattr(index, "search_numpy", None) or index.search
    return search(queries, k, params=params)


def prepare_lorentz(x: np.ndarray, *, what: str = "embeddings", rtol: float = 1e-2) -> np.ndarray:
    """Rows checked to lie on the hyperboloid and re-projected in float64.

    A row (x0, v) must have x0 > 0 and -<x, x>_L = x0^2 - |v|^2 within ``rtol`` of 1
    (relative to x0^2); x0 is then recomputed as sqrt(1 + |v|^2) so that float32
    rounding cannot give -<q, g>_L < 1 for distinct points.
    """
    a = _as_matrix(x, what=what).astype(np.float64)
    if a.shape[1] < 2:
        raise ValueError(f"{what}: Lorentz rows need at least 2 coordinates (x0, x1..xn), got {a.shape[1]}")
    x0, v = a[:, 0], a[:, 1:]
    sq = np.sum(v * v, axis=1)
    off = np.abs(x0 * x0 - sq - 1.0) / np.maximum(x0 * x0, 1.0)
    bad = (x0 <= 0) | (off > rtol)
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{what} row {i} is not on the unit hyperboloid (x0={x0[i]:.4g}, x0^2-|v|^2={x0[i]**2 - sq[i]:.4g}, "
            "expected x0>0 and 1); Lorentz rows are (x0, x1..xn), see core.similarity.lift_to_hyperboloid"
        )
    return np.concatenate([np.sqrt(1.0 + sq)[:, None], v], axis=1)


def _check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")


def _sort_topk(scores: np.ndarray, indices: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Sort each row by (-score, index) and keep k columns; missing (-1) hits go last."""
    key_score = np.where(indices < 0, -np.inf, scores)
    key_index = np.where(indices < 0, np.iinfo(np.int64).max, indices)
    order = np.lexsort((key_index, -key_score))[:, :k]  # lexsort sorts along the last axis
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(indices, order, axis=1)


@dataclass
class SearchIndex:
    """A FAISS index over a gallery plus what is needed to score queries against it.

    ``metric`` is ``"cosine"`` or ``"lorentz"``; ``kind`` is what was actually
    built: ``"flat"`` (exact), ``"hnsw"`` or ``"ivf"`` (approximate).
    ``ef_search`` (HNSW) and ``nprobe`` (IVF) may be changed between searches.
    """

    index: faiss.Index
    metric: str
    kind: str
    dim: int
    ef_search: int = DEFAULT_EF_SEARCH
    nprobe: int = DEFAULT_NPROBE
    #: float64 gallery kept for the exact Lorentz re-sort (None for cosine).
    gallery64: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return int(self.index.ntotal)

    @property
    def uses_l2_reduction(self) -> bool:
        """True for approximate Lorentz indexes (MIPS-to-L2 reduction, one extra coordinate)."""
        return self.metric == "lorentz" and self.kind != "flat"

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k gallery rows per query: (scores Q x k' float32, indices Q x k' int64), k' = min(k, len).

        Scores are cosine or exp(-d) (higher = better), sorted decreasing,
        ties by gallery index. A 1-D query is treated as one row. An
        approximate index may find fewer than k' rows for a query (IVF with a
        small ``nprobe``): those slots hold index -1 and score -inf.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        n = len(self)
        if n == 0:
            raise EmptyGalleryError("the index holds no gallery rows; nothing to search")
        k_out = min(int(k), n)
        if self.metric == "cosine":
            q = prepare_cosine(queries, what="queries")
        else:
            q64 = prepare_lorentz(queries, what="queries")
            q = q64.copy()
            q[:, 0] = -q[:, 0]
            if self.uses_l2_reduction:  # reduction query a = (-q0, q1..qn, 0)
                q = np.concatenate([q, np.zeros((q.shape[0], 1))], axis=1)
            q = np.ascontiguousarray(q.astype(np.float32))
        extra_dims = self.index.d - self.dim
        if q.shape[1] != self.index.d:
            raise ValueError(
                f"queries have dimension {q.shape[1] - extra_dims}, the index holds dimension {self.dim}"
            )
        if q.shape[0] == 0:
            return np.zeros((0, k_out), np.float32), np.zeros((0, k_out), np.int64)
        # Lorentz: fetch a margin of extra candidates, then re-sort them exactly in float64.
        k_fetch = k_out if self.metric == "cosine" else min(n, max(2 * k_out, k_out + 16))
        params = None
        if self.kind == "hnsw":
            params = faiss.SearchParametersHNSW(efSearch=max(int(self.ef_search), k_fetch))
        elif self.kind == "ivf":
            params = faiss.SearchParametersIVF(nprobe=int(self.nprobe))
        if self.kind == "flat" and q.shape[0] < SINGLE_THREAD_BELOW:
            with _single_omp_thread():
                raw_scores, idx = faiss_search(self.index, q, k_fetch, params=params)
        else:
            raw_scores, idx = faiss_search(self.index, q, k_fetch, params=params)
        idx = idx.astype(np.int64)
        if self.metric == "cosine":
            scores = raw_scores.astype(np.float64)
        else:
            assert self.gallery64 is not None
            safe = np.where(idx < 0, 0, idx)
            g = self.gallery64[safe]  # Q x k_fetch x D
            inner = np.einsum("qd,qkd->qk", q64[:, 1:], g[:, :, 1:]) - q64[:, :1] * g[:, :, 0]
            scores = np.exp(-np.arccosh(np.maximum(-inner, 1.0)))
        scores, idx = _sort_topk(scores, idx, k_out)
        scores = np.where(idx < 0, -np.inf, scores).astype(np.float32)
        return scores, idx


def default_nlist(n: int) -> int:
    """IVF list count: about one list per 500 vectors, as a power of two in [16, 4096] (1M -> 2048)."""
    target = max(16, min(4096, n // 500))
    return 1 << int(round(np.log2(target)))


def build_index(
    embeddings: np.ndarray,
    *,
    metric: str = "cosine",
    approximate: bool | None = None,
    approximate_kind: str = "auto",
    hnsw_m: int = 32,
    ef_search: int = DEFAULT_EF_SEARCH,
    ef_construction: int = DEFAULT_EF_CONSTRUCTION,
    nlist: int | None = None,
    nprobe: int = DEFAULT_NPROBE,
    seed: int = 0,
) -> SearchIndex:
    """Index the gallery rows of ``embeddings`` (N x D) for ``metric`` search.

    ``approximate=None`` builds an exact flat index up to
    :data:`APPROXIMATE_THRESHOLD` rows and an approximate one above it;
    ``True`` / ``False`` force one. ``approximate_kind`` picks the approximate
    index: ``"hnsw"`` (graph: ``hnsw_m`` links per node, ``ef_construction`` /
    ``ef_search`` candidate lists), ``"ivf"`` (k-means into ``nlist`` lists,
    default :func:`default_nlist`, ``nprobe`` lists visited per query), or
    ``"auto"``: HNSW up to :data:`IVF_THRESHOLD` rows, IVF above (HNSW build
    time grows too fast on 2 cores). ``seed`` fixes HNSW levels and the IVF
    k-means training sample. An empty gallery raises :class:`EmptyGalleryError`.
    """
    _check_metric(metric)
    if approximate_kind not in ("auto", "hnsw", "ivf"):
        raise ValueError(f"unknown approximate_kind {approximate_kind!r}; expected 'auto', 'hnsw' or 'ivf'")
    a = _as_matrix(embeddings, what="embeddings")
    if a.shape[0] == 0:
        raise EmptyGalleryError("cannot build a search index from an empty gallery (0 rows)")
    if metric == "cosine":
        g = prepare_cosine(a)
        g64 = None
    else:
        g64 = prepare_lorentz(a)
        g = np.ascontiguousarray(g64.astype(np.float32))
    n, dim = g.shape
    if approximate is None:
        approximate = n * dim > APPROXIMATE_THRESHOLD * 256
    if not approximate:
        index = faiss.IndexFlatIP(dim)
        index.add(g)
        return SearchIndex(index=index, metric=metric, kind="flat", dim=dim, ef_search=int(ef_search),
                           nprobe=int(nprobe), gallery64=g64)
    kind = approximate_kind if approximate_kind != "auto" else ("hnsw" if n <= IVF_THRESHOLD else "ivf")
    if metric == "cosine":
        stored, faiss_metric = g, faiss.METRIC_INNER_PRODUCT
    else:  # MIPS -> L2 reduction, see docs/retrieval.md
        assert g64 is not None
        sq_norms = np.sum(g64 * g64, axis=1)
        extra = np.sqrt(np.maximum(sq_norms.max() - sq_norms, 0.0))[:, None]
        stored = np.ascontiguousarray(np.concatenate([g64, extra], axis=1).astype(np.float32))
        faiss_metric = faiss.METRIC_L2
    d = stored.shape[1]
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(d, int(hnsw_m), faiss_metric)
        index.hnsw.efConstruction = int(ef_construction)
        index.hnsw.efSearch = int(ef_search)
        _seed_hnsw_levels(index, seed)
        index.add(stored)
    else:
        lists = int(nlist) if nlist is not None else default_nlist(n)
        lists = max(1, min(lists, n // 39 or 1))  # FAISS wants >= 39 training points per list
        quantizer = faiss.IndexFlatIP(d) if faiss_metric == faiss.METRIC_INNER_PRODUCT else faiss.IndexFlatL2(d)
        index = faiss.IndexIVFFlat(quantizer, d, lists, faiss_metric)
        index.cp.seed = int(seed)
        n_train = min(n, IVF_TRAIN_PER_LIST * lists)
        sample = np.random.default_rng(seed).choice(n, size=n_train, replace=False) if n_train < n else slice(None)
        index.train(np.ascontiguousarray(stored[sample]))
        index.add(stored)
        index.nprobe = int(nprobe)  # the FAISS wrapper keeps ``quantizer`` alive with ``index``
    return SearchIndex(index=index, metric=metric, kind=kind, dim=dim, ef_search=int(ef_search),
                       nprobe=int(nprobe), gallery64=g64)


def _seed_hnsw_levels(index: faiss.IndexHNSWFlat, seed: int) -> None:
    """Seed HNSW level assignment (FAISS draws node levels from ``hnsw.rng``, default seed 12345).

    Insertion runs on several threads, so links can still differ between builds;
    the seed makes the level structure, and single-threaded builds, reproducible.
    """
    index.hnsw.rng = faiss.RandomGenerator(int(seed))


def rank_gallery(similarity: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of a dense Q x G similarity matrix: (scores Q x k', indices Q x k'), k' = min(k, G).

    Sorted by decreasing score; equal scores keep increasing gallery index
    (stable), so the ranking is deterministic. Meant for small galleries where
    the full matrix is already at hand; NaN is an error.
    """
    s = np.asarray(similarity)
    if s.ndim != 2:
        raise ValueError(f"similarity must be a Q x G matrix, got shape {s.shape}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if s.shape[1] == 0:
        raise EmptyGalleryError("the similarity matrix has no gallery columns")
    if np.isnan(s).any():
        raise ValueError("similarity contains NaN")
    k_out = min(int(k), s.shape[1])
    order = np.argsort(-s, axis=1, kind="stable")[:, :k_out]
    return np.take_along_axis(s, order, axis=1), order.astype(np.int64)
