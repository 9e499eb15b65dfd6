"""Importing photos into the catalogue: files, folders, zips, CSV manifests, Kaggle layouts, Camtrap DP packages.

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
import zipfile
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from core.annotations import CURATOR_SOURCES, DEFAULT_MIN_CONFIDENCE, WHOLE_PHOTO, Box, Detection, crop_rect
from core.field.detectors import create_detector, detector_available
from core.io.images import MAX_PIXELS, DecodedImage, decode_image, extension_for, load_rgb, make_thumbnail
from core.io.privacy import blur_boxes
from core.readers import (
    FOLDER_MEANINGS,
    FORMATS,
    Entry,
    FolderCounts,
    ImportTally,
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
    folder_counts,
    give_folders_meaning,
    prepare_entry,
    short_error,
    upload_entries,
)
from core.readers import parse_flank as parse_flank_word
from core.readers.camtrapdp import CamtrapPackage, Observation, read_camtrapdp, refused_boxes
from core.readers.megadetector import DetectionsFormatError, match_frames, read_megadetector_json
from core.readers.prepare import alpha_threshold, spool_folder
from core.field.stations import EVENT_GAP_S
from db.records.annotations import CuratorOverride, curator_overrides
from db.audit import acting_as
from db.catalogue import CatalogueError, find_individual_by_name, get_or_create_individual, get_or_create_user
from db.records.deployments import EVENT_KEY_PREFIX, DeploymentIndex, form_events, store_deployments
from db.models import (
    DEFAULT_SPECIES_ID,
    PHOTO_FILE_COLUMNS,
    EventKind,
    Flank,
    IdentityEvent,
    Image,
    Individual,
    MatchDecision,
    Photo,
    Sighting,
    Species,
    utcnow,
)
from db.species import clean_species_name, get_or_create_species
from db.session import database_reason
from db.storage import is_disk_full, sha256_bytes

__all__ = ["FORMATS", "KEEP_EMPTY_CLI", "KEEP_EMPTY_TAB", "PREFETCH", "FolderPreview", "IngestError",
           "IngestItemResult", "IngestReport", "ManifestError", "detect_format", "ingest_path", "ingest_uploads",
           "metadata_changes", "parse_flank", "upload_folders"]  # readers' names: core.readers

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


@dataclass(frozen=True)
class FrameBoxes:
    """What a detector saw in one frame: the animal boxes to catalogue and the person boxes to blur."""

    animals: tuple[Detection, ...] = ()
    people: tuple[Detection, ...] = ()
    # a Camtrap DP media row: its animal observations, one annotation each (then ``animals`` is empty)
    observations: tuple[Observation, ...] = ()
    below_threshold: int = 0  # boxes the detector gave below the import's threshold (left out)
    invalid: tuple[str, ...] = ()  # why each box that could not be used was refused (a frame of only these is not
    # empty: it comes in as one whole-photo annotation, for review)


@dataclass
class DetectionPlan:
    """Boxes for the files of an import, by the entry's name (relative path), and where they came from."""

    frames: dict[str, FrameBoxes]
    source: str  # the annotations' box source: megadetector | camtrap-dp | detector:<name>
    details: dict[str, Any] = field(default_factory=dict)  # stored on each photo: detector, threshold, file
    keep_empty: bool = False  # a frame with no animal box is kept as a photo without annotations


#: An annotation a machine box may not replace: drawn by a curator, or already decided / named.
def _curator_owned(session: Session, ann: Image) -> bool:
    if ann.box_source in CURATOR_SOURCES or ann.individual_id is not None or ann.decision_version:
        return True
    return session.scalar(select(MatchDecision.id).where(MatchDecision.query_image_id == ann.id).limit(1)) is not None


#: Boxes this close (intersection over union) are taken as the same animal.
SAME_ANIMAL_IOU = 0.5


def _overridden(det: Detection, overrides: Sequence[CuratorOverride]) -> CuratorOverride | None:
    """The curator's standing move or delete of the machine box this detection is (or lies over), or None: the
    curator has acted on it, so no import adds it again."""
    return next((o for o in overrides if o.is_detection_box and o.box.iou(det.box) >= SAME_ANIMAL_IOU), None)


def _left_alone(det: Detection, source: str, override: CuratorOverride, anns: Sequence[Image]) -> str:
    """The report's words for a detection left alone because a curator moved or deleted the box it gave."""
    now = next((a.box for a in anns if a.id == override.annotation_id), None)
    came = ("this detection" if override.source == source and override.box == det.box
            else f"the {override.source} box {override.box.as_list()} it lies over")
    return (f"the {source} box {det.box.as_list()} (confidence {det.confidence:.2f}) was left alone: annotation "
            f"#{override.annotation_id} came from {came}, and {override.describe(now)}")


def _observation_left_alone(obs: Observation, override: CuratorOverride, anns: Sequence[Image]) -> str:
    """The report's words for a Camtrap DP observation left alone because a curator moved or deleted its
    annotation."""
    now = next((a.box for a in anns if a.id == override.annotation_id), None)
    return (f"observation {obs.observation_id} was left alone: annotation #{override.annotation_id} came from it, "
            f"and {override.describe(now)}")


def _observation_overridden(obs: Observation, overrides: Sequence[CuratorOverride]) -> CuratorOverride | None:
    """The curator's standing move or delete of the annotation this Camtrap DP observation became, or None (by its
    observation key; an edit recorded before the key was kept with the row is matched by its box)."""
    for o in overrides:
        if o.observation_key == obs.key or (o.observation_key is None and o.source == "camtrap-dp"
                                            and obs.box is not None and o.box.iou(obs.box) >= SAME_ANIMAL_IOU):
            return o
    return None


#: How to keep empty frames, said by the shell's import and by the Ingest tab's.
KEEP_EMPTY_CLI = "import with --keep-empty"
KEEP_EMPTY_TAB = 'tick "keep empty frames"'


