"""Per species and model, an IVF-PQ index on disk for galleries past :data:`VECTOR_INDEX_THRESHOLD` photos.

Under the threshold match review embeds the gallery and searches it in memory (``db.identify.matching``). Past it, loading
every embedding of a species at once is what breaks (FiftyOne's users hit that wall near a million samples), so:

- the ``build_index`` job (:func:`build_vector_index`) reads the gallery's cached features
  :data:`CHUNK_IDS` photos at a time (``embed_images``, which computes the missing ones), trains one IVF-PQ on a
  seeded sample and writes it as :data:`SHARDS` memory-mappable shards with :mod:`core.identify.ondisk_index` under
  ``<data_dir>/cache/indexes/<species id>/<model fingerprint>/``, with the photo-id order as ``ids.npy`` (opened as
  a memmap) and recall@10 measured against exact streamed search on :data:`RECALL_QUERIES` gallery photos;
- :func:`index_for` opens it (or says there is none) and reports how far the gallery moved since the build: photos
  added since are few and searched exactly beside it, photos that left the gallery are dropped from its answers;
  past :data:`MAX_DELTA_FRACTION` of the gallery the index is stale and not used;
- :func:`streamed_topk` is the exact fallback while no index is built: the gallery is scored chunk by chunk.

Cosine models only: a Lorentz model's gallery past the threshold is always searched by :func:`streamed_topk`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.identify.ondisk_index import (
    OnDiskIndex,
    OnDiskIndexInfo,
    build_ivfpq_on_disk,
    default_nlist,
    default_pq_m,
    open_on_disk,
    read_info,
)
from core.identify.retrieval import prepare_cosine
from core.similarity import pairwise_scores
from db.catalogue import CatalogueError
from db.embeddings import all_image_ids, embed_images, gallery_image_ids, get_backbone
from db.session import Catalogue
from db.identify.suggestions import Suggestion, store_suggestions

#: Gallery size (photos of one species) from which match review uses the on-disk index.
VECTOR_INDEX_THRESHOLD: int = 100_000
THRESHOLD_ENV = "ROSETTE_INDEX_THRESHOLD"
#: Photos whose features are read (or computed) at once while building or streaming.
CHUNK_IDS: int = 20_000
#: Shards of the on-disk index.
SHARDS: int = 4
#: IVF lists visited per query (of ``core.identify.ondisk_index.default_nlist``: 4,096 at 1M photos). The scale benchmark
#: (tests/benchmarks/scale_faiss.py) measures recall@10 and latency at this setting.
NPROBE: int = 32
#: Gallery photos whose exact top-10 is kept during the build to measure recall@10.
RECALL_QUERIES: int = 200
#: At most this many photos train the IVF lists and PQ codebooks.
TRAIN_MAX: int = 64_000
#: Past this fraction of the gallery added or removed since the build, the index is stale and not used.
MAX_DELTA_FRACTION: float = 0.02
IDS_FILE = "ids.npy"

_OPEN: dict[Path, tuple[str, OnDiskIndex, np.ndarray]] = {}
_OPEN_LOCK = threading.Lock()


def index_threshold() -> int:
    """:data:`VECTOR_INDEX_THRESHOLD`, or ``$ROSETTE_INDEX_THRESHOLD`` when set (a positive whole number)."""
    raw = os.environ.get(THRESHOLD_ENV, "").strip()
    if not raw:
        return VECTOR_INDEX_THRESHOLD
    if not raw.isdigit() or int(raw) < 1:
        raise CatalogueError(f"{THRESHOLD_ENV} must be a positive whole number of photos, got {raw!r}")
    return int(raw)


def gallery_hash(ids: Sequence[int] | np.ndarray) -> str:
    """16 hex chars of SHA-256 over the gallery's photo ids in order."""
    return hashlib.sha256(np.ascontiguousarray(np.asarray(ids, dtype=np.int64)).tobytes()).hexdigest()[:16]


