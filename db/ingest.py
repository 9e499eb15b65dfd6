"""Importing photos into the catalogue: files, folders, zips, CSV manifests, Kaggle layouts.

The sources are read by :mod:`core.readers` (formats, layouts, format detection, the hardened file and zip
readers, and the read / hash / decode of each file); this module stores what they read.

Every file is its own unit of work (one transaction per file): a file that fails
leaves no row and no blob of its own behind, and never undoes another file.
Images are stored content-addressed by the sha256 of the original bytes, so
importing the same bytes again is recognised (``duplicate``), and new facts
from a manifest (identity, flank, sighting) fill in what the image lacked
(``updated``); facts that *contradict* the catalogue are reported, never applied.
Client paths are never trusted: zip members with ``..`` or absolute paths,
links leaving the folder and manifest rows pointing outside it are refused.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from core.images import MAX_PIXELS, DecodedImage, extension_for
from core.readers import (
    FORMATS,
    Entry,
    IngestError,
    IngestItemResult,
    IngestReport,
    ManifestError,
    Prepared,
    ReadError,
    Tree,
    ZipTree,
    decode_prepared,
    describe,
    detect_format,
    entries_for_path,
    prepare_entry,
    short_error,
    upload_entries,
)
from core.readers import parse_flank as parse_flank_word
from core.readers.prepare import alpha_threshold
from db.audit import acting_as
from db.catalogue import CatalogueError, find_individual_by_name, get_or_create_individual, get_or_create_user
from db.models import DEFAULT_SPECIES_ID, EventKind, Flank, IdentityEvent, Image, Individual, Sighting, utcnow
from db.species import get_or_create_species
from db.storage import sha256_bytes

__all__ = ["FORMATS", "PREFETCH", "IngestError", "IngestItemResult", "IngestReport", "ManifestError", "detect_format",
           "ingest_path", "ingest_uploads", "metadata_changes", "parse_flank"]  # readers' names: core.readers

#: Files read and decoded ahead of the database work, in a helper thread.
PREFETCH = 4

Progress = Callable[[int, int], None]

# the readers' classes under the names jobs.actions.export uses (they live in core.readers now)
_ReadError, _ZipTree = ReadError, ZipTree


def parse_flank(value: str | None) -> Flank | None:
    """'left'/'L', 'right'/'R', 'front'/'F', 'other'/'O' (any case) -> Flank; blank/'unknown' -> None.

    Raises ValueError for anything else.
    """
    word = parse_flank_word(value)
    return Flank(word) if word else None


def _flank(e: Entry) -> Flank | None:
    """The flank an entry states, as the catalogue's vocabulary."""
    return Flank(e.flank) if e.flank else None


# --------------------------------------------------------------------------- importing


METADATA_FIELDS = ("date", "place", "lat", "lon", "camera", "observer")