class _Importer:
    """Runs entries through decode -> blobs -> rows, one transaction per file."""

    def __init__(self, cat, *, user: str, dry_run: bool, origin: str, max_pixels: int = MAX_PIXELS,
                 update_metadata: bool = False, plan: DetectionPlan | None = None,
                 event_gap_s: float = EVENT_GAP_S, keep_empty_words: str = KEEP_EMPTY_CLI) -> None:
        self.cat = cat
        self.keep_empty_words = keep_empty_words  # how to keep empty frames, in the words of the import's screen
        self.event_gap_s = event_gap_s  # photos of one deployment this close in time form one event
        self.stations: DeploymentIndex | None = None  # the stored deployments, loaded when the run starts
        self.plan = plan
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
        self._linked: set[int] = set()  # known photos this run linked to a deployment (grouped into events)
        self.spool_dir: str | None = None  # where large streamed files wait for their blob (a folder per run)
        # deployments the import stores before its photos (a Camtrap DP package's): a dry run, which stores none,
        # still says which photos it would link to them
        self.planned_deployments: set[str] = set()
        self.common_names: dict[str, str] = {}  # a Camtrap DP package's English common names, by scientific name
        self.interrupted = False  # Ctrl-C stopped the run (the report says what stayed; the shell exits 130)

    # ---- helpers

    def _put(self, written: list[str], data: bytes | Path, *, kind: str, ext: str, digest: str | None = None) -> str:
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
                or_(Image.blob_path == rel, Image.thumb_path == rel, Image.mask_path == rel)).limit(1)) or \
                session.scalar(select(Photo.id).where(or_(Photo.blob_path == rel, Photo.thumb_path == rel)).limit(1))
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
        """The id of the species named in the manifest (created if new, with the common name the package gives it;
        one without a common name takes it), else the default species."""
        if not name:
            return DEFAULT_SPECIES_ID
        return get_or_create_species(session, name, common_name=self.common_names.get(name)).id

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
        if s.event_key is None and facts.get("event_key"):  # a Camtrap DP eventID, as it came
            s.event_key = facts["event_key"]
        if s.deployment_id is None and facts.get("deployment") and self.stations:
            s.deployment_id = self.stations.by_key.get(facts["deployment"], (None, None))[0]
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
        """Undo what this file's transaction did. When the commit itself was interrupted after the database took
        it (Ctrl-C in an after-commit step), there is nothing left to undo and SQLAlchemy refuses a rollback:
        the session is closed instead, so the next file starts clean."""
        try:
            session.rollback()
        except Exception:  # noqa: BLE001 - a session that cannot roll back is closed; nothing is lost either way
            session.close()
        self._pending.clear()

    def _why(self, exc: BaseException) -> str:
        """A file's failure in words: the database's or the disk's refusal as start-up says it (SQLite reports a
        full disk as "disk I/O error": with little space left it is called full), else the error's first line."""
        reason = database_reason(exc, data_dir=self.cat.data_dir)
        if reason is not None:
            return reason
        if is_disk_full(exc):
            return f"the disk is full where {self.cat.data_dir} is; free some space first"
        return short_error(exc)

    def _lookup(self, session: Session, digest: str) -> Photo | None:
        """The catalogued photo with these bytes; skips the query for bytes unseen at start and in this run."""
        if digest not in self.known_hashes and digest not in self.run_hashes:
            return None
        return session.scalar(select(Photo).where(Photo.content_hash == digest))

    def _boxes(self, e: Entry) -> FrameBoxes | None:
        """The detector's boxes for this file (None: no plan, or the plan does not name it)."""
        return self.plan.frames.get(e.name) if self.plan is not None else None

    # ---- one file

    def prepare(self, e: Entry) -> Prepared:
        """Everything that needs no database: read, hash, decode, thumbnail, alpha mask
        (:func:`core.readers.prepare_entry`).

        Runs in a helper thread ahead of the database work (PIL releases the GIL
        while decoding and resizing). Decoding is skipped for bytes the catalogue
        already had when the import started (a re-run costs a hash per file).
        """
        return prepare_entry(e, known_hashes=self.known_hashes, max_pixels=self.max_pixels, spool_dir=self.spool_dir)

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
        boxes = self._boxes(e)
        camtrap = self.plan is not None and self.plan.source == "camtrap-dp"
        if self.plan is not None and boxes is None:
            desc += ("; no animal observation in the package: one whole-photo annotation, for review" if camtrap
                     else "; not in the detections file: imported as one whole-photo annotation")
        refused_only = boxes is not None and bool(boxes.invalid) and not boxes.animals and not boxes.observations
        if boxes is not None and not boxes.animals and not boxes.observations and not refused_only \
                and not self.plan.keep_empty:
            people = f" ({len(boxes.people)} person box(es))" if boxes.people else ""
            what = ("the package observes no animal here (blank, people or vehicles only)" if camtrap
                    else "no animal box at or above the detector threshold")
            return IngestItemResult(e.name, "empty", f"{what}{people}: not imported ({self.keep_empty_words} to "
                                    "keep empty frames)")
        if refused_only:
            desc += (f"; not an empty frame: its {len(boxes.invalid)} box(es) were refused as invalid "
                     f"({'; '.join(boxes.invalid)}): imported as one whole-photo annotation, for review"
                     + (f", {len(boxes.people)} person box(es) blurred" if boxes.people else ""))
        elif boxes is not None:
            n = len(boxes.observations) if camtrap else len(boxes.animals)
            desc += (f"; {n} animal observation{'s' if n != 1 else ''}" if camtrap else f"; {_animals(n)}") \
                + (f", {len(boxes.people)} person box(es) blurred" if boxes.people else "")
        if self.dry_run:
            self.seen[prep.digest] = e.name
            if e.identity and e.identity not in self.planned_individuals and find_individual_by_name(session, e.identity) is None:
                desc += " (new individual)"
                self.planned_individuals.add(e.identity)
            linking = self._would_link(e, exif_time=decoded.exif_time)
            return IngestItemResult(e.name, "would-import", desc + (f"; {linking}" if linking else ""))
        return self._store(session, e, prep.source, prep.digest, decoded, prep.thumb, prep.mask_png, prep.quality, desc,
                           boxes)

    def run_one(self, session: Session, e: Entry) -> IngestItemResult:
        """Prepare and handle one entry in the calling thread."""
        return self.handle(session, self.prepare(e))

    def _store(self, session, e: Entry, data: bytes | Path, digest: str, decoded: DecodedImage, thumb: bytes,
               mask_png: bytes | None, quality, desc: str, boxes: FrameBoxes | None = None) -> IngestItemResult:
        written: list[str] = []
        try:
            blob = self._put(written, data, kind="images", ext=extension_for(decoded.format), digest=digest)
            people = [d.box for d in boxes.people] if boxes is not None else []
            if people:  # camera traps photograph people: their boxes are blurred in every thumbnail
                thumb = make_thumbnail(blur_boxes(decoded.image, people))
            thumb_rel = self._put(written, thumb, kind="thumbs", ext=".jpg", digest=digest)
            photo = Photo(
                content_hash=digest, original_name=e.name[:500], blob_path=blob, thumb_path=thumb_rel,
                format=decoded.format[:16], mode=decoded.mode[:16], width=decoded.width, height=decoded.height,
                size_bytes=data.stat().st_size if isinstance(data, Path) else len(data),
                exif_time=decoded.exif_time, gps_lat=decoded.gps_lat, gps_lon=decoded.gps_lon,
                people=[[*d.box.as_list(), round(d.confidence, 4)] for d in boxes.people] if people else None,
                detections=dict(self.plan.details) if boxes is not None else None,
            )
            station_note = self._place(photo, e, decoded)
            if e.media_key:  # a Camtrap DP media row: its mediaID and other fields, for the export
                self._check_media_key(session, e.media_key)
                photo.media_key, photo.media_details = e.media_key, e.media_details
            if e.sighting:
                photo.sighting = self._sighting(session, e.sighting, decoded)
            session.add(photo)
            species_id = self._species_id(session, e.species)
            made: list[Image] = []
            notes: list[str] = []
            if boxes is not None and boxes.observations:  # Camtrap DP: one annotation per animal observation
                for obs in boxes.observations:
                    img = self._annotation(photo, e, species_id=species_id, thumb_rel=thumb_rel)
                    session.add(img)
                    notes.extend(self._observe(session, img, obs, decoded=decoded, people=people,
                                               thumb_rel=thumb_rel, written=written))
                    made.append(img)
            elif boxes is None or (boxes.invalid and not boxes.animals):  # one animal: the whole photo
                img = self._annotation(photo, e, species_id=species_id, thumb_rel=thumb_rel)
                if mask_png is not None:
                    img.mask_path = self._put(written, mask_png, kind="masks", ext=".png")
                    img.mask_source = "alpha"
                    img.solidity = quality.solidity
                    img.mask_flags = list(quality.flags)
                    img.mask_details = {"rule": "alpha > threshold", "threshold": alpha_threshold(),
                                        "area_fraction": quality.area_fraction, "n_components": quality.n_components}
                made.append(img)
            else:
                for det in boxes.animals:
                    made.append(self._annotation(
                        photo, e, species_id=species_id, box=det.box, confidence=det.confidence,
                        thumb_rel=self._put(written, _crop_thumbnail(decoded, det.box, people), kind="thumbs",
                                            ext=".jpg")))
            for img in made:
                session.add(img)
            note = self._assign(session, made[0], e.identity) if e.identity and len(made) == 1 else ""
            if e.identity and len(made) > 1:
                note = f"{len(made)} animals in this photo: {e.identity!r} was not assigned to any of them"
            note = "; ".join([note, *notes] if note else notes)
            session.flush()
            for img in made:
                self._before_commit(session, img)
            self._commit(session, digest)
        except KeyboardInterrupt:  # interrupted half way: this file leaves nothing behind, the run stops
            self._rollback(session)
            self._discard(session, written)
            raise
        except Exception as exc:  # any failure: this file leaves nothing behind
            self._rollback(session)
            self._discard(session, written)
            raced = session.scalar(select(Photo).where(Photo.content_hash == digest))
            if raced is not None:  # another import stored the same bytes meanwhile
                return self._existing(session, e, raced)
            return IngestItemResult(e.name, "error",
                                    f"could not be stored ({self._why(exc)}); nothing was kept for this file")
        ids = tuple(img.id for img in made)
        if not made:
            desc += "; an empty frame, kept as a photo without annotations"
        return IngestItemResult(e.name, "imported", desc + (f"; {note}" if note else "")
                                + (f"; warning: {e.warning}" if e.warning else "")
                                + (f"; {station_note}" if station_note else ""), ids[0] if ids else None,
                                photo_id=photo.id, annotation_ids=ids)

    def _would_link(self, e: Entry, *, exif_time: str | None) -> str:
        """A dry run's words for the linking the import would do: the deployment (stored, or the package's own)
        and the event of a photo, or why it would stay unlinked; '' when the import links nothing."""
        if self.stations is None or not (self.stations or e.deployment):
            return ""
        if e.deployment and e.deployment in self.planned_deployments and e.deployment not in self.stations.by_key:
            words = f"would be linked to deployment {e.deployment} (stored by this import)"
            if e.taken_at:
                words += f", taken {e.taken_at}"
        else:
            found = self.stations.resolve(deployment=e.deployment, taken_at=e.taken_at, exif_time=exif_time)
            if found.deployment_id is None:
                return "would not be linked to a deployment" + (f" ({'; '.join(found.warnings)})"
                                                                 if found.warnings else "")
            words = f"would be linked to deployment {found.deployment_key}" + (
                f", taken {found.taken_at}" if found.taken_at else "") + (
                f" ({'; '.join(found.warnings)})" if found.warnings else "")
        if e.sighting:
            event = e.sighting.get("event_key")
            return words + (f", in event {event}" if event else f", in sighting {e.sighting['key']}")
        return words + f", grouped into an event with the photos of its deployment within {self.event_gap_s:g} s"

    def _place(self, photo: Photo, e: Entry, decoded: DecodedImage) -> str:
        """Camera stations: the photo's deployment and time (:meth:`db.records.deployments.DeploymentIndex.resolve`);
        what the curator should know about them (an assumed time zone, no active deployment), or ''."""
        if self.stations is None or not (self.stations or e.deployment):
            return ""
        found = self.stations.resolve(deployment=e.deployment, taken_at=e.taken_at, exif_time=decoded.exif_time)
        photo.deployment_id, photo.taken_at = found.deployment_id, found.taken_at
        return "; ".join(found.warnings)

    def _events(self, session: Session, results: list[IngestItemResult]) -> None:
        """Group this run's new photos into events (:func:`db.records.deployments.form_events`); each photo's report line
        names its event."""
        by_photo = {r.photo_id: r for r in results if r.photo_id is not None
                    and (r.status == "imported" or r.photo_id in self._linked)}
        if not by_photo or not self.stations:
            return
        try:
            form_events(session, list(by_photo), gap_s=self.event_gap_s)
            session.commit()
        except Exception as exc:  # the photos are stored: say they were not grouped, never lose them
            self._rollback(session)
            for r in by_photo.values():
                r.message += f"; could not be grouped into events ({self._why(exc)})"
            return
        rows = session.execute(select(Photo.id, Sighting.key).join(Sighting, Photo.sighting_id == Sighting.id)
                               .where(Photo.id.in_(list(by_photo)),
                                      Sighting.key.startswith(EVENT_KEY_PREFIX, autoescape=True)))
        for photo_id, key in rows:
            by_photo[photo_id].message += f"; event {key} (photos of its deployment within {self.event_gap_s:g} s)"

    def _annotation(self, photo: Photo, e: Entry, *, species_id: int, thumb_rel: str | None,
                    box: Box = WHOLE_PHOTO, confidence: float | None = None) -> Image:
        """A new annotation of ``photo``: its file columns, box and the facts the entry states."""
        img = Image(photo=photo, **{c: getattr(photo, c) for c in PHOTO_FILE_COLUMNS}, thumb_path=thumb_rel,
                    flank=_flank(e) or Flank.unknown, flank_source="manifest" if e.flank else None,
                    species_id=species_id, box_source="whole-photo" if box.is_whole and confidence is None
                    else self.plan.source, box_confidence=confidence)
        img.box = box
        img.sighting = photo.sighting
        return img

    def _observe(self, session: Session, img: Image, obs: Observation, *, decoded: DecodedImage,
                 people: Sequence[Box], thumb_rel: str | None, written: list[str]) -> list[str]:
        """Make ``img`` the annotation of one Camtrap DP observation: its box (none: the whole photo), species,
        observation key, life stage, sex and other fields, and its ``individualID`` assigned (the individual's sex
        and life stage filled when it has none). An individualID catalogued under another species than the
        observation's is refused (CatalogueError naming both). Returns notes for the report line."""
        box = obs.box or WHOLE_PHOTO
        img.box = box
        img.box_source, img.box_confidence = ("whole-photo" if box.is_whole else self.plan.source), None
        img.thumb_path = thumb_rel if box.is_whole else self._put(
            written, _crop_thumbnail(decoded, box, people), kind="thumbs", ext=".jpg")
        img.species_id = self._species_id(session, obs.scientific_name)  # none named: the default species
        img.observation_key = obs.key
        img.life_stage, img.sex = obs.life_stage, obs.sex
        img.observation_details = dict(obs.details) or None
        if not obs.individual:
            return []
        known = find_individual_by_name(session, obs.individual)
        if known is not None and known.species_id != img.species_id:
            if not obs.scientific_name:  # the observation names no species: the individual's is taken
                img.species_id = known.species_id
            else:
                stored = session.scalar(select(Species.name).where(Species.id == known.species_id))
                raise CatalogueError(
                    f"observation {obs.observation_id!r}: individualID {obs.individual!r} is catalogued as "
                    f"{stored!r}, the observation says {obs.scientific_name!r}: refused; correct the package's "
                    "scientificName or individualID (or the individual's species in the catalogue)")
        note = self._assign(session, img, obs.individual)
        ind = session.get(Individual, img.individual_id)
        if ind is not None:
            if ind.sex is None and obs.sex:
                ind.sex = obs.sex
            if ind.life_stage is None and obs.life_stage:
                ind.life_stage = obs.life_stage
        return [f"observation {obs.observation_id} -> {obs.individual}"] + ([note] if note else [])

    def _check_media_key(self, session: Session, key: str) -> None:
        """Refuse a second photo for one Camtrap DP mediaID (other bytes under an id already catalogued)."""
        row = session.execute(select(Photo.id, Photo.original_name).where(Photo.media_key == key)).first()
        if row is not None:
            raise CatalogueError(f"mediaID {key!r} is already in the catalogue as photo #{row[0]} ({row[1]}) with "
                                 "other bytes; one media row names one file")

    def _before_commit(self, session: Session, img: Image) -> None:
        """Hook for tests (fault injection after the blobs were written)."""

    def _existing(self, session: Session, e: Entry, photo: Photo) -> IngestItemResult:
        """Same bytes already catalogued: add the detector's new boxes, fill in missing facts, report
        contradictions."""
        anns = list(session.scalars(select(Image).where(Image.photo_id == photo.id).order_by(Image.id)))
        boxes = self._boxes(e)
        base = f"already in the catalogue as photo #{photo.id}"
        same_as = photo.original_name if photo.original_name != e.name else None
        if same_as:
            base = f"same bytes as {same_as!r}, already in the catalogue as photo #{photo.id}"
        linked = self._link_known_photo(session, e, photo, anns)
        result = self._existing_facts(session, e, photo, anns, boxes, base, same_as)
        if linked:
            result.message += f"; {linked}"
            if result.status == "duplicate":
                result.status = "would-update" if self.dry_run else "updated"
        return result

    def _link_known_photo(self, session: Session, e: Entry, photo: Photo, anns: list[Image]) -> str:
        """A known photo without a deployment that this import places at one (a Camtrap DP package of photos
        catalogued before, a manifest's ``deployment`` column): link it, give it its time and, when it has no
        sighting, the import's (a Camtrap DP eventID) or, after the run, an event; its own transaction. Returns
        what was done, or ''. A photo already linked keeps its deployment."""
        if photo.deployment_id is not None or not e.deployment or self.stations is None:
            return ""
        if self.dry_run and e.deployment in self.planned_deployments and e.deployment not in self.stations.by_key:
            return f"would be linked to deployment {e.deployment} (stored by this import)"
        found = self.stations.resolve(deployment=e.deployment, taken_at=e.taken_at, exif_time=photo.exif_time)
        if found.deployment_id is None:
            return ""
        words = f"linked to deployment {found.deployment_key}" + (f" ({'; '.join(found.warnings)})"
                                                                    if found.warnings else "")
        if self.dry_run:
            return "would be " + words
        try:
            photo.deployment_id = found.deployment_id
            if photo.taken_at is None:
                photo.taken_at = found.taken_at
            if photo.sighting_id is None and e.sighting:
                photo.sighting = self._sighting(session, e.sighting, None)
                for a in anns:
                    if a.sighting_id is None:
                        a.sighting = photo.sighting
            session.flush()
            self._commit(session)
        except Exception as exc:
            self._rollback(session)
            return f"could not be linked to deployment {found.deployment_key} ({self._why(exc)})"
        self._linked.add(photo.id)
        return words

    def _existing_facts(self, session: Session, e: Entry, photo: Photo, anns: list[Image],
                        boxes: FrameBoxes | None, base: str, same_as: str | None) -> IngestItemResult:
        """A known photo's new boxes or observations, or the facts the import states for its one animal."""
        if boxes is not None and boxes.observations:
            return self._existing_observations(session, e, photo, anns, boxes, base, same_as)
        if boxes is not None:
            return self._existing_boxes(session, e, photo, anns, boxes, base, same_as)
        if len(anns) != 1:
            ids = ", ".join(f"#{a.id}" for a in anns) or "none"
            msg = f"{base}; it holds {len(anns)} annotations ({ids}): facts for one animal were not applied"
            return IngestItemResult(e.name, "duplicate", msg, anns[0].id if anns else None, same_as=same_as,
                                    photo_id=photo.id, annotation_ids=tuple(a.id for a in anns))
        img = anns[0]
        base = base.replace(f"photo #{photo.id}", f"image #{img.id}") if img.id == photo.id else base
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
        found = {"photo_id": photo.id, "annotation_ids": (img.id,)}
        if not changes:
            return IngestItemResult(e.name, "duplicate", "; ".join([base, *notes]), img.id, same_as=same_as, **found)
        if self.dry_run:
            return IngestItemResult(e.name, "would-update", "; ".join([base, "would set " + ", ".join(changes), *notes]),
                                    img.id, **found)
        try:
            note = ""
            if e.identity and current is None:
                note = self._assign(session, img, e.identity)
            if flank and img.flank == Flank.unknown:
                img.flank, img.flank_source = flank, "manifest"
            if e.sighting and img.sighting_id is None:
                img.sighting = self._sighting(session, e.sighting, None)
                photo.sighting = img.sighting
            if self.update_metadata:  # an audited change of the sighting (db.audit: sighting.metadata)
                for attr, _old, value in metadata:
                    setattr(sighting, attr, value)
            session.flush()
            self._commit(session)
        except Exception as exc:
            self._rollback(session)
            return IngestItemResult(e.name, "error", f"{base}; could not update it ({self._why(exc)})", img.id,
                                    **found)
        return IngestItemResult(e.name, "updated", "; ".join([base, "set " + ", ".join(changes), *notes, *([note] if note else [])]),
                                img.id, **found)

    def _existing_observations(self, session: Session, e: Entry, photo: Photo, anns: list[Image],
                               boxes: FrameBoxes, base: str, same_as: str | None) -> IngestItemResult:
        """A known photo imported again from a Camtrap DP package: add the observations it lacks, once.

        An observation already catalogued (its observation key) is not added again, so importing the same package
        twice changes nothing, and one whose annotation a curator moved or deleted (not undone) is left alone and
        named. An undecided whole-photo annotation that is no observation (the photo imported
        before, without the package) takes the first new observation's place (same id); the others are added."""
        keys = [o.key for o in boxes.observations]
        known = set(session.scalars(select(Image.observation_key).where(Image.observation_key.in_(keys))))
        overrides = curator_overrides(session, photo.id)
        new: list[Observation] = []
        left_alone: list[str] = []
        for obs in boxes.observations:
            override = _observation_overridden(obs, overrides)
            if override is not None and (obs.key not in known or override.observation_key == obs.key):
                left_alone.append(_observation_left_alone(obs, override, anns))
            elif obs.key not in known:
                new.append(obs)
        found = {"photo_id": photo.id, "annotation_ids": tuple(a.id for a in anns)}
        if not new:
            words = f"its {len(keys)} observation(s) are catalogued" if not left_alone else "no new observations"
            return IngestItemResult(e.name, "duplicate", "; ".join([f"{base}; {words}", *left_alone]),
                                    anns[0].id if anns else None, same_as=same_as, **found)
        if self.dry_run:
            return IngestItemResult(e.name, "would-update", "; ".join([f"{base}; would add {len(new)} observation(s)",
                                                                       *left_alone]), None, **found)
        written: list[str] = []
        notes: list[str] = []
        added: list[Image] = []
        try:
            whole = [a for a in anns if a.box.is_whole and a.observation_key is None
                     and not _curator_owned(session, a)]
            decoded = None
            people = [d.box for d in boxes.people]
            for obs in new:
                if decoded is None and obs.box is not None and not obs.box.is_whole:
                    decoded = decode_image(self.cat.blobs.path(photo.blob_path).read_bytes(),
                                           name=e.name, max_pixels=self.max_pixels)
                if whole:
                    ann = whole.pop(0)
                    ann.mask_path = ann.mask_source = ann.mask_details = ann.solidity = ann.mask_flags = None
                else:
                    species_id = self._species_id(session, e.species)
                    with session.no_autoflush:  # the new annotation joins the session below, not half-made
                        ann = self._annotation(photo, e, species_id=species_id, thumb_rel=photo.thumb_path)
                    session.add(ann)
                    anns.append(ann)
                notes.extend(self._observe(session, ann, obs, decoded=decoded, people=people,
                                           thumb_rel=photo.thumb_path, written=written))
                added.append(ann)
            if e.media_key and photo.media_key is None:
                self._check_media_key(session, e.media_key)
                photo.media_key, photo.media_details = e.media_key, e.media_details
        except Exception as exc:
            return self._update_failed(session, e, written, f"{base}; could not add its observations", exc, found)
        return self._update_done(session, e, photo, boxes, anns, written, found,
                                 [base, f"added {len(new)} observation(s)", *left_alone, *notes],
                                 what="its observations", added=added)

    def _existing_boxes(self, session: Session, e: Entry, photo: Photo, anns: list[Image], boxes: FrameBoxes,
                        base: str, same_as: str | None) -> IngestItemResult:
        """A known photo imported again with a detector's boxes: add the boxes it lacks, once.

        A box already there (same source, same box) is not added again, so importing the same detections twice
        changes nothing. A detection whose box a curator moved or deleted (a standing override,
        :func:`db.records.annotations.curator_overrides`), or one lying over that box, is left alone, and so is a machine
        box over an annotation a curator drew, named or decided (the curator's stays): the report names each. An
        undecided whole-photo annotation is the photo before anyone knew where the animal was: the first new box
        takes its place (same id), the others are added.
        """
        notes: list[str] = []
        new: list[Detection] = []
        overrides = curator_overrides(session, photo.id)
        for det in boxes.animals:
            if any(a.box_source == self.plan.source and a.box == det.box for a in anns):
                continue
            override = _overridden(det, overrides)
            if override is not None:
                notes.append(_left_alone(det, self.plan.source, override, anns))
                continue
            kept = next((a for a in anns if not a.box.is_whole and a.box.iou(det.box) >= SAME_ANIMAL_IOU
                         and _curator_owned(session, a)), None)
            if kept is not None:
                notes.append(f"the {self.plan.source} box {det.box.as_list()} (confidence {det.confidence:.2f}) "
                             f"lies over annotation #{kept.id} ({kept.box_source}, kept by the curator): not added")
                continue
            new.append(det)
        found = {"photo_id": photo.id, "annotation_ids": tuple(a.id for a in anns)}
        if not new:
            return IngestItemResult(e.name, "duplicate", "; ".join([base, "no new boxes", *notes]),
                                    anns[0].id if anns else None, same_as=same_as, **found)
        if self.dry_run:
            return IngestItemResult(e.name, "would-update", "; ".join([base, f"would add {_animals(len(new))}",
                                                                       *notes]), None, **found)
        written: list[str] = []
        added: list[Image] = []
        try:
            whole = [a for a in anns if a.box.is_whole and not _curator_owned(session, a)]
            decoded = None
            people = [d.box for d in boxes.people]
            for det in new:
                if decoded is None:
                    decoded = decode_image(self.cat.blobs.path(photo.blob_path).read_bytes(),
                                           name=e.name, max_pixels=self.max_pixels)
                thumb_rel = self._put(written, _crop_thumbnail(decoded, det.box, people), kind="thumbs", ext=".jpg")
                if whole:
                    ann = whole.pop(0)
                    ann.box, ann.box_source, ann.box_confidence, ann.thumb_path = \
                        det.box, self.plan.source, det.confidence, thumb_rel
                    ann.mask_path = ann.mask_source = ann.mask_details = ann.solidity = ann.mask_flags = None
                else:
                    species_id = anns[0].species_id if anns else self._species_id(session, e.species)
                    # loading the photo's sighting must not flush the new annotation before it joins the session
                    with session.no_autoflush:
                        ann = self._annotation(photo, e, species_id=species_id, thumb_rel=thumb_rel, box=det.box,
                                               confidence=det.confidence)
                    session.add(ann)
                    anns.append(ann)
                added.append(ann)
        except Exception as exc:
            return self._update_failed(session, e, written, f"{base}; could not add its boxes", exc, found)
        return self._update_done(session, e, photo, boxes, anns, written, found,
                                 [base, f"added {_animals(len(new))}", *notes], what="its boxes", added=added)

    def _update_failed(self, session: Session, e: Entry, written: list[str], words: str, exc: Exception,
                       found: dict[str, Any]) -> IngestItemResult:
        """A known photo's update failed: nothing of it stays (rows rolled back, new files removed)."""
        self._rollback(session)
        self._discard(session, written)
        return IngestItemResult(e.name, "error", f"{words} ({self._why(exc)})", None, **found)

    def _update_done(self, session: Session, e: Entry, photo: Photo, boxes: FrameBoxes, anns: list[Image],
                     written: list[str], found: dict[str, Any], words: list[str], *, what: str,
                     added: Sequence[Image]) -> IngestItemResult:
        """Finish a known photo's update with new boxes or observations (``added``: the annotations they became):
        its person boxes and provenance, then commit (one transaction per file, as for a new photo)."""
        try:
            if boxes.people and not photo.people:
                photo.people = [[*d.box.as_list(), round(d.confidence, 4)] for d in boxes.people]
            photo.detections = dict(self.plan.details)
            session.flush()
            self._commit(session)
        except Exception as exc:
            return self._update_failed(session, e, written, f"{words[0]}; could not add {what}", exc, found)
        found["annotation_ids"] = tuple(a.id for a in anns)
        return IngestItemResult(e.name, "updated", "; ".join(words), anns[0].id, added_ids=tuple(a.id for a in added),
                                **found)

    # ---- many files

    def run(self, entries: Sequence[Entry], *, progress: Progress | None = None,
            should_cancel: Callable[[], bool] | None = None, lookahead: int = PREFETCH) -> list[IngestItemResult]:
        """Every entry, in order; files are prepared ``lookahead`` ahead in one helper thread.

        When ``should_cancel()`` turns true the import stops between two files: what was
        imported stays (each file is its own transaction) and the rest is reported as skipped,
        so running the same import again picks up where it stopped. Every change is audited as this import's user.
        """
        with acting_as(self.user), spool_folder() as spool:
            self.spool_dir = spool  # large streamed files (core.readers.prepare), removed with it at the end
            try:
                return self._run(entries, progress=progress, should_cancel=should_cancel, lookahead=lookahead)
            finally:
                self.spool_dir = None

    def _run(self, entries: Sequence[Entry], *, progress: Progress | None, should_cancel: Callable[[], bool] | None,
             lookahead: int) -> list[IngestItemResult]:
        results: list[IngestItemResult] = []
        total = len(entries)
        with self.cat.unit_of_work() as session:
            self.known_hashes = set(session.scalars(select(Photo.content_hash)))
            self.stations = DeploymentIndex(session)
            session.rollback()
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-prepare") as pool:
                queue: deque[Future[Prepared]] = deque()
                upcoming = iter(entries)
                for e in itertools.islice(upcoming, max(1, lookahead)):
                    queue.append(pool.submit(self.prepare, e))
                i = 0
                prep: Prepared | None = None
                try:
                    while queue:
                        fut = queue.popleft()
                        nxt = next(upcoming, None)
                        if nxt is not None:
                            queue.append(pool.submit(self.prepare, nxt))
                        prep = None
                        try:
                            prep = fut.result()
                            res = self.handle(session, prep)
                        except Exception as exc:  # a bug or DB outage for one file must not stop the batch
                            self._rollback(session)
                            res = IngestItemResult(entries[i].name, "error", f"unexpected problem ({self._why(exc)})")
                        finally:
                            if prep is not None:  # its spooled copy, if any: the blob is stored by now
                                prep.discard()
                        results.append(res)
                        if self.dry_run:
                            self._rollback(session)
                        i += 1
                        if progress is not None:
                            progress(i, total)
                        if should_cancel is not None and i < total and should_cancel():
                            for fut in queue:
                                fut.cancel()
                            results.extend(IngestItemResult(e.name, "skipped", "import stopped by the curator "
                                                            "before this file; import again to continue")
                                           for e in entries[i:])
                            results.append(_stopped(results, total, why="was stopped by the curator"))
                            break
                except KeyboardInterrupt:  # Ctrl-C, wherever it lands: the report says what stayed
                    for fut in queue:
                        fut.cancel()
                    self._interrupted(session, entries, results, prep)
            if not self.dry_run:
                try:
                    self._events(session, results)
                except KeyboardInterrupt:  # the photos are stored; only their grouping is undone
                    self._rollback(session)
                    self.interrupted = True
                    results.append(IngestItemResult(
                        "import", "note", "the import was interrupted while grouping its photos into events: the "
                        "photos are stored, not grouped", about_import=True))
        return results

    def _interrupted(self, session: Session, entries: Sequence[Entry], results: list[IngestItemResult],
                     prep: Prepared | None) -> None:
        """Ctrl-C during the run: undo the current file's transaction (unless the interrupt came after its commit:
        then it is stored, whole, and reported so), report the rest as not imported, and add the line that says
        running the same import again resumes."""
        self.interrupted = True
        self._rollback(session)
        if prep is not None:
            prep.discard()
        done = len(results)
        if done < len(entries) and prep is not None and prep.entry is entries[done]:
            stored = self._stored_before_interrupt(session, prep)
            if stored is not None:
                results.append(stored)
        results.extend(IngestItemResult(e.name, "skipped", "the import was interrupted before this file was "
                                        "stored; import again to continue") for e in entries[len(results):])
        results.append(_stopped(results, len(entries), why="was interrupted"))

    def _stored_before_interrupt(self, session: Session, prep: Prepared) -> IngestItemResult | None:
        """The line of a file whose transaction was committed just before Ctrl-C landed (in an after-commit step),
        or None when it was not stored by this run."""
        if self.dry_run or prep.digest is None or prep.digest in self.known_hashes:
            return None
        try:
            photo = session.scalar(select(Photo).where(Photo.content_hash == prep.digest))
            ids = tuple(session.scalars(select(Image.id).where(Image.photo_id == photo.id).order_by(Image.id))) \
                if photo is not None else ()
        except Exception:  # noqa: BLE001 - the report then says "not stored": a re-import finds it anyway
            return None
        if photo is None:
            return None
        return IngestItemResult(prep.entry.name, "imported", "stored just before the import was interrupted",
                                ids[0] if ids else None, photo_id=photo.id, annotation_ids=ids)
        return results


