"""The small functions the Gradio handlers call, each a few lines over ``db``.

Every function opens one unit of work on the catalogue, does one thing, commits
if it changed something, and returns plain data (dataclasses, lists of rows,
short curator-readable messages) that a tab only has to render. Errors a
curator can cause (a taken name, nothing to undo ...) are raised as
:class:`db.catalogue.CatalogueError` / ``ValueError`` with a message meant to be
shown as is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from db.catalogue import (
    CatalogueError,
    ConflictError,
    NotFoundError,
    catalogue_stats,
    get_individual,
    history,
    images_of,
    last_undoable_event,
    list_individuals,
    merge_individuals,
    rename_individual,
    split_images,
    undo_event,
)
from db.models import EventKind, IdentityEvent, Image, Individual, Sighting
from db.session import Catalogue

HISTORY_HEADERS = ["When (UTC)", "Who", "What"]
SIGHTING_HEADERS = ["Sighting", "Date", "Place", "Camera", "Observer", "Photos"]
REPORT_HEADERS = ["File", "Result", "Details"]


def curator_name(user: str | None) -> str:
    """The name a change is attributed to; refuses an empty one so no change goes unattributed."""
    from db.audit import known_actor

    # inside a guarded handler (or a CLI command) the acting user is already known: it wins over any argument
    name = (known_actor() or user or "").strip()
    if not name:
        raise ValueError("No one is signed in, so the change could not be attributed to anyone; sign in first.")
    return name[:120]


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
        summaries = list_individuals(s, search=search)
        blobs = dict(s.execute(select(Image.id, Image.blob_path).where(
            Image.id.in_([x.cover_image_id for x in summaries if x.cover_image_id]))).all())
    return [IndividualCard(id=x.id, name=x.name, n_images=x.n_images, n_sightings=x.n_sightings,
                           thumb=cat.blobs.existing(x.cover_thumb) or cat.blobs.existing(blobs.get(x.cover_image_id)))
            for x in summaries]


def open_individual(cat: Catalogue, individual_id: int) -> IndividualView:
    """Photos (with flank, sighting, date) and sightings of one individual."""
    with cat.unit_of_work() as s:
        ind = get_individual(s, int(individual_id))
        merged_into = s.get(Individual, ind.merged_into_id).name if ind.merged_into_id else None
        images = images_of(s, ind.id)
        sightings = {sg.id: sg for sg in s.scalars(select(Sighting).where(
            Sighting.id.in_({im.sighting_id for im in images if im.sighting_id})))}
        cards, per_sighting = [], {}
        for im in images:
            sg = sightings.get(im.sighting_id)
            date = (sg.date if sg and sg.date else None) or im.exif_time
            cards.append(ImageCard(id=im.id, path=cat.blobs.existing(im.blob_path) or cat.blobs.existing(im.thumb_path) or "",
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


def catalogue_summary(cat: Catalogue) -> str:
    with cat.unit_of_work() as s:
        st = catalogue_stats(s)
        unassigned = s.scalar(select(func.count(Image.id)).where(Image.individual_id.is_(None))) or 0
    text = (f"{st['individuals']} individuals · {st['images']} photos · {st['sightings']} sightings · "
            f"{st['masks']} masks · {st['decisions']} match decisions")
    if unassigned:
        text += f" · **{unassigned} photo{'s' if unassigned != 1 else ''} not yet assigned to an individual**"
    return text


# --------------------------------------------------------------------------- changes


def rename(cat: Catalogue, individual_id: int | None, new_name: str, *, user: str) -> str:
    """Rename an individual; returns what happened in words."""
    if individual_id is None:
        raise CatalogueError("Open an individual first.")
    user = curator_name(user)
    with cat.unit_of_work() as s:
        ev = rename_individual(s, int(individual_id), new_name, user=user)
        s.commit()
        return f"Renamed {ev.payload['old']} to {ev.payload['new']}."


def merge(cat: Catalogue, source_id: int | None, target_id: int | None, *, user: str) -> str:
    """Merge ``source`` into ``target`` (all photos move; the source is retired, history kept)."""
    if source_id is None:
        raise CatalogueError("Open the individual to merge first.")
    if target_id is None:
        raise CatalogueError("Choose the individual to merge into.")
    user = curator_name(user)
    with cat.unit_of_work() as s:
        ev = merge_individuals(s, int(source_id), int(target_id), user=user)
        s.commit()
        n = len(ev.payload["image_ids"])
        return f"Merged {ev.payload['source_name']} into {ev.payload['target_name']} ({n} photo{'s' if n != 1 else ''} moved)."


def split(cat: Catalogue, image_ids: Sequence[int], *, new_name: str | None = None, user: str) -> tuple[int, str]:
    """Move the chosen photos into a new individual; returns (new individual id, message)."""
    user = curator_name(user)
    with cat.unit_of_work() as s:
        new, _ev = split_images(s, [int(i) for i in image_ids or []], user=user, new_name=(new_name or "").strip() or None)
        s.commit()
        n = len(set(image_ids))
        return new.id, f"Split {n} photo{'s' if n != 1 else ''} out into the new individual {new.name}."


def move_photos(cat: Catalogue, image_ids: Sequence[int], target_id: int | None, *, user: str) -> str:
    """Move the chosen photos of the open individual to another one, each an undoable change (one transaction)."""
    from db.catalogue import assign_image

    ids = [int(i) for i in image_ids or []]
    if not ids:
        raise CatalogueError("Tick the photos to move first.")
    if target_id is None:
        raise CatalogueError("Choose the individual to move them to.")
    user = curator_name(user)
    with cat.unit_of_work() as s:
        target = get_individual(s, int(target_id))
        moved = 0
        for i in ids:
            photo = s.get(Image, i)
            if photo is None:
                raise CatalogueError(f"There is no photo #{i} in the catalogue.")
            if photo.individual_id != target.id:
                assign_image(s, i, target.id, user=user)
                moved += 1
        s.commit()
        return (f"Moved {moved} photo{'s' if moved != 1 else ''} to {target.name} (each one is an undoable change).")


def set_flanks(cat: Catalogue, image_ids: Sequence[int], flank: str | None, *, user: str) -> str:
    """Set the flank of every chosen photo at once."""
    from db.masks import set_flank

    from db.masks import FLANKS

    ids = [int(i) for i in image_ids or []]
    if not ids:
        raise CatalogueError("Tick the photos whose flank to set first.")
    if flank not in FLANKS:
        raise CatalogueError(f"Choose the flank first ({', '.join(FLANKS)}).")
    user = curator_name(user)
    for i in ids:
        set_flank(cat, i, flank, user=user)
    return f"Flank set to {flank} for {len(ids)} photo{'s' if len(ids) != 1 else ''}."


def undo_last(cat: Catalogue, *, user: str, seen_event_id: int | None = None) -> str:
    """Undo the most recent identity change that is not undone yet.

    ``seen_event_id`` is the change the curator saw as the newest (the Catalogue tab sends it with the button):
    that change is undone and no other. If another curator undid it meanwhile, this one is told so; if a newer
    change came since, nothing is undone and the curator is shown it. Eight curators pressing Undo at once thus
    undo one change, not the newest one and then the one before it, as a bare "undo the newest" would when
    one of them arrives after another's undo has committed."""
    user = curator_name(user)
    with cat.unit_of_work() as s:
        newest = last_undoable_event(s)
        if seen_event_id is not None:
            seen = s.get(IdentityEvent, int(seen_event_id))
            if seen is None:
                raise NotFoundError(f"There is no change #{int(seen_event_id)}.")
            if seen.undone_at is None and newest is not None and newest.id != seen.id:
                raise ConflictError(f"Nothing undone: a newer change was made since you looked, "
                                    f"#{newest.id} {describe_event(newest, _names(s, [newest]))} by {newest.user}. "
                                    "Look at the history and press Undo again if that is the one to undo.")
            newest = seen  # if it was undone meanwhile, undo_event below says by whom
        if newest is None:
            raise CatalogueError("There is nothing to undo.")
        event_id, what = newest.id, describe_event(newest, _names(s, [newest]))
    # a new transaction whose first statement claims the event: of curators pressing Undo at once, one undoes
    # it and the others are told (instead of each undoing it again)
    with cat.unit_of_work() as s:
        undo_event(s, event_id, user=user)
        s.commit()
    return f"Undone: {what}."


