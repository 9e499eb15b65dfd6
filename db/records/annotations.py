"""Annotations in the store: list them, find the one a photo id means, and a curator's box edits (add, move,
delete, undo), each one transaction, audited, and recorded in ``box_edits`` so that undo restores it exactly. A
move or delete of a machine box that is not undone is the curator's standing override of the detection it came
from (:func:`curator_overrides`): imports read it and never put that detection back."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from core.annotations import CURATOR_SOURCES, Box, InvalidBoxError
from db.audit import acting_as
from db.catalogue import CatalogueError, get_or_create_user
from db.models import PHOTO_FILE_COLUMNS, BoxEdit, Flank, Image, Individual, MatchDecision, MatchSuggestion, Photo, utcnow
from db.session import Catalogue


@dataclass(frozen=True)
class AnnotationRow:
    """One annotation as the CLI and the tabs list it (``image_id`` is its photo)."""

    id: int
    image_id: int
    bbox: tuple[float, float, float, float]
    confidence: float | None
    source: str
    individual: str | None
    individual_id: int | None
    flank: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "image_id": self.image_id, "bbox": list(self.bbox), "confidence": self.confidence,
                "source": self.source, "individual": self.individual, "flank": self.flank}


def list_annotations(cat: Catalogue, *, photo_id: int | None = None, limit: int | None = None) -> list[AnnotationRow]:
    """Every annotation (of one photo when ``photo_id``), by id."""
    with cat.unit_of_work() as s:
        if photo_id is not None and s.get(Photo, photo_id) is None:
            raise CatalogueError(f"no image with id {photo_id}")
        q = (select(Image, Individual.name).outerjoin(Individual, Image.individual_id == Individual.id)
             .order_by(Image.id))
        if photo_id is not None:
            q = q.where(Image.photo_id == photo_id)
        if limit is not None:
            q = q.limit(limit)
        return [AnnotationRow(a.id, a.photo_id, (a.bbox_x, a.bbox_y, a.bbox_w, a.bbox_h), a.box_confidence,
                              a.box_source, name, a.individual_id, a.flank.value) for a, name in s.execute(q)]


def count_annotations(cat: Catalogue) -> int:
    with cat.unit_of_work() as s:
        return int(s.scalar(select(func.count(Image.id))) or 0)


def annotation_for_photo(cat: Catalogue, photo_id: int) -> int:
    """The annotation a photo id means: its only one. A photo with several animals (or none) is refused with
    the list of its annotations, so the curator picks one."""
    rows = list_annotations(cat, photo_id=photo_id)
    if len(rows) == 1:
        return rows[0].id
    if not rows:
        raise CatalogueError(f"photo {photo_id} has no annotation (an empty frame): draw a box in the Mask tab first")
    listed = "; ".join(f"#{r.id} {r.source} box {[round(v, 3) for v in r.bbox]}"
                       + (f" ({r.individual})" if r.individual else "") for r in rows)
    raise CatalogueError(f"photo {photo_id} holds {len(rows)} annotations: {listed}; "
                         "name one with --annotation ID")


def annotation_exists(cat: Catalogue, annotation_id: int) -> int:
    with cat.unit_of_work() as s:
        if s.get(Image, annotation_id) is None:
            raise CatalogueError(f"no annotation with id {annotation_id}")
    return annotation_id


_ROW_FIELDS = ("photo_id", *PHOTO_FILE_COLUMNS, "thumb_path", "bbox_x", "bbox_y", "bbox_w", "bbox_h", "box_source",
               "box_confidence", "flank", "flank_source", "sighting_id", "individual_id", "species_id",
               "decision_version", "mask_path", "mask_source", "mask_details", "solidity", "mask_flags",
               "observation_key", "life_stage", "sex", "observation_details")


def _row(ann: Image) -> dict[str, Any]:
    out = {f: getattr(ann, f) for f in _ROW_FIELDS}
    out["flank"] = ann.flank.value
    out["id"] = ann.id
    return out


def _in_use(s: Session, ann: Image) -> str | None:
    """Why an annotation cannot be deleted (it carries identity work), or None."""
    if ann.individual_id is not None:
        return "it is assigned to an individual"
    decided = s.scalar(select(func.count(MatchDecision.id)).where(
        (MatchDecision.query_image_id == ann.id) | (MatchDecision.candidate_image_id == ann.id)))
    if decided:
        return f"{decided} match decision(s) name it"
    return None


def add_box(cat: Catalogue, photo_id: int, box: Box, *, user: str) -> int:
    """A curator draws a new animal on a photo: a ``drawn`` annotation of the photo's species; its id."""
    with acting_as(user), cat.unit_of_work() as s:
        photo = s.get(Photo, photo_id)
        if photo is None:
            raise CatalogueError(f"no image with id {photo_id}")
        sibling = s.scalar(select(Image).where(Image.photo_id == photo_id).limit(1))
        get_or_create_user(s, user)
        ann = Image(photo=photo, **{c: getattr(photo, c) for c in PHOTO_FILE_COLUMNS}, thumb_path=photo.thumb_path,
                    box_source="drawn", sighting_id=photo.sighting_id,
                    species_id=sibling.species_id if sibling is not None else 1)
        ann.box = box
        s.add(ann)
        s.flush()
        s.add(BoxEdit(photo_id=photo_id, annotation_id=ann.id, kind="add", before=None, after=_row(ann), user=user))
        s.commit()
        return ann.id


