"""Catalogue operations as units of work: individuals, assignments, merge, split, undo.

Each function changes the session and records an :class:`IdentityEvent` with
the user and time and whatever undo needs to restore the exact previous state;
it flushes but does not commit: the caller owns the transaction
(``with cat.unit_of_work() as s: merge_individuals(s, ...); s.commit()``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from db.models import (
    DEFAULT_SPECIES_ID,
    Benchmark,
    DecisionKind,
    EventKind,
    Flank,
    IdentityEvent,
    Image,
    Individual,
    MatchDecision,
    Model,
    ModelStatus,
    Photo,
    Sighting,
    Species,
    User,
    utcnow,
)


class CatalogueError(ValueError):
    """A catalogue operation that cannot be carried out; the message says why."""


class NotFoundError(CatalogueError):
    pass


class ConflictError(CatalogueError):
    """The catalogue changed since the state an operation (e.g. an undo) expects."""


def get_or_create_user(session: Session, name: str) -> User:
    name = (name or "").strip() or "curator"
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        user = User(name=name)
        session.add(user)
        session.flush()
    return user


def _record(session: Session, kind: EventKind, *, user: str, individual_id: int | None = None,
            other_individual_id: int | None = None, payload: dict[str, Any] | None = None) -> IdentityEvent:
    get_or_create_user(session, user)
    ev = IdentityEvent(kind=kind, individual_id=individual_id, other_individual_id=other_individual_id,
                       payload=payload or {}, user=user, created_at=utcnow())
    session.add(ev)
    session.flush()
    return ev


def current_individual(ind: Individual | None, individuals: Mapping[int, Individual]) -> Individual | None:
    """The individual ``ind`` stands for now: a merged-away one leads to the one it was merged into
    (``individuals``: every individual by id, loaded once by the caller)."""
    hops = 0
    while ind is not None and not ind.active and ind.merged_into_id is not None and hops < 100:
        ind, hops = individuals.get(ind.merged_into_id), hops + 1
    return ind


def get_individual(session: Session, individual_id: int) -> Individual:
    ind = session.get(Individual, individual_id)
    if ind is None:
        raise NotFoundError(f"no individual with id {individual_id}")
    return ind


def get_image(session: Session, image_id: int) -> Image:
    img = session.get(Image, image_id)
    if img is None:
        raise NotFoundError(f"no image with id {image_id}")
    return img


def image_field(session: Session, image_id: int, column: Any) -> Any:
    """One column of one image (e.g. ``Image.species_id``); NotFoundError when there is no such image."""
    value = session.scalar(select(column).where(Image.id == int(image_id)))
    if value is None:
        raise NotFoundError(f"no image with id {image_id}")
    return value


def find_individual_by_name(session: Session, name: str) -> Individual | None:
    return session.scalar(select(Individual).where(Individual.name == name))


def _check_name_free(session: Session, name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise CatalogueError("an individual needs a non-empty name")
    if len(name) > 200:
        raise CatalogueError("individual names are at most 200 characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise CatalogueError("individual names cannot hold control characters (tabs, line breaks, terminal codes, NUL)")
    if find_individual_by_name(session, name) is not None:
        raise CatalogueError(f"an individual named {name!r} already exists")
    return name


def next_individual_name(session: Session, *, prefix: str = "individual") -> str:
    """A free name like ``individual-0007``."""
    n = (session.scalar(select(func.count(Individual.id))) or 0) + 1
    while find_individual_by_name(session, f"{prefix}-{n:04d}") is not None:
        n += 1
    return f"{prefix}-{n:04d}"


def create_individual(session: Session, name: str | None = None, *, user: str, notes: str | None = None,
                      species_id: int = DEFAULT_SPECIES_ID) -> Individual:
    name = _check_name_free(session, name) if name else next_individual_name(session)
    ind = Individual(name=name, notes=notes, species_id=species_id)
    session.add(ind)
    session.flush()
    _record(session, EventKind.create, user=user, individual_id=ind.id, payload={"name": name})
    return ind


def get_or_create_individual(session: Session, name: str, *, user: str,
                             species_id: int = DEFAULT_SPECIES_ID) -> Individual:
    ind = find_individual_by_name(session, name)
    if ind is not None:
        return ind
    return create_individual(session, name, user=user, species_id=species_id)


def rename_individual(session: Session, individual_id: int, new_name: str, *, user: str) -> IdentityEvent:
    ind = get_individual(session, individual_id)
    old = ind.name
    if (new_name or "").strip() == old:
        raise CatalogueError(f"{old!r} already has that name")
    ind.name = _check_name_free(session, new_name)
    return _record(session, EventKind.rename, user=user, individual_id=ind.id, payload={"old": old, "new": ind.name})


def assign_image(session: Session, image_id: int, individual_id: int | None, *, user: str) -> IdentityEvent:
    """Put an image under an individual (``None`` takes it out of any individual)."""
    img = get_image(session, image_id)
    if individual_id is not None:
        target = get_individual(session, individual_id)
        if not target.active:
            raise CatalogueError(f"{target.name!r} was merged into another individual; assign to that one")
        if target.species_id != img.species_id:
            raise CatalogueError(f"{target.name!r} is of another species than image {image_id}; "
                                 "set the photo's species first")
    previous = img.individual_id
    if previous == individual_id:
        raise CatalogueError("the image is already assigned there")
    img.individual_id = individual_id
    kind = EventKind.unassign if individual_id is None else EventKind.assign
    return _record(session, kind, user=user, individual_id=individual_id, other_individual_id=previous,
                   payload={"image_id": image_id, "previous": previous, "new": individual_id})


def merge_individuals(session: Session, source_id: int, target_id: int, *, user: str) -> IdentityEvent:
    """Move every image of ``source`` to ``target`` and retire ``source``."""
    if source_id == target_id:
        raise CatalogueError("cannot merge an individual into itself")
    source = get_individual(session, source_id)
    target = get_individual(session, target_id)
    if not source.active or not target.active:
        raise CatalogueError("both individuals must be active (not already merged)")
    if source.species_id != target.species_id:
        raise CatalogueError(f"{source.name!r} and {target.name!r} are of different species and cannot be merged")
    moved = sorted(session.scalars(select(Image.id).where(Image.individual_id == source_id)))
    for img in session.scalars(select(Image).where(Image.id.in_(moved))):
        img.individual_id = target_id
    source.active = False
    source.merged_into_id = target_id
    return _record(session, EventKind.merge, user=user, individual_id=target_id, other_individual_id=source_id,
                   payload={"source": source_id, "target": target_id, "image_ids": moved,
                            "source_name": source.name, "target_name": target.name})


def split_images(session: Session, image_ids: Sequence[int], *, user: str, new_name: str | None = None) -> tuple[Individual, IdentityEvent]:
    """Move ``image_ids`` out of their individuals into a new individual."""
    ids = sorted(set(int(i) for i in image_ids))
    if not ids:
        raise CatalogueError("choose at least one image to split out")
    images = [get_image(session, i) for i in ids]
    if len({img.species_id for img in images}) > 1:
        raise CatalogueError("these photos are of different species; split them separately")
    previous = {str(img.id): img.individual_id for img in images}
    new = create_individual(session, new_name, user=user, species_id=images[0].species_id)
    for img in images:
        img.individual_id = new.id
    ev = _record(session, EventKind.split, user=user, individual_id=new.id,
                 payload={"new_individual": new.id, "previous": previous})
    return new, ev


def undo_event(session: Session, event_id: int, *, user: str) -> IdentityEvent:
    """Reverse one event, restoring the exact previous assignment; refuses if later changes conflict.

    The event is claimed first (``UPDATE ... SET undone_at WHERE undone_at IS NULL``; as a transaction's first
    statement SQLite evaluates it on the latest committed row): of several curators undoing the same event at
    once exactly one does, the others are told. An event that applied a standing match decision (a "same" or
    "new individual" assignment) undoes that decision too, so a photo never stays unassigned under a
    decision that still stands."""
    claimed = session.execute(update(IdentityEvent).where(IdentityEvent.id == event_id,
                                                          IdentityEvent.undone_at.is_(None))
                              .values(undone_at=utcnow())).rowcount
    ev = session.get(IdentityEvent, event_id)
    if ev is None:
        raise NotFoundError(f"no identity event {event_id}")
    if claimed != 1:
        undoer = session.scalar(select(IdentityEvent.user).where(IdentityEvent.id == ev.undone_by_id)) \
            if ev.undone_by_id else None
        raise ConflictError(f"change {event_id} was already undone" + (f" by {undoer}" if undoer else ""))
    try:
        return _reverse(session, ev, user=user)
    except BaseException:  # refused (a later change conflicts): the claim is given back, nothing changed
        session.execute(update(IdentityEvent).where(IdentityEvent.id == event_id).values(undone_at=None))
        raise


def _reverse(session: Session, ev: IdentityEvent, *, user: str) -> IdentityEvent:
    """Undo the claimed event ``ev`` (every branch checks before it changes anything)."""
    if ev.kind == EventKind.undo:
        raise CatalogueError("an undo cannot itself be undone; redo the change instead")
    p = ev.payload
    said: dict[str, Any] = {}  # what the undo did beyond putting the event's rows back, for its history line
    if ev.kind == EventKind.create:
        ind = get_individual(session, ev.individual_id)
        if session.scalar(select(func.count(Image.id)).where(Image.individual_id == ind.id)):
            raise ConflictError(f"{ind.name!r} has images now; move them before undoing its creation")
        ind.active = False
    elif ev.kind == EventKind.rename and "species" in p:  # a change of species (db.species), photos included
        ind = get_individual(session, ev.individual_id)
        if ind.species_id != p["species"]["new"]:
            raise ConflictError(f"{ind.name!r} changed species again since; undo that first")
        ind.species_id = p["species"]["old"]
        for img in session.scalars(select(Image).where(Image.individual_id == ind.id)):
            img.species_id = p["species"]["old"]
        if p["species"].get("created"):
            removed = _remove_if_empty(session, p["species"]["new"])
            if removed:
                said["removed_species"] = removed
    elif ev.kind == EventKind.rename:
        ind = get_individual(session, ev.individual_id)
        if ind.name != p["new"]:
            raise ConflictError(f"{p['new']!r} was renamed again since; undo that first")
        ind.name = _check_name_free(session, p["old"])
    elif ev.kind in (EventKind.assign, EventKind.unassign):
        img = get_image(session, p["image_id"])
        if img.individual_id != p["new"]:
            raise ConflictError("the image was reassigned since; undo that first")
        img.individual_id = p["previous"]
    elif ev.kind == EventKind.merge:
        source = get_individual(session, p["source"])
        images = list(session.scalars(select(Image).where(Image.id.in_(p["image_ids"]))))
        if any(img.individual_id != p["target"] for img in images) or source.active:
            raise ConflictError("images of the merge were moved since; undo those changes first")
        for img in images:
            img.individual_id = p["source"]
        source.active = True
        source.merged_into_id = None
    elif ev.kind == EventKind.split:
        new_id = p["new_individual"]
        images = {str(img.id): img for img in session.scalars(select(Image).where(Image.id.in_([int(k) for k in p["previous"]])))}
        if any(img.individual_id != new_id for img in images.values()):
            raise ConflictError("images of the split were moved since; undo those changes first")
        for key, prev in p["previous"].items():
            images[key].individual_id = prev
        get_individual(session, new_id).active = False
        # the split's own create event is part of the split
        for create_ev in session.scalars(select(IdentityEvent).where(
                IdentityEvent.kind == EventKind.create, IdentityEvent.individual_id == new_id,
                IdentityEvent.undone_at.is_(None))):
            create_ev.undone_at = utcnow()
    elif ev.kind == EventKind.flank:
        _reverse_flank(session, p)
    elif ev.kind == EventKind.traits:
        ind = get_individual(session, ev.individual_id)
        if any(getattr(ind, column) != old_new[1] for column, old_new in p["changed"].items()):
            raise ConflictError(f"the sex or life stage of {ind.name!r} changed again since; undo that first")
        for column, (old, _new) in p["changed"].items():
            setattr(ind, column, old)
    elif ev.kind == EventKind.species_rename:  # its scientific name, its common name, or both
        sp = session.get(Species, p["species_id"])
        if sp is None:
            raise ConflictError(f"species {p['new']!r} was merged into another since; undo that first")
        renamed = p["old"] != p["new"]
        common_changed = p.get("old_common_name") != p.get("new_common_name")  # older events hold no common name
        if renamed:
            if sp.name != p["new"]:
                raise ConflictError(f"species {p['new']!r} was renamed again since; undo that first")
            _check_species_name_free(session, p["old"], other_than=sp.id)
        if common_changed and sp.common_name != p.get("new_common_name"):
            raise ConflictError(f"the common name of species {sp.name!r} was changed again since; undo that first")
        if renamed:
            sp.name = p["old"]
        if common_changed:
            sp.common_name = p["old_common_name"]
    elif ev.kind == EventKind.species_merge:
        _reverse_species_merge(session, p)
    else:  # pragma: no cover - enum is closed
        raise CatalogueError(f"cannot undo {ev.kind}")
    undo = _record(session, EventKind.undo, user=user, individual_id=ev.individual_id,
                   other_individual_id=ev.other_individual_id, payload={"undid": ev.id, "kind": ev.kind.value, **said})
    ev.undone_at = utcnow()
    ev.undone_by_id = undo.id
    _undo_decision_of(session, ev, user=user)
    session.flush()
    return undo


def _remove_if_empty(session: Session, species_id: int) -> str | None:
    """Remove a species a move made, now that the move is undone, when nothing is of it any more (no individual,
    photo, benchmark or model, no active model): a curator would otherwise find an empty species left by a change
    that no longer stands. The audit trail records the removal. Returns its name when removed."""
    sp = session.get(Species, species_id)
    if sp is None or sp.id == DEFAULT_SPECIES_ID or sp.active_model_id is not None:
        return None
    session.flush()  # the individual and its photos, moved back, no longer count as the species'
    for model in (Individual, Image, Benchmark, Model):
        if session.scalar(select(model.id).where(model.species_id == species_id).limit(1)) is not None:
            return None
    session.delete(sp)
    return sp.name


def _reverse_flank(session: Session, p: dict[str, Any]) -> None:
    """Put back each photo's flank and its source (``payload["previous"]``: image id -> [flank, source])."""
    images = {str(img.id): img for img in session.scalars(
        select(Image).where(Image.id.in_([int(k) for k in p["previous"]])))}
    changed = sorted(int(k) for k, img in images.items() if img.flank.value != p["flank"])
    if changed or len(images) != len(p["previous"]):
        raise ConflictError(f"the flank of photo #{changed[0] if changed else '?'} was changed again since; "
                            "undo that first")
    for key, (flank, source) in p["previous"].items():
        images[key].flank = Flank(flank)
        images[key].flank_source = source


