"""The catalogue as the Catalogue tab and the catalogue commands see and change it: browsing individuals, and the
identity edits (rename, merge, split, move photos, set flanks, undo) with their history.

Every function opens one unit of work on the catalogue, does one thing, commits if it changed something, and
returns plain data (dataclasses, lists of rows, short curator-readable messages) that a tab or a command only has
to render. An edit takes one request (``jobs.requests.catalogue``) and is the same function for the tab and the
command. Errors a curator can cause (a taken name, nothing to undo ...) are raised as
:class:`jobs.actions.errors.CatalogueError` / ``ValueError`` with a message meant to be shown as is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import func, select

from db import catalogue as store  # called through the module: a test stands in for one of its functions
from db.catalogue import CatalogueError, ConflictError, NotFoundError
from db.inspect.masks import FLANKS
from db.inspect.masks import set_flanks as label_flanks  # this module's set_flanks is the request's action
from db.models import EventKind, IdentityEvent, Image, Individual, Photo, Sighting
from db.session import Catalogue
from jobs.actions.common import attributed, curator_name
from jobs.actions.frames import shows_whole_file
from jobs.requests.catalogue import (
    MergeRequest,
    MovePhotosRequest,
    RenameRequest,
    SetFlanksRequest,
    SplitRequest,
    UndoRequest,
)

HISTORY_HEADERS = ["When (UTC)", "Who", "What"]
SIGHTING_HEADERS = ["Sighting", "Date", "Place", "Camera", "Observer", "Photos"]


# --------------------------------------------------------------------------- browsing


@dataclass
class IndividualCard:
    """One individual in the catalogue overview."""

    id: int
    name: str
    n_images: int
    n_sightings: int
    thumb: str | None  # absolute path of the cover picture, or None when the individual has no photo

    @property
    def caption(self) -> str:
        photos = "photo" if self.n_images == 1 else "photos"
        sightings = "sighting" if self.n_sightings == 1 else "sightings"
        return f"{self.name} ({self.n_images} {photos}, {self.n_sightings} {sightings})"


@dataclass
class ImageCard:
    """One photo of an individual, with what a curator wants to see under it."""

    id: int
    path: str  # absolute path of the picture to show
    original_name: str
    flank: str
    sighting: str | None
    date: str | None
    mask_source: str | None

    @property
    def caption(self) -> str:
        parts = [f"#{self.id}", f"{self.flank} flank" if self.flank != "unknown" else "flank not set"]
        if self.sighting:
            parts.append(f"sighting {self.sighting}")
        if self.date:
            parts.append(self.date)
        return " · ".join(parts)


@dataclass
class IndividualView:
    """An opened individual: its photos, its sightings and its identity history."""

    id: int
    name: str
    active: bool
    merged_into: str | None
    images: list[ImageCard] = field(default_factory=list)
    sightings: list[list[object]] = field(default_factory=list)  # rows under SIGHTING_HEADERS

    @property
    def n_sightings(self) -> int:
        return len(self.sightings)

    def headline(self) -> str:
        photos = "photo" if len(self.images) == 1 else "photos"
        sightings = "sighting" if self.n_sightings == 1 else "sightings"
        text = f"{self.name}: {len(self.images)} {photos}, {self.n_sightings} {sightings}"
        if not self.active:
            text += f" (merged into {self.merged_into})" if self.merged_into else " (retired)"
        return text


def individual_cards(cat: Catalogue, *, search: str | None = None) -> list[IndividualCard]:
    """Active individuals (name contains ``search``) with counts and a cover picture, by name."""
    search = (search or "").strip() or None
    with cat.unit_of_work() as s:
        summaries = store.list_individuals(s, search=search)
        blobs = dict(s.execute(select(Image.id, Image.blob_path).where(
            Image.id.in_([x.cover_image_id for x in summaries if x.cover_image_id]))).all())
    return [IndividualCard(id=x.id, name=x.name, n_images=x.n_images, n_sightings=x.n_sightings,
                           thumb=cat.blobs.existing(x.cover_thumb) or cat.blobs.existing(blobs.get(x.cover_image_id)))
            for x in summaries]


def list_individuals(cat: Catalogue, *, search: str | None = None) -> list[store.IndividualSummary]:
    """Active individuals whose name contains ``search`` (as given), with photo and sighting counts, by name
    (``rosette individuals``)."""
    with cat.unit_of_work() as s:
        return store.list_individuals(s, search=search)


def individual_id(cat: Catalogue, ref: str) -> int:
    """The individual a command names by number or by its current name."""
    with cat.unit_of_work() as s:
        if ref.isdigit():
            return store.get_individual(s, int(ref)).id
        ind = store.find_individual_by_name(s, ref)
        if ind is None:
            raise NotFoundError(f"no individual named {ref!r}")
        return ind.id


def open_individual(cat: Catalogue, individual_id: int) -> IndividualView:
    """Photos (with flank, sighting, date) and sightings of one individual."""
    with cat.unit_of_work() as s:
        ind = store.get_individual(s, int(individual_id))
        merged_into = s.get(Individual, ind.merged_into_id).name if ind.merged_into_id else None
        images = store.images_of(s, ind.id)
        sightings = {sg.id: sg for sg in s.scalars(select(Sighting).where(
            Sighting.id.in_({im.sighting_id for im in images if im.sighting_id})))}
        # photos holding people: their person boxes are blurred in the thumbnails only
        with_people = {pid for pid, people in s.execute(select(Photo.id, Photo.people).where(
            Photo.id.in_({im.photo_id for im in images}))) if people}
        cards, per_sighting = [], {}
        for im in images:
            sg = sightings.get(im.sighting_id)
            date = (sg.date if sg and sg.date else None) or im.exif_time
            # the animal as matching sees it: a boxed annotation is its crop's thumbnail, never the whole frame
            whole = shows_whole_file(im.box, has_people=im.photo_id in with_people)
            shown = (cat.blobs.existing(im.blob_path) if whole else None) or cat.blobs.existing(im.thumb_path)
            cards.append(ImageCard(id=im.id, path=shown or "",
                                   original_name=im.original_name, flank=im.flank.value,
                                   sighting=sg.key if sg else None, date=date, mask_source=im.mask_source))
            if sg is not None:
                per_sighting[sg.id] = per_sighting.get(sg.id, 0) + 1
        rows = [[sightings[k].key, sightings[k].date or "", sightings[k].place or "", sightings[k].camera or "",
                 sightings[k].observer or "", n]
                for k, n in sorted(per_sighting.items(), key=lambda kv: (sightings[kv[0]].date or "", kv[0]))]
        return IndividualView(id=ind.id, name=ind.name, active=ind.active, merged_into=merged_into,
                              images=cards, sightings=rows)


def image_choices(view: IndividualView) -> list[tuple[str, int]]:
    """(label, image id) pairs for picking photos of an opened individual (e.g. to split them out)."""
    return [(f"{c.caption} — {c.original_name}", c.id) for c in view.images]


def catalogue_stats(cat: Catalogue) -> dict[str, int]:
    """Counts of individuals, photos, sightings, masks and standing decisions (``rosette stats``)."""
    with cat.unit_of_work() as s:
        return store.catalogue_stats(s)


def catalogue_summary(cat: Catalogue) -> str:
    with cat.unit_of_work() as s:
        st = store.catalogue_stats(s)
        unassigned = s.scalar(select(func.count(Image.id)).where(Image.individual_id.is_(None))) or 0
    text = (f"{st['individuals']} individuals · {st['images']} photos · {st['sightings']} sightings · "
            f"{st['masks']} masks · {st['decisions']} match decisions")
    if unassigned:
        text += f" · **{unassigned} animal{'s' if unassigned != 1 else ''} not yet assigned to an individual**"
    return text


# --------------------------------------------------------------------------- changes


@dataclass(frozen=True)
class Renamed:
    event_id: int
    old: str
    new: str

    @property
    def message(self) -> str:
        return f"Renamed {self.old} to {self.new}."


@dataclass(frozen=True)
class Merged:
    event_id: int
    source_name: str
    target_name: str
    moved: int  # photos moved

    @property
    def message(self) -> str:
        return (f"Merged {self.source_name} into {self.target_name} "
                f"({self.moved} photo{'s' if self.moved != 1 else ''} moved).")


@dataclass(frozen=True)
class SplitOut:
    individual_id: int  # the new individual
    name: str
    event_id: int
    photos: int

    @property
    def message(self) -> str:
        return f"Split {self.photos} photo{'s' if self.photos != 1 else ''} out into the new individual {self.name}."


@dataclass(frozen=True)
class Undone:
    event_id: int  # the change undone
    kind: str  # what kind of change it was (rename, merge ...)
    what: str  # the change in a curator's words

    @property
    def message(self) -> str:
        return f"Undone: {self.what}."


def rename(cat: Catalogue, request: RenameRequest) -> Renamed:
    """Rename an individual."""
    if request.individual_id is None:
        raise CatalogueError("Open an individual first.")
    user = curator_name(request.user)
    with cat.unit_of_work() as s:
        ev = store.rename_individual(s, request.individual_id, request.new_name, user=user)
        s.commit()
        return Renamed(event_id=ev.id, old=ev.payload["old"], new=ev.payload["new"])


def merge(cat: Catalogue, request: MergeRequest) -> Merged:
    """Merge ``source`` into ``target`` (all photos move; the source is retired, history kept)."""
    if request.source_id is None:
        raise CatalogueError("Open the individual to merge first.")
    if request.target_id is None:
        raise CatalogueError("Choose the individual to merge into.")
    user = curator_name(request.user)
    with cat.unit_of_work() as s:
        ev = store.merge_individuals(s, request.source_id, request.target_id, user=user)
        s.commit()
        p = ev.payload
        return Merged(event_id=ev.id, source_name=p["source_name"], target_name=p["target_name"],
                      moved=len(p["image_ids"]))


def split(cat: Catalogue, request: SplitRequest) -> SplitOut:
    """Move the chosen photos into a new individual."""
    user = curator_name(request.user)
    with cat.unit_of_work() as s:
        new, ev = store.split_images(s, list(request.image_ids), user=user, new_name=request.new_name)
        s.commit()
        return SplitOut(individual_id=new.id, name=new.name, event_id=ev.id, photos=len(set(request.image_ids)))


def move_photos(cat: Catalogue, request: MovePhotosRequest) -> str:
    """Move the chosen photos of the open individual to another one, each an undoable change (one transaction)."""
    if not request.image_ids:
        raise CatalogueError("Tick the photos to move first.")
    if request.target_id is None:
        raise CatalogueError("Choose the individual to move them to.")
    user = curator_name(request.user)
    with cat.unit_of_work() as s:
        target = store.get_individual(s, request.target_id)
        moved = 0
        for i in request.image_ids:
            photo = s.get(Image, i)
            if photo is None:
                raise CatalogueError(f"There is no photo #{i} in the catalogue.")
            if photo.individual_id != target.id:
                store.assign_image(s, i, target.id, user=user)
                moved += 1
        s.commit()
        return (f"Moved {moved} photo{'s' if moved != 1 else ''} to {target.name} (each one is an undoable change).")


def set_flanks(cat: Catalogue, request: SetFlanksRequest) -> str:
    """Set the flank of every chosen photo at once (the Catalogue tab's ticked photos; ``rosette flank``)."""
    if not request.image_ids:
        raise CatalogueError("Tick the photos whose flank to set first.")
    if request.flank not in FLANKS:
        raise CatalogueError(f"Choose the flank first ({', '.join(FLANKS)}).")
    user = curator_name(request.user)
    label_flanks(cat, request.image_ids, request.flank, user=user)  # one undoable change for them all
    n = len(request.image_ids)
    return f"Flank set to {request.flank} for {n} photo{'s' if n != 1 else ''}."


def undo(cat: Catalogue, request: UndoRequest) -> Undone:
    """Undo an identity change: the one given (``event_id``), else the most recent one not undone yet.

    ``seen_event_id`` is the change the curator saw as the newest (the Catalogue tab sends it with the button):
    that change is undone and no other. If another curator undid it meanwhile, this one is told so; if a newer
    change came since, nothing is undone and the curator is shown it. Eight curators pressing Undo at once thus
    undo one change, not the newest one and then the one before it, as a bare "undo the newest" would when
    one of them arrives after another's undo has committed."""
    user = curator_name(request.user)
    event_id, what = request.event_id, None
    if event_id is None:
        with cat.unit_of_work() as s:
            newest = store.last_undoable_event(s)
            if request.seen_event_id is not None:
                seen = s.get(IdentityEvent, request.seen_event_id)
                if seen is None:
                    raise NotFoundError(f"There is no change #{request.seen_event_id}.")
                if seen.undone_at is None and newest is not None and newest.id != seen.id:
                    raise ConflictError(f"Nothing undone: a newer change was made since you looked, "
                                        f"#{newest.id} {describe_event(newest, event_words(s, [newest]))} by "
                                        f"{newest.user}. "
                                        "Look at the history and press Undo again if that is the one to undo.")
                newest = seen  # if it was undone meanwhile, undo_event below says by whom
            if newest is None:
                raise CatalogueError("There is nothing to undo.")
            event_id, what = newest.id, describe_event(newest, event_words(s, [newest]))
    # a new transaction whose first statement claims the event: of curators pressing Undo at once, one undoes
    # it and the others are told (instead of each undoing it again); what it changes is audited under the curator
    with attributed(user), cat.unit_of_work() as s:
        done = store.undo_event(s, event_id, user=user)
        kind = str(done.payload["kind"])
        if what is None:
            undone = s.get(IdentityEvent, event_id)
            what = describe_event(undone, event_words(s, [undone]))
        s.commit()
    return Undone(event_id=event_id, kind=kind, what=what)


def last_change_id(cat: Catalogue) -> int | None:
    """The id of the change "Undo last change" would undo now (what the Catalogue tab shows as the newest)."""
    with cat.unit_of_work() as s:
        ev = store.last_undoable_event(s)
        return ev.id if ev is not None else None


# --------------------------------------------------------------------------- history


#: An event's kind in a curator's words, for a change whose own description cannot be given (it is gone).
KIND_WORDS = {EventKind.create: "a new individual", EventKind.rename: "a rename", EventKind.assign: "an assignment",
              EventKind.unassign: "an unassignment", EventKind.merge: "a merge", EventKind.split: "a split",
              EventKind.undo: "an undo", EventKind.flank: "a flank label", EventKind.traits: "a sex or life stage",
              EventKind.species_rename: "a species rename", EventKind.species_merge: "a species merge"}


@dataclass(frozen=True)
class EventWords:
    """What describing events needs besides the events: the individuals' names, each animal's photo (an animal,
    an annotation, is one of the animals in a photo: the history names both), and the events the undos undid."""

    names: dict[int, str] = field(default_factory=dict)
    photo_of: dict[int, int] = field(default_factory=dict)  # annotation id -> photo id
    undone: dict[int, IdentityEvent] = field(default_factory=dict)  # event id -> the event an undo undid


def event_words(session, events: Sequence[IdentityEvent]) -> EventWords:
    """The names, photos and undone events that :func:`describe_event` reads for ``events``."""
    undone_ids = {int(ev.payload["undid"]) for ev in events
                  if ev.kind == EventKind.undo and isinstance((ev.payload or {}).get("undid"), int)}
    undone = {ev.id: ev for ev in session.scalars(select(IdentityEvent).where(IdentityEvent.id.in_(undone_ids)))} \
        if undone_ids else {}
    every = [*events, *undone.values()]
    wanted: set[int] = set()
    annotations: set[int] = set()
    for ev in every:
        p = ev.payload or {}
        wanted.update(i for i in (ev.individual_id, ev.other_individual_id) if i)
        for key in ("previous", "new", "new_individual", "source", "target"):
            v = p.get(key)
            if isinstance(v, int):
                wanted.add(v)
        if ev.kind == EventKind.split:
            wanted.update(v for v in p.get("previous", {}).values() if isinstance(v, int))
        if ev.kind in (EventKind.assign, EventKind.unassign) and isinstance(p.get("image_id"), int):
            annotations.add(p["image_id"])
        if ev.kind == EventKind.species_merge:
            annotations.update(i for i in p.get("image_ids", []) if isinstance(i, int))
    names = dict(session.execute(select(Individual.id, Individual.name).where(Individual.id.in_(wanted))).all()) \
        if wanted else {}
    photo_of = dict(session.execute(select(Image.id, Image.photo_id).where(Image.id.in_(annotations))).all()) \
        if annotations else {}
    return EventWords(names=names, photo_of=photo_of, undone=undone)


def _animal(annotation_id: Any, words: EventWords) -> str:
    photo = words.photo_of.get(annotation_id) if isinstance(annotation_id, int) else None
    return f"animal #{annotation_id}" + (f" (photo #{photo})" if photo is not None else "")


def _counted(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def describe_event(ev: IdentityEvent, words: EventWords | None = None) -> str:
    """One identity event in a curator's words, e.g. ``merged A into B (3 photos)``; an assignment names the
    animal and the photo it is in, an undo says what the undone change was."""
    words = words if words is not None else EventWords()
    names = words.names
    p = ev.payload or {}

    def name(i: int | None) -> str:
        return names.get(i, f"individual #{i}") if i is not None else "no individual"

    if ev.kind == EventKind.create:
        return f"created {p.get('name') or name(ev.individual_id)}"
    if ev.kind == EventKind.rename and "species" in p:  # db.species.set_individual_species
        species = p["species"].get("new_name") or f"#{p['species'].get('new')}"
        return f"moved {p.get('new') or name(ev.individual_id)} to species {species}"
    if ev.kind == EventKind.rename:
        return f"renamed {p.get('old')} to {p.get('new')}"
    if ev.kind == EventKind.flank:
        shown = sorted(int(k) for k in p.get("previous", {}))
        was = sorted({v[0] for v in p.get("previous", {}).values()})
        photos = (f"photo #{shown[0]}" if len(shown) == 1 else
                  f"{len(shown)} photos (#{', #'.join(str(i) for i in shown[:5])}{', ...' if len(shown) > 5 else ''})")
        owner = f" of {name(ev.individual_id)}" if ev.individual_id else ""
        return f"set the flank of {photos}{owner} to {p.get('flank')} (was {', '.join(was)})"
    if ev.kind == EventKind.traits:
        labels = {"sex": "sex", "life_stage": "life stage"}
        done = ", ".join(f"{labels.get(k, k)} {old or 'not recorded'} → {new or 'not recorded'}"
                         for k, (old, new) in p.get("changed", {}).items())
        return f"set {p.get('name') or name(ev.individual_id)}'s {done}"
    if ev.kind == EventKind.species_rename:  # the scientific name, the common name, or both
        old_common, new_common = p.get("old_common_name"), p.get("new_common_name")
        common = f"common name {old_common or 'none'} → {new_common or 'none'}" if old_common != new_common else ""
        if p.get("old") == p.get("new"):
            return f"set species {p.get('new')}'s {common}"
        return f"renamed species {p.get('old')} to {p.get('new')}" + (f" ({common})" if common else "")
    if ev.kind == EventKind.species_merge:
        animals = p.get("image_ids", [])
        photos = {words.photo_of[i] for i in animals if i in words.photo_of}
        counts = [_counted(len(p.get("individual_ids", [])), "individual")]
        if photos:  # the animals' photos are known while the animals are in the catalogue
            counts.append(_counted(len(photos), "photo"))
        counts.append(_counted(len(animals), "animal"))
        return f"merged species {p.get('source', {}).get('name')} into {p.get('target_name')} ({', '.join(counts)})"
    if ev.kind == EventKind.assign:
        text = f"assigned {_animal(p.get('image_id'), words)} to {name(p.get('new'))}"
        return text + (f" (was {name(p.get('previous'))})" if p.get("previous") else "")
    if ev.kind == EventKind.unassign:
        return f"took {_animal(p.get('image_id'), words)} out of {name(p.get('previous'))}"
    if ev.kind == EventKind.merge:
        n = len(p.get("image_ids", []))
        return (f"merged {p.get('source_name') or name(p.get('source'))} into "
                f"{p.get('target_name') or name(p.get('target'))} ({n} photo{'s' if n != 1 else ''})")
    if ev.kind == EventKind.split:
        n = len(p.get("previous", {}))
        return f"split {n} photo{'s' if n != 1 else ''} out into {name(p.get('new_individual'))}"
    if ev.kind == EventKind.undo:
        undone = words.undone.get(p.get("undid"))
        if undone is not None and undone.kind != EventKind.undo:
            text = f"undid change #{p.get('undid')}: {describe_event(undone, words)}"
        else:
            kind = next((k for k in EventKind if k.value == p.get("kind")), None)
            text = f"undid change #{p.get('undid')}" + (f" ({KIND_WORDS[kind]})" if kind in KIND_WORDS else "")
        removed = p.get("removed_species")
        return text + (f"; species {removed}, left empty, was removed" if removed else "")
    return ev.kind.value  # pragma: no cover - the enum is closed


def _when(t: datetime | None) -> str:
    return t.replace(tzinfo=timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if t else ""


def history_rows(cat: Catalogue, *, individual_id: int | None = None, limit: int = 50) -> list[list[str]]:
    """Newest first identity events as rows under HISTORY_HEADERS; undone ones are marked."""
    with cat.unit_of_work() as s:
        events = store.history(s, individual_id=individual_id, limit=limit)
        words = event_words(s, events)
        return [[_when(ev.created_at), ev.user,
                 f"#{ev.id} {describe_event(ev, words)}" + (" (undone)" if ev.undone_at else "")]
                for ev in events]


@dataclass(frozen=True)
class HistoryEntry:
    """One identity event as ``rosette history`` lists it."""

    id: int
    created_at: datetime
    user: str
    kind: str
    payload: Any
    undone: bool


def history_entries(cat: Catalogue, *, individual_id: int | None = None, limit: int = 100) -> list[HistoryEntry]:
    """Newest first identity events (of one individual, or all)."""
    with cat.unit_of_work() as s:
        return [HistoryEntry(id=e.id, created_at=e.created_at, user=e.user, kind=e.kind.value, payload=e.payload,
                             undone=e.undone_at is not None)
                for e in store.history(s, individual_id=individual_id, limit=limit)]
