"""Masks and flanks of catalogue images: run a masker, store the mask PNG
(content-addressed) with its source, details and quality, set flank labels."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sqlalchemy import select

from db.catalogue import CatalogueError, get_image, get_or_create_user
from db.embeddings import ImageSource, load_photo, sources_for
from db.models import Flank, Image
from db.session import Catalogue

FLANKS = [f.value for f in Flank]


def store_mask(cat: Catalogue, image_id: int, mask: np.ndarray, *, source: str, details: dict[str, Any] | None = None,
               user: str = "curator") -> dict[str, Any]:
    """Save ``mask`` for an image (replacing any previous one) and return its quality."""
    from core.masking import encode_mask_png, mask_quality, prompt_of

    quality = mask_quality(mask, **prompt_of(details))  # a drawn box and clicks: is the mask likely partial?
    rel = cat.blobs.put(encode_mask_png(mask), kind="masks", ext=".png")
    with cat.unit_of_work() as s:
        img = get_image(s, image_id)
        if tuple(mask.shape) != (img.height, img.width):
            raise CatalogueError(f"mask is {mask.shape[1]}x{mask.shape[0]} but the photo is {img.width}x{img.height}")
        get_or_create_user(s, user)
        img.mask_path = rel
        img.mask_source = source
        img.mask_details = {**(details or {}), "user": user}
        img.solidity = quality.solidity
        img.mask_flags = list(quality.flags)
        s.commit()
    return {"image_id": image_id, "solidity": quality.solidity, "area_fraction": quality.area_fraction,
            "n_components": quality.n_components, "flags": list(quality.flags), "source": source, "mask_path": rel}


def predict_mask(cat: Catalogue, image_id: int, *, masker: str, points: Sequence[tuple[float, float]] | None = None,
                 point_labels: Sequence[int] | None = None, box: tuple[float, float, float, float] | None = None,
                 **masker_opts: Any):
    """Run a masker on one catalogue photo (nothing stored); returns the core ``MaskResult``."""
    from core.masking import create_masker

    src = sources_for(cat, [image_id])[0]
    rgb = load_photo(cat, src)
    return create_masker(masker, **masker_opts).predict(rgb, points=points, point_labels=point_labels, box=box)


def mask_images(cat: Catalogue, *, masker: str | None = None, image_ids: Sequence[int] | None = None,
                only_missing: bool = True, user: str = "curator", progress: Callable[[int, int], None] | None = None,
                should_cancel: Callable[[], bool] | None = None, **masker_opts: Any) -> dict[str, Any]:
    """Batch-mask photos (default masker: SAM 2 when configured, else GrabCut), one commit per photo,
    so an interrupted run resumes where it stopped with ``only_missing``."""
    from core.masking import create_masker, default_masker_name

    name = masker or default_masker_name()
    model = create_masker(name, **masker_opts)
    with cat.unit_of_work() as s:
        q = select(Image.id).order_by(Image.id)
        if image_ids is not None:
            q = q.where(Image.id.in_(list(image_ids)))
        if only_missing:
            q = q.where(Image.mask_path.is_(None))
        todo = list(s.scalars(q))
    done, flagged, errors = 0, 0, []
    for n, src in enumerate(sources_for(cat, todo)):
        if should_cancel and should_cancel():
            break
        try:
            res = model.predict(load_photo(cat, src))
            q = store_mask(cat, src.image_id, res.mask, source=res.source, details=res.details, user=user)
            done += 1
            flagged += bool(q["flags"])
        except Exception as exc:  # one bad photo must not stop the batch
            errors.append({"image_id": src.image_id, "error": str(exc)})
        if progress:
            progress(n + 1, len(todo))
    return {"masker": name, "masked": done, "flagged": flagged, "errors": errors, "todo": len(todo),
            "summary": f"{done} of {len(todo)} photos masked with {name} ({flagged} flagged, {len(errors)} errors)"}


def set_flank(cat: Catalogue, image_id: int, flank: str, *, user: str = "curator", source: str = "curator") -> None:
    if flank not in FLANKS:
        raise CatalogueError(f"flank must be one of {', '.join(FLANKS)}")
    with cat.unit_of_work() as s:
        img = get_image(s, image_id)
        get_or_create_user(s, user)
        img.flank = Flank(flank)
        img.flank_source = source
        s.commit()


def image_source(cat: Catalogue, image_id: int) -> ImageSource:
    return sources_for(cat, [image_id])[0]
