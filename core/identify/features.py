"""Batched feature extraction with progress, cancellation and a content-addressed disk cache.

:func:`extract_features` embeds a list of ``(content_key, loader)`` items with a backbone. ``content_key``
identifies the pixels (callers append a mask hash for mask-dependent variants); ``loader()`` returns the prepared
HxWx3 uint8 RGB array and is only called on a cache miss. An entry is keyed by (content_key, the backbone config's
fingerprint, variant), so a different model never reads another's features; writes are atomic and a damaged entry
is recomputed. Torch backbones may run through ONNX Runtime (not in the key: both give the same features to 1e-4),
and :class:`PhotoFile` JPEGs may be decoded and resized on the GPU (not in the key either: core.identify.gpu_decode).

The cache layout, why writes are atomic, and the runtime and worker options: docs/retrieval.md."""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

# cheap: gpu_decode imports torch/torchvision only when a batch is decoded on a device
from core.identify.gpu_decode import PhotoFile, device_decode_default, device_decode_supported, prepare_on_device
from core.io.images import load_rgb

__all__ = ["ExtractionCancelled", "PhotoFile", "extract_features", "feature_cache_path", "load_rgb", "read_cached",
           "write_cached"]

Loader = Callable[[], np.ndarray]
_SAFE = re.compile(r"^[A-Za-z0-9._+=-]{1,120}$")


class ExtractionCancelled(Exception):
    """``should_cancel()`` returned True; raised between batches. ``done`` of ``total`` items were finished
    (and are cached, so a rerun continues where this one stopped)."""

    def __init__(self, done: int, total: int) -> None:
        super().__init__(f"feature extraction cancelled after {done} of {total} images")
        self.done = done
        self.total = total


def _safe_name(text: str) -> str:
    """A file-system-safe name: kept as-is when simple, else its SHA-256 (stable across runs)."""
    if _SAFE.match(text) and text not in (".", ".."):
        return text
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def feature_cache_path(cache_dir: str | os.PathLike[str], fingerprint: str, variant: str, content_key: str) -> Path:
    """Where the embedding of (content_key, fingerprint, variant) lives under ``cache_dir``."""
    key = _safe_name(content_key)
    # one join of strings and one Path: a ranking asks for the whole gallery's paths, and each "/" parses again
    return Path(os.path.join(cache_dir, _safe_name(fingerprint), _safe_name(variant), key[:2], f"{key}.npy"))


class _VectorMemo:
    """Cached vectors already read, by path, while their file is unchanged (same inode, size and mtime): ranking a
    query against a gallery reads every gallery photo's vector, and a review screen ranks one query per click. A
    stat is much cheaper than opening and parsing an ``.npy`` file; a file replaced or corrupted since is read
    again. Bounded in bytes, least recently used first out."""

    def __init__(self, *, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, tuple[tuple[int, int, int], np.ndarray]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str, stamp: tuple[int, int, int]) -> np.ndarray | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None or hit[0] != stamp:
                return None
            self._items.move_to_end(key)
            return hit[1]

    def put(self, key: str, stamp: tuple[int, int, int], arr: np.ndarray) -> None:
        arr.setflags(write=False)  # shared between callers: nobody may change it in place
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1].nbytes
            self._items[key] = (stamp, arr)
            self._bytes += arr.nbytes
            while self._bytes > self.max_bytes and self._items:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped.nbytes

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0


#: vectors read from the feature cache, kept in memory (``ROSETTE_FEATURE_MEMO_MB``, default 256 MB: about 50,000
#: photos of a 1,280-wide backbone)
FEATURE_MEMO = _VectorMemo(max_bytes=int(float(os.environ.get("ROSETTE_FEATURE_MEMO_MB", "256")) * 2**20))


def read_cached(path: Path | str, dim: int) -> np.ndarray | None:
    """The cached D-vector at ``path``, or None when missing or corrupt (wrong shape/dtype, non-finite).
    The vector returned is read-only (it may be shared through :data:`FEATURE_MEMO`)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key, stamp = str(path), (st.st_ino, st.st_size, st.st_mtime_ns)
    arr = FEATURE_MEMO.get(key, stamp)
    if arr is not None and arr.shape == (dim,):
        return arr
    try:
        arr = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, EOFError):
        return None
    if arr.dtype != np.float32 or arr.shape != (dim,) or not np.all(np.isfinite(arr)):
        return None
    FEATURE_MEMO.put(key, stamp, arr)
    return arr


def atomic_write(path: Path, writer: Callable[[Any], None]) -> None:
    """Write a file through ``writer(fh)`` into a temporary file beside it, then ``os.replace``: a crash never
    leaves half a file under the final name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            writer(fh)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_cached(path: Path, vector: np.ndarray) -> None:
    """Write one float32 vector atomically (temporary file in the same folder + ``os.replace``)."""
    vec = np.ascontiguousarray(vector, dtype=np.float32)
    atomic_write(path, lambda fh: np.save(fh, vec, allow_pickle=False))


def _write_config(cache_root: Path, backbone: Any) -> None:
    path = cache_root / "config.json"
    if path.exists():
        return
    config = backbone.config.to_dict()
    data = json.dumps(config, indent=2, sort_keys=True).encode("utf-8")
    try:
        atomic_write(path, lambda fh: fh.write(data))
    except OSError:  # provenance file only; never fail an extraction for it
        pass