def index_folder(cat: Catalogue, species_id: int, fingerprint: str) -> Path:
    """``<data_dir>/cache/indexes/<species id>/<model fingerprint>``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in fingerprint)
    return cat.cache_dir / "indexes" / str(int(species_id)) / safe


def model_metric(backbone: Any) -> str:
    return str(getattr(backbone, "metric", None) or getattr(backbone.config, "metric", "cosine"))


@dataclass
class GalleryIndex:
    """A built index of one species' gallery, opened, and how the gallery moved since it was built."""

    index: OnDiskIndex
    ids: np.ndarray  # position in the index -> photo id (memmap)
    info: OnDiskIndexInfo
    added: np.ndarray  # gallery photos the index does not hold (searched exactly beside it)
    removed: np.ndarray  # photos the index holds that left the gallery (dropped from its answers), sorted

    def describe(self) -> str:
        """e.g. ``IVF-PQ on disk (4 shards, nlist 1024, m 32, nprobe 16; recall@10 0.93 measured on 200 queries)``."""
        moved = []
        if len(self.added):
            moved.append(f"{len(self.added):,} photos added since searched exactly")
        if len(self.removed):
            moved.append(f"{len(self.removed):,} photos that left the gallery skipped")
        return self.info.describe() + (f" + {'; '.join(moved)}" if moved else "")


def _open(folder: Path, info: OnDiskIndexInfo) -> tuple[OnDiskIndex, np.ndarray]:
    with _OPEN_LOCK:
        hit = _OPEN.get(folder)
        if hit is not None and hit[0] == info.built_at:
            return hit[1], hit[2]
        index = open_on_disk(folder)
        if index is None:
            raise FileNotFoundError(folder)
        ids = np.load(folder / IDS_FILE, mmap_mode="r")
        _OPEN[folder] = (info.built_at, index, ids)
        return index, ids


def index_for(cat: Catalogue, species_id: int, model: str | Any, *, gallery: Sequence[int] | None = None
              ) -> GalleryIndex | None:
    """The on-disk index of the species' gallery for ``model`` (a name or a backbone), or None: under the threshold,
    not built (or half-built), built for other features, not a cosine model, or stale (the gallery moved by more
    than :data:`MAX_DELTA_FRACTION` since the build). ``gallery``: the species' gallery ids when already read."""
    backbone = get_backbone(cat, model) if isinstance(model, str) else model
    if model_metric(backbone) != "cosine":
        return None
    ids_now = np.asarray(gallery if gallery is not None else gallery_image_ids(cat, species_id=species_id),
                         dtype=np.int64)
    if len(ids_now) < index_threshold():
        return None
    folder = index_folder(cat, species_id, backbone.config.fingerprint())
    info = read_info(folder)
    if info is None or not (folder / IDS_FILE).is_file():
        return None
    if info.extra.get("fingerprint") != backbone.config.fingerprint() or info.dim != int(backbone.config.embed_dim):
        return None
    try:
        index, ids = _open(folder, info)
    except (OSError, RuntimeError, ValueError):
        return None
    if info.extra.get("gallery_hash") == gallery_hash(ids_now):
        empty = np.zeros(0, np.int64)
        return GalleryIndex(index=index, ids=ids, info=info, added=empty, removed=empty)
    added = np.setdiff1d(ids_now, ids, assume_unique=True)
    removed = np.setdiff1d(ids, ids_now, assume_unique=True)
    if len(added) + len(removed) > MAX_DELTA_FRACTION * max(len(ids_now), 1):
        return None
    return GalleryIndex(index=index, ids=ids, info=info, added=added, removed=removed)


def index_state(cat: Catalogue, species_id: int, model: str) -> dict[str, Any]:
    """What ``rosette index show`` prints for one species and model: threshold, gallery size, whether an index is
    built, in use or stale, and its ``index.json``."""
    backbone = get_backbone(cat, model)
    gallery = gallery_image_ids(cat, species_id=species_id)
    folder = index_folder(cat, species_id, backbone.config.fingerprint())
    info = read_info(folder)
    used = index_for(cat, species_id, backbone, gallery=gallery)
    if used is not None:
        state = "in use"
    elif info is None:
        state = "not built"
    elif len(gallery) < index_threshold():
        state = "built, not used (gallery under the threshold)"
    else:
        state = "stale (gallery changed since the build)"
    return {"species_id": int(species_id), "model": backbone.config.name, "gallery": len(gallery),
            "threshold": index_threshold(), "folder": str(folder), "state": state,
            "answers_with": used.describe() if used is not None else None,
            "index": info.to_dict() if info is not None else None}


