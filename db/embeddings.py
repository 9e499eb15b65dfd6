"""Embeddings of catalogue images: load photo + mask, build the variant, run the
backbone through the cached feature pipeline, and record the model.

Everything a number depends on is in the cache key or the model row: the image
content hash, the mask's hash (for mask-dependent variants), the inpainter and
seed (for ``background_inpainted``), and the backbone config fingerprint.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import select

from core.annotations import CROP_MARGIN, WHOLE_PHOTO, Box, crop_array
from core.identify.backbones import BACKBONES, DEFAULT_BACKBONE, create_backbone
from core.identify.backbones.weights import sha256_file
from core.identify.features import extract_features
from core.io.images import crop_draft_scale, decode_key, draft_size, load_crops, load_rgb
from core.inspect.masking import decode_mask_png
from core.inspect.variants import MASK_FREE_VARIANTS, make_variant
from db.catalogue import CatalogueError
from db.models import Image, Individual, Model, ModelStatus
from db.session import Catalogue

_BACKBONES: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()


@dataclass
class ImageSource:
    """What is needed to build any variant of one annotation: its photo's file, its box and its mask (which is
    in the pixels of the box's crop)."""

    image_id: int
    content_hash: str
    blob_path: str
    mask_path: str | None
    mask_source: str | None
    box: Box = WHOLE_PHOTO
    frame_size: tuple[int, int] | None = None  # (W, H) of the upright photo
    draftable: bool = False  # a JPEG whose decode can be DCT-scaled (core.io.images: draft)

    def decode_scale(self, min_side: int | None, *, margin: float = CROP_MARGIN) -> int:
        """The JPEG draft reduction the crop is decoded at for a model wanting ``min_side`` pixels (1: none)."""
        if min_side is None or not self.draftable or self.frame_size is None:
            return 1
        return crop_draft_scale(self.frame_size, self.box, min_side, margin=margin)

    @property
    def pixel_key(self) -> str:
        return pixel_key_of(self.content_hash, self.box)


def pixel_key_of(content_hash: str, box: Box) -> str:
    """Cache key of an annotation's pixels: the photo's content hash, plus the box for a box inside the photo
    (a whole-photo annotation keeps the key it had before annotations, so its cached features stay valid)."""
    if box.is_whole:
        return content_hash
    return f"{content_hash}-b{_fingerprint_dict({'box': box.key()})[:12]}"


def _mask_digest(mask_path: str | None) -> str:
    return Path(mask_path).stem[:16] if mask_path else "nomask"


def masked_content_key(src: ImageSource) -> str:
    """Cache key of what depends on a photo and its mask (mask variants' features, spot keypoints): a new mask
    gives a new key, so nothing computed on the old one is read again."""
    return f"{src.pixel_key}-m{_mask_digest(src.mask_path)}"


_SOURCE_COLUMNS = (Image.id, Image.content_hash, Image.blob_path, Image.mask_path, Image.mask_source, Image.bbox_x,
                   Image.bbox_y, Image.bbox_w, Image.bbox_h, Image.width, Image.height, Image.format, Image.mode)


def _source_rows(cat: Catalogue, image_ids: Sequence[int]) -> list[tuple]:
    """The columns an :class:`ImageSource` is built from, one plain tuple per id, in order."""
    wanted = list(dict.fromkeys(int(i) for i in image_ids))
    rows: dict[int, tuple] = {}
    with cat.unit_of_work() as s:
        for start in range(0, len(wanted), 5000):  # a bounded IN list per query
            rows.update((r[0], tuple(r)) for r in s.execute(select(*_SOURCE_COLUMNS)
                                                            .where(Image.id.in_(wanted[start:start + 5000]))))
    missing = [i for i in image_ids if i not in rows]
    if missing:
        raise CatalogueError(f"unknown image id(s): {missing[:10]}")
    return [rows[i] for i in image_ids]


