"""Reads of the curator's loop that only the command line shows in bulk: the photos without a flank label and
the flank suggested for each (``rosette flank-suggest``; the screens show one photo's suggestion through
:mod:`jobs.actions.flanks`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from db.flank import suggest_flanks
from db.models import Flank, Image
from db.session import Catalogue


def unlabelled_photos(cat: Catalogue) -> list[int]:
    """Photos whose flank is not labelled, in catalogue order."""
    with cat.unit_of_work() as s:
        return list(s.scalars(select(Image.id).where(Image.flank == Flank.unknown).order_by(Image.id)))


def flank_suggestions(cat: Catalogue, image_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Per photo: the suggested flank (left / right / other), its confidence, and the suggester's held-out
    accuracy, training-set size and model."""
    return suggest_flanks(cat, list(image_ids))