def _chunks(cat: Catalogue, ids: Sequence[int], *, backbone: Any, chunk: int,
            progress: Callable[[int, int], None] | None = None, done0: int = 0, total: int = 0,
            should_cancel: Callable[[], bool] | None = None):
    """The L2-normalised features of ``ids``, ``chunk`` photos at a time."""
    for start in range(0, len(ids), chunk):
        part = list(ids[start:start + chunk])
        emb = embed_images(cat, part, backbone=backbone, should_cancel=should_cancel)
        if progress is not None:
            progress(done0 + start + len(part), total)
        yield prepare_cosine(emb)


def build_vector_index(cat: Catalogue, *, species_id: int, model_name: str, shards: int = SHARDS,
                       nprobe: int = NPROBE, chunk: int | None = None, seed: int = 0,
                       progress: Callable[[int, int], None] | None = None,
                       should_cancel: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Build the species' on-disk IVF-PQ index for ``model_name`` (whatever the gallery size; match review only
    uses it past the threshold). Features are read ``chunk`` photos at a time; the index is written into a fresh
    folder and moved into place once complete. Returns its ``index.json`` plus a ``summary``."""
    backbone = get_backbone(cat, model_name)
    if model_metric(backbone) != "cosine":
        raise CatalogueError(f"{backbone.config.name} scores by the {model_metric(backbone)} metric; the on-disk "
                             "IVF-PQ index serves cosine models only (its galleries are searched exactly)")
    chunk = int(chunk or CHUNK_IDS)
    gallery = np.asarray(gallery_image_ids(cat, species_id=species_id), dtype=np.int64)
    n = len(gallery)
    if n < 2:
        raise CatalogueError(f"species {species_id} has {n} gallery photos; nothing to index")
    dim = int(backbone.config.embed_dim)
    fp = backbone.config.fingerprint()
    rng = np.random.default_rng(seed)
    nlist = default_nlist(n)
    n_train = min(n, TRAIN_MAX, max(nlist * 39, 256 * 39))
    nbits = 8 if n_train >= 256 * 39 else max(4, min(8, int(np.log2(max(n_train // 39, 16)))))
    train_pos = np.sort(rng.choice(n, size=n_train, replace=False))
    total = n + n_train
    train = np.concatenate(list(_chunks(cat, gallery[train_pos].tolist(), backbone=backbone, chunk=chunk,
                                        progress=progress, total=total, should_cancel=should_cancel)))
    q_pick = np.sort(rng.choice(n_train, size=min(RECALL_QUERIES, n_train), replace=False))

    folder = index_folder(cat, species_id, fp)
    work = folder.with_name(f".{folder.name}.building-{os.getpid()}-{threading.get_ident()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        np.save(work / IDS_FILE, gallery)
        extra = {"fingerprint": fp, "model": backbone.config.name, "species_id": int(species_id),
                 "gallery_hash": gallery_hash(gallery), "ids_file": IDS_FILE, "vectors": n, "chunk": chunk}
        info = build_ivfpq_on_disk(
            _chunks(cat, gallery.tolist(), backbone=backbone, chunk=chunk, progress=progress, done0=n_train,
                    total=total, should_cancel=should_cancel),
            dim=dim, folder=work, n_total=n, nlist=nlist, m=default_pq_m(dim), nbits=nbits, shards=shards,
            train_sample=train, metric="ip", seed=seed, nprobe=min(int(nprobe), nlist),
            recall_queries=train[q_pick], recall_exclude=train_pos[q_pick], extra=extra)
        del train
        old = folder.with_name(f".{folder.name}.old-{os.getpid()}-{threading.get_ident()}")
        if folder.exists():
            folder.rename(old)
        work.rename(folder)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    with _OPEN_LOCK:
        _OPEN.pop(folder, None)
    index, ids = _open(folder, read_info(folder))
    stored = store_top_matches(cat, species_id=species_id, model_name=model_name, backbone=backbone, index=index,
                               gallery=ids, chunk=chunk, should_cancel=should_cancel)
    return {**info.to_dict(), "folder": str(folder), "suggestions": stored,
            "summary": f"indexed {n:,} photos of species {species_id} with {backbone.config.name}: {info.describe()}, "
                       f"{info.size_bytes / 1e6:.1f} MB in {info.build_seconds:.0f} s; stored the best match of "
                       f"{stored:,} photos for the review queue"}


def store_top_matches(cat: Catalogue, *, species_id: int, model_name: str, backbone: Any, index: OnDiskIndex,
                      gallery: np.ndarray, chunk: int, should_cancel: Callable[[], bool] | None = None) -> int:
    """Every photo of the species gets its best gallery match by the index (itself excluded) stored in
    ``match_suggestions`` (``db.identify.suggestions``): the review queue past the on-the-fly limit reads those. Scores are
    the index's approximate (PQ) inner products: they order the queue; the match view re-scores exactly."""
    photo_ids = all_image_ids(cat, species_id=species_id)

    def best_matches():
        features = _chunks(cat, photo_ids, backbone=backbone, chunk=chunk, should_cancel=should_cancel)
        for start, emb in zip(range(0, len(photo_ids), chunk), features):
            part = photo_ids[start:start + chunk]
            scores, pos = index.search_ids(emb, 2)
            for row, photo in enumerate(part):
                for score, p in zip(scores[row], pos[row]):
                    if p >= 0 and int(gallery[p]) != photo:
                        yield Suggestion(int(photo), int(gallery[p]), float(score))
                        break

    return store_suggestions(cat, model_name=model_name, suggestions=best_matches())