def _source_of(r: tuple) -> ImageSource:
    return ImageSource(r[0], r[1], r[2], r[3], r[4], Box(r[5], r[6], r[7], r[8]), (r[9], r[10]),
                       r[11] == "JPEG" and r[12] in DRAFTABLE_MODES)


def sources_for(cat: Catalogue, image_ids: Sequence[int]) -> list[ImageSource]:
    # plain columns, not ORM objects: ranking one query reads the sources of the whole gallery, and building an
    # ORM instance per row cost most of a review screen's time at a thousand photos
    return [_source_of(r) for r in _source_rows(cat, image_ids)]


class _RowVectors:
    """Each annotation's vector by everything it is computed from: its row of the sources' columns (photo content,
    box, size, format) and the catalogue's feature cache, the model's fingerprint, variant, crop margin and decode
    size. A review screen ranks
    one query against the whole gallery on every click; rebuilding a thousand sources and their cache keys cost
    more than the vectors. The feature cache is keyed by the same facts, so a vector here is the one it holds.
    Bounded in entries, oldest first out."""

    def __init__(self, *, max_entries: int) -> None:
        self.max_entries = max_entries
        self._items: dict[tuple, np.ndarray] = {}
        self._lock = threading.Lock()

    def known(self, context: tuple, rows: Sequence[tuple]) -> list[np.ndarray | None]:
        """Each row's vector, None where it is not known."""
        with self._lock:
            return [self._items.get((context, r)) for r in rows]

    def remember(self, context: tuple, rows: Sequence[tuple], vectors: np.ndarray) -> None:
        with self._lock:
            for r, v in zip(rows, vectors):
                self._items[(context, r)] = np.array(v, dtype=np.float32)
            while len(self._items) > self.max_entries:
                del self._items[next(iter(self._items))]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


#: ``ROSETTE_ROW_VECTORS`` entries (default 100,000: about 300 MB of 768-wide vectors at most).
ROW_VECTORS = _RowVectors(max_entries=int(os.environ.get("ROSETTE_ROW_VECTORS", "100000")))


#: PIL modes of JPEGs that decode DCT-scaled (``core.io.images``' draft rule).
DRAFTABLE_MODES = ("RGB", "L", "CMYK", "YCbCr")


def load_photo(cat: Catalogue, src: ImageSource) -> np.ndarray:
    """The annotation's pixels at full resolution: its box's crop of the photo (box plus CROP_MARGIN on every
    side, clipped), or the whole photo for a whole-photo annotation."""
    return crop_array(load_rgb(cat.blobs.path(src.blob_path)), src.box)