def _check_species_name_free(session: Session, name: str, *, other_than: int | None = None) -> None:
    clash = session.scalar(select(Species).where(func.lower(Species.name) == name.lower(),
                                                 Species.id != (other_than or 0)))
    if clash is not None:
        raise ConflictError(f"a species is named {clash.name!r} now; rename it before undoing this")


def _chunks(ids: list[int], size: int = 5000) -> Iterable[list[int]]:
    """``ids`` in slices small enough for one statement's parameters on every database."""
    for start in range(0, len(ids), size):
        yield ids[start:start + size]


def _reverse_species_merge(session: Session, p: dict[str, Any]) -> None:
    """Bring back the merged-away species (as it was, same id) and move back what the merge moved
    (``db.species.merge_species`` writes the payload); refused when any of it changed species or individual
    since."""
    source, target_id = p["source"], p["target"]
    individual_ids, image_ids = set(p["individual_ids"]), set(p["image_ids"])
    # read the target's rows whole rather than naming every moved id in one query (a species may hold more photos
    # than a statement may have parameters)
    in_target = set(session.scalars(select(Individual.id).where(Individual.species_id == target_id)))
    target_images = dict(session.execute(select(Image.id, Image.individual_id).where(Image.species_id == target_id))
                         .all())
    moved_on = len(individual_ids - in_target) + len(image_ids - target_images.keys())
    if moved_on:
        raise ConflictError(f"{moved_on} individual(s) or photo(s) of the merge changed species or were removed "
                            "since; undo those changes first")
    # a moved photo now under one of the target's own individuals, or a target photo under a moved individual
    mixed = sum(1 for image_id, ind in target_images.items()
                if ind is not None and (image_id in image_ids) != (ind in individual_ids))
    if mixed:
        raise ConflictError(f"{mixed} photo(s) were moved between the two species' individuals since the merge; "
                            "undo those changes first")
    source_id = source["id"]
    if p["source_deleted"]:
        _check_species_name_free(session, source["name"])
        # under its own id, unless a species made since was given that id (SQLite may hand out a deleted row's id)
        revived = Species(name=source["name"], common_name=source.get("common_name"),
                          active_model_id=source["active_model_id"],
                          new_individual_threshold=source["new_individual_threshold"],
                          created_at=datetime.fromisoformat(source["created_at"]))
        if session.get(Species, source_id) is None:
            revived.id = source_id
        session.add(revived)
        session.flush()
        source_id = revived.id
    for chunk in _chunks(sorted(individual_ids)):
        for ind in session.scalars(select(Individual).where(Individual.id.in_(chunk))):
            ind.species_id = source_id
    for chunk in _chunks(sorted(image_ids)):
        session.execute(update(Image).where(Image.id.in_(chunk)).values(species_id=source_id))
    for bench in session.scalars(select(Benchmark).where(Benchmark.id.in_(p["benchmark_ids"]))):
        bench.species_id = source_id
    for model in session.scalars(select(Model).where(Model.id.in_(p["model_ids"]))):
        model.species_id = source_id
    target = session.get(Species, target_id)
    if target is not None and target.active_model_id == p["target_active_model_after"]:  # not promoted since
        target.active_model_id = p["target_active_model_id"]
    for model_id, status in p["model_status"].items():
        model = session.get(Model, int(model_id))
        if model is not None:
            model.status = ModelStatus(status)