def streamed_topk(cat: Catalogue, query: np.ndarray, gallery: Sequence[int], *, backbone: Any, k: int,
                  chunk: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` (scores, gallery positions) of one query over ``gallery``, its features read ``chunk``
    photos at a time (never the whole gallery's at once); scores as ``core.similarity.pairwise_scores``."""
    chunk = int(chunk or CHUNK_IDS)
    metric = model_metric(backbone)
    k = max(1, min(int(k), len(gallery)))
    best_s = np.full(0, -np.inf)
    best_i = np.zeros(0, np.int64)
    q = prepare_cosine(query) if metric == "cosine" else np.atleast_2d(query)
    for start in range(0, len(gallery), chunk):
        emb = embed_images(cat, list(gallery[start:start + chunk]), backbone=backbone)
        g = prepare_cosine(emb) if metric == "cosine" else emb
        s = pairwise_scores(q, g, metric=metric)[0].astype(np.float64)
        all_s = np.concatenate([best_s, s])
        all_i = np.concatenate([best_i, np.arange(start, start + len(s), dtype=np.int64)])
        order = np.lexsort((all_i, -all_s))[:k]
        best_s, best_i = all_s[order], all_i[order]
    return best_s, best_i


def exact_scores(cat: Catalogue, query: np.ndarray, image_ids: Sequence[int], *, backbone: Any) -> np.ndarray:
    """Exact scores of one query against a few photos (the index's hits, the photos added since its build)."""
    if not len(image_ids):
        return np.zeros(0)
    metric = model_metric(backbone)
    emb = embed_images(cat, list(image_ids), backbone=backbone)
    if metric == "cosine":
        return (prepare_cosine(emb) @ prepare_cosine(query)[0]).astype(np.float64)
    return pairwise_scores(np.atleast_2d(query), emb, metric=metric)[0].astype(np.float64)


__all__ = ["CHUNK_IDS", "GalleryIndex", "THRESHOLD_ENV", "VECTOR_INDEX_THRESHOLD",
           "build_vector_index", "exact_scores", "gallery_hash", "index_folder", "index_for", "index_state",
           "index_threshold", "streamed_topk"]