def _stopped(results: Sequence[IngestItemResult], total: int, *, why: str) -> IngestItemResult:
    """The line of an import that stopped before its last file: how much it kept, and that running it again
    resumes (each file is its own transaction, and what is catalogued is recognised by its bytes)."""
    files = [r for r in results if not r.about_import]
    done = [r for r in files if r.status != "skipped"]
    kept = sum(1 for r in done if r.status in ("imported", "updated"))
    left = len(files) - len(done)
    return IngestItemResult("import", "note", f"the import {why} after {len(done)} of {total} files: {kept} "
                            f"stored and kept, each complete (its photo, annotations and links), {left} not "
                            "imported yet. Run the same import again to resume: what it already stored is "
                            "recognised and left as it is, and the rest comes in", about_import=True)


def megadetector_plan(path: str | Path, names: Sequence[str], *, min_confidence: float = DEFAULT_MIN_CONFIDENCE,
                      keep_empty: bool = False) -> tuple[DetectionPlan, list[IngestItemResult]]:
    """The boxes a MegaDetector batch JSON gives the files ``names`` of an import, and the report lines about
    the JSON itself (files it names that the import lacks, detections it could not read). Raises IngestError
    when the file is not MegaDetector output of a version Rosette reads."""
    p = Path(path).expanduser()
    try:
        output = read_megadetector_json(p, min_confidence=min_confidence)
    except FileNotFoundError:
        raise IngestError(f"{p}: no such detections file") from None
    except DetectionsFormatError as exc:
        raise IngestError(f"{p.name}: {exc}") from None
    matched, missing = match_frames(output, names)
    notes = [IngestItemResult(p.name, "error", f"detections file: {problem}") for problem in output.problems]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        notes.append(IngestItemResult(p.name, "error", f"{len(missing)} file(s) named in the detections file are "
                                      f"not in the import: {shown}"))
    failed = sorted(name for name, fd in matched.items() if fd.failure)
    if failed:  # the detector could not read these: they come in as whole photos, as without a detections file
        notes.append(IngestItemResult(p.name, "error", f"the detector could not read {len(failed)} file(s) "
                                      f"({', '.join(failed[:5])}): imported as whole photos"))
    frames = {name: FrameBoxes(animals=fd.animals, people=fd.people, below_threshold=fd.below_threshold,
                               invalid=fd.invalid) for name, fd in matched.items() if not fd.failure}
    details = {"source": "megadetector", "file": p.name, "detector": output.detector,
               "format_version": output.format_version, "min_confidence": min_confidence}
    return DetectionPlan(frames=frames, source="megadetector", details=details, keep_empty=keep_empty), notes