def extract_features(
    backbone: Any,
    items: Sequence[tuple[str, Loader]],
    *,
    variant: str,
    cache_dir: Path | str | None,
    batch_size: int = 32,
    progress: Callable[[int, int], None] | None = None,
    should_cancel: Callable[[], bool] | None = None,
    prefetch: bool = True,
    stats: dict[str, int] | None = None,
    runtime: str | None = None,
    workers: int = 1,
    decode_on_device: bool | None = None,
) -> np.ndarray:
    """Embed ``items`` -> N x D float32 (rows in item order, L2-normalised by the backbone).

    Cached entries are read, the rest are loaded and embedded ``batch_size`` at a
    time (items with the same key are computed once) and written to the cache.
    ``progress(done, total)`` is called once after the cache scan and after every
    batch; ``should_cancel()`` is checked before every batch and raises
    :class:`ExtractionCancelled` when it returns True (finished batches stay
    cached). With ``prefetch`` the next batch is loaded in one background thread
    while the current one is embedded (loaders run one at a time, in order); for
    backbones with ``prepare``/``embed_prepared`` (torch backbones) that thread also
    resizes and normalises, so only the forward pass stays on the calling thread.
    ``stats``, when given, receives ``{"cached": .., "computed": ..}``.

    ``runtime`` (``"auto"``, ``"torch"``, ``"onnx"``; backbones with ``use_runtime``) chooses the forward
    runtime; the ONNX export is kept under ``cache_dir`` beside the features it gives (same fingerprint).
    ``workers`` > 1 prepares up to that many batches at once in that many threads (loaders then run
    concurrently and must be thread-safe; order and values of the result do not change).

    ``decode_on_device``: items whose loader is a :class:`PhotoFile` (the loader names its JPEG) are decoded,
    resized and normalised on the backbone's device (:mod:`core.identify.gpu_decode`; the same features to float
    tolerance); other loaders and the photos that path does not take run the CPU path in the same batch. None
    (default): on when the backbone runs on CUDA and its preprocessing allows it; False: always the CPU path;
    True: also on a CPU backbone (ValueError where the backbone's preprocessing does not allow it).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    if workers < 1:
        raise ValueError("workers must be >= 1")
    config = backbone.config
    dim = int(config.embed_dim)
    total = len(items)
    out = np.empty((total, dim), dtype=np.float32)
    fp = config.fingerprint()
    cache_root = Path(cache_dir) / _safe_name(fp) if cache_dir is not None else None

    # cache scan; group positions by key so duplicates are computed once. The folder of the entries is joined
    # once (a ranking scans the whole gallery: a Path per entry cost more than reading the vectors)
    pending: dict[str, list[int]] = {}
    loaders: dict[str, Loader] = {}
    done = 0
    folder = os.path.join(cache_dir, _safe_name(fp), _safe_name(variant)) if cache_dir is not None else ""
    for i, (key, loader) in enumerate(items):
        if key in pending:
            pending[key].append(i)
            continue
        if cache_root is not None:
            safe = _safe_name(key)
            vec = read_cached(f"{folder}/{safe[:2]}/{safe}.npy", dim)
            if vec is not None:
                out[i] = vec
                done += 1
                continue
        pending[key] = [i]
        loaders[key] = loader
    n_cached = done
    if progress is not None:
        progress(done, total)

    keys = list(pending)
    batches = [keys[s:s + batch_size] for s in range(0, len(keys), batch_size)]
    if cache_root is not None and batches:
        _write_config(cache_root, backbone)

    # backbones that split embedding into a CPU "prepare" step and a model step (torch backbones) get
    # the prepare step done in the loader thread too, overlapping resize/normalise with the forward pass
    split = callable(getattr(backbone, "prepare", None)) and callable(getattr(backbone, "embed_prepared", None))

    # decoding on the device stands in for the whole prepare step, so it needs a backbone with that split
    if decode_on_device is None:
        on_device = split and device_decode_default(backbone)
    elif decode_on_device:
        if not (split and device_decode_supported(backbone)):
            raise ValueError(f"{config.name}: its preprocessing cannot run on the device (decode_on_device=True)")
        on_device = True
    else:
        on_device = False

    def load_batch(batch_keys: list[str]) -> Any:
        if on_device and any(isinstance(loaders[k], PhotoFile) for k in batch_keys):
            return prepare_on_device(backbone, [loaders[k] for k in batch_keys])[0]
        images = [loaders[k]() for k in batch_keys]
        return backbone.prepare(images) if split else images

    if batches and callable(getattr(backbone, "use_runtime", None)):
        backbone.use_runtime(runtime, cache_dir=cache_dir)

    executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rosette-prefetch") if prefetch else None
    computed = 0
    try:
        ahead: deque[Future[Any]] = deque()
        submitted = 0
        for b, batch_keys in enumerate(batches):
            if should_cancel is not None and should_cancel():
                raise ExtractionCancelled(done, total)
            if executor is None:
                loaded = load_batch(batch_keys)
            else:
                while submitted < len(batches) and submitted <= b + workers:  # this batch + ``workers`` ahead
                    ahead.append(executor.submit(load_batch, batches[submitted]))
                    submitted += 1
                loaded = ahead.popleft().result()
            embedded = backbone.embed_prepared(loaded) if split else backbone.embed(loaded)
            feats = np.asarray(embedded, dtype=np.float32)
            if feats.shape != (len(batch_keys), dim):
                raise RuntimeError(f"{config.name} returned {feats.shape}, expected {(len(batch_keys), dim)}")
            for key, vec in zip(batch_keys, feats):
                positions = pending[key]
                out[positions] = vec
                if cache_root is not None:
                    write_cached(feature_cache_path(cache_dir, fp, variant, key), vec)
                done += len(positions)
                computed += 1
            if progress is not None:
                progress(done, total)
    finally:
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
    if stats is not None:
        stats["cached"] = n_cached
        stats["computed"] = computed
    return out