def move_box(cat: Catalogue, annotation_id: int, box: Box, *, user: str) -> None:
    """A curator moves or resizes an annotation's box. Its mask was drawn on the old crop, so it is cleared
    (the edit keeps it for undo) and its cached features follow the new box (they are keyed by it)."""
    with acting_as(user), cat.unit_of_work() as s:
        ann = s.get(Image, annotation_id)
        if ann is None:
            raise CatalogueError(f"no annotation with id {annotation_id}")
        before = _row(ann)
        ann.box = box
        if ann.box_source != "drawn":
            ann.box_source, ann.box_confidence = "drawn", None
        ann.mask_path = ann.mask_source = ann.mask_details = ann.solidity = ann.mask_flags = None
        s.query(MatchSuggestion).filter(MatchSuggestion.image_id == annotation_id).delete()
        get_or_create_user(s, user)
        s.add(BoxEdit(photo_id=ann.photo_id, annotation_id=ann.id, kind="move", before=before, after=_row(ann),
                      user=user))
        s.commit()


def delete_box(cat: Catalogue, annotation_id: int, *, user: str) -> None:
    """A curator removes an annotation that is not an animal (a false detection). One that carries identity
    work (an individual, decisions) is refused: nothing a curator decided is lost."""
    with acting_as(user), cat.unit_of_work() as s:
        ann = s.get(Image, annotation_id)
        if ann is None:
            raise CatalogueError(f"no annotation with id {annotation_id}")
        why = _in_use(s, ann)
        if why:
            raise CatalogueError(f"annotation {annotation_id} cannot be deleted: {why}; undo those first")
        before = _row(ann)
        s.query(MatchSuggestion).filter((MatchSuggestion.image_id == annotation_id)
                                        | (MatchSuggestion.top_image_id == annotation_id)).delete()
        get_or_create_user(s, user)
        s.add(BoxEdit(photo_id=ann.photo_id, annotation_id=ann.id, kind="delete", before=before, after=None,
                      user=user))
        s.delete(ann)
        s.commit()


