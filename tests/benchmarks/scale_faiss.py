"""Scale benchmark, FAISS part: single-query latency, recall@10, build time and size at 100k / 1M (IVF in memory)
and 10M (IVF-PQ on disk, 4 memory-mapped shards, as ``db.identify.vector_index`` builds it for match review).

``run(sizes=(100_000, 1_000_000)) -> list[dict]`` returns rows ``{benchmark, value, unit, note}``; the ``scale``
section of ``make bench`` prints them. Run alone: ``.venv/bin/python tests/benchmarks/scale_faiss.py [SIZES...]``.

Data: synthetic 256-d float32 embeddings from a gaussian mixture of 10,000 clusters, L2-normalised: a random centre
per cluster plus variation inside the cluster's own random 8-d subspace plus 10% isotropic noise (like the photos
of one animal varying along a few directions). Uniform random vectors would make any IVF recall meaningless. Rows
are generated chunk by chunk from a seeded RNG (chunk ``i`` from seed ``(seed, stream, i)``), so the 10M x 256
floats (10 GB) never sit in memory at once; the IVF-PQ's exact ground truth is a running top-10 over the same
chunks, kept during the build. Queries: 200 fresh draws from the same mixture, one query per search call.

The on-disk size: 10M by default (measured: 630 s to build on 2 quiet cores, peak RSS 3.5 GB, 738 MB on disk);
``ROSETTE_SCALE_PQ_SIZE`` chooses another (e.g. ``2000000`` for a 2-minute run). Peak memory is reported (``ru_maxrss``): the build holds
one 20k-row chunk, one shard's PQ codes (n/4 x (m + 8) bytes) and the training sample.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.identify.ondisk_index import (  # noqa: E402
    RunningTopK,
    build_ivfpq_on_disk,
    default_pq_m,
    open_on_disk,
    recall_at_k,
)
from core.identify.ondisk_index import default_nlist as pq_nlist  # noqa: E402
from core.identify.retrieval import DEFAULT_NPROBE, build_index, default_nlist  # noqa: E402

DIM = 256
CENTRES = 10_000
INTRINSIC = 8
N_QUERIES = 200
CHUNK = 20_000
PQ_SHARDS = 4
PQ_M = default_pq_m(DIM)  # as db.identify.vector_index builds it: 64 sub-quantizers of 4 dimensions, 64 bytes per vector
PQ_NLIST = 4096  # cap on core.identify.ondisk_index.default_nlist (8,192 at 10M) to keep the 10M build near 15 min
PQ_NPROBE = 32  # db.identify.vector_index.NPROBE
PQ_TRAIN = 100_000
DATA_NOTE = (f"synthetic {DIM}-d gaussian mixture, {CENTRES:,} clusters (own 8-d variation + 10% noise), "
             "L2-normalised, generated in seeded chunks")


class Mixture:
    """A reproducible gaussian mixture: ``chunks(n, stream)`` yields the same rows every time, chunk by chunk."""

    def __init__(self, *, dim: int = DIM, centres: int = CENTRES, intrinsic: int = INTRINSIC, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.seed = seed
        self.centres = rng.standard_normal((centres, dim), dtype=np.float32)
        self.bases = rng.standard_normal((centres, intrinsic, dim), dtype=np.float32) / np.sqrt(intrinsic)

    def chunk(self, stream: int, i: int, size: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, stream, i])
        label = rng.integers(len(self.centres), size=size)
        z = rng.standard_normal((size, self.bases.shape[1]), dtype=np.float32)
        x = self.centres[label] + np.einsum("mr,mrd->md", z, self.bases[label])
        x += 0.1 * rng.standard_normal(x.shape, dtype=np.float32)
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    def chunks(self, n: int, stream: int, *, chunk: int = CHUNK) -> Iterator[np.ndarray]:
        for i, start in enumerate(range(0, n, chunk)):
            yield self.chunk(stream, i, min(chunk, n - start))

    def draw(self, n: int, stream: int) -> np.ndarray:
        return np.concatenate(list(self.chunks(n, stream)))


GALLERY, QUERIES, TRAIN = 1, 2, 3  # RNG streams


def _row(benchmark: str, value: float, unit: str, note: str = "") -> dict:
    return {"benchmark": benchmark, "value": float(value), "unit": unit, "note": note}


def _single_query_ms(search, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    times, hits = [], []
    for i in range(len(queries)):
        t0 = time.perf_counter()
        _, idx = search(queries[i:i + 1], k)
        times.append((time.perf_counter() - t0) * 1e3)
        hits.append(np.asarray(idx[0]))
    return np.asarray(times), np.asarray(hits)


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2  # Linux: KiB


def ivf_rows(n: int, *, mix: Mixture, queries: np.ndarray) -> list[dict]:
    """IVF (IVFFlat, in memory, ``core.identify.retrieval.build_index``) at ``n`` vectors."""
    gallery = mix.draw(n, GALLERY)
    exact = RunningTopK(queries, 10)
    for start in range(0, n, CHUNK):
        exact.update(gallery[start:start + CHUNK], start)
    t0 = time.perf_counter()
    index = build_index(gallery, approximate=True, approximate_kind="ivf")
    build_s = time.perf_counter() - t0
    times, hits = _single_query_ms(index.search, queries, 10)
    recall = recall_at_k(hits, exact.result()[1])
    size_mb = n * (DIM * 4 + 8) / 1e6
    what = f"IVFFlat nlist {default_nlist(n)}, nprobe {DEFAULT_NPROBE}, in memory; {DATA_NOTE}"
    del gallery, index
    return [
        _row(f"FAISS IVF query p50 @ {n:,}", np.median(times), "ms",
             f"k=10, one query per call, {len(queries)} queries; p95 {np.percentile(times, 95):.2f} ms; {what}"),
        _row(f"FAISS IVF recall@10 @ {n:,}", recall, "", f"against exact search; {what}"),
        _row(f"FAISS IVF build @ {n:,}", build_s, "s", f"train + add; vectors {size_mb:,.0f} MB in memory"),
    ]


def pq_size() -> int:
    """The IVF-PQ's size: ``$ROSETTE_SCALE_PQ_SIZE``, else 10M."""
    raw = os.environ.get("ROSETTE_SCALE_PQ_SIZE", "").replace("_", "").strip()
    if raw:
        return int(raw)
    return 10_000_000