class FrameCrops:
    """Crops for a model that needs ``min_side`` pixels, decoded once per photo: the first annotation of a photo
    to load decodes the crops of all its annotations in this batch (JPEG draft at the scale each needs), and
    the others take theirs. Thread-safe (the feature pipeline loads in threads)."""

    #: Photos whose decoded crops are kept for annotations still to ask.
    KEEP_PHOTOS = 64

    def __init__(self, cat: Catalogue, sources: Sequence[ImageSource], *, min_side: int | None,
                 margin: float = CROP_MARGIN) -> None:
        self.cat, self.min_side, self.margin = cat, min_side, margin
        self._siblings: dict[str, list[ImageSource]] = {}
        for src in sources:
            self._siblings.setdefault(src.blob_path, []).append(src)
        # photo -> its annotations' crops, oldest first; a photo's siblings load next to each other, so a few
        # photos suffice, and one whose other annotation is cached (never asks) is let go with the oldest
        self._decoding: dict[str, Future[dict[int, np.ndarray]]] = {}
        self._lock = threading.Lock()

    def key(self, src: ImageSource) -> str:
        """Cache key of the crop: the annotation's pixel key plus the decode (``-draft4``: decoded at 1/4)."""
        margin = "" if self.margin == CROP_MARGIN or src.box.is_whole else f"-c{self.margin:g}"
        return src.pixel_key + margin + decode_key(self._scale(src))

    def _scale(self, src: ImageSource) -> int:
        return src.decode_scale(self.min_side, margin=self.margin)

    def load(self, src: ImageSource) -> np.ndarray:
        """The annotation's crop. The first of a photo's annotations to ask decodes them all; one that asks while
        that decode runs (the pipeline's other thread, usually) waits for it instead of decoding again."""
        with self._lock:
            decoding = self._decoding.get(src.blob_path)
            owner = decoding is None
            if owner:
                decoding = self._decoding[src.blob_path] = Future()
                while len(self._decoding) > self.KEEP_PHOTOS:  # siblings that never ask (cached) must not pile up
                    oldest = next(iter(self._decoding))
                    if not self._decoding[oldest].done():
                        break
                    del self._decoding[oldest]
        if owner:
            try:
                decoding.set_result(self._decode(src.blob_path))
            except BaseException as exc:
                decoding.set_exception(exc)
                with self._lock:  # a later call may try again
                    self._decoding.pop(src.blob_path, None)
                raise
        crops = decoding.result()
        with self._lock:
            crop = crops.pop(src.image_id, None)
            if not crops:  # every annotation of the photo has its crop: let the pixels go
                self._decoding.pop(src.blob_path, None)
        if crop is None:  # asked twice (a retry): decode this one again
            return self._decode(src.blob_path)[src.image_id]
        return crop

    def _decode(self, blob_path: str) -> dict[int, np.ndarray]:
        group = self._siblings[blob_path]
        crops = load_crops(self.cat.blobs.path(blob_path), [g.box for g in group], min_side=self.min_side,
                           margin=self.margin)
        for g, c in zip(group, crops):
            if c.scale != self._scale(g):  # the key promised another decode: never mislabel it
                raise RuntimeError(f"photo {g.image_id} decoded at 1/{c.scale}, expected 1/{self._scale(g)}")
        return {g.image_id: c.rgb for g, c in zip(group, crops)}


def decode_side(backbone: Any) -> int | None:
    """How many pixels a backbone's input needs of a photo's longer side: twice its input size
    (:func:`core.io.images.draft_size`), which lets large JPEGs decode DCT-scaled; None for other backbones."""
    size = getattr(getattr(backbone, "config", None), "input_size", None)
    return draft_size(tuple(size)) if size else None


def load_frame(cat: Catalogue, src: ImageSource) -> np.ndarray:


    """The whole photo an annotation lies in (for drawing its box on the frame)."""
    return load_rgb(cat.blobs.path(src.blob_path))


CACHED_MASK_PREFIX = "cache:"  # a mask_path under the cache folder: a diagnostic's mask, not the catalogue's


def load_mask(cat: Catalogue, src: ImageSource, *, shape: tuple[int, int] | None = None) -> np.ndarray | None:

    if not src.mask_path:
        return None
    if src.mask_path.startswith(CACHED_MASK_PREFIX):
        mask = decode_mask_png((cat.cache_dir / src.mask_path[len(CACHED_MASK_PREFIX):]).read_bytes())
    else:
        mask = decode_mask_png(cat.blobs.read(src.mask_path))
    if shape is not None and mask.shape != shape:
        import cv2

        mask = cv2.resize(mask.astype(np.uint8), (shape[1], shape[0]), interpolation=cv2.INTER_NEAREST).astype(bool)
    return mask