def last_change_id(cat: Catalogue) -> int | None:
    """The id of the change "Undo last change" would undo now (what the Catalogue tab shows as the newest)."""
    with cat.unit_of_work() as s:
        ev = last_undoable_event(s)
        return ev.id if ev is not None else None


# --------------------------------------------------------------------------- history


def _names(session, events: Sequence[IdentityEvent]) -> dict[int, str]:
    wanted: set[int] = set()
    for ev in events:
        wanted.update(i for i in (ev.individual_id, ev.other_individual_id) if i)
        for key in ("previous", "new", "new_individual", "source", "target"):
            v = ev.payload.get(key)
            if isinstance(v, int):
                wanted.add(v)
        if ev.kind == EventKind.split:
            wanted.update(v for v in ev.payload.get("previous", {}).values() if isinstance(v, int))
    if not wanted:
        return {}
    return dict(session.execute(select(Individual.id, Individual.name).where(Individual.id.in_(wanted))).all())


def describe_event(ev: IdentityEvent, names: dict[int, str]) -> str:
    """One identity event in a curator's words, e.g. ``merged A into B (3 photos)``."""
    p = ev.payload or {}

    def name(i: int | None) -> str:
        return names.get(i, f"individual #{i}") if i is not None else "no individual"

    if ev.kind == EventKind.create:
        return f"created {p.get('name') or name(ev.individual_id)}"
    if ev.kind == EventKind.rename:
        return f"renamed {p.get('old')} to {p.get('new')}"
    if ev.kind == EventKind.assign:
        text = f"assigned photo #{p.get('image_id')} to {name(p.get('new'))}"
        return text + (f" (was {name(p.get('previous'))})" if p.get("previous") else "")
    if ev.kind == EventKind.unassign:
        return f"took photo #{p.get('image_id')} out of {name(p.get('previous'))}"
    if ev.kind == EventKind.merge:
        n = len(p.get("image_ids", []))
        return (f"merged {p.get('source_name') or name(p.get('source'))} into "
                f"{p.get('target_name') or name(p.get('target'))} ({n} photo{'s' if n != 1 else ''})")
    if ev.kind == EventKind.split:
        n = len(p.get("previous", {}))
        return f"split {n} photo{'s' if n != 1 else ''} out into {name(p.get('new_individual'))}"
    if ev.kind == EventKind.undo:
        return f"undid change #{p.get('undid')} ({p.get('kind')})"
    return ev.kind.value  # pragma: no cover - the enum is closed


