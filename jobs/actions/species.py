"""The catalogue's species: listing them, renaming one (its scientific and common name) and merging one into another
(the Species tab, ``rosette species rename|common-name|merge``; all undoable), setting the species of an individual
(the Catalogue tab's "Set species", ``rosette species set --individual``) or of unassigned photos, and the threshold
below which match review suggests a new individual."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from db.identify import calibration
from db import species as store
from db.models import Individual, Species
from db.session import Catalogue
from db.catalogue import CatalogueError
from jobs.actions.catalogue import Undone, describe_event, event_words, undo
from jobs.actions.common import attributed, curator_name
from jobs.queue import submit
from jobs.requests.catalogue import (
    IndividualSpeciesRequest,
    MergeSpeciesRequest,
    PhotoSpeciesRequest,
    RenameSpeciesRequest,
    SpeciesThresholdRequest,
    UndoRequest,
)


def list_species(cat: Catalogue) -> list[dict[str, Any]]:
    """Every species with its counts (individuals, images) and active model."""
    return store.list_species(cat)


def totals_text(cat: Catalogue, rows: list[dict[str, Any]]) -> str:
    """The species list's totals in one line, photos (the files) and animals (the animals in them, which the
    per-species counts are of) each counted as what they are: "2 species, 5 individuals, 21 photos and 24 animals
    in all"."""
    photos, animals = store.count_photos(cat), sum(r["images"] for r in rows)
    return (f"{len(rows)} species, {sum(r['individuals'] for r in rows)} individuals, "
            f"{photos} photo{'s' if photos != 1 else ''} and {animals} animal{'s' if animals != 1 else ''} in all.")


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
    old: str
    event_id: int
    common_name: str | None = None
    old_common_name: str | None = None

    @property
    def message(self) -> str:
        said = []
        if self.name != self.old:
            said.append(f"Species {self.old} is now {self.name}")
        if self.common_name != self.old_common_name:
            whose = "its common name" if said else f"The common name of {self.name}"
            said.append(f"{whose} is now {self.common_name}" if self.common_name else
                        f"{whose} ({self.old_common_name}) is cleared")
        exports = ["Exports write the new name." if self.name != self.old else "",
                   "Camtrap DP exports give the common name as the species' English name."
                   if self.common_name and self.common_name != self.old_common_name else ""]
        return " ".join([f"{'; '.join(said)} (change #{self.event_id}; it can be undone).", *filter(None, exports)])


def rename_species(cat: Catalogue, request: RenameSpeciesRequest) -> SpeciesRenamed:
    """Rename a species (its scientific name, its common name, or both): audited under the acting user, undoable
    like an individual's rename."""
    user = curator_name(request.user)
    with attributed(user):
        done = store.rename_species(cat, request.species, request.new_name, common_name=request.common_name,
                                    user=user)
    return SpeciesRenamed(species_id=done.species_id, name=done.new, old=done.old, event_id=done.event_id,
                          common_name=done.common_name, old_common_name=done.old_common_name)


@dataclass(frozen=True)
class SpeciesMergeDone:
    merged: store.SpeciesMerged
    job_ids: dict[str, int]  # the background work the merge queued (the adopted model's features), by kind

    @property
    def message(self) -> str:
        m = self.merged
        text = (f"Merged species {m.source} into {m.target}: {m.individuals} "
                f"individual{'s' if m.individuals != 1 else ''}, {m.photos} photo{'s' if m.photos != 1 else ''} "
                f"({m.animals} animal{'s' if m.animals != 1 else ''}), {m.benchmarks} benchmark"
                f"{'s' if m.benchmarks != 1 else ''} and {m.models} trained model{'s' if m.models != 1 else ''} moved "
                f"(change #{m.event_id}; it can be undone).")
        if m.source_kept:
            text += f" {m.source} stays, empty: photos imported without a species go there."
        if m.adopted_model:
            text += (f" {m.target} had no active model of its own and now uses {m.adopted_model}; its features are "
                     f"being computed for every photo (job #{self.job_ids.get('embed')}).")
        if m.demoted_model:
            text += (f" {m.target} keeps its own active model; {m.demoted_model} (the active model of {m.source}) is a "
                     "candidate again (promote it in the Models tab to use it).")
        return text


def merge_species(cat: Catalogue, request: MergeSpeciesRequest) -> SpeciesMergeDone:
    """Merge one species into another in one transaction (``db.species.merge_species``) and queue what the
    target's adopted active model needs; audited under the acting user, undoable."""
    user = curator_name(request.user)
    with attributed(user):
        merged = store.merge_species(cat, request.source, request.target, user=user)
        job_ids = {item["kind"]: submit(cat, item["kind"], item["params"]) for item in merged.follow_up}
    return SpeciesMergeDone(merged=merged, job_ids=job_ids)


SPECIES_HISTORY_HEADERS = ["When (UTC)", "Who", "What"]


def species_history_rows(cat: Catalogue, *, limit: int = 20) -> list[list[str]]:
    """The newest renames and merges of species as rows under :data:`SPECIES_HISTORY_HEADERS` (undone marked)."""
    events = store.species_changes(cat, limit=limit)
    with cat.unit_of_work() as s:
        words = event_words(s, events)
    return [[ev.created_at.strftime("%Y-%m-%d %H:%M:%S"), ev.user,
             f"#{ev.id} {describe_event(ev, words)}" + (" (undone)" if ev.undone_at else "")]
            for ev in events]


def last_species_change_id(cat: Catalogue) -> int | None:
    """The newest rename or merge of species not undone yet (what the Species tab's Undo undoes)."""
    return next((ev.id for ev in store.species_changes(cat, limit=50) if ev.undone_at is None), None)


def undo_species_change(cat: Catalogue, request: UndoRequest) -> Undone:
    """Undo the species change the Species tab showed as the newest (``request.event_id``)."""
    if request.event_id is None:
        raise CatalogueError("There is no species change to undo.")
    return undo(cat, request)


def set_new_individual_threshold(cat: Catalogue, request: SpeciesThresholdRequest) -> float:
    """Below this calibrated probability match review suggests a new individual for the species' photos;
    returns the threshold stored."""
    with cat.unit_of_work() as s:
        sid = store.find_species(s, request.species).id
    with attributed(request.user):
        return calibration.set_new_individual_threshold(cat, request.threshold, sid)