def detector_plan(name: str, entries: Sequence[Entry], *, min_confidence: float = DEFAULT_MIN_CONFIDENCE,
                  keep_empty: bool = False, max_pixels: int = MAX_PIXELS,
                  progress: Progress | None = None) -> tuple[DetectionPlan, list[IngestItemResult]]:
    """Run the registered detector ``name`` on every file of an import first (boxes with source
    ``detector:<name>``, the same path as a MegaDetector JSON). Raises IngestError when the detector cannot run
    here (no weights: the reason names where they go). A file that cannot be read or decoded is left out of the
    plan; the import then reports it as it does without a detector."""
    available, why = detector_available(name)
    if not available:
        raise IngestError(f"the {name} detector cannot run here: {why}")
    detector = create_detector(name)
    frames: dict[str, FrameBoxes] = {}
    for n, e in enumerate(entries):
        if e.read is None or e.error:
            continue
        try:
            found = detector.detect(load_rgb(e.read(), max_pixels=max_pixels))
        except (OSError, ValueError):  # unreadable: the import itself says why, for this file
            continue
        keep = [d for d in found if d.confidence >= min_confidence]
        frames[e.name] = FrameBoxes(animals=tuple(d for d in keep if d.category == "animal"),
                                    people=tuple(d for d in keep if d.category == "person"),
                                    below_threshold=len(found) - len(keep))
        if progress is not None:
            progress(n + 1, len(entries))
    details = {"source": f"detector:{name}", **detector.details(), "min_confidence": min_confidence}
    return DetectionPlan(frames=frames, source=f"detector:{name}", details=details, keep_empty=keep_empty), []


