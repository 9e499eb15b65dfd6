"""Annotations as people act on them: list them (``rosette annotations``), resolve which animal a command
means (a photo id works for a photo with one animal), and the Mask tab's box edits."""

from __future__ import annotations

from core.annotations import Box
from db.records import annotations as store
from db.records.annotations import AnnotationRow
from db.session import Catalogue
from jobs.actions.common import curator_name
from jobs.requests.annotations import (
    AddBoxRequest,
    DeleteBoxRequest,
    ListAnnotationsRequest,
    MoveBoxRequest,
    TargetRequest,
    UndoBoxRequest,
)

__all__ = ["AnnotationRow", "add_box", "annotations", "delete_box", "move_box", "resolve_target", "undo_box"]


def annotations(cat: Catalogue, request: ListAnnotationsRequest) -> list[AnnotationRow]:
    return store.list_annotations(cat, photo_id=request.image_id)


def resolve_target(cat: Catalogue, request: TargetRequest) -> int:
    """The annotation id a command means; a photo with several animals is refused with the list of them."""
    if request.annotation_id is not None:
        return store.annotation_exists(cat, request.annotation_id)
    return store.annotation_for_photo(cat, request.image_id)


def add_box(cat: Catalogue, request: AddBoxRequest) -> int:
    return store.add_box(cat, request.image_id, Box(*request.box), user=curator_name(request.user))


def move_box(cat: Catalogue, request: MoveBoxRequest) -> None:
    store.move_box(cat, request.annotation_id, Box(*request.box), user=curator_name(request.user))


def delete_box(cat: Catalogue, request: DeleteBoxRequest) -> None:
    store.delete_box(cat, request.annotation_id, user=curator_name(request.user))


def undo_box(cat: Catalogue, request: UndoBoxRequest) -> str:
    edit = store.undo_box_edit(cat, request.image_id, user=curator_name(request.user))
    return f"undid the {edit.kind} of annotation {edit.annotation_id} on photo {edit.photo_id}"
