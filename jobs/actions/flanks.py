"""Flank suggestion as the Mask and Match review screens show it, accepting it (key F), and the bulk reads of
``rosette flank-suggest`` (the photos without a flank label and the flank suggested for each)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from db.inspect.flank import accept_flank_suggestion, suggest_flanks
from db.models import Flank, Image
from db.session import Catalogue
from jobs.actions.common import curator_name
from jobs.requests.catalogue import AcceptFlankRequest


def flank_suggestion(cat: Catalogue, image_id: int | None) -> tuple[str, bool]:
    """(markdown, whether the Accept button shows) for a photo; nothing when its flank is already labelled."""
    if image_id is None:
        return "", False
    with cat.unit_of_work() as s:
        flank = s.scalar(select(Image.flank).where(Image.id == int(image_id)))
    if flank is None or flank != Flank.unknown:
        return "", False
    try:
        sug: dict[str, Any] = suggest_flanks(cat, [int(image_id)])[int(image_id)]
    except ValueError as exc:  # too few labelled photos to learn from
        return f"No flank suggestion yet: {exc}.", False
    acc = f"{100 * sug['accuracy']:.0f}% right on held-out labelled photos" if sug["accuracy"] is not None \
        else "accuracy not measured yet (too few labelled photos)"
    return (f"Suggested flank: **{sug['flank']}** ({100 * sug['confidence']:.0f}% confident; the suggester is {acc}, "
            f"learned from {sug['n_train']} labelled photos with {sug['model']}). Press **F** to accept."), True


def accept_suggestion(cat: Catalogue, request: AcceptFlankRequest) -> str:
    """Take the suggested flank of the photo as its label (recorded as the curator's)."""
    user = curator_name(request.user)
    flank = accept_flank_suggestion(cat, request.image_id, user=user)
    return f"Flank set to {flank} (suggested, accepted by {user})."


def unlabelled_photos(cat: Catalogue) -> list[int]:
    """Photos whose flank is not labelled, in catalogue order."""
    with cat.unit_of_work() as s:
        return list(s.scalars(select(Image.id).where(Image.flank == Flank.unknown).order_by(Image.id)))


def flank_suggestions(cat: Catalogue, image_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Per photo: the suggested flank (left / right / other), its confidence, and the suggester's held-out
    accuracy, training-set size and model."""
    return suggest_flanks(cat, list(image_ids))