def camtrapdp_plan(package: CamtrapPackage, *, keep_empty: bool = False) -> DetectionPlan:
    """The annotations a Camtrap DP package gives its media: each animal observation becomes one (box
    ``camtrap-dp``, or the whole photo), ``human`` boxes are blurred in thumbnails, and a media row observed to hold
    no animal (blank, people, vehicles only) is an empty frame, imported only with ``keep_empty``. A media row
    without observations (or only ``unknown`` / ``unclassified`` ones) is left out of the plan: it comes in as one
    whole-photo annotation for review."""
    frames: dict[str, FrameBoxes] = {}
    for name, facts in package.observations.items():
        # a person box the package states has no detector confidence: 1.0 stands for "stated by the package"
        people = tuple(Detection("person", box, 1.0) for box in facts.people)
        if facts.animals:  # an animal whose box cannot be used is a whole-photo annotation, its box counted refused
            frames[name] = FrameBoxes(people=people, observations=facts.animals, invalid=refused_boxes(facts))
        elif facts.is_empty:
            frames[name] = FrameBoxes(people=people)
    details = {"source": "camtrap-dp", "file": package.label, "profile": package.profile}
    return DetectionPlan(frames=frames, source="camtrap-dp", details=details, keep_empty=keep_empty)


def _package_deployments(cat, package: CamtrapPackage, *, user: str, dry_run: bool) -> list[IngestItemResult]:
    """Store a Camtrap DP package's deployments before its media (:func:`db.records.deployments.store_deployments`); the
    report lines (about the package, not counted as media): what was stored, its warnings, and each deployment stored
    differently before (kept as stored). Deployments without coordinates have the package reader's own line."""
    stored = store_deployments(cat, package.deployments, user=user, dry_run=dry_run)
    label = "deployments"
    words = "; ".join([stored.summary(), *(w for w in stored.warnings if "have no coordinates" not in w)])
    status = ("would-import" if dry_run else "imported") if stored.new else "duplicate"
    lines = [IngestItemResult(label, status, words, about_import=True)]
    lines.extend(IngestItemResult(label, "error", c.describe(), about_import=True) for c in stored.conflicting)
    return lines