def metadata_changes(sighting: Sighting, facts: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, catalogue value, import value) for each sighting fact the import gives differently."""
    return [(a, getattr(sighting, a), facts[a]) for a in METADATA_FIELDS
            if facts.get(a) is not None and getattr(sighting, a) != facts[a]]


def _shown(value: Any) -> str:
    return "(none)" if value is None else repr(value) if isinstance(value, str) else str(value)


class _Importer:
    """Runs entries through decode -> blobs -> rows, one transaction per file."""

    def __init__(self, cat, *, user: str, dry_run: bool, origin: str, max_pixels: int = MAX_PIXELS,
                 update_metadata: bool = False) -> None:
        self.cat = cat
        self.user = user
        self.dry_run = dry_run
        self.update_metadata = update_metadata  # replace a known photo's sighting facts with the import's
        self.origin = origin
        self.max_pixels = max_pixels
        self.seen: dict[str, str] = {}  # content hash -> first name in this run (dry run)
        self.planned_individuals: set[str] = set()
        self.known_hashes: set[str] = set()  # content hashes catalogued when the run started
        self.run_hashes: set[str] = set()  # content hashes committed by this run
        # committed rows reused across files (strong references keep them in the session's identity map)
        self._ind_cache: dict[str, Individual] = {}  # individual name -> active individual
        self._sight_cache: dict[str, Sighting] = {}  # sighting key -> sighting
        self._user_known = False
        self._pending: dict[tuple[str, str], Any] = {}  # cache entries waiting for this file's commit

    # ---- helpers

    def _put(self, written: list[str], data: bytes, *, kind: str, ext: str, digest: str | None = None) -> str:
        """Store a blob; remember it for clean-up when it was not on disk before."""
        blobs = self.cat.blobs
        rel = blobs.relative_path(digest or sha256_bytes(data), kind=kind, ext=ext)
        existed = blobs.path(rel).exists()
        rel = blobs.put(data, kind=kind, ext=ext, digest=digest)
        if not existed:
            written.append(rel)
        return rel

    def _discard(self, session: Session, written: list[str]) -> None:
        """Remove blobs written for a failed file unless a committed image uses them."""
        for rel in written:
            used = session.scalar(select(Image.id).where(
                or_(Image.blob_path == rel, Image.thumb_path == rel, Image.mask_path == rel)).limit(1))
            if used is None:
                try:
                    self.cat.blobs.delete(rel)
                except (OSError, ValueError):  # pragma: no cover - best effort
                    pass

    def _individual(self, session: Session, name: str, *, species_id: int = 1) -> tuple[Individual, str]:
        """The individual called ``name`` (created in ``species_id`` if new; a merged one leads to its target)."""
        ind = self._ind_cache.get(name)
        if ind is not None and ind in session and ind.active and ind.name == name:
            return ind, ""
        ind = get_or_create_individual(session, name, user=self.user, species_id=species_id)
        note = ""
        hops = 0
        while not ind.active and ind.merged_into_id is not None and hops < 50:
            target = session.get(Individual, ind.merged_into_id)
            if target is None:
                break
            note = f"{name!r} was merged into {target.name!r}; assigned there"
            ind, hops = target, hops + 1
        if not ind.active:
            raise CatalogueError(f"the individual {name!r} was retired; reactivate or rename it first")
        if not note:
            self._pending[("ind", name)] = ind
        return ind, note

    def _species_id(self, session: Session, name: str | None) -> int:
        """The id of the species named in the manifest (created if new), else the default species."""
        if not name:
            return DEFAULT_SPECIES_ID
        return get_or_create_species(session, name).id

    def _assign(self, session: Session, img: Image, name: str) -> str:
        """Put ``img`` under the individual ``name`` and record the assign event; returns a note.

        The event has exactly the payload :func:`db.catalogue.assign_image` records
        (``image_id``, ``previous``, ``new``), so history and undo treat it like any
        assignment, plus ``via``/``source``/``name`` saying which import did it. It is
        written here (not through assign_image) to save statements on big imports:
        a new image gets its individual in its INSERT.
        """
        ind, note = self._individual(session, name, species_id=img.species_id)
        if ind.species_id != img.species_id:
            raise CatalogueError(f"the individual {ind.name!r} belongs to another species than this photo; "
                                 "check the manifest's species column")
        self._ensure_user(session)
        previous = img.individual_id
        img.individual_id = ind.id
        if img.id is None:
            session.flush()
        session.add(IdentityEvent(
            kind=EventKind.assign, individual_id=ind.id, other_individual_id=previous, user=self.user,
            created_at=utcnow(),
            payload={"image_id": img.id, "previous": previous, "new": ind.id, "via": "import",
                     "source": self.origin, "name": img.original_name},
        ))
        return note

    def _ensure_user(self, session: Session) -> None:
        if not self._user_known:
            get_or_create_user(session, self.user)
            self._pending[("user", self.user)] = 1

    def _sighting(self, session: Session, facts: dict[str, Any], decoded: DecodedImage | None) -> Sighting:
        """The sighting keyed ``facts['key']`` (created if new); fills fields it does not have yet."""
        s = self._sight_cache.get(facts["key"])
        if s is None or s not in session:
            s = session.scalar(select(Sighting).where(Sighting.key == facts["key"]))
        if s is None:
            s = Sighting(key=facts["key"])
            session.add(s)
        for attr in ("date", "place", "lat", "lon", "camera", "observer"):
            if getattr(s, attr) is None and facts.get(attr) is not None:
                setattr(s, attr, facts[attr])
        if s.date is None and decoded is not None and decoded.exif_time:
            s.date = decoded.exif_time
        if decoded is not None and s.lat is None and decoded.gps_lat is not None and decoded.gps_lon is not None:
            s.lat, s.lon = decoded.gps_lat, decoded.gps_lon
        self._pending[("sight", facts["key"])] = s
        return s

    def _commit(self, session: Session, digest: str | None = None) -> None:
        """Commit one file's transaction and remember what is now safely in the catalogue."""
        session.commit()
        for (kind, key), value in self._pending.items():
            if kind == "ind":
                self._ind_cache[key] = value
            elif kind == "sight":
                self._sight_cache[key] = value
            elif kind == "user":
                self._user_known = True
        self._pending.clear()
        if digest:
            self.run_hashes.add(digest)

    def _rollback(self, session: Session) -> None:
        session.rollback()
        self._pending.clear()

    def _lookup(self, session: Session, digest: str) -> Image | None:
        """The catalogued image with these bytes; skips the query for bytes unseen at start and in this run."""
        if digest not in self.known_hashes and digest not in self.run_hashes:
            return None
        return session.scalar(select(Image).where(Image.content_hash == digest))

    # ---- one file

    def prepare(self, e: Entry) -> Prepared:
        """Everything that needs no database: read, hash, decode, thumbnail, alpha mask
        (:func:`core.readers.prepare_entry`).

        Runs in a helper thread ahead of the database work (PIL releases the GIL
        while decoding and resizing). Decoding is skipped for bytes the catalogue
        already had when the import started (a re-run costs a hash per file).
        """
        return prepare_entry(e, known_hashes=self.known_hashes, max_pixels=self.max_pixels)

    def _decode(self, prep: Prepared) -> None:
        decode_prepared(prep, max_pixels=self.max_pixels)

    def handle(self, session: Session, prep: Prepared) -> IngestItemResult:
        """The database part for one prepared file (one transaction)."""
        if prep.result is not None and prep.digest is None:
            return prep.result
        e = prep.entry
        existing = self._lookup(session, prep.digest)
        if existing is not None:
            return self._existing(session, e, existing)
        if self.dry_run and prep.digest in self.seen:
            return IngestItemResult(e.name, "duplicate", f"same bytes as {self.seen[prep.digest]!r} earlier in this import",
                                    same_as=self.seen[prep.digest])
        if prep.decoded is None and prep.result is None:
            self._decode(prep)  # known when the import started, gone since
        if prep.result is not None:
            return prep.result
        decoded = prep.decoded
        desc = describe(decoded, e, mask=prep.mask_png is not None)
        if self.dry_run:
            self.seen[prep.digest] = e.name
            if e.identity and e.identity not in self.planned_individuals and find_individual_by_name(session, e.identity) is None:
                desc += " (new individual)"
                self.planned_individuals.add(e.identity)
            return IngestItemResult(e.name, "would-import", desc)
        return self._store(session, e, prep.data, prep.digest, decoded, prep.thumb, prep.mask_png, prep.quality, desc)

    def run_one(self, session: Session, e: Entry) -> IngestItemResult:
        """Prepare and handle one entry in the calling thread."""
        return self.handle(session, self.prepare(e))

    def _store(self, session, e: Entry, data: bytes, digest: str, decoded: DecodedImage, thumb: bytes,
               mask_png: bytes | None, quality, desc: str) -> IngestItemResult:
        written: list[str] = []
        try:
            blob = self._put(written, data, kind="images", ext=extension_for(decoded.format), digest=digest)
            thumb_rel = self._put(written, thumb, kind="thumbs", ext=".jpg", digest=digest)
            img = Image(
                content_hash=digest, original_name=e.name[:500], blob_path=blob, thumb_path=thumb_rel,
                format=decoded.format[:16], mode=decoded.mode[:16], width=decoded.width, height=decoded.height,
                size_bytes=len(data), exif_time=decoded.exif_time, gps_lat=decoded.gps_lat, gps_lon=decoded.gps_lon,
                flank=_flank(e) or Flank.unknown, flank_source="manifest" if e.flank else None,
                species_id=self._species_id(session, e.species),
            )
            if mask_png is not None:
                img.mask_path = self._put(written, mask_png, kind="masks", ext=".png")
                img.mask_source = "alpha"
                img.solidity = quality.solidity
                img.mask_flags = list(quality.flags)
                img.mask_details = {"rule": "alpha > threshold", "threshold": alpha_threshold(),
                                    "area_fraction": quality.area_fraction, "n_components": quality.n_components}
            if e.sighting:
                img.sighting = self._sighting(session, e.sighting, decoded)
            session.add(img)
            note = self._assign(session, img, e.identity) if e.identity else ""
            session.flush()
            self._before_commit(session, img)
            self._commit(session, digest)
        except Exception as exc:  # any failure: this file leaves nothing behind
            self._rollback(session)
            self._discard(session, written)
            raced = session.scalar(select(Image).where(Image.content_hash == digest))
            if raced is not None:  # another import stored the same bytes meanwhile
                return self._existing(session, e, raced)
            return IngestItemResult(e.name, "error", f"could not be stored ({short_error(exc)}); nothing was kept for this file")
        return IngestItemResult(e.name, "imported", desc + (f"; {note}" if note else "")
                                + (f"; warning: {e.warning}" if e.warning else ""), img.id)

    def _before_commit(self, session: Session, img: Image) -> None:
        """Hook for tests (fault injection after the blobs were written)."""

    def _existing(self, session: Session, e: Entry, img: Image) -> IngestItemResult:
        """Same bytes already catalogued: fill in missing facts, report contradictions."""
        changes: list[str] = []
        notes: list[str] = []
        current = session.get(Individual, img.individual_id) if img.individual_id else None
        if e.identity:
            if current is None:
                changes.append(f"assigned to {e.identity}")
            elif current.name != e.identity:
                notes.append(f"it is catalogued as {current.name!r}, the import says {e.identity!r}: not changed")
        flank = _flank(e)
        if flank:
            if img.flank == Flank.unknown:
                changes.append(f"flank {flank.value}")
            elif img.flank != flank:
                notes.append(f"its flank is {img.flank.value}, the import says {flank.value}: not changed")
        if e.sighting and img.sighting_id is None:
            changes.append(f"sighting {e.sighting['key']}")
        sighting = session.get(Sighting, img.sighting_id) if e.sighting and img.sighting_id is not None else None
        metadata = metadata_changes(sighting, e.sighting) if sighting is not None else []
        if metadata:
            words = ", ".join(f"{a} {_shown(old)} -> {_shown(new)}" for a, old, new in metadata)
            if self.update_metadata:
                changes.append(f"metadata of sighting {sighting.key}: {words}")
            else:
                notes.append(f"the import has other metadata ({words}): not changed; import again with "
                             "“update metadata of existing photos” to apply it")
        base = f"already in the catalogue as image #{img.id}"
        same_as = img.original_name if img.original_name != e.name else None
        if same_as:
            base = f"same bytes as {same_as!r}, already in the catalogue as image #{img.id}"
        if not changes:
            return IngestItemResult(e.name, "duplicate", "; ".join([base, *notes]), img.id, same_as=same_as)
        if self.dry_run:
            return IngestItemResult(e.name, "would-update", "; ".join([base, "would set " + ", ".join(changes), *notes]), img.id)
        try:
            note = ""
            if e.identity and current is None:
                note = self._assign(session, img, e.identity)
            if flank and img.flank == Flank.unknown:
                img.flank, img.flank_source = flank, "manifest"
            if e.sighting and img.sighting_id is None:
                img.sighting = self._sighting(session, e.sighting, None)
            if self.update_metadata:  # an audited change of the sighting (db.audit: sighting.metadata)
                for attr, _old, value in metadata:
                    setattr(sighting, attr, value)
            session.flush()
            self._commit(session)
        except Exception as exc:
            self._rollback(session)
            return IngestItemResult(e.name, "error", f"{base}; could not update it ({short_error(exc)})", img.id)
        return IngestItemResult(e.name, "updated", "; ".join([base, "set " + ", ".join(changes), *notes, *([note] if note else [])]), img.id)

    # ---- many files

    def run(self, entries: Sequence[Entry], *, progress: Progress | None = None,
            should_cancel: Callable[[], bool] | None = None, lookahead: int = PREFETCH) -> list[IngestItemResult]:
        """Every entry, in order; files are prepared ``lookahead`` ahead in one helper thread.

        When ``should_cancel()`` turns true the import stops between two files: what was
        imported stays (each file is its own transaction) and the rest is reported as skipped,
        so running the same import again picks up where it stopped. Every change is audited as this import's user.
        """
        with acting_as(self.user):
            return self._run(entries, progress=progress, should_cancel=should_cancel, lookahead=lookahead)

    def _run(self, entries: Sequence[Entry], *, progress: Progress | None, should_cancel: Callable[[], bool] | None,
             lookahead: int) -> list[IngestItemResult]:
        results: list[IngestItemResult] = []
        total = len(entries)
        with self.cat.unit_of_work() as session:
            self.known_hashes = set(session.scalars(select(Image.content_hash)))
            session.rollback()
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-prepare") as pool:
                queue: deque[Future[Prepared]] = deque()
                upcoming = iter(entries)
                for e in itertools.islice(upcoming, max(1, lookahead)):
                    queue.append(pool.submit(self.prepare, e))
                i = 0
                while queue:
                    fut = queue.popleft()
                    nxt = next(upcoming, None)
                    if nxt is not None:
                        queue.append(pool.submit(self.prepare, nxt))
                    try:
                        prep = fut.result()
                        res = self.handle(session, prep)
                    except Exception as exc:  # a bug or DB outage for one file must not stop the batch
                        self._rollback(session)
                        res = IngestItemResult(entries[i].name, "error", f"unexpected problem ({short_error(exc)})")
                    results.append(res)
                    if self.dry_run:
                        self._rollback(session)
                    i += 1
                    if progress is not None:
                        progress(i, total)
                    if should_cancel is not None and i < total and should_cancel():
                        for fut in queue:
                            fut.cancel()
                        results.extend(IngestItemResult(e.name, "skipped", "import stopped by the curator before "
                                                        "this file; import again to continue") for e in entries[i:])
                        break
        return results


