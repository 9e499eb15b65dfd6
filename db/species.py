"""Species and each species' active model.

Every individual and photo belongs to one species (a new catalogue starts with ``default``, id 1). Match
review offers candidates of the query's own species only; benchmarks and training sets are per species; each
species has at most one active model (``species.active_model_id``; None means the offline default backbone).
Promoting a model makes it the species' active model, marks it ``active`` (the one it replaces goes back to
``candidate`` unless another species still uses it) and queues a background re-embedding of that species'
photos, so match review never computes features while a curator waits. Renaming a species (its scientific name,
``name``, which exports write, and its English common name) and merging one into another (every row of it moves, in
one transaction) are undoable identity events (``db.catalogue.undo_event``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from core.identify.backbones import DEFAULT_BACKBONE as DEFAULT_MODEL  # the offline default, defined once
from db.catalogue import CatalogueError, NotFoundError, _record, image_field
from db.embeddings import get_backbone
from db.models import (
    DEFAULT_SPECIES_ID,
    Benchmark,
    EventKind,
    IdentityEvent,
    Image,
    Individual,
    Model,
    ModelStatus,
    Species,
)
from db.session import Catalogue

MAX_NAME = 120
MAX_COMMON_NAME = 200


def clean_species_name(name: str | None) -> str:
    text = " ".join((name or "").split())
    if not text:
        raise CatalogueError("a species needs a name")
    if len(text) > MAX_NAME or any(ord(c) < 32 for c in text):
        raise CatalogueError(f"species names are up to {MAX_NAME} printable characters")
    return text


def clean_common_name(name: str | None) -> str | None:
    """A common name as stored (spaces collapsed); None when empty: the species has none."""
    text = " ".join((name or "").split())
    if not text:
        return None
    if len(text) > MAX_COMMON_NAME or any(ord(c) < 32 for c in text):
        raise CatalogueError(f"common names are up to {MAX_COMMON_NAME} printable characters")
    return text


def find_species(session: Session, name_or_id: str | int) -> Species:
    """A species by id or (case-insensitive) name; a clear error listing the species otherwise."""
    sp = None
    if isinstance(name_or_id, int) or str(name_or_id).isdigit():
        sp = session.get(Species, int(name_or_id))
    if sp is None:
        sp = session.scalar(select(Species).where(func.lower(Species.name) == str(name_or_id).strip().lower()))
    if sp is None:
        known = ", ".join(session.scalars(select(Species.name).order_by(Species.id)))
        raise NotFoundError(f"no species {name_or_id!r}; known: {known}")
    return sp


def get_or_create_species(session: Session, name: str, *, common_name: str | None = None) -> Species:
    """The species called ``name`` (created if new). ``common_name`` (e.g. from an imported package) is given to a
    new species, or to one that has none yet; a common name a curator chose is never replaced."""
    name = clean_species_name(name)
    common_name = clean_common_name(common_name)
    sp = session.scalar(select(Species).where(func.lower(Species.name) == name.lower()))
    if sp is None:
        sp = Species(name=name, common_name=common_name)
        session.add(sp)
        session.flush()
    elif common_name is not None and sp.common_name is None:
        sp.common_name = common_name
    return sp


def list_species(cat: Catalogue) -> list[dict[str, Any]]:
    """Every species with its counts and active model."""
    with cat.unit_of_work() as s:
        out = []
        for sp in s.scalars(select(Species).order_by(Species.id)):
            n_ind = s.scalar(select(func.count()).select_from(Individual).where(
                Individual.species_id == sp.id, Individual.active.is_(True)))
            n_img = s.scalar(select(func.count()).select_from(Image).where(Image.species_id == sp.id))
            n_photos = s.scalar(select(func.count(func.distinct(Image.photo_id))).where(Image.species_id == sp.id))
            model = s.get(Model, sp.active_model_id) if sp.active_model_id else None
            # "images" counts animals (annotations); "photos" the photos they are in
            out.append({"id": sp.id, "name": sp.name, "common_name": sp.common_name, "individuals": n_ind,
                        "images": n_img, "photos": n_photos,
                        "active_model": model.name if model else DEFAULT_MODEL,
                        "new_individual_threshold": sp.new_individual_threshold})
        return out


def count_photos(cat: Catalogue) -> int:
    """The photos holding at least one animal, each counted once (a photo may hold animals of two species)."""
    with cat.unit_of_work() as s:
        return int(s.scalar(select(func.count(func.distinct(Image.photo_id)))) or 0)


@dataclass(frozen=True)
class SpeciesRenamed:
    species_id: int
    old: str
    new: str  # the scientific name now (the old one when only the common name changed)
    old_common_name: str | None
    common_name: str | None  # the common name now
    event_id: int  # the undoable change


def rename_species(cat: Catalogue, name_or_id: str | int, new_name: str | None, *, common_name: str | None = None,
                   user: str) -> SpeciesRenamed:
    """Give a species a new scientific name (the name exports write) and/or common name, in one undoable change
    recorded under ``user`` (its payload holds both old names). ``new_name`` None keeps the scientific name;
    ``common_name`` None keeps the common name, an empty one clears it. Refused when nothing would change."""
    with cat.unit_of_work() as s:
        sp = find_species(s, name_or_id)
        name = sp.name if new_name is None else clean_species_name(new_name)
        common = sp.common_name if common_name is None else clean_common_name(common_name)
        if name == sp.name and common == sp.common_name:
            if new_name is not None:
                raise CatalogueError(f"species {sp.name!r} already has that name")
            said = f"the common name {common!r}" if common else "no common name"
            raise CatalogueError(f"species {sp.name!r} already has {said}; give a new name or another common name")
        clash = s.scalar(select(Species).where(func.lower(Species.name) == name.lower(), Species.id != sp.id))
        if clash is not None:
            raise CatalogueError(f"a species named {clash.name!r} exists; merge into it instead of renaming")
        old, old_common = sp.name, sp.common_name
        sp.name, sp.common_name = name, common
        ev = _record(s, EventKind.species_rename, user=user,
                     payload={"species_id": sp.id, "old": old, "new": name, "old_common_name": old_common,
                              "new_common_name": common})
        s.commit()
        return SpeciesRenamed(species_id=sp.id, old=old, new=name, old_common_name=old_common, common_name=common,
                              event_id=ev.id)


@dataclass(frozen=True)
class SpeciesMerged:
    """What :func:`merge_species` moved, and the background work it needs (``follow_up``, as for a promotion)."""

    source: str
    target: str
    individuals: int
    photos: int  # the photos the moved animals are in
    animals: int  # the animals (annotations) moved
    benchmarks: int
    models: int
    source_kept: bool  # the catalogue's first species stays (emptied): photos coming in without a species land there
    adopted_model: str | None  # the source's active model, now the target's (the target had none chosen)
    demoted_model: str | None  # the source's active model, back to candidate (the target keeps its own)
    event_id: int
    follow_up: list[dict[str, Any]] = field(default_factory=list)


def _name_key(name: str) -> str:
    return " ".join(name.split()).casefold()


def merge_species(cat: Catalogue, source: str | int, target: str | int, *, user: str) -> SpeciesMerged:
    """Move every individual, photo (annotation), benchmark and trained model of ``source`` to ``target`` in one
    transaction, then remove ``source`` (the first species, id 1, is kept empty: imports without a species use it).

    The target keeps its active model; if it had none chosen, it takes the source's, and ``follow_up`` asks for
    that model's features of the target's photos. Refused, changing nothing, when an individual of one species
    has the name of one of the other's (ignoring case and spaces): they would be two same-named animals of one
    species. Undoable (``db.catalogue.undo_event``): the payload lists what moved."""
    with cat.unit_of_work() as s:
        src, dst = find_species(s, source), find_species(s, target)
        if src.id == dst.id:
            raise CatalogueError(f"choose two different species (both are {src.name!r})")
        names = {}
        for ind_name, species_id in s.execute(select(Individual.name, Individual.species_id).where(
                Individual.species_id.in_([src.id, dst.id]), Individual.active.is_(True))):
            names.setdefault(_name_key(ind_name), {})[species_id] = ind_name
        clashes = sorted((v[src.id], v[dst.id]) for v in names.values() if len(v) == 2)
        if clashes:
            said = "; ".join(f"{a!r} ({src.name}) and {b!r} ({dst.name})" for a, b in clashes[:10])
            more = f" and {len(clashes) - 10} more" if len(clashes) > 10 else ""
            raise CatalogueError(f"cannot merge {src.name!r} into {dst.name!r}: individuals of the same name would "
                                 f"be in one species: {said}{more}. Rename one of each pair (or merge the two "
                                 "individuals after moving one to the other species) first.")
        individuals = list(s.scalars(select(Individual).where(Individual.species_id == src.id).order_by(Individual.id)))
        image_ids = sorted(s.scalars(select(Image.id).where(Image.species_id == src.id)))
        n_photos = s.scalar(select(func.count(func.distinct(Image.photo_id))).where(Image.species_id == src.id))
        benchmarks = list(s.scalars(select(Benchmark).where(Benchmark.species_id == src.id)))
        models = list(s.scalars(select(Model).where(Model.species_id == src.id)))
        for row in (*individuals, *benchmarks, *models):
            row.species_id = dst.id
        s.execute(update(Image).where(Image.species_id == src.id).values(species_id=dst.id))
        target_model_before = dst.active_model_id
        model_status: dict[str, str] = {}
        adopted = demoted = None
        source_model = s.get(Model, src.active_model_id) if src.active_model_id else None
        keep_source = src.id == DEFAULT_SPECIES_ID
        if source_model is not None and dst.active_model_id is None:
            dst.active_model_id, adopted = source_model.id, source_model
        elif source_model is not None and source_model.id != dst.active_model_id and not keep_source:
            others = s.scalar(select(func.count()).select_from(Species).where(
                Species.id != src.id, Species.active_model_id == source_model.id))
            if not others and source_model.status == ModelStatus.active:
                model_status[str(source_model.id)] = source_model.status.value
                source_model.status, demoted = ModelStatus.candidate, source_model
        payload = {"source": {"id": src.id, "name": src.name, "common_name": src.common_name,
                              "active_model_id": src.active_model_id,
                              "new_individual_threshold": src.new_individual_threshold,
                              "created_at": src.created_at.isoformat()},
                   "source_deleted": not keep_source, "target": dst.id, "target_name": dst.name,
                   "target_active_model_id": target_model_before, "target_active_model_after": dst.active_model_id,
                   "individual_ids": [i.id for i in individuals], "image_ids": image_ids,
                   "benchmark_ids": [b.id for b in benchmarks], "model_ids": [m.id for m in models],
                   "model_status": model_status}
        if not keep_source:
            s.flush()  # the rows that named it point at the target first
            s.delete(src)
        ev = _record(s, EventKind.species_merge, user=user, payload=payload)
        s.commit()
        follow_up = []
        if adopted is not None:
            follow_up = _promotion_follow_up(adopted, species_id=dst.id, user=user,
                                             reason=f"merge of {payload['source']['name']} into {dst.name}")
        return SpeciesMerged(source=payload["source"]["name"], target=dst.name, individuals=len(individuals),
                             photos=n_photos, animals=len(image_ids), benchmarks=len(benchmarks), models=len(models),
                             source_kept=keep_source, adopted_model=adopted.name if adopted else None,
                             demoted_model=demoted.name if demoted else None, event_id=ev.id, follow_up=follow_up)


SPECIES_EVENTS = (EventKind.species_rename, EventKind.species_merge)


def species_changes(cat: Catalogue, *, limit: int = 20) -> list[IdentityEvent]:
    """The newest renames and merges of species, newest first (undone ones included)."""
    with cat.unit_of_work() as s:
        return list(s.scalars(select(IdentityEvent).where(IdentityEvent.kind.in_(SPECIES_EVENTS))
                              .order_by(IdentityEvent.id.desc()).limit(limit)))


def set_individual_species(cat: Catalogue, individual_id: int, species: str | int, *, user: str) -> int:
    """Move an individual and all its photos to ``species`` (created if new); returns the species id."""
    with cat.unit_of_work() as s:
        ind = s.get(Individual, int(individual_id))
        if ind is None:
            raise NotFoundError(f"no individual with id {individual_id}")
        known = set(s.scalars(select(Species.id)))
        sp = get_or_create_species(s, str(species)) if not str(species).isdigit() else find_species(s, species)
        old = ind.species_id
        ind.species_id = sp.id
        s.execute(update(Image).where(Image.individual_id == ind.id).values(species_id=sp.id))
        old_name = s.scalar(select(Species.name).where(Species.id == old))
        # "created": undoing the move removes the species it made, if nothing else came to it since
        _record(s, EventKind.rename, user=user, individual_id=ind.id,
                payload={"species": {"old": old, "new": sp.id, "old_name": old_name, "new_name": sp.name,
                                     "created": sp.id not in known},
                         "old": ind.name, "new": ind.name})
        s.commit()
        return sp.id


def set_image_species(cat: Catalogue, image_ids: Sequence[int], species: str | int) -> int:
    """Set the species of unassigned photos (an assigned photo follows its individual)."""
    with cat.unit_of_work() as s:
        sp = get_or_create_species(s, str(species)) if not str(species).isdigit() else find_species(s, species)
        rows = list(s.scalars(select(Image).where(Image.id.in_(list(image_ids)))))
        missing = set(image_ids) - {r.id for r in rows}
        if missing:
            raise NotFoundError(f"no image with id {sorted(missing)[0]}")
        assigned = [r.id for r in rows if r.individual_id is not None]
        if assigned:
            raise CatalogueError(f"image {assigned[0]} belongs to an individual: set the individual's species instead")
        for r in rows:
            r.species_id = sp.id
        s.commit()
        return sp.id


def species_of_image(cat: Catalogue, image_id: int) -> int:

    with cat.unit_of_work() as s:
        return int(image_field(s, image_id, Image.species_id))


def active_model_name(cat: Catalogue, species: str | int | None = None) -> str:
    """The name of the species' active model (default species when None; the offline default if unset)."""
    with cat.unit_of_work() as s:
        sp = find_species(s, species if species is not None else DEFAULT_SPECIES_ID)
        if sp.active_model_id is None:
            return DEFAULT_MODEL
        name = s.scalar(select(Model.name).where(Model.id == sp.active_model_id))
    return name or DEFAULT_MODEL