def inpainted_background(cat: Catalogue, src: ImageSource, rgb: np.ndarray, mask: np.ndarray, *,
                         inpainter: Any, seed: int = 0) -> np.ndarray:
    """The photo with the animal removed and filled in, cached on disk per (image, mask, inpainter, seed)."""
    key = _fingerprint_dict(inpainter.config)
    path = cat.cache_dir / "inpainted" / key / f"{src.pixel_key}_{_mask_digest(src.mask_path)}_s{seed}.png"
    if path.exists():
        try:
            return load_rgb(path)
        except Exception:
            path.unlink(missing_ok=True)
    out = inpainter.inpaint(rgb, mask, seed=seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    from PIL import Image as PILImage

    tmp = path.with_suffix(".tmp.png")
    PILImage.fromarray(out).save(tmp)
    tmp.replace(path)
    return out


def _fingerprint_dict(d: dict[str, Any]) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def variant_loader(cat: Catalogue, src: ImageSource, variant: str, *, inpainter: Any = None,
                   seed: int = 0, crops: FrameCrops | None = None) -> tuple[str, Callable[[], np.ndarray]]:
    """(cache key, loader) for one image and variant, as ``core.identify.features.extract_features`` expects. With
    ``crops`` the mask-free variants decode large JPEGs at the scale the model needs (recorded in the key)."""
    if variant in MASK_FREE_VARIANTS:
        if crops is not None:
            return crops.key(src), lambda: crops.load(src)
        return src.pixel_key, lambda: load_photo(cat, src)
    if not src.mask_path:
        raise CatalogueError(f"image {src.image_id} has no mask; mask it in the Mask tab (or `rosette mask`) before "
                              f"using the {variant!r} variant")
    key = masked_content_key(src)
    if variant == "background_inpainted":
        if inpainter is None:
            raise CatalogueError("the background_inpainted variant needs an inpainter")
        key += f"-i{_fingerprint_dict(inpainter.config)}-s{seed}"

    def load() -> np.ndarray:
        rgb = load_photo(cat, src)
        mask = load_mask(cat, src, shape=rgb.shape[:2])
        filled = inpainted_background(cat, src, rgb, mask, inpainter=inpainter, seed=seed) \
            if variant == "background_inpainted" else None
        return make_variant(rgb, mask, variant, inpainted=filled)

    return key, load


MIN_CODEBOOK_PHOTOS = 50


def fit_set_hash(cat: Catalogue, image_ids: Sequence[int]) -> str:
    """16 hex chars of SHA-256 over the sorted content hashes of the photos a codebook is fitted on."""
    import hashlib

    with cat.unit_of_work() as s:
        hashes = sorted(s.scalars(select(Image.content_hash).where(Image.id.in_(list(image_ids)))))
    return hashlib.sha256("\n".join(hashes).encode()).hexdigest()[:16]


def codebook_path(cat: Catalogue, backbone_name: str, fit_hash: str) -> Path:
    """Where the codebook fitted on exactly one photo set lives (keyed by that set's hash)."""
    safe = backbone_name.replace(':', '_').replace('/', '_')
    return cat.data_dir / "models" / f"{safe}-codebook-{fit_hash}.npz"


def _catalogue_codebook_pointer(cat: Catalogue, backbone_name: str) -> Path:
    return cat.data_dir / "models" / f"{backbone_name.replace(':', '_').replace('/', '_')}-catalogue-codebook.txt"


def _fitted_backbone(cat: Catalogue, name: str, fit_image_ids: Sequence[int] | None, **opts: Any) -> tuple[str, Any]:
    """(fit hash, backbone) for a backbone that learns from photos (sift_vlad's VLAD codebook).

    The codebook is saved per exact fit set, so a codebook fitted on one benchmark's train split is never
    reused for another; without ``fit_image_ids`` (match review) the catalogue's codebook is fitted once on
    a seeded sample and kept. Fewer than :data:`MIN_CODEBOOK_PHOTOS` photos are refused.
    """
    pointer = _catalogue_codebook_pointer(cat, name)
    if fit_image_ids is None and pointer.exists():
        fit_hash = pointer.read_text().strip()
        path = codebook_path(cat, name, fit_hash)
        if path.exists():
            return fit_hash, create_backbone(name, codebook_path=str(path), **opts)
    ids = list(fit_image_ids) if fit_image_ids is not None else _sample_image_ids(cat, 200)
    if len(ids) < MIN_CODEBOOK_PHOTOS:
        raise CatalogueError(f"{name} fits its codebook on at least {MIN_CODEBOOK_PHOTOS} photos that are not test "
                             f"photos; only {len(ids)} are available (import more photos, or use a benchmark with a "
                             "train split)")
    fit_hash = fit_set_hash(cat, ids)
    path = codebook_path(cat, name, fit_hash)
    if path.exists():
        backbone = create_backbone(name, codebook_path=str(path), **opts)
    else:
        backbone = create_backbone(name, **opts)
        backbone.fit([load_photo(cat, src) for src in sources_for(cat, ids)], seed=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        backbone.save(path)
    if fit_image_ids is None:
        pointer.parent.mkdir(parents=True, exist_ok=True)
        pointer.write_text(fit_hash)
    return fit_hash, backbone


def _trained_backbone(cat: Catalogue, name: str, **opts: Any) -> Any | None:
    """A trained model registered under ``name`` (checkpoint verified against its recorded hash), or None."""
    from core.identify.backbones.trained import load_trained_backbone  # lazy: imports torch (start-up time)

    with cat.unit_of_work() as s:
        row = s.scalar(select(Model).where(Model.name == name, Model.head.is_not(None), Model.head != "pipeline"))
    if row is None or not row.checkpoint_path:
        return None
    path = cat.data_dir / row.checkpoint_path
    if path.exists():

        h = sha256_file(path)
        if h != row.checkpoint_hash:
            raise CatalogueError(f"the checkpoint of model {name!r} ({path}) does not match the hash recorded when it "
                                 f"was trained ({row.checkpoint_hash[:12]}... vs {h[:12]}...); it was changed or damaged")
    return load_trained_backbone(path, name=name, checkpoint_sha256=row.checkpoint_hash, device=opts.get("device"))


def get_backbone(cat: Catalogue, name: str, *, fit_image_ids: Sequence[int] | None = None, **opts: Any) -> Any:
    """A backbone -- or a trained model -- by name, built once per process and data directory.

    Registry names build the registered backbone; a trained model's name (``rosette train``) loads its
    checkpoint. Backbones that need fitting (``sift_vlad``'s codebook) are fitted on ``fit_image_ids``
    (default: a seeded sample of up to 200 catalogue photos, fitted once) and the fit is saved under
    ``<data_dir>/models`` keyed by the exact photo set.
    """
    if name not in BACKBONES:
        with cat.unit_of_work() as s:  # a fused pipeline (db.identify.spots): its global model embeds
            pipeline_global = s.scalar(select(Model.backbone).where(Model.name == name, Model.head == "pipeline"))
        if pipeline_global is not None:
            return get_backbone(cat, pipeline_global, fit_image_ids=fit_image_ids, **opts)
    fit_key = None
    if name == "sift_vlad" and fit_image_ids is not None:
        fit_key = fit_set_hash(cat, fit_image_ids)
    key = (str(cat.data_dir), name, fit_key)
    with _LOCK:
        if key in _BACKBONES:
            return _BACKBONES[key]
        if name == "sift_vlad":
            _, backbone = _fitted_backbone(cat, name, fit_image_ids, **opts)
        elif name in BACKBONES:
            backbone = create_backbone(name, **opts)
        else:
            backbone = _trained_backbone(cat, name, **opts)
            if backbone is None:
                with cat.unit_of_work() as s:
                    trained = sorted(s.scalars(select(Model.name).where(Model.head.is_not(None))))
                raise CatalogueError(f"unknown backbone or trained model {name!r}; backbones: {', '.join(BACKBONES.names())}"
                                     + (f"; trained models: {', '.join(trained)}" if trained else ""))
        _BACKBONES[key] = backbone
    ensure_model_row(cat, backbone)
    return backbone


def _sample_image_ids(cat: Catalogue, n: int) -> list[int]:
    with cat.unit_of_work() as s:
        ids = sorted(s.scalars(select(Image.id)))
    rng = np.random.default_rng(0)
    return sorted(rng.choice(ids, size=min(n, len(ids)), replace=False).tolist()) if ids else []


def ensure_model_row(cat: Catalogue, backbone: Any) -> Model:
    """The ``models`` row of a frozen backbone (name = registry name), created on first use."""
    cfg = backbone.config
    with cat.unit_of_work() as s:
        model = s.scalar(select(Model).where(Model.name == cfg.name))
        if model is None:
            model = Model(name=cfg.name, backbone=cfg.name, head=None, config=cfg.to_dict(),
                          checkpoint_hash=cfg.weights_sha256,
                          status=ModelStatus.active if cfg.name == DEFAULT_BACKBONE else ModelStatus.candidate)
            s.add(model)
        elif model.config != cfg.to_dict():
            model.config = cfg.to_dict()
            model.checkpoint_hash = cfg.weights_sha256
        s.commit()
        return model


#: Threads that decode and resize photos while the backbone embeds the batch before (``extract_features``).
PREFETCH_WORKERS = max(1, min(2, os.cpu_count() or 1))


def embed_images(cat: Catalogue, image_ids: Sequence[int], *, backbone: Any, variant: str = "full_rgb",
                 inpainter: Any = None, seed: int = 0, batch_size: int = 32,
                 progress: Callable[[int, int], None] | None = None,
                 should_cancel: Callable[[], bool] | None = None,
                 sources: Sequence[ImageSource] | None = None, runtime: str | None = None) -> np.ndarray:
    """N x D embeddings of ``image_ids`` (in that order) for one variant, through the feature cache.

    ``sources`` (one per id, in order) replaces the catalogue's view of the photos, e.g. with a diagnostic's
    cached masks (:func:`db.inspect.masks.diagnostic_masks`). ``runtime`` (``auto``/``torch``/``onnx``) picks the
    forward runtime of torch backbones (:func:`core.identify.features.extract_features`); the features are the same."""
    if sources is None and variant in MASK_FREE_VARIANTS:
        return _embed_catalogue_crops(cat, image_ids, backbone=backbone, variant=variant, batch_size=batch_size,
                                      progress=progress, should_cancel=should_cancel, runtime=runtime)
    if sources is None:
        sources = sources_for(cat, image_ids)
    elif [s.image_id for s in sources] != [int(i) for i in image_ids]:
        raise ValueError("sources must be the photos of image_ids, in the same order")
    margin = float(getattr(getattr(backbone, "config", None), "crop_margin", CROP_MARGIN))
    if variant not in MASK_FREE_VARIANTS and margin != CROP_MARGIN:
        raise CatalogueError(f"masks are drawn on crops with a margin of {CROP_MARGIN}; the {variant!r} variant "
                             f"cannot be built for a backbone cropping with {margin}")
    crops = FrameCrops(cat, sources, min_side=decode_side(backbone), margin=margin) \
        if variant in MASK_FREE_VARIANTS else None
    items = [variant_loader(cat, src, variant, inpainter=inpainter, seed=seed, crops=crops) for src in sources]
    # decode and resize in threads, ahead of the forward pass (PIL and OpenCV release the GIL); an inpainter (a
    # diffusers pipeline, say) is not known to be thread-safe, so that variant prepares one batch at a time
    workers = 1 if variant == "background_inpainted" else PREFETCH_WORKERS
    return extract_features(backbone, items, variant=variant, cache_dir=cat.cache_dir / "features",
                            batch_size=batch_size, progress=progress, should_cancel=should_cancel, runtime=runtime,
                            workers=workers)


def _embed_catalogue_crops(cat: Catalogue, image_ids: Sequence[int], *, backbone: Any, variant: str,
                           batch_size: int, progress: Callable[[int, int], None] | None,
                           should_cancel: Callable[[], bool] | None, runtime: str | None) -> np.ndarray:
    """:func:`embed_images` of the catalogue's own crops (a mask-free variant): the rows already known
    (:data:`ROW_VECTORS`) are not built into sources again; the others go through the feature pipeline."""
    rows = _source_rows(cat, image_ids)
    context = (str(cat.cache_dir), backbone.config.fingerprint(), variant,
               getattr(backbone.config, "crop_margin", CROP_MARGIN), decode_side(backbone))
    found = ROW_VECTORS.known(context, rows)
    todo = [i for i, v in enumerate(found) if v is None]
    if not todo:
        if progress is not None:
            progress(len(rows), len(rows))
        return np.stack(found) if found else np.empty((0, int(backbone.config.embed_dim)), dtype=np.float32)
    skipped = len(rows) - len(todo)
    step = None if progress is None else (lambda done, total: progress(skipped + done, skipped + total))
    todo_rows = [rows[i] for i in todo]
    computed = embed_images(cat, [r[0] for r in todo_rows], backbone=backbone, variant=variant,
                            batch_size=batch_size, progress=step, should_cancel=should_cancel,
                            sources=[_source_of(r) for r in todo_rows], runtime=runtime)
    ROW_VECTORS.remember(context, todo_rows, computed)
    for i, vec in zip(todo, computed):
        found[i] = vec
    return np.stack(found)


def gallery_image_ids(cat: Catalogue, *, species_id: int | None = None) -> list[int]:
    """Images assigned to an active individual (the matching gallery), by id; of one species when given."""
    with cat.unit_of_work() as s:
        q = (select(Image.id).join(Individual, Image.individual_id == Individual.id)
             .where(Individual.active.is_(True)).order_by(Image.id))
        if species_id is not None:
            q = q.where(Image.species_id == species_id)
        return list(s.scalars(q))


def all_image_ids(cat: Catalogue, *, species_id: int | None = None) -> list[int]:
    with cat.unit_of_work() as s:
        q = select(Image.id).order_by(Image.id)
        if species_id is not None:
            q = q.where(Image.species_id == species_id)
        return list(s.scalars(q))


@dataclass(frozen=True)
class AnimalCount:
    """Annotations (animals) still in the catalogue, in id order, and how many photos they lie in."""

    annotation_ids: list[int]
    photos: int

    @property
    def words(self) -> str:
        """e.g. ``3 animals in 2 photos``."""
        n = len(self.annotation_ids)
        return f"{n} animal{'s' if n != 1 else ''} in {self.photos} photo{'s' if self.photos != 1 else ''}"


def count_animals(cat: Catalogue, image_ids: Sequence[int]) -> AnimalCount:
    """The given annotations that are still in the catalogue (one deleted since is left out) and their photos."""
    wanted = sorted({int(i) for i in image_ids})
    rows: list[tuple[int, int]] = []
    with cat.unit_of_work() as s:
        for start in range(0, len(wanted), 5000):  # a bounded IN list per query
            rows += s.execute(select(Image.id, Image.photo_id)
                              .where(Image.id.in_(wanted[start:start + 5000]))).all()
    rows.sort()
    return AnimalCount(annotation_ids=[i for i, _ in rows], photos=len({p for _, p in rows}))


def annotation_ids_after(cat: Catalogue, last_id: int | None) -> list[int]:
    """Annotations made after the one numbered ``last_id`` (None: all), in id order: what an import added."""
    with cat.unit_of_work() as s:
        q = select(Image.id).order_by(Image.id)
        if last_id is not None:
            q = q.where(Image.id > int(last_id))
        return list(s.scalars(q))


def last_annotation_id(cat: Catalogue) -> int | None:
    """The highest annotation id so far (None in an empty catalogue): the mark an import's new ones lie above."""
    with cat.unit_of_work() as s:
        return s.scalar(select(Image.id).order_by(Image.id.desc()).limit(1))