def _finish(report: IngestReport, t0: float) -> IngestReport:
    report.seconds = time.perf_counter() - t0
    return report


def ingest_path(cat, path: str | Path, *, format: str | None = None, user: str, dry_run: bool = False,
                progress: Progress | None = None, should_cancel: Callable[[], bool] | None = None,
                max_pixels: int = MAX_PIXELS, update_metadata: bool = False) -> IngestReport:
    """Import a file, folder, zip, manifest CSV or Kaggle layout; one report line per file.

    ``format`` is one of FORMATS (auto-detected when None). With ``dry_run``
    every file is read and decoded but nothing is written (database or disk).
    ``progress(done, total)`` is called after each file. Raises IngestError /
    FileNotFoundError only when the import cannot start at all; a manifest that
    lacks required columns gives a report with that single error. With ``update_metadata`` the sighting facts
    (date, place, position, camera, observer) of photos already catalogued are replaced by the import's
    (an audited change); without it they are reported and left alone.
    """
    t0 = time.perf_counter()
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or folder")
    fmt = format or detect_format(p)
    if fmt not in FORMATS:
        raise IngestError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    report = IngestReport(source=str(p), format=fmt, dry_run=dry_run)
    trees: list[Tree] = []
    try:
        try:
            entries, trees, layout = entries_for_path(p, fmt)
        except ManifestError as exc:
            report.items.append(IngestItemResult(p.name, "error", str(exc)))
            return _finish(report, t0)
        report.format = layout
        problems = [pr for t in trees for pr in t.problems]
        importer = _Importer(cat, user=user, dry_run=dry_run, origin=f"{layout}:{p.name}", max_pixels=max_pixels,
                             update_metadata=update_metadata)
        report.items.extend(problems)
        report.items.extend(importer.run(entries, progress=progress, should_cancel=should_cancel))
    finally:
        for t in trees:
            t.close()
    return _finish(report, t0)


def ingest_uploads(cat, files: Sequence[str | Path], *, manifest: str | Path | None = None, user: str,
                   dry_run: bool = False, progress: Progress | None = None,
                   should_cancel: Callable[[], bool] | None = None, update_metadata: bool = False) -> IngestReport:
    """Import files uploaded through the UI: photos and/or zips, with an optional manifest CSV.

    The manifest gives identity / flank / sighting by *original file name*
    (matched on the file name, folders ignored); its rows naming no uploaded file
    are reported as errors. Uploaded zips are read like ``--format zip``
    (:func:`core.readers.upload_entries`).
    """
    t0 = time.perf_counter()
    report = IngestReport(source=f"{len(files)} uploaded file(s)", format="upload", dry_run=dry_run)
    upload = upload_entries(files, manifest=manifest)
    try:
        report.items.extend(upload.items)
        if upload.refused:
            return _finish(report, t0)
        importer = _Importer(cat, user=user, dry_run=dry_run, origin="upload", update_metadata=update_metadata)
        report.items.extend(importer.run(upload.entries, progress=progress, should_cancel=should_cancel))
    finally:
        upload.close()
    return _finish(report, t0)
