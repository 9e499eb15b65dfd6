"""Masks and flanks of catalogue images: run a masker, store the mask PNG
(content-addressed) with its source, details and quality, set flank labels."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sqlalchemy import select

from core.annotations import box_prompt, crop_rect
from core.inspect.masking import (
    MaskResult,
    create_masker,
    decode_mask_png,
    default_masker_name,
    encode_mask_png,
    mask_quality,
    prompt_of,
)
from db.catalogue import CatalogueError, _record, get_image, get_or_create_user
from db.embeddings import CACHED_MASK_PREFIX, ImageSource, load_photo, sources_for
from db.models import EventKind, Flank, Image
from db.session import Catalogue

FLANKS = [f.value for f in Flank]
#: The maskers a batch run uses; only their masks are ever made again by one.
AUTOMATIC_MASKERS = ("grabcut", "sam2")
#: Key of a mask's details saying who made it: ``automatic`` (a batch run) or ``curator`` (accepted in the Mask tab).
MADE_BY = "made_by"
CENTRE_RETRY = "one click in the middle, after the box prompt found no animal"


def centre_click(shape: Sequence[int]) -> tuple[list[tuple[float, float]], list[int]]:
    """(points, labels) of one click on the animal in the middle of the picture of ``shape`` (HxW...): what a
    curator tries first in the Mask tab, and what a batch run tries when its box prompt found no animal."""
    h, w = shape[0], shape[1]
    return [(w / 2, h / 2)], [1]


def automatic_mask(model: Any, rgb: np.ndarray, box: tuple[float, float, float, float] | None) -> MaskResult:
    """A batch run's mask of one photo: ``model`` prompted with ``box`` (the annotation's box, or None for the
    masker's default), and, when that mask is empty, once more with :func:`centre_click`. The details say it was
    made automatically (:data:`MADE_BY`), and ``retry`` when the click made it."""
    res = model.predict(rgb, box=box)
    if not np.asarray(res.mask).any():
        points, labels = centre_click(rgb.shape)
        again = model.predict(rgb, points=points, point_labels=labels)
        if np.asarray(again.mask).any():
            res = MaskResult(mask=again.mask, source=again.source, details={**again.details, "retry": CENTRE_RETRY})
    return MaskResult(mask=res.mask, source=res.source, details={**res.details, MADE_BY: "automatic"})


def made_automatically(source: str | None, details: dict[str, Any] | None) -> bool:
    """Whether a stored mask came from a batch run (``rosette mask``, the mask job, a diagnostic's mask pass), so
    that a run may make it again when it is empty. A curator's mask never is: one accepted in the Mask tab
    (``made_by: curator``), one whose details show a curator's prompt (clicks, a drawn box), or one stored with
    no record of a masker's prompt. Masks from before :data:`MADE_BY` count as automatic only with the masker's
    own default prompt and no click."""
    if source not in AUTOMATIC_MASKERS:
        return False
    details = details or {}
    if MADE_BY in details:
        return details[MADE_BY] == "automatic"
    prompt = details.get("prompt")
    if not isinstance(prompt, dict) or prompt.get("points"):
        return False
    return str(prompt.get("box_source") or "").startswith("default")


def empty_automatic_masks(cat: Catalogue, image_ids: Sequence[int]) -> list[int]:
    """The photos of ``image_ids`` whose stored mask is empty and :func:`made_automatically`, in the given order."""
    with cat.unit_of_work() as s:
        rows = {r.id: r for r in s.execute(select(Image.id, Image.mask_source, Image.mask_details, Image.mask_flags)
                                           .where(Image.id.in_(list(image_ids)), Image.mask_path.is_not(None)))}
    return [int(i) for i in image_ids if i in rows and "empty" in (rows[i].mask_flags or [])
            and made_automatically(rows[i].mask_source, rows[i].mask_details)]


def retry_empty_masks(cat: Catalogue, image_ids: Sequence[int], *, masker: str, user: str) -> int:
    """Mask again, with :func:`centre_click`, the photos of ``image_ids`` whose automatic mask came out empty;
    returns how many now have an animal. Those still empty stay so (a run that needs them names them)."""
    model = create_masker(masker)
    made = 0
    for src in sources_for(cat, list(image_ids)):
        rgb = load_photo(cat, src)
        points, labels = centre_click(rgb.shape)
        res = model.predict(rgb, points=points, point_labels=labels)
        if np.asarray(res.mask).any():
            store_mask(cat, src.image_id, res.mask, source=res.source,
                       details={**res.details, "retry": CENTRE_RETRY, MADE_BY: "automatic"}, user=user)
            made += 1
    return made


def empty_mask_words(empty_ids: Sequence[int], *, shown: int = 5) -> str:
    """What a curator does about photos whose mask came out empty, naming them."""
    named = ", ".join(f"#{i}" for i in empty_ids[:shown]) + (
        f" and {len(empty_ids) - shown} more" if len(empty_ids) > shown else "")
    return (f"the masker found no animal in photo{'s' if len(empty_ids) != 1 else ''} {named}, even with a click in "
            "the middle: draw a box around the animal or click on it in the Mask tab, then accept the mask")


def store_mask(cat: Catalogue, image_id: int, mask: np.ndarray, *, source: str, details: dict[str, Any] | None = None,
               user: str = "curator") -> dict[str, Any]:
    """Save ``mask`` for an image (replacing any previous one) and return its quality."""
    quality = mask_quality(mask, **prompt_of(details))  # a drawn box and clicks: is the mask likely partial?
    rel = cat.blobs.put(encode_mask_png(mask), kind="masks", ext=".png")
    with cat.unit_of_work() as s:
        img = get_image(s, image_id)
        left, top, right, bottom = crop_rect(img.box, img.width, img.height)
        if tuple(mask.shape) != (bottom - top, right - left):
            what = "photo" if img.box.is_whole else "annotation's crop"
            raise CatalogueError(f"mask is {mask.shape[1]}x{mask.shape[0]} but the {what} is "
                                 f"{right - left}x{bottom - top}")
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
    src = sources_for(cat, [image_id])[0]
    rgb = load_photo(cat, src)
    if box is None and not points:  # no prompt drawn: the annotation's own box is the prompt
        box = box_prompt(src.box, rgb.shape)
    return create_masker(masker, **masker_opts).predict(rgb, points=points, point_labels=point_labels, box=box)


def mask_images(cat: Catalogue, *, masker: str | None = None, image_ids: Sequence[int] | None = None,
                only_missing: bool = True, user: str = "curator", progress: Callable[[int, int], None] | None = None,
                should_cancel: Callable[[], bool] | None = None, **masker_opts: Any) -> dict[str, Any]:
    """Batch-mask photos (default masker: SAM 2 when configured, else GrabCut), one commit per photo,
    so an interrupted run resumes where it stopped with ``only_missing``."""
    name = masker or default_masker_name()
    model = create_masker(name, **masker_opts)
    with cat.unit_of_work() as s:
        q = select(Image.id).order_by(Image.id)
        if image_ids is not None:
            q = q.where(Image.id.in_(list(image_ids)))
        if only_missing:
            q = q.where(Image.mask_path.is_(None))
        todo = list(s.scalars(q))
    done, flagged, retried, errors = 0, 0, 0, []
    empty: list[int] = []
    for n, src in enumerate(sources_for(cat, todo)):
        if should_cancel and should_cancel():
            break
        try:
            rgb = load_photo(cat, src)
            res = automatic_mask(model, rgb, box_prompt(src.box, rgb.shape))
            q = store_mask(cat, src.image_id, res.mask, source=res.source, details=res.details, user=user)
            retried += "retry" in res.details
            if "empty" in q["flags"]:
                empty.append(src.image_id)
            else:
                done += 1
                flagged += bool(q["flags"])
        except Exception as exc:  # one bad photo must not stop the batch
            errors.append({"image_id": src.image_id, "error": str(exc)})
        if progress:
            progress(n + 1, len(todo))
    summary = (f"{done} of {len(todo)} photos masked with {name} ({flagged} flagged, {len(empty)} empty, "
               f"{len(errors)} errors)" if todo else
               "nothing to mask: every photo chosen already has a mask (--all masks them again)" if only_missing else
               "nothing to mask: no photo chosen")
    if retried:
        summary += f"; {retried} found with a click in the middle after the box found no animal"
    if empty:
        summary += f"; {empty_mask_words(empty)}"
    return {"masker": name, "masked": done, "flagged": flagged, "empty": len(empty), "empty_ids": empty,
            "retried": retried, "errors": errors, "todo": len(todo), "summary": summary}


def diagnostic_masks(cat: Catalogue, image_ids: Sequence[int], *, masker: str | None = None,
                     keep_in_catalogue: bool = False, user: str = "curator",
                     progress: Callable[[int, int], None] | None = None,
                     should_cancel: Callable[[], bool] | None = None) -> tuple[list[ImageSource], dict[str, Any]]:
    """The photos of ``image_ids`` with a mask each, for a diagnostic, and what was done to get them.

    A photo with a catalogue mask keeps it. The others get a mask made by ``masker`` that stays in the
    diagnostic's cache (``cache/masks/<masker>-<config>/<photo>/<png digest>.png``, made once, read again by
    later runs), not in the catalogue: a diagnostic must not change what the curators keep.
    With ``keep_in_catalogue`` the masks are stored as catalogue masks instead, as ``rosette mask`` does."""
    name = masker or default_masker_name()
    if keep_in_catalogue:
        run = mask_images(cat, masker=name, image_ids=image_ids, only_missing=True, user=user, progress=progress,
                          should_cancel=should_cancel)
        return sources_for(cat, image_ids), {**run, "cached": 0, "kept_in_catalogue": True}
    sources = sources_for(cat, image_ids)
    missing = [i for i, src in enumerate(sources) if not src.mask_path]
    made = reused = flagged = retried = 0
    empty: list[int] = []
    errors: list[dict[str, Any]] = []
    if missing:
        model = create_masker(name)
        config = getattr(model, "options", None) or getattr(model, "info", None) or {}
        digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]
        folder = f"masks/{name}-{digest}"
        for n, i in enumerate(missing):
            if should_cancel and should_cancel():
                break
            src = sources[i]
            here = cat.cache_dir / folder / src.pixel_key
            found = sorted(here.glob("*.png")) if here.is_dir() else []
            try:
                if found and decode_mask_png(found[0].read_bytes()).any():
                    path, reused = found[0], reused + 1
                else:  # none yet, or an empty one from before the batch retry: made (again)
                    rgb = load_photo(cat, src)
                    res = automatic_mask(model, rgb, box_prompt(src.box, rgb.shape))
                    mask, retried = res.mask, retried + ("retry" in res.details)
                    for old in found:
                        old.unlink(missing_ok=True)
                    png = encode_mask_png(mask)
                    path = here / f"{hashlib.sha256(png).hexdigest()[:32]}.png"
                    here.mkdir(parents=True, exist_ok=True)
                    tmp = path.with_suffix(".tmp")
                    tmp.write_bytes(png)
                    tmp.replace(path)
                    if mask.any():
                        made, flagged = made + 1, flagged + bool(mask_quality(mask).flags)
                    else:
                        empty.append(src.image_id)
                rel = path.relative_to(cat.cache_dir).as_posix()
                sources[i] = dataclasses.replace(src, mask_path=f"{CACHED_MASK_PREFIX}{rel}",
                                                 mask_source=f"{name} (diagnostic cache)")
            except Exception as exc:  # one bad photo must not stop the diagnostic; its variants will say so
                errors.append({"image_id": src.image_id, "error": str(exc)})
            if progress:
                progress(n + 1, len(missing))
    summary = (f"{made} masks made, {len(empty)} empty and {reused} reused with {name} in the diagnostic cache "
               f"(the catalogue's masks are unchanged)" if missing else "every photo has a catalogue mask")
    if empty:
        summary += f"; {empty_mask_words(empty)}"
    return sources, {"masker": name, "masked": made, "cached": reused, "flagged": flagged, "empty": len(empty),
                     "empty_ids": empty, "retried": retried, "errors": errors, "todo": len(missing),
                     "kept_in_catalogue": False, "summary": summary}


def set_flank(cat: Catalogue, image_id: int, flank: str, *, user: str = "curator", source: str = "curator") -> None:
    set_flanks(cat, [image_id], flank, user=user, source=source)


def set_flanks(cat: Catalogue, image_ids: Sequence[int], flank: str, *, user: str = "curator",
               source: str = "curator") -> int | None:
    """Label photos with ``flank`` in one transaction: one undoable identity event (shown in the Catalogue's recent
    changes) for the photos whose flank changed. Returns its id, or None when nothing changed."""
    if flank not in FLANKS:
        raise CatalogueError(f"flank must be one of {', '.join(FLANKS)}")
    with cat.unit_of_work() as s:
        images = [get_image(s, int(i)) for i in dict.fromkeys(image_ids)]
        previous = {str(img.id): [img.flank.value, img.flank_source] for img in images
                    if img.flank.value != flank}
        for img in images:
            img.flank = Flank(flank)
            img.flank_source = source
        if not previous:
            s.commit()  # a change of source only (a suggestion confirmed): audited, nothing to undo
            return None
        owners = {img.individual_id for img in images if str(img.id) in previous}
        ev = _record(s, EventKind.flank, user=user, individual_id=owners.pop() if len(owners) == 1 else None,
                     payload={"flank": flank, "source": source, "previous": previous})
        s.commit()
        return ev.id


def image_source(cat: Catalogue, image_id: int) -> ImageSource:
    return sources_for(cat, [image_id])[0]