def _undo_decision_of(session: Session, ev: IdentityEvent, *, user: str) -> None:
    """The standing match decision ``ev`` applied, if any, is undone with it (its photo's decision version
    moves on, and a "new individual" left empty is retired as undo_decision does)."""
    dec = session.scalar(select(MatchDecision).where(MatchDecision.identity_event_id == ev.id,
                                                     MatchDecision.undone_at.is_(None)))
    if dec is None:
        return
    dec.undone_at = utcnow()
    session.execute(update(Image).where(Image.id == dec.query_image_id)
                    .values(decision_version=Image.decision_version + 1))
    if dec.decision == DecisionKind.new_individual and dec.candidate_individual_id is not None:
        ind = session.get(Individual, dec.candidate_individual_id)
        empty = ind is not None and not session.scalar(select(Image.id).where(Image.individual_id == ind.id).limit(1))
        create_ev = session.scalar(select(IdentityEvent).where(
            IdentityEvent.kind == EventKind.create, IdentityEvent.individual_id == dec.candidate_individual_id,
            IdentityEvent.undone_at.is_(None))) if empty else None
        if create_ev is not None:
            undo_event(session, create_ev.id, user=user)


@dataclass(frozen=True)
class IdentityState:
    """How far the catalogue's who-is-who had come when a result was computed: its newest identity event, match
    decision and annotation (ids only grow), so a result shown later can say how many changes it predates."""

    event_id: int
    decision_id: int
    annotation_id: int