def _animals(n: int) -> str:
    return f"{n} animal box{'es' if n != 1 else ''}"


def _crop_thumbnail(decoded: DecodedImage, box: Box, people: Sequence[Box]) -> bytes:
    """The thumbnail of one annotation: its box's crop, person boxes blurred first."""
    img = blur_boxes(decoded.image, people) if people else decoded.image
    return make_thumbnail(img.crop(crop_rect(box, img.width, img.height)))


def _finish(report: IngestReport, t0: float) -> IngestReport:
    report.seconds = time.perf_counter() - t0
    return report


#: How a folder's first-level sub-folders are read (see :func:`ingest_path`): chosen, or ``auto``.
LAYOUTS = ("auto", *FOLDER_MEANINGS)


def _folder_meaning(cat, entries: Sequence[Entry], *, layout: str, read_as: str) -> str | None:
    """What a folder's (or zip's) first-level folders are read as (one of FOLDER_MEANINGS; see
    :func:`ingest_path`), or None when the import is not read as folders of photos (a manifest, a package)."""
    folder_like = read_as in ("folder", "zip (folder)")
    if not folder_like:
        if layout == "stations":
            raise IngestError(f"the stations layout is for a folder or a zip of photos; this is read as {read_as}")
        return None
    if layout != "auto":
        return layout
    folders = folder_counts(entries).folders
    if not folders:
        return "none"
    with cat.unit_of_work() as session:
        stations = DeploymentIndex(session)
    if stations and all(stations.is_station(f) for f in folders):
        return "stations"
    # a folder on this machine keeps its documented folder-per-individual reading; a zip's folder names never
    # become individuals unasked (a zip of station folders made each station an individual)
    return "individuals" if read_as == "folder" else "none"


