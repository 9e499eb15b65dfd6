"""Retrieval benchmark: FAISS latency / recall, Kaggle pair scoring, re-ranking mAP.

Rows (``make bench`` or ``.venv/bin/python tests/benchmarks/run.py retrieval``):

- flat (exact) single-query latency p50/p95 at growing gallery sizes, to place
  :data:`core.identify.retrieval.APPROXIMATE_THRESHOLD`;
- approximate index (HNSW up to IVF_THRESHOLD, IVF above) build time,
  single-query latency p50/p95 and recall@10 against exact search at 10k, 100k
  and 1M vectors (256-d float32, clustered, L2-normalised), plus an efSearch /
  nprobe sweep;
- Kaggle scoring time: 137,270 pairs (all ordered pairs) over 371 images, 1280-d;
- macro mAP (all-vs-all, same sighting excluded) with and without each
  re-ranking method, see :func:`rerank_report`.

Data are synthetic (see :func:`clustered_unit_vectors`). Set
``ROSETTE_BENCH_RERANK_FEATURES=path.npz`` (arrays ``embeddings``, ``labels``,
optional ``sightings``) to measure re-ranking on real features instead, and
``ROSETTE_BENCH_RETRIEVAL_SIZES=10000,100000`` to skip the 1M case.
Latency is per call with a batch of one query, FAISS on 2 threads; the machine
is shared, so figures carry the noise of whatever else runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import faiss
import numpy as np

from core.io.kaggle import PairRow, score_pairs
from core.metrics import all_vs_all_metrics, all_vs_all_valid
from core.identify.rerank import all_vs_all_rerank
from core.identify.retrieval import (
    APPROXIMATE_THRESHOLD,
    DEFAULT_EF_SEARCH,
    DEFAULT_NPROBE,
    IVF_THRESHOLD,
    IVF_TRAIN_PER_LIST,
    build_index,
)

DIM = 256
N_QUERIES = 200
SIZES = (10_000, 100_000, 1_000_000)
HNSW_M = 32
EF_SWEEP = (32, 64, 128, 256)
NPROBE_SWEEP = (16, 32, 48, 64, 128)


def clustered_unit_vectors(
    n: int,
    dim: int,
    *,
    n_clusters: int,
    spread: float = 1.0,
    intrinsic_dim: int | None = 8,
    seed: int = 0,
    chunk: int = 8_192,
) -> np.ndarray:
    """n float32 unit vectors: a random Gaussian centre per cluster plus variation, normalised.

    Variation = ``spread`` * (Gaussian in the cluster's own random
    ``intrinsic_dim``-d subspace, scaled to the full-dimensional norm) + 0.1 *
    ``spread`` isotropic noise: like real embeddings, the images of one
    individual vary along few directions (pose, light) of their own. A point's
    cosine to its own cluster is ~0.5, to other clusters ~0.
    ``intrinsic_dim=None`` makes all variation isotropic: every cluster is then
    a ball of near-equidistant points, a much harder case for approximate
    search (measured at 1M on the busy machine: HNSW M=32/efC=40 recall@10 0.90
    at efSearch 128 after a 15-minute build; IVF1024 recall 0.63 at nprobe 16).
    """
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters, dim), dtype=np.float32)
    bases = None
    if intrinsic_dim is not None:  # n_clusters x r x dim, rows ~ N(0, dim / r) so |variation| ~ |isotropic|
        bases = rng.standard_normal((n_clusters, intrinsic_dim, dim), dtype=np.float32) / np.sqrt(intrinsic_dim)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        label = rng.integers(n_clusters, size=m)
        x = centres[label]
        if bases is None:
            x = x + spread * rng.standard_normal((m, dim), dtype=np.float32)
        else:
            z = rng.standard_normal((m, bases.shape[1]), dtype=np.float32)
            x = x + spread * np.einsum("mr,mrd->md", z, bases[label])
            x += 0.1 * spread * rng.standard_normal((m, dim), dtype=np.float32)
        out[start:start + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def _latencies_ms(search, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-call wall time (ms) of ``search(q[i:i+1], k)`` and the returned indices."""
    times, hits = [], []
    for i in range(len(queries)):
        t0 = time.perf_counter()
        _, idx = search(queries[i:i + 1], k)
        times.append((time.perf_counter() - t0) * 1e3)
        hits.append(idx[0])
    return np.asarray(times), np.asarray(hits)


def _recall_at(got: np.ndarray, exact: np.ndarray) -> float:
    k = exact.shape[1]
    return float(np.mean([len(set(a.tolist()) & set(b.tolist())) / k for a, b in zip(got, exact)]))


