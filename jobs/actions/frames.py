"""What a person sees of an annotation: its crop, or the whole frame with every animal's box drawn on it.

Person boxes (``Photo.people``, from the detector) are blurred before anything is shown."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
from PIL import Image as PILImage
from sqlalchemy import select

from core.annotations import Box, box_in_crop
from core.io.box_drawing import dim_neighbours, draw_boxes, draw_legend
from core.io.images import load_rgb
from core.io.privacy import blur_boxes, person_boxes
from db.catalogue import CatalogueError
from db.embeddings import load_photo, sources_for
from db.models import Image, Individual, Photo
from db.session import Catalogue
from jobs.actions.review_words import frame_legend

__all__ = ["SCREEN_DIR", "annotation_crop", "annotation_picture", "frame_jpeg", "screen_file", "frame_with_boxes", "frame_words", "photo_frame",
           "photo_of", "shows_whole_file"]


def _people(photo: Photo | None) -> list[Box]:
    return person_boxes(photo.people) if photo is not None else []


def _blurred(rgb: np.ndarray, people: list[Box]) -> np.ndarray:
    if not people:
        return rgb
    return np.asarray(blur_boxes(PILImage.fromarray(np.ascontiguousarray(rgb)), people))


def _animals(s, photo_id: int) -> list[tuple[Image, str | None]]:
    """A photo's annotations in id order, each with its individual's name (None: no individual yet)."""
    return [(a, name) for a, name in s.execute(
        select(Image, Individual.name).outerjoin(Individual, Image.individual_id == Individual.id)
        .where(Image.photo_id == photo_id).order_by(Image.id))]


def photo_frame(cat: Catalogue, photo_id: int, *, highlight: int | None = None) -> np.ndarray:
    """A photo, person boxes blurred, with every animal box drawn and labelled (the individual's name, else
    ``#<annotation id>``); annotation ``highlight``'s box drawn thicker."""
    with cat.unit_of_work() as s:
        photo = s.get(Photo, photo_id)
        if photo is None:
            raise CatalogueError(f"no image with id {photo_id}")
        people, blob = _people(photo), photo.blob_path
        rows = _animals(s, photo_id)
        boxes = [a.box for a, _ in rows]
        labels = [name or f"#{a.id}" for a, name in rows]
        index = next((i for i, (a, _) in enumerate(rows) if a.id == highlight), None)
    frame = _blurred(load_rgb(cat.blobs.path(blob)), people)
    return draw_boxes(frame, boxes, labels, highlight=index)


def photo_of(cat: Catalogue, annotation_id: int) -> int:
    """The id of the photo an annotation lies in."""
    with cat.unit_of_work() as s:
        ann = s.get(Image, annotation_id)
        if ann is None:
            raise CatalogueError(f"no annotation with id {annotation_id}")
        return ann.photo_id


def frame_with_boxes(cat: Catalogue, annotation_id: int, *, legend: str | None = None) -> np.ndarray:
    """The whole photo of an annotation, person boxes blurred, with all its photo's animal boxes drawn and
    labelled (the individual's name, else ``#<annotation id>``); the given annotation's box is highlighted. With
    ``legend`` (what the highlighted box is, e.g. "photo to identify"), a legend under the photo says which box
    is which (:func:`jobs.actions.review_words.frame_legend`)."""
    frame = photo_frame(cat, photo_of(cat, annotation_id), highlight=annotation_id)
    return draw_legend(frame, frame_legend(cat, annotation_id, what=legend)) if legend else frame


def frame_words(cat: Catalogue, annotation_id: int) -> str:
    """What :func:`frame_with_boxes` draws, in words: the photo, and each of its animals' boxes with the individual
    (or ``no individual yet``) and where the box came from; the given annotation is marked."""
    with cat.unit_of_work() as s:
        ann = s.get(Image, annotation_id)
        if ann is None:
            raise CatalogueError(f"no annotation with id {annotation_id}")
        photo = s.get(Photo, ann.photo_id)
        rows = _animals(s, ann.photo_id)
        people = len(photo.people or []) if photo is not None else 0
        name = photo.original_name if photo is not None else "?"
        animals = "; ".join(f"#{a.id} {who or 'no individual yet'} ({a.box_source})"
                            + (" ← this one" if a.id == annotation_id else "") for a, who in rows)
        words = f"Photo #{ann.photo_id} ({name}): {len(rows)} animal{'s' if len(rows) != 1 else ''}: {animals}"
    if people:
        words += f"; {people} person box{'es' if people != 1 else ''} blurred"
    return words + "."


def annotation_crop(cat: Catalogue, annotation_id: int) -> np.ndarray:
    """The annotation's pixels (its box's crop, as matching sees it), any person in it blurred and the other
    animals' boxes that reach into its margin darkened."""
    src = sources_for(cat, [annotation_id])[0]
    crop = load_photo(cat, src)
    with cat.unit_of_work() as s:
        ann = s.get(Image, annotation_id)
        people = _people(s.get(Photo, ann.photo_id)) if ann is not None else []
        # a whole-photo annotation has no margin: every animal in it is part of the picture
        others = ([a.box for a, _ in _animals(s, ann.photo_id) if a.id != annotation_id]
                  if ann is not None and not src.box.is_whole else [])
    inside = []
    for p in people:
        x, y, w, h = box_in_crop(p, src.box)
        x0, y0, x1, y1 = max(0.0, x), max(0.0, y), min(1.0, x + w), min(1.0, y + h)
        if x1 > x0 and y1 > y0:
            inside.append(Box(x0, y0, x1 - x0, y1 - y0))
    return dim_neighbours(_blurred(crop, inside), [box_in_crop(o, src.box) for o in others],
                          box_in_crop(src.box, src.box))


def shows_whole_file(box: Box, *, has_people: bool) -> bool:
    """Whether a screen shows an annotation as its photo's stored file: a whole-photo annotation of a photo without
    people (nothing to cut or blur). Any other is shown as its crop (or the crop's thumbnail)."""
    return box.is_whole and not has_people


def annotation_picture(cat: Catalogue, annotation_id: int) -> str | np.ndarray:
    """What a screen shows for an annotation: the stored photo's path for a whole-photo annotation of a photo
    without people (nothing to cut or blur), else :func:`annotation_crop`."""
    with cat.unit_of_work() as s:
        ann = s.get(Image, annotation_id)
        if ann is None:
            raise CatalogueError(f"no annotation with id {annotation_id}")
        photo = s.get(Photo, ann.photo_id)
        whole, blob = shows_whole_file(ann.box, has_people=bool(photo is not None and photo.people)), ann.blob_path
    path = cat.blobs.existing(blob) if whole else None
    return str(path) if path else annotation_crop(cat, annotation_id)


def frame_jpeg(cat: Catalogue, annotation_id: int, *, max_side: int = 480) -> bytes:
    """:func:`frame_with_boxes` shrunk to at most ``max_side`` pixels a side, as JPEG bytes (for a card)."""
    img = PILImage.fromarray(frame_with_boxes(cat, annotation_id))
    img.thumbnail((max_side, max_side))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=82)
    return buf.getvalue()


#: where pictures drawn for a screen (crops, outlines, whole frames) are written, under a served folder of the data
#: dir: named by their content, so a picture is written once and a browser may keep it
SCREEN_DIR = Path("thumbs") / "screen"


def screen_file(cat: Catalogue, picture: str | np.ndarray | None, *, quality: int = 88) -> str | None:
    """A picture as a file the browser can load: a stored file as it is, an array as a JPEG named by its content.

    A page that shows a picture by URL gets it once (later screens reuse the browser's copy) and an update of the
    page carries a short URL instead of an encoded picture."""
    if picture is None or (isinstance(picture, str) and not picture):
        return None
    if isinstance(picture, str):
        return picture
    buf = io.BytesIO()
    PILImage.fromarray(np.ascontiguousarray(picture, dtype=np.uint8)).save(buf, format="JPEG", quality=quality)
    data = buf.getvalue()
    folder = cat.data_dir / SCREEN_DIR
    path = folder / f"{hashlib.sha256(data).hexdigest()[:32]}.jpg"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{id(data)}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)  # atomic: two screens drawing the same picture never leave half a file
    return str(path)