#: The words after the layout in a report's format, by what the folders were read as.
_MEANING_WORDS = {"stations": " (stations)", "individuals": "",
                  "none": " (folder names not read: --layout stations or --layout individuals reads them)"}


def _tally(items: Sequence[IngestItemResult], plan: DetectionPlan | None) -> ImportTally:
    """The report's counts of things (:class:`core.readers.ImportTally`): photos and animals this import made,
    person boxes blurred in them, and what the boxes' source left out (below the threshold, refused as invalid,
    empty frames)."""
    imported = [it for it in items if it.status == "imported" and it.photo_id is not None]
    frames = plan.frames if plan is not None else {}
    given = [it for it in items if it.status == "updated" and it.added_ids]
    added = sum(len(it.added_ids) for it in given)
    tally = ImportTally(photos=len(imported), animals=sum(len(it.annotation_ids) for it in imported) + added,
                        photos_given_animals=len(given), animals_added=added, boxes=plan is not None,
                        min_confidence=(plan.details.get("min_confidence") if plan is not None else None))
    for it in imported:
        fb = frames.get(it.name)
        if fb is not None:
            tally.people_blurred += len(fb.people)
            if not it.annotation_ids:
                tally.empty_kept += 1
    tally.empty_left_out = sum(1 for it in items if it.status == "empty")
    tally.below_threshold = sum(fb.below_threshold for fb in frames.values())
    tally.invalid_boxes = sum(len(fb.invalid) for fb in frames.values())
    return tally


def _check_species(species: str | None) -> str | None:
    """The species an import sets (a clean name), or None; IngestError for a name no species may have."""
    if species is None or not species.strip():
        return None
    try:
        return clean_species_name(species)
    except CatalogueError as exc:
        raise IngestError(f"the species {species[:40]!r}: {exc}") from None


def _with_species(entries: Sequence[Entry], species: str | None) -> list[Entry]:
    """The import's species on every entry whose source names none of its own (a manifest's ``species`` column
    names a row's own)."""
    if species is None:
        return list(entries)
    return [replace(e, species=species) if e.species is None else e for e in entries]


def ingest_path(cat, path: str | Path, *, format: str | None = None, user: str, dry_run: bool = False,
                progress: Progress | None = None, should_cancel: Callable[[], bool] | None = None,
                max_pixels: int = MAX_PIXELS, update_metadata: bool = False, detections: str | Path | None = None,
                min_confidence: float = DEFAULT_MIN_CONFIDENCE, keep_empty: bool = False,
                detector: str | None = None, event_gap_s: float = EVENT_GAP_S,
                layout: str = "auto", species: str | None = None,
                keep_empty_words: str = KEEP_EMPTY_CLI) -> IngestReport:
    """Import a file, folder, zip, manifest CSV or Kaggle layout; one report line per file.

    With ``detections`` (a MegaDetector batch-output JSON) every animal box at or above ``min_confidence``
    becomes an annotation of its photo, person boxes are blurred in its thumbnails, and a frame with no animal
    box is reported as ``empty`` and left out unless ``keep_empty``. Importing the same JSON again adds nothing.
    With ``detector`` (a registered detector whose weights are here) the boxes come from running it instead.

    A Camtrap DP 1.x package (``format`` ``camtrap-dp``: its datapackage.json, folder or zip) stores its deployments
    first (:func:`db.records.deployments.store_deployments`), then its media: each animal observation becomes its own
    annotation (:func:`camtrapdp_plan`: box source ``camtrap-dp``, or the whole photo; species, individualID, life
    stage, sex, the other columns in ``observation_details``, keyed by ``observation_key`` so a second import adds
    nothing), media observed as blank are empty frames (kept only with ``keep_empty``), and a media row's eventID
    is its sighting (``event_key``).

    ``format`` is one of FORMATS (auto-detected when None). With ``dry_run``
    every file is read and decoded but nothing is written (database or disk).
    ``progress(done, total)`` is called after each file. Raises IngestError /
    FileNotFoundError only when the import cannot start at all; a manifest that
    lacks required columns gives a report with that single error. With ``update_metadata`` the sighting facts
    (date, place, position, camera, observer) of photos already catalogued are replaced by the import's
    (an audited change); without it they are reported and left alone.

    Camera stations (:mod:`db.records.deployments`): each photo is linked to the deployment its source names (a Camtrap DP
    deploymentID, a manifest ``deployment`` column) and given ``taken_at``; photos of one deployment within
    ``event_gap_s`` seconds of each other and without a sighting form one event. ``layout`` says how a folder's
    (or zip's) first-level sub-folders are read: ``individuals`` (one folder per individual), ``stations`` (the
    camera-trap ``Station/...`` layout: the folder names the station, and the deployment of that station active
    when the photo was taken is chosen), ``none`` (folder names are not read: photos come in unassigned) or
    ``auto``: stations when deployments are stored and every first-level folder names a stored station (a
    locationID or locationName), else individuals for a folder (its documented folder-per-individual layout) and
    nothing for a zip (a zip's folder names never become individuals unless asked).

    ``species`` is the species of what comes in (created if new, audited as the import's user) for every photo
    whose source names none (a manifest's ``species`` column names a row's own); a Camtrap DP package names its
    observations' species itself, so it is refused with one. ``keep_empty_words`` says how to keep empty frames
    in the words of the screen the import came from. ``report.tally`` counts photos, animals, people blurred and
    what the boxes' source left out.
    """
    if layout not in LAYOUTS:
        raise IngestError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    species = _check_species(species)
    if event_gap_s < 0:
        raise IngestError(f"the event gap must be at least 0 seconds (got {event_gap_s:g})")
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
        package: CamtrapPackage | None = None
        try:
            if fmt == "camtrap-dp":
                package = read_camtrapdp(p)
                entries, trees, layout_used = package.entries, [package.tree], "camtrap-dp"
            else:
                entries, trees, layout_used = entries_for_path(p, fmt)
        except ManifestError as exc:
            report.items.append(IngestItemResult(p.name, "error", str(exc)))
            return _finish(report, t0)
        meaning = _folder_meaning(cat, entries, layout=layout, read_as=layout_used)
        if meaning is not None:
            if folder_counts(entries).folders or meaning == "stations":
                layout_used += _MEANING_WORDS[meaning]
            entries = give_folders_meaning(entries, meaning)
        if species is not None:
            if package is not None:
                raise IngestError("a Camtrap DP package names each observation's species itself (scientificName): "
                                  "import it without a species")
            entries = _with_species(entries, species)
        report.format = layout_used
        problems = [pr for t in trees for pr in t.problems]
        plan = None
        if detections is not None and detector is not None:
            raise IngestError("boxes come from a detections file or from a detector, not both")
        if package is not None:
            if detections is not None or detector is not None:
                raise IngestError("a Camtrap DP package brings its own boxes (its observations); import it without "
                                  "--detections or --detector")
            problems.extend(package.problems)
            problems.extend(_package_deployments(cat, package, user=user, dry_run=dry_run))
            plan = camtrapdp_plan(package, keep_empty=keep_empty)
        elif detections is not None:
            plan, notes = megadetector_plan(detections, [e.name for e in entries], min_confidence=min_confidence,
                                            keep_empty=keep_empty)
            problems.extend(notes)
        elif detector is not None:
            plan, _ = detector_plan(detector, entries, min_confidence=min_confidence, keep_empty=keep_empty,
                                    max_pixels=max_pixels)
        if keep_empty and plan is None:
            raise IngestError("keeping empty frames (--keep-empty) needs a MegaDetector output file (--detections), "
                              f"a detector or a Camtrap DP package: {p.name} is read as {layout_used}, where no "
                              "frame is empty")
        importer = _Importer(cat, user=user, dry_run=dry_run, origin=f"{layout_used}:{p.name}",
                             max_pixels=max_pixels, update_metadata=update_metadata, plan=plan,
                             event_gap_s=event_gap_s, keep_empty_words=keep_empty_words)
        if package is not None:
            importer.planned_deployments = {d.key for d in package.deployments}
            importer.common_names = package.common_names
        report.items.extend(problems)
        report.items.extend(importer.run(entries, progress=progress, should_cancel=should_cancel))
        report.interrupted = importer.interrupted
        report.tally = _tally(report.items, plan)
    finally:
        for t in trees:
            t.close()
    return _finish(report, t0)


