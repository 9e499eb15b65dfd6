"""A FAISS IVF-PQ index kept on disk, split into shards and memory-mapped when searched.

Past a few hundred thousand photos a gallery's embeddings do not fit in one process's memory (1M x 1280-d float32
is 5 GB). :func:`build_ivfpq_on_disk` trains on a sample and adds vectors chunk by chunk into shards;
:func:`open_on_disk` memory-maps them as one index. Recall@10 against exact search is measured in the same pass
(:class:`RunningTopK`). ``index.json`` is written last and atomically: a folder without it is never opened.
Scores are PQ approximations; callers that show scores re-score the hits exactly.

How shards, ids and memory-mapping fit together, and the metrics: docs/retrieval.md."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from core.identify.retrieval import faiss_search

INDEX_JSON = "index.json"
METRICS = ("ip", "l2")
DEFAULT_NPROBE = 16


@dataclass(frozen=True)
class OnDiskIndexInfo:
    """What ``index.json`` records about one on-disk index (``extra``: the caller's own facts, e.g. the model
    fingerprint and the gallery hash)."""

    dim: int
    n: int
    nlist: int
    m: int
    nbits: int
    nprobe: int
    shards: int
    metric: str
    shard_files: tuple[str, ...]
    bounds: tuple[int, ...]  # shard s holds ids [bounds[s], bounds[s + 1])
    recall_at_10: float | None
    recall_queries: int
    build_seconds: float
    size_bytes: int
    built_at: str
    extra: dict[str, Any] = field(default_factory=dict)
    # share of the exact top-10 inside the index's top-100 (what a caller re-scoring 100 hits exactly finds)
    recall_10_in_100: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shard_files"], d["bounds"] = list(self.shard_files), list(self.bounds)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OnDiskIndexInfo:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["shard_files"] = tuple(known.get("shard_files", ()))
        known["bounds"] = tuple(int(b) for b in known.get("bounds", ()))
        return cls(**known)

    def describe(self) -> str:
        """One line naming the index, e.g. ``IVF-PQ on disk (4 shards, nlist 1024, m 32, nprobe 16; recall@10 0.93
        measured on 200 queries)``."""
        recall = (f"; recall@10 {self.recall_at_10:.2f} measured on {self.recall_queries} queries"
                  if self.recall_at_10 is not None else "; recall not measured")
        return (f"IVF-PQ on disk ({self.shards} shards, nlist {self.nlist}, m {self.m}, nprobe {self.nprobe}"
                f"{recall})")


def shard_bounds(n_total: int, shards: int) -> list[int]:
    """Contiguous, disjoint id ranges covering [0, n_total): ``shards + 1`` increasing bounds."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    return [n_total * s // shards for s in range(shards + 1)]


def recall_at_k(found: np.ndarray, exact: np.ndarray, *, k: int = 10) -> float:
    """Mean over queries of |found[:k] ∩ exact[:k]| / k (ids; -1 in ``found`` never counts)."""
    found, exact = np.asarray(found), np.asarray(exact)
    if found.shape[0] != exact.shape[0]:
        raise ValueError(f"found has {found.shape[0]} queries, exact has {exact.shape[0]}")
    if found.shape[0] == 0:
        raise ValueError("no queries to measure recall on")
    hits = [len({int(i) for i in f[:k] if i >= 0} & {int(i) for i in e[:k]}) for f, e in zip(found, exact)]
    return float(np.mean(hits) / k)


