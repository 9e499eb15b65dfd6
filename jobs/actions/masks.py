"""Masking: what the Mask tab calls, and the batch masking of ``rosette mask`` and "Mask all photos without a mask".

A :class:`MaskDraft` holds one photo's prompts (clicks, box) and the mask proposed for it until the curator
accepts it (:func:`accept_mask`) or starts again (:func:`clear_prompts`). Nothing is stored before "Accept".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from sqlalchemy import select

from core.inspect.masking import mask_quality
from db.catalogue import CatalogueError
from db.embeddings import load_mask, load_photo, sources_for
from db.inspect.masks import MADE_BY, mask_images, predict_mask, set_flank, store_mask
from db.models import Image, Individual
from db.session import Catalogue
from jobs import queue
from jobs.actions.common import curator_name
from jobs.actions.diagnostic_words import FLAG_WORDS, describe_mask_source, masker_in_use, tip
from jobs.actions.review_words import animal_places
from jobs.requests.masks import AcceptMaskRequest, MaskDraft, MaskPhotosRequest, PhotoFlankRequest

FLANK_CHOICES = ["left", "right", "front", "other", "unknown"]
CLICK_MODES = ("animal", "background", "box corner")


def mask_image_choices(cat: Catalogue) -> list[tuple[str, int]]:
    """(label, image id) for every catalogue animal: id, file name, which of its photo's animals it is (when the
    photo holds several: "the left one of 2 animals"), individual, who made its mask."""
    with cat.unit_of_work() as s:
        rows = s.execute(select(Image.id, Image.original_name, Individual.name, Image.mask_source)
                         .outerjoin(Individual, Image.individual_id == Individual.id).order_by(Image.id)).all()
    places = animal_places(cat)
    return [(f"#{i} · {name}{f' · {places[i].short}' if i in places and places[i].short else ''} · "
             f"{ind or 'no individual yet'} · {'mask: ' + src if src else 'no mask yet'}", i)
            for i, name, ind, src in rows]


def open_for_masking(cat: Catalogue, image_id: int) -> MaskDraft:
    """A draft for one photo, showing its stored mask (if any) and flank."""
    with cat.unit_of_work() as s:
        img = s.get(Image, int(image_id))
        if img is None:
            raise CatalogueError(f"There is no photo #{image_id}.")
        draft = MaskDraft(image_id=img.id, source=img.mask_source, details=dict(img.mask_details or {}),
                          flank=img.flank.value, stored=img.mask_path is not None)
        shape = (img.height, img.width)
    if draft.stored:
        draft.mask = load_mask(cat, sources_for(cat, [draft.image_id])[0], shape=shape)
    return draft


def photo(cat: Catalogue, image_id: int) -> np.ndarray:
    """The photo as HxWx3 uint8 RGB."""
    return load_photo(cat, sources_for(cat, [int(image_id)])[0])


def add_click(draft: MaskDraft, x: float, y: float, *, mode: str) -> MaskDraft:
    """Record a click at pixel (x, y): an animal point, a background point, or a box corner.

    Two box corners make the box; a third corner starts a new box. The proposed
    mask is dropped because the prompts changed.
    """
    if draft.image_id is None:
        raise ValueError("Pick a photo first.")
    if mode not in CLICK_MODES:
        raise ValueError(f"unknown click mode {mode!r}")
    if mode == "box corner":
        corners = [(float(x), float(y))] if len(draft.corners) >= 2 else [*draft.corners, (float(x), float(y))]
        box = None
        if len(corners) == 2:
            (x0, y0), (x1, y1) = corners
            box = (min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))
        draft.corners, draft.box = corners, box
    else:
        draft.points = [*draft.points, (float(x), float(y))]
        draft.labels = [*draft.labels, 1 if mode == "animal" else 0]
    draft.mask, draft.source, draft.details, draft.stored = None, None, {}, False
    return draft


def set_box(draft: MaskDraft, x0: float | None, y0: float | None, x1: float | None, y1: float | None) -> MaskDraft:
    """Set the box from typed numbers (any corner order); all four are needed."""
    if draft.image_id is None:
        raise ValueError("Pick a photo first.")
    if any(v is None for v in (x0, y0, x1, y1)):
        raise ValueError("Give all four box numbers (left, top, right, bottom), in pixels.")
    draft.box = (min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))
    draft.corners = [(draft.box[0], draft.box[1]), (draft.box[2], draft.box[3])]
    draft.mask, draft.source, draft.details, draft.stored = None, None, {}, False
    return draft


def clear_prompts(draft: MaskDraft) -> MaskDraft:
    """Redo: forget clicks, box and the proposed mask (the stored mask, if any, is untouched)."""
    return MaskDraft(image_id=draft.image_id, flank=draft.flank)


def run_masker(cat: Catalogue, draft: MaskDraft, *, masker: str | None = None) -> MaskDraft:
    """Propose a mask from the draft's prompts (default: SAM 2 if configured, else GrabCut); nothing stored."""
    if draft.image_id is None:
        raise ValueError("Pick a photo first.")
    name = masker or masker_in_use()[0]
    res = predict_mask(cat, draft.image_id, masker=name, points=draft.points or None,
                       point_labels=draft.labels or None, box=draft.box)
    draft.mask, draft.source, draft.stored = res.mask, res.source, False
    draft.details = dict(res.details)
    return draft