def ingest_uploads(cat, files: Sequence[str | Path], *, manifest: str | Path | None = None, user: str,
                   dry_run: bool = False, progress: Progress | None = None,
                   should_cancel: Callable[[], bool] | None = None, update_metadata: bool = False,
                   detections: str | Path | None = None, min_confidence: float = DEFAULT_MIN_CONFIDENCE,
                   keep_empty: bool = False, event_gap_s: float = EVENT_GAP_S, folders: str = "none",
                   species: str | None = None) -> IngestReport:
    """Import files uploaded through the UI: photos and/or zips, with an optional manifest CSV.

    ``detections``, ``min_confidence``, ``keep_empty`` and ``species`` are as for :func:`ingest_path` (the JSON's
    file names are matched against the uploaded names). ``folders`` says what the zips' first-level folders mean
    (``stations``, ``individuals`` or ``none``, the default: a folder name never becomes an individual unasked);
    :func:`upload_folders` previews what that finds.

    The manifest gives identity / flank / sighting by *original file name*
    (matched on the file name, folders ignored); its rows naming no uploaded file
    are reported as errors. Uploaded zips are read like ``--format zip``
    (:func:`core.readers.upload_entries`).

    A zip holding a Camtrap DP package (its ``datapackage.json``) is imported as the package it is, as
    :func:`ingest_path` does with ``format`` ``camtrap-dp``, when it is uploaded on its own: it brings its own
    deployments, boxes and individuals, so beside other files, a manifest or a MegaDetector file it is refused.
    """
    t0 = time.perf_counter()
    packages = [Path(f) for f in files if Path(f).is_file() and detect_format(f) == "camtrap-dp"]
    if packages:
        if len(files) == 1 and manifest is None and detections is None:
            return ingest_path(cat, packages[0], format="camtrap-dp", user=user, dry_run=dry_run, progress=progress,
                               should_cancel=should_cancel, update_metadata=update_metadata, keep_empty=keep_empty,
                               event_gap_s=event_gap_s, species=species, keep_empty_words=KEEP_EMPTY_TAB)
        with_it = []
        if len(files) > 1:
            others = [Path(f).name for f in files if Path(f) != packages[0]]
            with_it.append(f"other files ({', '.join(others[:3])}{' ...' if len(others) > 3 else ''})")
        if manifest is not None:
            with_it.append("a manifest")
        if detections is not None:
            with_it.append("a MegaDetector file")
        beside = ", ".join(with_it)
        report = IngestReport(source=f"{len(files)} uploaded file(s)", format="upload", dry_run=dry_run)
        report.items.append(IngestItemResult(
            packages[0].name, "error",
            f"{packages[0].name} is a Camtrap DP package, uploaded beside {beside}: a package brings its own "
            "deployments, boxes and individuals, so upload it on its own (nothing was imported)"))
        return _finish(report, t0)
    if keep_empty and detections is None:
        raise IngestError("keeping empty frames needs a MegaDetector output file or a Camtrap DP package: "
                          "without one no frame is empty")
    species = _check_species(species)
    report = IngestReport(source=f"{len(files)} uploaded file(s)", format="upload", dry_run=dry_run)
    upload = upload_entries(files, manifest=manifest, folders=folders)
    try:
        report.items.extend(upload.items)
        if upload.refused:
            return _finish(report, t0)
        plan = None
        if detections is not None:
            plan, notes = megadetector_plan(detections, [e.name for e in upload.entries],
                                            min_confidence=min_confidence, keep_empty=keep_empty)
            report.items.extend(notes)
        importer = _Importer(cat, user=user, dry_run=dry_run, origin="upload", update_metadata=update_metadata,
                             plan=plan, event_gap_s=event_gap_s, keep_empty_words=KEEP_EMPTY_TAB)
        report.items.extend(importer.run(_with_species(upload.entries, species), progress=progress,
                                         should_cancel=should_cancel))
        report.interrupted = importer.interrupted
        report.tally = _tally(report.items, plan)
    finally:
        upload.close()
    return _finish(report, t0)


@dataclass(frozen=True)
class FolderPreview:
    """What the first-level folders of uploaded zips are, before the person says what they mean: their photo
    counts, and which name a station of the stored deployments (with that station's deployment ids) or a
    catalogued individual."""

    folders: FolderCounts
    stations: dict[str, tuple[str, ...]]  # folder -> the deployments (deploymentIDs) of the station it names
    individuals: tuple[str, ...]  # folders named as a catalogued individual is
    deployments: int  # how many deployments are stored

    @property
    def suggested(self) -> str:
        """``stations`` when every folder names a stored station, else ``none`` (never ``individuals``: that is
        only ever chosen by the person)."""
        names = self.folders.folders
        return "stations" if names and all(n in self.stations for n in names) else "none"


def upload_folders(cat, files: Sequence[str | Path]) -> FolderPreview:
    """Preview the uploaded zips' first-level folders (:class:`FolderPreview`); reads the zips' listings only."""
    zips = [f for f in files if Path(f).is_file() and zipfile.is_zipfile(f) and Path(f).suffix.lower() != ".csv"]
    upload = upload_entries(zips, folders="individuals")
    upload.close()
    counts = upload.folders
    with cat.unit_of_work() as session:
        index = DeploymentIndex(session)
        stations: dict[str, tuple[str, ...]] = {}
        for name in counts.folders:
            if index.is_station(name):
                stations[name] = tuple(spec.key for _, spec in index.by_location[name.strip().lower()])
        individuals = tuple(n for n in counts.folders if find_individual_by_name(session, n) is not None)
        return FolderPreview(counts, stations, individuals, len(index.by_key))