def identity_state(session: Session) -> IdentityState:
    return IdentityState(event_id=session.scalar(select(func.max(IdentityEvent.id))) or 0,
                         decision_id=session.scalar(select(func.max(MatchDecision.id))) or 0,
                         annotation_id=session.scalar(select(func.max(Image.id))) or 0)


def changes_since(session: Session, state: IdentityState) -> tuple[int, int]:
    """(changes to who is who, animals imported) since ``state``. A change is a decision, an assignment, a merge,
    a split or an undo: each identity event but the creation of an individual (a decision of "new individual"
    creates one and assigns the animal to it: one change), and each decision that moved nobody ("not the same")."""
    events = session.scalar(select(func.count(IdentityEvent.id)).where(
        IdentityEvent.id > state.event_id, IdentityEvent.kind != EventKind.create)) or 0
    decisions = session.scalar(select(func.count(MatchDecision.id)).where(
        MatchDecision.id > state.decision_id, MatchDecision.identity_event_id.is_(None))) or 0
    animals = session.scalar(select(func.count(Image.id)).where(Image.id > state.annotation_id)) or 0
    return int(events + decisions), int(animals)


def check_date(value: str | None, *, what: str) -> str | None:
    """A ``YYYY-MM-DD`` filter bound, or None when blank; anything else is refused clearly."""
    value = (value or "").strip()
    if not value:
        return None
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise CatalogueError(f"{what} must be a date like 2024-05-31, not {value!r}") from None