def promote_model(cat: Catalogue, name: str, *, species: str | int | None = None,
                  user: str = "curator") -> dict[str, Any]:
    """Make ``name`` the active model of ``species`` (its own species for a trained model, else the default).
    Returns {model, species, species_id, previous, follow_up}: ``follow_up`` lists the jobs the promotion needs
    (re-embedding the species' photos; a fused pipeline's keypoints) as {kind, params}, for the caller to queue
    (``jobs.actions.promote.promote``): the store does not reach up into the job queue."""
    get_backbone(cat, name)  # loads (and registers) it: a model whose weights are missing cannot be promoted
    with cat.unit_of_work() as s:
        model = s.scalar(select(Model).where(Model.name == name))
        if model is None:
            raise NotFoundError(f"no model named {name!r}")
        if model.status == ModelStatus.archived:
            raise CatalogueError(f"model {name!r} is archived; restore it before promoting it")
        sp = find_species(s, species if species is not None else (model.species_id or DEFAULT_SPECIES_ID))
        if model.species_id is not None and model.species_id != sp.id:
            raise CatalogueError(f"model {name!r} was trained on another species; it cannot match {sp.name}")
        previous = s.get(Model, sp.active_model_id) if sp.active_model_id else \
            s.scalar(select(Model).where(Model.name == DEFAULT_MODEL))  # no choice made yet: the offline default
        sp.active_model_id = model.id
        model.status = ModelStatus.active
        if previous is not None and previous.id != model.id:
            others = select(func.count()).select_from(Species).where(Species.id != sp.id)
            if previous.name == DEFAULT_MODEL:  # species without a choice still use the default
                others = others.where((Species.active_model_id == previous.id) | Species.active_model_id.is_(None))
            else:
                others = others.where(Species.active_model_id == previous.id)
            if not s.scalar(others):
                previous.status = ModelStatus.candidate
        s.commit()
        result = {"model": name, "species": sp.name, "species_id": sp.id,
                  "previous": previous.name if previous else DEFAULT_MODEL}
    result["follow_up"] = _promotion_follow_up(model, species_id=result["species_id"], user=user,
                                               reason=f"promotion of {name} for {result['species']}")
    return result