def _search(index: Any, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    search = getattr(index, "search_ids", None)
    if search is not None:
        return search(queries, k)
    return faiss_search(index, np.ascontiguousarray(queries, dtype=np.float32), k)


def measure_recall(index: Any, queries: np.ndarray, exact_neighbours: np.ndarray, *, k: int = 10,
                   depth: int | None = None, exclude: np.ndarray | None = None) -> float:
    """Mean fraction of each query's exact top-``k`` found in the index's top-``depth`` (default ``k``: recall@k).

    ``index``: a FAISS index or :class:`OnDiskIndex`; ``exact_neighbours``: Q x >=k ids. ``exclude`` (one id per
    query, e.g. the query's own id when it is in the index) is dropped from the index's answer before comparing,
    as it must have been from the exact one."""
    depth = int(depth or k)
    _, found = _search(index, queries, depth + (1 if exclude is not None else 0))
    if exclude is not None:
        kept = [[i for i in row if i != ex][:depth] for row, ex in zip(found, exclude)]
        found = np.array([row + [-1] * (depth - len(row)) for row in kept], dtype=np.int64)
    exact = np.asarray(exact_neighbours)[:, :k]
    hits = [len({int(i) for i in f[:depth] if i >= 0} & {int(i) for i in e}) for f, e in zip(found, exact)]
    return float(np.mean(hits) / k)


def measure_recall_at_10(index: Any, queries: np.ndarray, exact_neighbours: np.ndarray, *,
                         exclude: np.ndarray | None = None) -> float:
    """Recall@10 of ``index`` against ``exact_neighbours`` (see :func:`measure_recall`)."""
    return measure_recall(index, queries, exact_neighbours, k=10, exclude=exclude)


class RunningTopK:
    """Exact top-k of a few queries over data that arrives in chunks (never the whole matrix).

    ``update(chunk, first_id)`` scores the chunk (rows ``first_id ..``) and keeps the k best per query; ties go to
    the smaller id, so the result equals a stable full sort. ``exclude``: one id per query never kept."""

    def __init__(self, queries: np.ndarray, k: int, *, metric: str = "ip", exclude: np.ndarray | None = None) -> None:
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
        self.queries = np.ascontiguousarray(queries, dtype=np.float32)
        self.k = int(k)
        self.metric = metric
        self.exclude = None if exclude is None else np.asarray(exclude, dtype=np.int64)
        q = self.queries.shape[0]
        self.scores = np.full((q, self.k), -np.inf, dtype=np.float64)  # higher = better (l2: negated distance)
        self.ids = np.full((q, self.k), -1, dtype=np.int64)

    def update(self, chunk: np.ndarray, first_id: int) -> None:
        c = np.asarray(chunk, dtype=np.float32)
        if c.shape[0] == 0:
            return
        s = (self.queries @ c.T).astype(np.float64)
        if self.metric == "l2":
            s = 2 * s - np.einsum("ij,ij->i", c, c)[None, :] - np.einsum("ij,ij->i", self.queries,
                                                                         self.queries)[:, None]
        ids = np.broadcast_to(np.arange(first_id, first_id + c.shape[0], dtype=np.int64), s.shape)
        if self.exclude is not None:
            s = np.where(ids == self.exclude[:, None], -np.inf, s)
        all_s = np.concatenate([self.scores, s], axis=1)
        all_i = np.concatenate([self.ids, ids], axis=1)
        key_i = np.where(np.isneginf(all_s), np.iinfo(np.int64).max, all_i)
        order = np.lexsort((key_i, -all_s))[:, :self.k]
        self.scores = np.take_along_axis(all_s, order, axis=1)
        self.ids = np.where(np.isneginf(self.scores), -1, np.take_along_axis(all_i, order, axis=1))

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(scores Q x k, ids Q x k), best first (l2: scores are negated squared distances)."""
        return self.scores.copy(), self.ids.copy()


def exact_topk_streamed(chunks: Iterable[np.ndarray], queries: np.ndarray, k: int, *, metric: str = "ip",
                        exclude: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k ids of ``queries`` over the rows of ``chunks`` (global ids = row numbers), one chunk in memory
    at a time."""
    top = RunningTopK(queries, k, metric=metric, exclude=exclude)
    offset = 0
    for chunk in chunks:
        top.update(chunk, offset)
        offset += len(chunk)
    return top.result()


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_shard(index: faiss.Index, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    faiss.write_index(index, str(tmp))
    os.replace(tmp, path)


def train_ivfpq(train_sample: np.ndarray, *, dim: int, nlist: int, m: int, nbits: int = 8, metric: str = "ip",
                seed: int = 0, nprobe: int = DEFAULT_NPROBE) -> faiss.IndexIVFPQ:
    """An empty IVF-PQ (``nlist`` lists, ``m`` sub-quantizers of ``nbits`` bits) trained on ``train_sample``."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
    faiss_metric = faiss.METRIC_INNER_PRODUCT if metric == "ip" else faiss.METRIC_L2
    # built directly, not with index_factory: its IVF-PQ turns on polysemous training, far slower to train
    quantizer = faiss.IndexFlatIP(dim) if metric == "ip" else faiss.IndexFlatL2(dim)
    index = faiss.IndexIVFPQ(quantizer, dim, int(nlist), int(m), int(nbits), faiss_metric)
    index.cp.seed = int(seed)
    index.cp.min_points_per_centroid = 1  # small samples (tests, tiny galleries) train without complaint
    index.pq.cp.seed = int(seed)
    index.pq.cp.min_points_per_centroid = 1
    index.nprobe = int(nprobe)
    index.train(np.ascontiguousarray(train_sample, dtype=np.float32))
    index.own_fields = True  # keep the quantizer alive with the index
    quantizer.this.disown()
    return index


def build_ivfpq_on_disk(chunks: Iterable[np.ndarray], *, dim: int, folder: Path, n_total: int, nlist: int, m: int,
                        nbits: int = 8, shards: int = 4, train_sample: np.ndarray, metric: str = "ip", seed: int = 0,
                        nprobe: int = DEFAULT_NPROBE, recall_queries: np.ndarray | None = None,
                        recall_exclude: np.ndarray | None = None, extra: dict[str, Any] | None = None
                        ) -> OnDiskIndexInfo:
    """Train an IVF-PQ on ``train_sample``, add the ``n_total`` rows of ``chunks`` (in order: global ids 0..n-1)
    into ``shards`` shard files under ``folder``, and write ``index.json`` last.

    Rows are added as given (normalise them first for cosine). ``recall_queries`` (Q x dim; ``recall_exclude``: one
    id per query to leave out, e.g. the query's own) get their exact top-10 by a running search during the same pass,
    and the finished index's recall@10 is stored. ``extra`` is stored as is in ``index.json``. An existing
    ``index.json`` in ``folder`` is removed first, so a build that dies half-way leaves no complete-looking index.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
    if dim % m:
        raise ValueError(f"the dimension {dim} is not a multiple of the PQ sub-quantizer count m={m}")
    if n_total < 1:
        raise ValueError("cannot build an index over 0 vectors")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / INDEX_JSON).unlink(missing_ok=True)
    t0 = time.perf_counter()
    train = np.ascontiguousarray(train_sample, dtype=np.float32)
    if train.ndim != 2 or train.shape[1] != dim:
        raise ValueError(f"train_sample must be N x {dim}, got {train.shape}")
    trained = train_ivfpq(train, dim=dim, nlist=nlist, m=m, nbits=nbits, metric=metric, seed=seed, nprobe=nprobe)
    template = faiss.serialize_index(trained)  # every shard starts as this trained, empty index

    bounds = shard_bounds(int(n_total), int(shards))
    top = RunningTopK(recall_queries, 10, metric=metric, exclude=recall_exclude) \
        if recall_queries is not None and len(recall_queries) else None
    files: list[str] = []
    shard_no, current = 0, faiss.deserialize_index(template)
    offset = 0
    for chunk in chunks:
        c = np.ascontiguousarray(chunk, dtype=np.float32)
        if c.ndim != 2 or c.shape[1] != dim:
            raise ValueError(f"a chunk has shape {c.shape}; expected rows of dimension {dim}")
        if offset + len(c) > n_total:
            raise ValueError(f"the chunks hold more than the announced {n_total} vectors")
        if top is not None:
            top.update(c, offset)
        pos = 0
        while pos < len(c):
            end = min(len(c), bounds[shard_no + 1] - offset)
            if end > pos:
                current.add_with_ids(c[pos:end], np.arange(offset + pos, offset + end, dtype=np.int64))
                pos = end
            if offset + pos == bounds[shard_no + 1]:  # this shard's range is full: to disk, start the next
                name = f"shard_{shard_no:02d}.faiss"
                _write_shard(current, folder / name)
                files.append(name)
                shard_no += 1
                current = faiss.deserialize_index(template) if shard_no < shards else None
        offset += len(c)
    while shard_no < shards and offset == n_total:  # empty trailing ranges (n_total < shards)
        name = f"shard_{shard_no:02d}.faiss"
        _write_shard(current, folder / name)
        files.append(name)
        shard_no += 1
        current = faiss.deserialize_index(template) if shard_no < shards else None
    if offset != n_total:
        raise ValueError(f"the chunks held {offset} vectors, not the announced {n_total}")
    build_seconds = time.perf_counter() - t0

    recall = recall_100 = None
    n_queries = 0
    if top is not None:
        opened = OnDiskIndex(folder, _info_for_open(dim, n_total, nlist, m, nbits, nprobe, shards, metric, files,
                                                    bounds))
        exact = top.result()[1]
        recall = measure_recall_at_10(opened, top.queries, exact, exclude=recall_exclude)
        recall_100 = measure_recall(opened, top.queries, exact, k=10, depth=100, exclude=recall_exclude)
        n_queries = len(top.queries)
        opened.close()
    size = sum((folder / f).stat().st_size for f in files)
    info = OnDiskIndexInfo(dim=dim, n=int(n_total), nlist=int(nlist), m=int(m), nbits=int(nbits), nprobe=int(nprobe),
                           shards=int(shards), metric=metric, shard_files=tuple(files), bounds=tuple(bounds),
                           recall_at_10=recall, recall_queries=n_queries, build_seconds=round(build_seconds, 3),
                           size_bytes=int(size), built_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           extra=dict(extra or {}), recall_10_in_100=recall_100)
    _atomic_write_bytes(folder / INDEX_JSON, json.dumps(info.to_dict(), indent=2, sort_keys=True).encode())
    return info


def _info_for_open(dim: int, n: int, nlist: int, m: int, nbits: int, nprobe: int, shards: int, metric: str,
                   files: list[str], bounds: list[int]) -> OnDiskIndexInfo:
    return OnDiskIndexInfo(dim=dim, n=n, nlist=nlist, m=m, nbits=nbits, nprobe=nprobe, shards=shards, metric=metric,
                           shard_files=tuple(files), bounds=tuple(bounds), recall_at_10=None, recall_queries=0,
                           build_seconds=0.0, size_bytes=0, built_at="")


def read_info(folder: Path) -> OnDiskIndexInfo | None:
    """The index's ``index.json``, or None when the folder holds no complete index (missing, unreadable, or a shard
    file it names is absent)."""
    folder = Path(folder)
    try:
        info = OnDiskIndexInfo.from_dict(json.loads((folder / INDEX_JSON).read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not info.shard_files or not all((folder / f).is_file() for f in info.shard_files):
        return None
    return info


class OnDiskIndex:
    """The shards of one on-disk index, memory-mapped and joined in a ``faiss.IndexShards``."""

    def __init__(self, folder: Path, info: OnDiskIndexInfo) -> None:
        self.folder = Path(folder)
        self.info = info
        flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY
        self.parts = [faiss.read_index(str(self.folder / f), flags) for f in info.shard_files]
        self.index = faiss.IndexShards(info.dim, False, False)  # not threaded; successive_ids=False: ids are global
        for part in self.parts:  # self.parts keeps the shards alive as long as the IndexShards
            self.index.add_shard(part)
        self.set_nprobe(info.nprobe)

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def set_nprobe(self, nprobe: int) -> None:
        for part in self.parts:
            faiss.extract_index_ivf(part).nprobe = int(nprobe)
        self.nprobe = int(nprobe)

    def search_ids(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(approximate scores Q x k, global ids Q x k; -1 where fewer were found); ip: higher = better."""
        q = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        if q.shape[1] != self.info.dim:
            raise ValueError(f"queries have dimension {q.shape[1]}, the index holds dimension {self.info.dim}")
        k = max(1, min(int(k), self.ntotal))
        return faiss_search(self.index, q, k)

    def close(self) -> None:
        self.index = None
        self.parts = []


def open_on_disk(folder: Path) -> OnDiskIndex | None:
    """The complete index in ``folder``, memory-mapped; None when there is none (no ``index.json``: not built, or a
    build that did not finish)."""
    info = read_info(Path(folder))
    if info is None:
        return None
    return OnDiskIndex(Path(folder), info)


def default_nlist(n: int) -> int:
    """IVF list count: about 4 sqrt(n) as a power of two, at least 39 training points per list, in [1, 65536]
    (100k -> 1024, 1M -> 4096, 10M -> 16384)."""
    target = max(1, min(65536, int(4 * np.sqrt(max(n, 1))), max(1, n // 39)))
    return 1 << int(np.floor(np.log2(target)))


def default_pq_m(dim: int) -> int:
    """PQ sub-quantizers: the largest of 64, 48, 32, 24, 16, 8, 4, 2, 1 dividing ``dim`` with >= 4 dimensions each
    (256 -> 64, 1280 -> 64, 32 -> 8)."""
    for m in (64, 48, 32, 24, 16, 8, 4, 2, 1):
        if dim % m == 0 and dim // m >= 4:
            return m
    return 1