def last_undoable_event(session: Session) -> IdentityEvent | None:
    return session.scalar(
        select(IdentityEvent)
        .where(IdentityEvent.undone_at.is_(None), IdentityEvent.kind != EventKind.undo)
        .order_by(IdentityEvent.id.desc())
        .limit(1)
    )


def history(session: Session, *, individual_id: int | None = None, limit: int = 100) -> list[IdentityEvent]:
    q = select(IdentityEvent).order_by(IdentityEvent.id.desc()).limit(limit)
    if individual_id is not None:
        q = q.where((IdentityEvent.individual_id == individual_id) | (IdentityEvent.other_individual_id == individual_id))
    return list(session.scalars(q))


@dataclass
class IndividualSummary:
    id: int
    name: str
    n_images: int
    n_sightings: int
    cover_image_id: int | None
    cover_thumb: str | None


def list_individuals(session: Session, *, include_inactive: bool = False, search: str | None = None) -> list[IndividualSummary]:
    """Individuals with image and sighting counts and a cover thumbnail, by name."""
    q = (
        select(Individual.id, Individual.name, func.count(Image.id), func.count(func.distinct(Image.sighting_id)),
               func.min(Image.id))
        .outerjoin(Image, Image.individual_id == Individual.id)
        .group_by(Individual.id)
        .order_by(Individual.name)
    )
    if not include_inactive:
        q = q.where(Individual.active.is_(True))
    if search:
        q = q.where(Individual.name.ilike(f"%{search}%"))
    rows = session.execute(q).all()
    thumbs = dict(session.execute(select(Image.id, Image.thumb_path).where(Image.id.in_([r[4] for r in rows if r[4]]))).all())
    return [IndividualSummary(id=r[0], name=r[1], n_images=r[2], n_sightings=r[3], cover_image_id=r[4],
                              cover_thumb=thumbs.get(r[4])) for r in rows]


def images_of(session: Session, individual_id: int) -> list[Image]:
    return list(session.scalars(select(Image).where(Image.individual_id == individual_id).order_by(Image.id)))


def catalogue_stats(session: Session) -> dict[str, int]:
    """Counts shown by ``rosette stats``: individuals, images (photos), annotations (animals in them), sightings,
    masks, decisions."""
    return {
        "individuals": session.scalar(select(func.count(Individual.id)).where(Individual.active.is_(True))) or 0,
        "images": session.scalar(select(func.count(Photo.id))) or 0,
        "annotations": session.scalar(select(func.count(Image.id))) or 0,
        "sightings": session.scalar(select(func.count(Sighting.id))) or 0,
        "masks": session.scalar(select(func.count(Image.id)).where(Image.mask_path.is_not(None))) or 0,
        "decisions": session.scalar(select(func.count(MatchDecision.id)).where(MatchDecision.undone_at.is_(None))) or 0,
    }


def ids(objs: Iterable[Any]) -> list[int]:
    return [o.id for o in objs]
