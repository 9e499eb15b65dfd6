"""Requests about annotations (one animal in a photo): listing them, naming the one a command means, and a
curator's box edits in the Mask tab (add, move, delete, undo)."""

from __future__ import annotations

from dataclasses import dataclass

from core.annotations import Box
from core.requests import Request
from jobs.requests._values import as_id, optional_id, settle


def as_box(value: object) -> tuple[float, float, float, float]:
    """[x, y, w, h] normalised, checked by :class:`core.annotations.Box` (outside [0, 1] or no area: refused)."""
    box = Box.from_sequence(list(value) if isinstance(value, (list, tuple)) else value)
    return box.x, box.y, box.w, box.h


@dataclass(frozen=True)
class ListAnnotationsRequest(Request):
    """Every annotation, or those of one photo (``image_id``)."""

    image_id: int | None = None

    def __post_init__(self) -> None:
        settle(self, image_id=optional_id(self.image_id, "photo"))


@dataclass(frozen=True)
class TargetRequest(Request):
    """Which animal a command means: an annotation id, or a photo id for a photo holding one animal."""

    image_id: int | None = None
    annotation_id: int | None = None

    def __post_init__(self) -> None:
        settle(self, image_id=optional_id(self.image_id, "photo"),
               annotation_id=optional_id(self.annotation_id, "annotation"))
        if (self.image_id is None) == (self.annotation_id is None):
            raise ValueError("name either a photo (IMAGE_ID) or an annotation (--annotation ID), not both or neither")


@dataclass(frozen=True)
class AddBoxRequest(Request):
    """Draw a new animal's box on a photo."""

    image_id: int
    box: tuple[float, float, float, float]
    user: str

    def __post_init__(self) -> None:
        settle(self, image_id=as_id(self.image_id, "photo"), box=as_box(self.box))


@dataclass(frozen=True)
class MoveBoxRequest(Request):
    """Move or resize an annotation's box."""

    annotation_id: int
    box: tuple[float, float, float, float]
    user: str

    def __post_init__(self) -> None:
        settle(self, annotation_id=as_id(self.annotation_id, "annotation"), box=as_box(self.box))


@dataclass(frozen=True)
class DeleteBoxRequest(Request):
    """Remove an annotation that is not an animal."""

    annotation_id: int
    user: str

    def __post_init__(self) -> None:
        settle(self, annotation_id=as_id(self.annotation_id, "annotation"))


@dataclass(frozen=True)
class UndoBoxRequest(Request):
    """Undo the latest box change on a photo."""

    image_id: int
    user: str

    def __post_init__(self) -> None:
        settle(self, image_id=as_id(self.image_id, "photo"))
