"""The catalogue's species: listing them, renaming one, setting the species of an individual (the Catalogue
tab's "Set species", ``rosette species set --individual``) or of unassigned photos, and the threshold below which
match review suggests a new individual."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from db import calibration
from db import species as store
from db.models import Individual, Species
from db.session import Catalogue
from jobs.actions.common import attributed, curator_name
from jobs.requests.catalogue import (
    IndividualSpeciesRequest,
    PhotoSpeciesRequest,
    RenameSpeciesRequest,
    SpeciesThresholdRequest,
)


def list_species(cat: Catalogue) -> list[dict[str, Any]]:
    """Every species with its counts (individuals, images) and active model."""
    return store.list_species(cat)


def species_names(cat: Catalogue) -> list[str]:
    return [r["name"] for r in store.list_species(cat)]


def species_of_individual(cat: Catalogue, individual_id: int) -> str | None:
    with cat.unit_of_work() as s:
        return s.scalar(select(Species.name).join(Individual, Individual.species_id == Species.id)
                        .where(Individual.id == int(individual_id)))


def active_model_name(cat: Catalogue, species: str | int | None = None) -> str:
    """The species' active model (the default species' when None)."""
    return store.active_model_name(cat, species)


@dataclass(frozen=True)
class SpeciesSet:
    species_id: int
    name: str  # the species as asked for

    @property
    def message(self) -> str:
        return (f"The individual and its photos are now {self.name}; match review offers them only {self.name} "
                "candidates.")


def set_individual_species(cat: Catalogue, request: IndividualSpeciesRequest) -> SpeciesSet:
    """Move the individual (and its photos) to a species, created when the name is new."""
    name = store.clean_species_name(request.species)
    sid = store.set_individual_species(cat, request.individual_id, name, user=curator_name(request.user))
    return SpeciesSet(species_id=sid, name=name)


def set_photo_species(cat: Catalogue, request: PhotoSpeciesRequest) -> int:
    """Set the species of photos not assigned to an individual; returns the species id."""
    with attributed(request.user):
        return store.set_image_species(cat, list(request.image_ids), request.species)


@dataclass(frozen=True)
class SpeciesRenamed:
    species_id: int
    name: str


def rename_species(cat: Catalogue, request: RenameSpeciesRequest) -> SpeciesRenamed:
    with attributed(request.user):
        sp = store.rename_species(cat, request.species, request.new_name)
    return SpeciesRenamed(species_id=sp.id, name=sp.name)


def set_new_individual_threshold(cat: Catalogue, request: SpeciesThresholdRequest) -> float:
    """Below this calibrated probability match review suggests a new individual for the species' photos;
    returns the threshold stored."""
    with cat.unit_of_work() as s:
        sid = store.find_species(s, request.species).id
    with attributed(request.user):
        return calibration.set_new_individual_threshold(cat, request.threshold, sid)