def ivfpq_rows(n: int, *, mix: Mixture, queries: np.ndarray, folder: Path | None = None) -> list[dict]:
    """IVF-PQ on disk (4 memory-mapped shards in an IndexShards) at ``n`` vectors, built chunk by chunk."""
    own = folder is None
    folder = Path(folder or tempfile.mkdtemp(prefix="rosette-scale-ivfpq-"))
    nlist = min(PQ_NLIST, pq_nlist(n))
    try:
        train = mix.draw(min(n, PQ_TRAIN), TRAIN)
        t0 = time.perf_counter()
        info = build_ivfpq_on_disk(mix.chunks(n, GALLERY), dim=DIM, folder=folder, n_total=n, nlist=nlist, m=PQ_M,
                                   nbits=8, shards=PQ_SHARDS, train_sample=train, metric="ip", seed=0,
                                   nprobe=PQ_NPROBE, recall_queries=queries)
        build_s = time.perf_counter() - t0  # includes the running exact top-10 and the recall measurement
        del train
        index = open_on_disk(folder)
        assert index is not None
        times, _ = _single_query_ms(index.search_ids, queries, 10)
        exact = info  # recall was measured during the build against the streamed exact top-10
        what = (f"IVF-PQ on disk: {PQ_SHARDS} shards memory-mapped (IO_FLAG_MMAP) in IndexShards, nlist {nlist}, "
                f"PQ {PQ_M}x8, nprobe {PQ_NPROBE}; {DATA_NOTE}")
        shortlist = info.recall_10_in_100 or 0.0
        index.close()
        return [
            _row(f"FAISS IVF-PQ on disk query p50 @ {n:,}", np.median(times), "ms",
                 f"k=10, one query per call, {len(queries)} queries; p95 {np.percentile(times, 95):.2f} ms; {what}"),
            _row(f"FAISS IVF-PQ on disk recall@10 @ {n:,}", exact.recall_at_10 or 0.0, "",
                 f"against exact streamed search on {exact.recall_queries} queries (PQ scores, no re-ranking); "
                 f"exact top-10 inside the top-100: {shortlist:.3f} (what match review re-scores exactly)"),
            _row(f"FAISS IVF-PQ on disk build @ {n:,}", build_s, "s",
                 f"train on {min(n, PQ_TRAIN):,} + add in {CHUNK:,}-row chunks + exact top-10 of {len(queries)} "
                 f"queries; peak RSS so far {_peak_rss_gb():.2f} GB"),
            _row(f"FAISS IVF-PQ on disk size @ {n:,}", info.size_bytes / 1e6, "MB",
                 f"{PQ_SHARDS} shard files (codes + ids + lists); float32 vectors would be {n * DIM * 4 / 1e9:.1f} GB"),
        ]
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)


def run(sizes: Sequence[int] = (100_000, 1_000_000), *, pq_n: int | None = None) -> list[dict]:
    """The FAISS rows of the scale benchmark: IVF at each of ``sizes``, IVF-PQ on disk at ``pq_n``
    (default :func:`pq_size`; 0 skips it)."""
    mix = Mixture(seed=0)
    queries = mix.draw(N_QUERIES, QUERIES)
    rows: list[dict] = []
    for n in sizes:
        rows += ivf_rows(int(n), mix=mix, queries=queries)
    n_pq = pq_size() if pq_n is None else int(pq_n)
    if n_pq:
        rows += ivfpq_rows(n_pq, mix=mix, queries=queries)
    return rows


if __name__ == "__main__":
    args = [int(a.replace("_", "")) for a in sys.argv[1:]]
    for r in run(args or (100_000, 1_000_000)):
        print(f"{r['benchmark']:<45} {r['value']:>12.4g} {r['unit']:<3} {r['note']}")