def _row(benchmark: str, value: float, unit: str, goal: str = "", note: str = "") -> dict:
    return {"benchmark": benchmark, "value": float(value), "unit": unit, "goal": goal, "note": note}


def flat_latency_rows(sizes: Sequence[int] = (5_000, 10_000, 20_000, 50_000, 100_000)) -> list[dict]:
    """Exact single-query latency against gallery size: where does it pass a few ms?"""
    rows = []
    for n in sizes:
        data = clustered_unit_vectors(n + N_QUERIES, DIM, n_clusters=max(n // 100, 10), seed=1)
        index = build_index(data[:n], approximate=False)
        times, _ = _latencies_ms(index.search, data[n:], 10)
        rows.append(_row(
            f"flat p50 @ {n:,}", np.median(times), "ms", "< ~3 ms below the threshold",
            f"p95 {np.percentile(times, 95):.2f} ms; APPROXIMATE_THRESHOLD={APPROXIMATE_THRESHOLD:,}",
        ))
    return rows


def approximate_rows(sizes: Sequence[int] = SIZES) -> list[dict]:
    """What ``build_index(approximate=True)`` builds at each size (HNSW, or IVF above IVF_THRESHOLD) vs exact.

    Build time, single-query latency p50/p95 and recall@10 against exact search;
    the search knob (efSearch or nprobe) is swept at the largest size of each kind.
    """
    rows = []
    largest = {}
    for n in sizes:
        largest["hnsw" if n <= IVF_THRESHOLD else "ivf"] = n
    for n in sizes:
        data = clustered_unit_vectors(n + N_QUERIES, DIM, n_clusters=max(n // 100, 10), seed=2)
        gallery, queries = data[:n], data[n:]
        exact = build_index(gallery, approximate=False)
        t0 = time.perf_counter()
        _, truth = exact.search(queries, 10)  # batched ground truth
        gt_s = time.perf_counter() - t0
        n_flat = N_QUERIES if n <= 100_000 else 20  # 1M flat is ~0.3 s per query
        flat_times, _ = _latencies_ms(exact.search, queries[:n_flat], 10)
        del exact
        t0 = time.perf_counter()
        approx = build_index(gallery, approximate=True, hnsw_m=HNSW_M)
        build_s = time.perf_counter() - t0
        kind, tag = approx.kind, f"@ {n:,}"
        if kind == "hnsw":
            params = f"M={HNSW_M}, efConstruction={approx.index.hnsw.efConstruction}"
            knob, default, sweep = "ef", DEFAULT_EF_SEARCH, EF_SWEEP
        else:
            params = f"nlist={approx.index.nlist}, trained on {IVF_TRAIN_PER_LIST} points per list"
            knob, default, sweep = "nprobe", DEFAULT_NPROBE, NPROBE_SWEEP
        rows.append(_row(f"flat p50 {tag}", np.median(flat_times), "ms", "",
                         f"p95 {np.percentile(flat_times, 95):.1f} ms over {n_flat} queries; "
                         f"batched ground truth {gt_s:.1f} s"))
        rows.append(_row(f"{kind} build {tag}", build_s, "s", "", params))
        for value in (sweep if largest.get(kind) == n else (default,)):
            setattr(approx, "ef_search" if knob == "ef" else "nprobe", value)
            times, got = _latencies_ms(approx.search, queries, 10)
            mark = " (default)" if value == default else ""
            rows.append(_row(f"{kind} p50 {tag} {knob}={value}{mark}", np.median(times), "ms", "< 10 ms at 1M",
                             f"p95 {np.percentile(times, 95):.2f} ms"))
            rows.append(_row(f"{kind} recall@10 {tag} {knob}={value}{mark}", _recall_at(got, truth), "", ">= 0.95"))
        del approx, gallery, data
    return rows


def kaggle_scoring_rows(n_images: int = 371, dim: int = 1280) -> list[dict]:
    """Time score_pairs on every ordered pair of distinct images (371 * 370 = 137,270 rows)."""
    rng = np.random.default_rng(3)
    names = [f"img_{i:04d}.png" for i in range(n_images)]
    emb = rng.standard_normal((n_images, dim)).astype(np.float32)
    rows = [PairRow(str(r), names[i], names[j]) for r, (i, j) in
            enumerate((i, j) for i in range(n_images) for j in range(n_images) if i != j)]
    out = []
    for metric, e in (("cosine", emb), ("lorentz", None)):
        if metric == "lorentz":
            from core.similarity import lift_to_hyperboloid
            e = lift_to_hyperboloid(0.05 * emb[:, :255])  # a 256-d Lorentz head
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            sims = score_pairs(rows, e, names, metric=metric)
            times.append(time.perf_counter() - t0)
        assert sims.shape == (len(rows),) and np.isfinite(sims).all()
        out.append(_row(f"kaggle score_pairs {len(rows):,} pairs ({metric})", min(times), "s", "well under 2 s",
                        f"{n_images} images, {e.shape[1]}-d; best of 3"))
    return out


def rerank_report(
    embeddings: np.ndarray,
    labels: Sequence,
    *,
    sightings: Sequence | None = None,
    metric: str = "cosine",
    source: str = "",
    methods: Sequence[tuple[str, dict]] = (
        ("none", {}),
        ("aqe", {"top_k": 1}),
        ("aqe", {"top_k": 2}),
        ("aqe", {"top_k": 3}),
        ("k_reciprocal", {"k1": 20, "k2": 6, "lambda_value": 0.3}),
        ("k_reciprocal", {"k1": 10, "k2": 3, "lambda_value": 0.3}),
        ("k_reciprocal", {"k1": 5, "k2": 2, "lambda_value": 0.5}),
    ),
) -> list[dict]:
    """All-vs-all macro mAP of ``embeddings`` without and with each re-ranking (self and same sighting excluded)."""
    from core.similarity import l2_normalize, pairwise_scores

    emb = l2_normalize(embeddings) if metric == "cosine" else np.asarray(embeddings, np.float64)
    sim = pairwise_scores(emb, emb, metric=metric)
    valid = all_vs_all_valid(len(labels), sightings=sightings, exclude_same_sighting=True)
    rows, base = [], None
    for method, opts in methods:
        t0 = time.perf_counter()
        re = all_vs_all_rerank(sim, method=method, valid=valid, **opts)
        took = time.perf_counter() - t0
        res = all_vs_all_metrics(re, labels, sightings=sightings, exclude_same_sighting=True)
        base = res.map_macro if base is None else base
        name = method + ("(" + ", ".join(f"{k}={v}" for k, v in opts.items()) + ")" if opts else "")
        rows.append(_row(f"rerank macro mAP {name}", res.map_macro, "", "> none to switch on",
                         f"{source}; delta {res.map_macro - base:+.4f}; micro {res.map_micro:.4f}; "
                         f"CMC@1 {res.cmc_macro[1]:.3f}; {took:.2f} s"))
    return rows


def synthetic_reid_set(
    n_identities: int = 180, per_identity: int = 7, dim: int = 256, *, seed: int = 4
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nyala-sized stand-in: identity centre + per-sighting context offset + image noise.

    Images come in sightings of two (same place and moment), so a same-sighting
    pair shares a context vector as real photos share a background. The noise
    levels put plain macro mAP near 0.19 without and 0.32 with the same-sighting
    photo, the regime of frozen ImageNet features on nyala (DESIGN section 4).
    """
    rng = np.random.default_rng(seed)
    n = n_identities * per_identity
    labels = np.repeat(np.arange(n_identities), per_identity)
    sightings = np.repeat(np.arange((n + 1) // 2), 2)[:n]
    identity = rng.standard_normal((n_identities, dim))
    context = rng.standard_normal((sightings.max() + 1, dim))
    x = identity[labels] + 1.2 * context[sightings] + 2.5 * rng.standard_normal((n, dim))
    return x.astype(np.float32), labels, sightings


def rerank_rows() -> list[dict]:
    path = os.environ.get("ROSETTE_BENCH_RERANK_FEATURES")
    if path:
        data = np.load(path, allow_pickle=True)
        sightings = data["sightings"] if "sightings" in data else None
        return rerank_report(data["embeddings"], data["labels"], sightings=sightings, source=f"real: {path}")
    x, labels, sightings = synthetic_reid_set()
    return rerank_report(x, labels, sightings=sightings, source="SYNTHETIC clustered (no real features given)")


def run() -> list[dict]:
    faiss.omp_set_num_threads(2)
    sizes_env = os.environ.get("ROSETTE_BENCH_RETRIEVAL_SIZES")
    sizes = tuple(int(s) for s in sizes_env.split(",")) if sizes_env else SIZES
    rows: list[dict] = [_row("machine load at start (1-min average)", os.getloadavg()[0], "runnable tasks",
                             "< 2 for clean timings", f"{os.cpu_count()} CPUs; other work inflates every latency")]
    rows += kaggle_scoring_rows()
    rows += rerank_rows()
    rows += flat_latency_rows()
    rows += approximate_rows(sizes)
    return rows


if __name__ == "__main__":
    for r in run():
        print(r)
