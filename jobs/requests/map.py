"""Requests of the photos' features and their map: warm the feature cache (the ``embed`` job, queued by a promotion,
an import or the Jobs tab), compute the embedding map (the Map tab's "Compute map", ``rosette map``, the ``map``
job), and assign the photos selected on the map to an individual."""

from __future__ import annotations

from dataclasses import dataclass

from core.identify.backbones import DEFAULT_BACKBONE
from core.requests import Request
from jobs.requests._values import as_ids, settle


@dataclass(frozen=True)
class EmbedRequest(Request):
    """Compute (and cache) ``backbone``'s features of every catalogue photo (of ``species`` when given), or of the
    annotations ``image_ids`` only (an import's new animals), seeing ``variant`` of each. ``reason`` says why it was
    queued (a promotion)."""

    backbone: str = DEFAULT_BACKBONE
    variant: str = "full_rgb"
    species: int | None = None
    user: str = "curator"
    reason: str | None = None
    image_ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.image_ids is not None:
            settle(self, image_ids=as_ids(self.image_ids, "annotation"))


@dataclass(frozen=True)
class MapRequest(Request):
    """Project ``model``'s features of the photos (of ``species`` when given) to 2-D: UMAP, or a Poincare disk for
    a Lorentz model."""

    model: str
    species: int | None = None
    user: str = "curator"

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("Choose a model.")


@dataclass(frozen=True)
class AssignSelectionRequest(Request):
    """Assign the photos selected on the map to the individual named ``individual``, each an undoable change;
    ``create_new``: make that individual first when no individual has the name."""

    image_ids: tuple[int, ...]
    individual: str | None
    user: str
    create_new: bool = False

    def __post_init__(self) -> None:
        ids = as_ids(self.image_ids, "photo")
        if not ids:
            raise ValueError("Select photos on the map first (box or lasso).")
        name = (self.individual or "").strip()
        if not name:
            raise ValueError("Type the name of the individual to assign them to.")
        settle(self, image_ids=ids, individual=name)