def _promotion_follow_up(model: Model, *, species_id: int, user: str, reason: str) -> list[dict[str, Any]]:
    """The jobs a species' new active model needs ({kind, params}): its features of the species' photos, and a
    fused pipeline's keypoints."""
    follow_up = [{"kind": "embed", "params": {"backbone": model.name, "species": species_id, "user": user,
                                              "reason": reason}}]
    matcher = ((model.config or {}).get("pipeline") or {}).get("matcher") if model.head == "pipeline" else None
    if matcher:  # a fused pipeline also needs every photo's keypoints before review
        follow_up.append({"kind": "keypoints", "params": {"matcher": matcher, "species": species_id,
                                                          "image_ids": None, "user": user}})
    return follow_up


def archive_model(cat: Catalogue, name: str) -> None:
    """Archive a candidate model (an active one must be replaced first)."""
    with cat.unit_of_work() as s:
        model = s.scalar(select(Model).where(Model.name == name))
        if model is None:
            raise NotFoundError(f"no model named {name!r}")
        if s.scalar(select(func.count()).select_from(Species).where(Species.active_model_id == model.id)):
            raise CatalogueError(f"model {name!r} is active; promote another model first")
        model.status = ModelStatus.archived
        s.commit()


def model_status(cat: Catalogue) -> dict[str, dict[str, Any]]:
    """name -> {status, active_for: [species names]}."""
    with cat.unit_of_work() as s:
        active: dict[int, list[str]] = {}
        for sp in s.scalars(select(Species)):
            if sp.active_model_id:
                active.setdefault(sp.active_model_id, []).append(sp.name)
        return {m.name: {"status": m.status.value, "active_for": active.get(m.id, [])}
                for m in s.scalars(select(Model))}