def accept_mask(cat: Catalogue, request: AcceptMaskRequest) -> str:
    """Store the proposed mask for the photo (replacing any earlier one); returns what happened."""
    user = curator_name(request.user)
    draft = request.draft
    q = store_mask(cat, draft.image_id, draft.mask, source=draft.source or "unknown",
                   details={**(draft.details or {}), MADE_BY: "curator"}, user=user)  # no batch run replaces it
    draft.stored = True
    problems = f" Check it: {' '.join(FLAG_WORDS[f][0] for f in q['flags'] if f in FLAG_WORDS)}" if q["flags"] else ""
    return (f"Saved the mask of photo #{draft.image_id} (made by {describe_mask_source(q['source'], draft.details)}, "
            f"solidity {q['solidity']:.2f}).{problems}")


def save_flank(cat: Catalogue, request: PhotoFlankRequest) -> str:
    """Record which side of the animal the photo shows."""
    set_flank(cat, request.image_id, request.flank, user=curator_name(request.user))
    return f"Photo #{request.image_id}: flank set to {request.flank}."


def mask_report(draft: MaskDraft) -> str:
    """Markdown: who made the mask, its solidity in words, and its warnings (ML terms in tooltips)."""
    if draft.image_id is None:
        return "Pick a photo to mask."
    if draft.mask is None:
        n_pos = sum(draft.labels)
        n_neg = len(draft.labels) - n_pos
        box = "a box" if draft.box else ("one box corner" if draft.corners else "no box")
        return (f"**No mask proposed yet.** Prompts: {n_pos} click(s) on the animal, {n_neg} on the background, "
                f"{box}. Press “Make mask” (with no prompt, the masker uses the whole frame minus a small margin).")
    q = mask_quality(draft.mask, box=draft.box, points=draft.points or None, point_labels=draft.labels or None)
    who = describe_mask_source(draft.source, draft.details)
    status = "Stored mask" if draft.stored else "Proposed mask (not saved yet: press Accept to keep it)"
    partial = bool({"short_of_box", "misses_clicks"} & set(q.flags))
    if partial:
        shape_words = "solid, but likely partial: see the warning below"
    elif q.solidity >= 0.85:
        shape_words = "compact, clean outline"
    elif q.solidity >= 0.6:
        shape_words = "usual for a standing animal: legs, horns and tail make dents in the outline"
    else:
        shape_words = "very ragged or partial outline: check it"
    lines = [f"**{status}.** Mask made by {who}.",
             f"- {tip('Outline quality', 'solidity = mask area / convex-hull area, in (0, 1]; 1 = no dents')}: "
             f"**{q.solidity:.2f}** ({shape_words}). Low values make training trust this photo less.",
             f"- {tip('Share of the photo covered', 'mask area fraction')}: {q.area_fraction:.0%}; "
             f"{tip('pieces', 'significant 8-connected components')}: {q.n_components}"]
    if q.box_extent is not None:
        lines.append(f"- {tip('Reach within the box you drew', 'mask bounding box / drawn box, per axis')}: "
                     f"{q.box_extent[0]:.0%} of its width, {q.box_extent[1]:.0%} of its height; it comes close to "
                     f"{q.box_sides_reached} of its 4 sides and fills {q.box_fill:.0%} of it.")
    for flag in q.flags:
        words, term = FLAG_WORDS.get(flag, (flag, flag))
        lines.append(f"- ⚠ {tip(words, term)}")
    if not q.flags:
        lines.append("- No warnings.")
    return "\n".join(lines)


