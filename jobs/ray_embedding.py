"""Embedding a species on Ray: a Ray Data pipeline over the content-addressed photo store.

::

    ray.data.from_items([{key, photo's store path, mask}...])     # only photos not in the feature cache
      -> map_batches(decode_and_resize)                           # the local path's loader + the backbone's resize
      -> map_batches(EmbedActor, batch_size, num_cpus/num_gpus, N actors)   # backbone built once per actor
      -> the driver writes each vector to the feature cache       # core.identify.features: same path, same fingerprint,
                                                                  # atomic (a half-written file never lands)

The photos are decoded exactly as :func:`db.embeddings.embed_images` decodes them (the same
:func:`db.embeddings.variant_loader`) and prepared by the same backbone methods (``prepare`` /
``embed_prepared``), so the features equal the local engine's and later local reads find them cached. The Ray
workers open the catalogue themselves (data directory + database URL), so they need the data directory at the
same path: a shared filesystem.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from core.annotations import CROP_MARGIN, Box
from core.identify.features import atomic_write, feature_cache_path, read_cached, write_cached
from core.inspect.variants import MASK_FREE_VARIANTS
from db.embeddings import (
    FrameCrops,
    ImageSource,
    all_image_ids,
    decode_side,
    get_backbone,
    sources_for,
    variant_loader,
)
from db.session import Catalogue, open_catalogue
from jobs.context import JobCancelled, JobContext
from jobs.requests.map import EmbedRequest

_CATALOGUES: dict[tuple[str, str], Catalogue] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class EmbedSettings:
    """How the pipeline runs: ``actors`` embedding actors (``concurrency``) taking ``batch_size`` photos at a
    time with ``actor_cpus`` CPUs and ``actor_gpus`` GPUs each (None: one GPU per actor when the cluster has
    that many, else none); decoding tasks take ``decode_cpus`` CPUs."""

    actors: int = 1
    batch_size: int = 16
    actor_cpus: float = 1.0
    actor_gpus: float | None = None
    decode_cpus: float = 0.5

    def __post_init__(self) -> None:
        if self.actors < 1 or self.batch_size < 1:
            raise ValueError("actors and batch_size must be at least 1")
        if self.actor_cpus <= 0 or self.decode_cpus <= 0 or (self.actor_gpus is not None and self.actor_gpus < 0):
            raise ValueError("actor_cpus and decode_cpus must be positive, actor_gpus not negative")

    def gpus(self) -> float:
        if self.actor_gpus is not None:
            return float(self.actor_gpus)
        return 1.0 if ray.cluster_resources().get("GPU", 0) >= self.actors else 0.0


def worker_catalogue(data_dir: str, url: str) -> Catalogue:
    """The catalogue, opened once per Ray worker process."""
    with _LOCK:
        cat = _CATALOGUES.get((data_dir, url))
        if cat is None:
            cat = _CATALOGUES[(data_dir, url)] = open_catalogue(data_dir, url=url, migrate=False)
        return cat


def _source(row: dict[str, Any]) -> ImageSource:
    return ImageSource(int(row["image_id"]), str(row["content_hash"]), str(row["blob_path"]),
                       str(row["mask_path"]) or None, str(row["mask_source"]) or None,
                       Box(*(float(v) for v in row["box"])), tuple(int(v) for v in row["frame"]),
                       bool(row["draftable"]))


def decode_and_resize(batch: dict[str, np.ndarray], *, data_dir: str, url: str, variant: str,
                      resize_to: Any = None, min_side: int | None = None,
                      margin: float = CROP_MARGIN) -> dict[str, Any]:
    """Ray Data stage: each photo's pixels as the local path loads them (the same variant loader), resized to
    ``resize_to`` (a torch backbone's config) the way its ``prepare`` resizes, so the actor's own resize is then
    the identity; photos of other backbones go on as decoded."""
    cat = worker_catalogue(data_dir, url)
    resize = _resizer(resize_to)
    keys = [str(k) for k in batch["key"]]
    images = []
    for i in range(len(keys)):
        row = {c: batch[c][i] for c in ("image_id", "content_hash", "blob_path", "mask_path", "mask_source", "box",
                                        "frame", "draftable")}
        src = _source(row)
        crops = FrameCrops(cat, [src], min_side=min_side, margin=margin) if variant in MASK_FREE_VARIANTS else None
        _, load = variant_loader(cat, src, variant, crops=crops)
        images.append(resize(load()))
    pixels = np.stack(images) if images and all(im.shape == images[0].shape for im in images) else \
        np.array(images + [None], dtype=object)[:-1]
    return {"key": np.array(keys, dtype=object), "pixels": pixels}


def _splits(backbone: Any) -> bool:
    """Whether the backbone embeds in two steps, ``prepare`` (resize + normalise) and ``embed_prepared``."""
    return callable(getattr(backbone, "prepare", None)) and callable(getattr(backbone, "embed_prepared", None))


def _resizer(config: Any) -> Any:
    if config is None:
        return lambda img: img
    from core.identify.backbones.torch_base import (
        resize_for_config,
    )  # lazy: imports torch (only torch backbones resize)

    return lambda img: resize_for_config(img, config)


class EmbedActor:
    """Ray Data actor: builds the backbone once (in ``__init__``), then embeds batches of decoded photos."""

    def __init__(self, *, data_dir: str, url: str, backbone: str) -> None:
        cat = worker_catalogue(data_dir, url)
        self.backbone = get_backbone(cat, backbone)
        if callable(getattr(self.backbone, "use_runtime", None)):  # the runtime the local path chooses
            self.backbone.use_runtime(None, cache_dir=cat.cache_dir / "features")
        self.split = _splits(self.backbone)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        images = list(batch["pixels"])
        feats = self.backbone.embed_prepared(self.backbone.prepare(images)) if self.split else \
            self.backbone.embed(images)
        return {"key": batch["key"], "vector": np.asarray(feats, dtype=np.float32)}


def _write_provenance(cache_dir: Any, fingerprint: str, backbone: Any) -> None:
    """``<cache>/<fingerprint>/config.json`` as the local path writes it (provenance of the features)."""
    # feature_cache_path is <cache>/<fingerprint>/<variant>/<key[:2]>/<key>.npy: three folders up is the fingerprint's
    path = feature_cache_path(cache_dir, fingerprint, "v", "k").parent.parent.parent / "config.json"
    if path.exists():
        return
    data = json.dumps(backbone.config.to_dict(), indent=2, sort_keys=True).encode("utf-8")
    try:
        atomic_write(path, lambda fh: fh.write(data))
    except OSError:
        pass


def ray_embed(cat: Catalogue, params: dict[str, Any], ctx: JobContext, *,
              settings: EmbedSettings | None = None) -> dict[str, Any]:
    """The ``embed`` job on Ray: params are a stored :class:`jobs.requests.map.EmbedRequest`; the result is the
    local handler's. Raises :class:`JobCancelled` when the curator cancels between batches (what was written
    stays cached, whole)."""
    settings = settings or EmbedSettings()
    request = EmbedRequest.from_dict(params)
    ids = all_image_ids(cat, species_id=request.species)
    backbone = get_backbone(cat, request.backbone)  # here for the fingerprint and the model row
    config = backbone.config
    fp, dim = config.fingerprint(), int(config.embed_dim)
    cache_dir = cat.cache_dir / "features"
    pending: dict[str, ImageSource] = {}
    cached = 0
    sources = sources_for(cat, ids)
    min_side = decode_side(backbone)  # large JPEGs decode at the scale the model needs, as the local path does
    crops = FrameCrops(cat, sources, min_side=min_side, margin=config.crop_margin) \
        if request.variant in MASK_FREE_VARIANTS else None
    for src in sources:
        key, _ = variant_loader(cat, src, request.variant, crops=crops)
        if key in pending:
            continue
        if read_cached(feature_cache_path(cache_dir, fp, request.variant, key), dim) is not None:
            cached += 1
        else:
            pending[key] = src
    total = len(pending)
    ctx.progress(0.0, f"embedding {total} photos on Ray ({cached} already cached)")
    if pending:
        _write_provenance(cache_dir, fp, backbone)
        items = [{"key": key, "image_id": s.image_id, "content_hash": s.content_hash, "blob_path": s.blob_path,
                  "mask_path": s.mask_path or "", "mask_source": s.mask_source or "",
                  "box": [s.box.x, s.box.y, s.box.w, s.box.h], "frame": list(s.frame_size or (0, 0)),
                  "draftable": s.draftable} for key, s in pending.items()]
        ray.data.DataContext.get_current().enable_progress_bars = False  # progress goes to the jobs table
        where = {"data_dir": str(cat.data_dir), "url": cat.url}
        ds = (ray.data.from_items(items)
              .map_batches(decode_and_resize, batch_size=settings.batch_size, num_cpus=settings.decode_cpus,
                           fn_kwargs={**where, "variant": request.variant, "min_side": min_side,
                                      "margin": config.crop_margin,
                                      "resize_to": config if _splits(backbone) else None})
              .map_batches(EmbedActor, fn_constructor_kwargs={**where, "backbone": request.backbone},
                           batch_size=settings.batch_size, num_cpus=settings.actor_cpus, num_gpus=settings.gpus(),
                           # N actors: ``concurrency=N`` as Ray 2.51+ spells it
                           compute=ray.data.ActorPoolStrategy(size=settings.actors)))
        done = 0
        clock = ctx.callback(label="embedding on Ray")
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for key, vec in zip(batch["key"], batch["vector"]):
                if vec.shape != (dim,):
                    raise RuntimeError(f"{config.name} returned a {vec.shape} feature, expected ({dim},)")
                write_cached(feature_cache_path(cache_dir, fp, request.variant, str(key)), vec)
                done += 1
            clock(done, total)
            if ctx.cancelled():
                raise JobCancelled()
    return {"images": len(ids), "dim": dim, "computed": total, "cached": cached,
            "summary": f"embedded {len(ids)} photos with {config.name} on Ray"}


__all__ = ["EmbedActor", "EmbedSettings", "decode_and_resize", "ray_embed", "worker_catalogue"]