def _when(t: datetime | None) -> str:
    return t.replace(tzinfo=timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if t else ""


def history_rows(cat: Catalogue, *, individual_id: int | None = None, limit: int = 50) -> list[list[str]]:
    """Newest first identity events as rows under HISTORY_HEADERS; undone ones are marked."""
    with cat.unit_of_work() as s:
        events = history(s, individual_id=individual_id, limit=limit)
        names = _names(s, events)
        return [[_when(ev.created_at), ev.user,
                 f"#{ev.id} {describe_event(ev, names)}" + (" (undone)" if ev.undone_at else "")]
                for ev in events]


# --------------------------------------------------------------------------- ingest


@dataclass
class ImportOutcome:
    rows: list[list[str]]  # under REPORT_HEADERS
    counts: dict[str, int]
    features_job: int | None = None  # the background job computing match-review features of the new photos

    @property
    def summary(self) -> str:
        shown = [f"{n} {status if status != 'error' else ('errors' if n != 1 else 'error')}"
                 for status, n in self.counts.items() if n]
        text = " · ".join(shown) if shown else "nothing to import"
        if self.features_job is not None:
            text += f" · their features for match review are being computed in the background (job #{self.features_job})"
        return text


def upload_path(f: object) -> str:
    """A Gradio upload as a path (strings, ``NamedString`` or objects with ``.name``/``.path``)."""
    if isinstance(f, (str, Path)):
        return str(f)
    for attr in ("path", "name"):
        value = getattr(f, attr, None)
        if isinstance(value, str):
            return value
    raise ValueError(f"cannot read the upload {f!r}")


class StopRequests:
    """Stop buttons for long handlers: keyed by browser session, thread-safe.

    A running handler cannot see a later change to a ``gr.State``, so the Stop button
    records its session here and the running handler's ``should_cancel`` reads it."""

    def __init__(self) -> None:
        import threading

        self._keys: set[str] = set()
        self._lock = threading.Lock()

    def request(self, key: str | None) -> None:
        with self._lock:
            self._keys.add(key or "")

    def clear(self, key: str | None) -> None:
        with self._lock:
            self._keys.discard(key or "")

    def checker(self, key: str | None) -> Callable[[], bool]:
        return lambda: (key or "") in self._keys


IMPORT_STOPS = StopRequests()


def import_uploads(cat: Catalogue, files: Sequence[object] | None, *, manifest: object | None = None,
                   user: str, progress: Callable[[int, int], None] | None = None,
                   should_cancel: Callable[[], bool] | None = None, update_metadata: bool = False) -> ImportOutcome:
    """Import uploaded photos / zips (and an optional manifest CSV) and report per file.

    Gradio stores each upload as ``<upload dir>/<hash>/<original file name>``, so
    the basenames handed on are the names a manifest refers to. ``progress(done, total)``
    is called after each file.
    """
    user = curator_name(user)
    paths = [upload_path(f) for f in (files or [])]
    if not paths:
        raise ValueError("Choose some photos or a zip archive to import first.")
    from db.ingest import ingest_uploads

    report = ingest_uploads(cat, paths, manifest=upload_path(manifest) if manifest else None, user=user,
                            progress=progress, should_cancel=should_cancel, update_metadata=update_metadata)
    warm = warm_features(cat, user=user) if report.counts.get("imported") else None
    return ImportOutcome(rows=[[str(c) for c in row] for row in report.rows()], counts=dict(report.counts),
                         features_job=warm)


def warm_features(cat: Catalogue, *, user: str) -> int | None:
    """Queue the active model's features of every photo in the background (the ``embed`` job), so the first
    Match review opening after an import finds them instead of computing them while the curator waits. Returns
    the job id, or None when such a job is already waiting (it will include the new photos)."""
    from db.models import JobStatus
    from db.species import active_model_name
    from jobs.queue import list_jobs, submit

    model = active_model_name(cat)
    waiting = any(j.status == JobStatus.queued and (j.params or {}).get("backbone") == model
                  for j in list_jobs(cat, limit=50, kind="embed"))
    return None if waiting else submit(cat, "embed", {"backbone": model, "user": user})


# --------------------------------------------------------------------------- catalogue export


def export_catalogue(cat: Catalogue, *, user: str, include_inactive: bool = False) -> tuple[str, str]:
    """The catalogue as a zip of CSVs and per-individual sheets under the data folder's exports; returns
    (its path, what it holds in words)."""
    from db.catalogue_export import export_catalogue as write_export

    user = curator_name(user)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    done = write_export(cat, cat.data_dir / "exports" / f"catalogue-{stamp}.zip", user=user,
                        include_inactive=include_inactive)
    return str(done.path), done.summary + "."


# --------------------------------------------------------------------------- provenance


def database_label(url: str) -> str:
    """The database URL with any password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a malformed URL is still worth showing, minus credentials
        return url.split("@")[-1]


def provenance_line(cat: Catalogue) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("rosette")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        v = "dev"
    return f"Rosette {v} · data directory `{cat.data_dir}` · database `{database_label(cat.url)}`"


# --------------------------------------------------------------------------- species


def species_names(cat: Catalogue) -> list[str]:
    from db.species import list_species

    return [r["name"] for r in list_species(cat)]


def species_of_individual(cat: Catalogue, individual_id: int) -> str | None:
    from db.models import Individual, Species

    with cat.unit_of_work() as s:
        return s.scalar(select(Species.name).join(Individual, Individual.species_id == Species.id)
                        .where(Individual.id == int(individual_id)))


def set_species(cat: Catalogue, individual_id: int | None, species: str | None, *, user: str) -> str:
    """Move the open individual (and its photos) to a species, created when the name is new."""
    from db.species import clean_species_name, set_individual_species

    if individual_id is None:
        raise ValueError("Open an individual first.")
    name = clean_species_name(species)
    set_individual_species(cat, int(individual_id), name, user=curator_name(user))
    return f"The individual and its photos are now {name}; match review offers them only {name} candidates."