def undo_box_edit(cat: Catalogue, photo_id: int, *, user: str) -> BoxEdit:
    """Undo the latest box edit on a photo that is not undone yet: an added box goes (if nothing was decided on
    it since), a moved box goes back with its mask, a deleted annotation comes back with its id (no new row is ever
    given a deleted row's id). Only where a catalogue gave that id to a new annotation before its upgrade to ids
    never reused does the deleted one come back under a new id, the photo's edits of it up to this one then naming
    that id. Two undos of one edit at once: one of them wins."""
    with acting_as(user), cat.unit_of_work() as s:
        edit = s.scalar(select(BoxEdit).where(BoxEdit.photo_id == photo_id, BoxEdit.undone_at.is_(None))
                        .order_by(BoxEdit.id.desc()).limit(1))
        if edit is None:
            raise CatalogueError(f"photo {photo_id} has no box change to undo")
        if not s.execute(update(BoxEdit).where(BoxEdit.id == edit.id, BoxEdit.undone_at.is_(None))
                         .values(undone_at=utcnow())).rowcount:
            raise CatalogueError(f"the latest box change on photo {photo_id} was undone meanwhile")
        get_or_create_user(s, user)
        ann = s.get(Image, edit.annotation_id)
        if edit.kind == "add":
            if ann is not None:
                why = _in_use(s, ann)
                if why:
                    raise CatalogueError(f"the box added as annotation {ann.id} cannot be removed: {why}")
                s.delete(ann)
        elif edit.kind == "move":
            if ann is None:
                raise CatalogueError(f"annotation {edit.annotation_id} no longer exists")
            for f in ("bbox_x", "bbox_y", "bbox_w", "bbox_h", "box_source", "box_confidence", "mask_path",
                      "mask_source", "mask_details", "solidity", "mask_flags"):
                setattr(ann, f, edit.before[f])
        else:
            values = dict(edit.before)
            values["flank"] = Flank(values["flank"])
            if ann is not None:  # its id went to a new row before the upgrade to ids never reused
                del values["id"]
            restored = Image(**values)
            s.add(restored)
            s.flush()
            if restored.id != edit.annotation_id:
                s.execute(update(BoxEdit).where(BoxEdit.photo_id == photo_id, BoxEdit.id <= edit.id,
                                                BoxEdit.annotation_id == edit.annotation_id)
                          .values(annotation_id=restored.id))
        s.commit()
        s.refresh(edit)
        s.expunge(edit)
        return edit


#: Box sources that are no detection: a curator's move or delete of one of these overrides no machine.
_NOT_DETECTIONS = (*CURATOR_SOURCES, "whole-photo")


@dataclass(frozen=True)
class CuratorOverride:
    """A curator's move or delete of a machine box (a detector's box or a Camtrap DP observation), not undone: the
    detection that box came from is the curator's from then on, and no import puts it back. The edit's ``before``
    row is the annotation as the machine gave it (its source, box, confidence, observation key), so this needs no
    column of its own; undoing the edit lifts the override."""

    annotation_id: int
    kind: str  # move | delete
    source: str  # the box's source before the edit: megadetector | camtrap-dp | detector:<name> | whole-photo
    box: Box  # the machine's box, as it came
    confidence: float | None
    observation_key: str | None  # a Camtrap DP observation's key (None for a detector's box)
    user: str
    at: datetime

    @property
    def is_detection_box(self) -> bool:
        """Whether the edited box was a detector's or a package's box (not a whole-photo observation)."""
        return self.source not in _NOT_DETECTIONS

    def describe(self, now: Box | None = None) -> str:
        """What the curator did, in words: ``ana deleted it on 2026-05-02`` / ``ana moved it to [...] on ...``
        (``now``: the annotation's box today, when it still exists)."""
        did = "deleted it" if self.kind == "delete" else f"moved it{f' to {now.as_list()}' if now else ''}"
        return f"{self.user} {did} on {self.at:%Y-%m-%d}"


def curator_overrides(session: Session, photo_id: int) -> list[CuratorOverride]:
    """The standing overrides of a photo's machine boxes, one per annotation, oldest first: each move or delete
    not undone whose ``before`` row was a machine box. A later edit of the same annotation (a second move, a
    delete after a move) starts from a curator's box and adds nothing: the first one says what the machine gave."""
    edits = session.scalars(select(BoxEdit).where(BoxEdit.photo_id == photo_id, BoxEdit.undone_at.is_(None),
                                                  BoxEdit.kind.in_(("move", "delete"))).order_by(BoxEdit.id))
    found: dict[int, CuratorOverride] = {}
    for edit in edits:
        before = edit.before or {}
        source, key = before.get("box_source"), before.get("observation_key")
        if edit.annotation_id in found or (source in _NOT_DETECTIONS and not key):
            continue
        try:
            box = Box(before["bbox_x"], before["bbox_y"], before["bbox_w"], before["bbox_h"])
        except (KeyError, InvalidBoxError):  # a row that names no valid box overrides nothing it can be matched to
            continue
        found[edit.annotation_id] = CuratorOverride(
            annotation_id=edit.annotation_id, kind=edit.kind, source=str(source), box=box,
            confidence=before.get("box_confidence"), observation_key=key, user=edit.user, at=edit.created_at)
    return list(found.values())