def render_overlay(rgb: np.ndarray, mask: np.ndarray | None = None, *,
                   points: Sequence[tuple[float, float]] = (), labels: Sequence[int] = (),
                   corners: Sequence[tuple[float, float]] = (),
                   box: tuple[float, float, float, float] | None = None, alpha: float = 0.4) -> np.ndarray:
    """The photo with the mask tinted amber and outlined, animal clicks green, background clicks red, box yellow.

    tinted = (1 - alpha) * photo + alpha * amber inside the mask; the outline is the mask's external contours.
    """
    import cv2  # lazy: OpenCV is only needed once a photo is drawn

    out = np.array(rgb, dtype=np.uint8, copy=True)
    h, w = out.shape[:2]
    thick = max(2, round(max(h, w) / 256))
    if mask is not None and mask.any():
        m = mask.astype(bool)
        tint = np.array([255, 176, 0], dtype=np.float32)
        out[m] = ((1 - alpha) * out[m].astype(np.float32) + alpha * tint).astype(np.uint8)
        contours, _ = cv2.findContours(m.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        cv2.drawContours(out, contours, -1, (255, 255, 255), thick + 2)
        cv2.drawContours(out, contours, -1, (230, 97, 0), thick)
    if box is not None:
        x0, y0, x1, y1 = (int(round(v)) for v in box)
        cv2.rectangle(out, (x0, y0), (x1, y1), (255, 230, 0), thick)
    for cx, cy in corners:
        c = (int(round(cx)), int(round(cy)))
        cv2.drawMarker(out, c, (255, 230, 0), cv2.MARKER_CROSS, 6 * thick, thick)
    radius = 4 * thick
    for (px, py), lab in zip(points, labels):
        c = (int(round(px)), int(round(py)))
        cv2.circle(out, c, radius + thick, (255, 255, 255), -1)
        cv2.circle(out, c, radius, (40, 170, 60) if lab else (210, 40, 40), -1)
    return out


def draft_picture(cat: Catalogue, draft: MaskDraft) -> np.ndarray | None:
    """What the Mask tab shows: the photo with the draft's mask and prompts drawn on it."""
    if draft.image_id is None:
        return None
    return render_overlay(photo(cat, draft.image_id), draft.mask, points=draft.points, labels=draft.labels,
                          corners=draft.corners if len(draft.corners) == 1 else (), box=draft.box)


def mask_photos(cat: Catalogue, request: MaskPhotosRequest, *, progress: Callable[[int, int], None] | None = None,
                should_cancel: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Mask the photos now (``rosette mask``; the ``mask`` job runs the same request in the background), resumable:
    returns the counts, the errors per photo and a ``summary`` in words."""
    return mask_images(cat, masker=request.masker, image_ids=request.image_ids, only_missing=request.only_missing,
                       user=curator_name(request.user), progress=progress, should_cancel=should_cancel)


def submit_mask_all(cat: Catalogue, request: MaskPhotosRequest) -> tuple[int | None, str]:
    """Queue a ``mask`` job for every photo without a mask ("Mask all photos without a mask"); returns (job id or
    None, message)."""
    user = curator_name(request.user)
    with cat.unit_of_work() as s:
        missing = len(s.scalars(select(Image.id).where(Image.mask_path.is_(None))).all())
    if not missing:
        return None, "Every photo already has a mask; nothing to do."
    name, words = (request.masker, describe_mask_source(request.masker)) if request.masker else masker_in_use()
    job_id = queue.submit(cat, "mask", replace(request, masker=name, user=user).to_dict())
    return job_id, (f"Queued job #{job_id}: mask {missing} photo{'s' if missing != 1 else ''} without a mask "
                    f"with {words}. Follow it in the Jobs tab.")
