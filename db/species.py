"""Species and each species' active model.

Every individual and photo belongs to one species (a new catalogue starts with ``default``, id 1). Match
review offers candidates of the query's own species only; benchmarks and training sets are per species; each
species has at most one active model (``species.active_model_id``; None means the offline default backbone).
Promoting a model makes it the species' active model, marks it ``active`` (the one it replaces goes back to
``candidate`` unless another species still uses it) and queues a background re-embedding of that species'
photos, so match review never computes features while a curator waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from core.backbones import DEFAULT_BACKBONE as DEFAULT_MODEL  # the offline default, defined once
from db.catalogue import CatalogueError, NotFoundError, _record, image_field
from db.embeddings import get_backbone
from db.models import DEFAULT_SPECIES_ID, EventKind, Image, Individual, Model, ModelStatus, Species
from db.session import Catalogue

MAX_NAME = 120


def clean_species_name(name: str | None) -> str:
    text = " ".join((name or "").split())
    if not text:
        raise CatalogueError("a species needs a name")
    if len(text) > MAX_NAME or any(ord(c) < 32 for c in text):
        raise CatalogueError(f"species names are up to {MAX_NAME} printable characters")
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


def get_or_create_species(session: Session, name: str) -> Species:
    name = clean_species_name(name)
    sp = session.scalar(select(Species).where(func.lower(Species.name) == name.lower()))
    if sp is None:
        sp = Species(name=name)
        session.add(sp)
        session.flush()
    return sp


def list_species(cat: Catalogue) -> list[dict[str, Any]]:
    """Every species with its counts and active model."""
    with cat.unit_of_work() as s:
        out = []
        for sp in s.scalars(select(Species).order_by(Species.id)):
            n_ind = s.scalar(select(func.count()).select_from(Individual).where(
                Individual.species_id == sp.id, Individual.active.is_(True)))
            n_img = s.scalar(select(func.count()).select_from(Image).where(Image.species_id == sp.id))
            model = s.get(Model, sp.active_model_id) if sp.active_model_id else None
            out.append({"id": sp.id, "name": sp.name, "individuals": n_ind, "images": n_img,
                        "active_model": model.name if model else DEFAULT_MODEL,
                        "new_individual_threshold": sp.new_individual_threshold})
        return out


def rename_species(cat: Catalogue, name_or_id: str | int, new_name: str) -> Species:
    with cat.unit_of_work() as s:
        sp = find_species(s, name_or_id)
        new_name = clean_species_name(new_name)
        clash = s.scalar(select(Species).where(func.lower(Species.name) == new_name.lower(), Species.id != sp.id))
        if clash is not None:
            raise CatalogueError(f"a species named {clash.name!r} exists")
        sp.name = new_name
        s.commit()
        return sp


def set_individual_species(cat: Catalogue, individual_id: int, species: str | int, *, user: str) -> int:
    """Move an individual and all its photos to ``species`` (created if new); returns the species id."""
    with cat.unit_of_work() as s:
        ind = s.get(Individual, int(individual_id))
        if ind is None:
            raise NotFoundError(f"no individual with id {individual_id}")
        sp = get_or_create_species(s, str(species)) if not str(species).isdigit() else find_species(s, species)
        old = ind.species_id
        ind.species_id = sp.id
        s.execute(update(Image).where(Image.individual_id == ind.id).values(species_id=sp.id))
        _record(s, EventKind.rename, user=user, individual_id=ind.id,
                payload={"species": {"old": old, "new": sp.id}, "old": ind.name, "new": ind.name})
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
        matcher = ((model.config or {}).get("pipeline") or {}).get("matcher") if model.head == "pipeline" else None
        s.commit()
        result = {"model": name, "species": sp.name, "species_id": sp.id,
                  "previous": previous.name if previous else DEFAULT_MODEL}
    follow_up = [{"kind": "embed", "params": {"backbone": name, "species": result["species_id"], "user": user,
                                              "reason": f"promotion of {name} for {result['species']}"}}]
    if matcher:  # a fused pipeline also needs every photo's keypoints before review
        follow_up.append({"kind": "keypoints", "params": {"matcher": matcher, "species": result["species_id"],
                                                          "image_ids": None, "user": user}})
    result["follow_up"] = follow_up
    return result


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
