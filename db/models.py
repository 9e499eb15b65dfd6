"""SQLAlchemy 2.0 typed models of the Rosette catalogue (docs/DESIGN.md section 3).

Every table a curator's number can be traced through lives here: individuals,
sightings, images (with content hash, mask provenance and flank), identity
events (the undoable history of assignments, merges and splits), match
decisions, models, benchmarks, evaluations, jobs and users.
"""

from __future__ import annotations

import enum
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    event,
    insert,
    Boolean,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from core.annotations import Box
from core.field.stations import station_name


def utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


#: JSON everywhere, stored as ``jsonb`` on PostgreSQL (indexable, compact, compared by value).
JSONType = JSON().with_variant(JSONB(), "postgresql")


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSONType, list[Any]: JSONType}


class Flank(str, enum.Enum):
    left = "left"
    right = "right"
    front = "front"
    other = "other"
    unknown = "unknown"


class EventKind(str, enum.Enum):
    create = "create"
    rename = "rename"
    assign = "assign"
    unassign = "unassign"
    merge = "merge"
    split = "split"
    undo = "undo"
    flank = "flank"  # a curator's flank label of photos
    traits = "traits"  # an individual's sex and life stage
    species_rename = "species_rename"  # (no individual) a species' name
    species_merge = "species_merge"  # (no individual) every row of one species moved to another


class DecisionKind(str, enum.Enum):
    same = "same"
    not_same = "not"
    unsure = "unsure"
    new_individual = "new"

    @property
    def words(self) -> str:
        """The decision as a curator reads it (match review, the CLI, the audit trail)."""
        return DECISION_WORDS[self]


DECISION_WORDS = {DecisionKind.same: "same individual", DecisionKind.not_same: "not the same",
                  DecisionKind.unsure: "unsure", DecisionKind.new_individual: "new individual"}


class FlankLinkKind(str, enum.Enum):
    """A curator's answer to a left-right pair the two-flank density fit suggested."""

    linked = "linked"  # one animal: the right-flank individual was merged into the left-flank one
    rejected = "rejected"  # two animals: the next fit never links them


class ModelStatus(str, enum.Enum):
    candidate = "candidate"
    active = "active"
    archived = "archived"


class JobStatus(str, enum.Enum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


def _enum(cls: type[enum.Enum], name: str) -> Enum:
    return Enum(cls, name=name, native_enum=False, values_callable=lambda e: [m.value for m in e], length=16)


DEFAULT_SPECIES_ID = 1  # the species every catalogue starts with (and older catalogues migrate to)


class Species(Base):
    """A species: its individuals, photos, benchmarks, training sets and its own active model."""

    __tablename__ = "species"
    __table_args__ = {"sqlite_autoincrement": True}  # a deleted row's id is never given to a new one (SQLite)
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(120), unique=True)  # the scientific name, which exports write
    # what the people who know the species call it (English; Camtrap DP's vernacularNames "eng"); None: not given
    common_name: Mapped[str | None] = mapped_column(String(200), default=None)
    # the model match review, diagnostics and export use for this species (None: the offline default)
    active_model_id: Mapped[int | None] = mapped_column(ForeignKey("models.id", use_alter=True,
                                                                   name="fk_species_active_model"), default=None)
    # calibrated probability under which match review suggests "new individual" (None: the default)
    new_individual_threshold: Mapped[float | None] = mapped_column(Float, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Role(str, enum.Enum):
    """What a signed-in person may do; each role may do everything the roles before it may."""

    viewer = "viewer"  # browse, export
    curator = "curator"  # decide, mask, label, import, evaluate
    admin = "admin"  # users, models (train, promote, archive), species, delete


class User(Base):
    """A person who may sign in (``password_hash`` set), or a name only seen in the history (no password)."""

    __tablename__ = "users"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(120), unique=True)
    role: Mapped[Role] = mapped_column(_enum(Role, "user_role"), default=Role.viewer, server_default="viewer")
    password_hash: Mapped[str | None] = mapped_column(String(200), default=None)  # argon2id, salted
    active: Mapped[bool] = mapped_column(Boolean, default=True, server_default="1")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)


class AuditEvent(Base):
    """One change to the catalogue, who made it, and a hash chaining it to the change before it.

    ``row_hash = sha256(prev_hash + canonical JSON of (at, user, action, target, details))``: rewriting or
    deleting any past row breaks every hash after it (``db.audit.verify_chain``).
    """

    __tablename__ = "audit_events"
    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, index=True)
    user: Mapped[str] = mapped_column(String(120), index=True)
    action: Mapped[str] = mapped_column(String(80), index=True)  # e.g. "individual.rename", "decision.add"
    target: Mapped[str] = mapped_column(String(120), index=True)  # e.g. "individual#4"
    details: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    prev_hash: Mapped[str] = mapped_column(String(64))
    row_hash: Mapped[str] = mapped_column(String(64), unique=True)


class Individual(Base):
    __tablename__ = "individuals"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    notes: Mapped[str | None] = mapped_column(Text, default=None)
    # An individual merged into another stays as a row (for history and undo) but is inactive.
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    merged_into_id: Mapped[int | None] = mapped_column(ForeignKey("individuals.id"), default=None)
    species_id: Mapped[int] = mapped_column(ForeignKey("species.id"), default=DEFAULT_SPECIES_ID,
                                            server_default=str(DEFAULT_SPECIES_ID), index=True)
    # Camtrap DP vocabularies: sex female | male | unknown; life stage adult | subadult | juvenile | unknown
    sex: Mapped[str | None] = mapped_column(String(20), default=None)
    life_stage: Mapped[str | None] = mapped_column(String(20), default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    images: Mapped[list[Image]] = relationship(back_populates="individual", foreign_keys="Image.individual_id")


class Deployment(Base):
    """One camera at one location for one active period (Camtrap DP ``deployments``, docs/DESIGN.md section 8).

    A location whose camera was down for some days is several deployments sharing ``location_id``. ``start`` and
    ``end`` are ISO 8601 with the deployment's UTC offset (its local time); occasions count days in that time.
    """

    __tablename__ = "deployments"
    __table_args__ = {"sqlite_autoincrement": True}  # a deleted row's id is never given to a new one (SQLite)
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(200), unique=True)  # Camtrap DP deploymentID
    location_id: Mapped[str | None] = mapped_column(String(200), default=None, index=True)
    location_name: Mapped[str | None] = mapped_column(String(200), default=None)
    lat: Mapped[float | None] = mapped_column(Float, default=None)  # WGS84
    lon: Mapped[float | None] = mapped_column(Float, default=None)
    start: Mapped[str] = mapped_column(String(40))  # ISO 8601 with offset, e.g. 2024-05-01T12:00:00-04:00
    end: Mapped[str] = mapped_column(String(40))
    camera_id: Mapped[str | None] = mapped_column(String(200), default=None)
    camera_model: Mapped[str | None] = mapped_column(String(200), default=None)
    # the other Camtrap DP deployment fields as they came (habitat, setupBy, cameraHeight, ...), for the export
    details: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    @property
    def station(self) -> str:
        """The station it belongs to (:func:`core.field.stations.station_name`)."""
        return station_name(self.location_id, self.location_name, self.key)


class Sighting(Base):
    """An event: photos of one animal-passing, from a manifest's sighting column, a Camtrap DP ``eventID``, or
    photos of one deployment within 60 s of each other."""

    __tablename__ = "sightings"
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(200), unique=True)  # label from the manifest, or generated
    date: Mapped[str | None] = mapped_column(String(40), default=None)  # ISO date/time as given
    place: Mapped[str | None] = mapped_column(String(200), default=None)
    lat: Mapped[float | None] = mapped_column(Float, default=None)
    lon: Mapped[float | None] = mapped_column(Float, default=None)
    camera: Mapped[str | None] = mapped_column(String(200), default=None)
    observer: Mapped[str | None] = mapped_column(String(200), default=None)
    deployment_id: Mapped[int | None] = mapped_column(ForeignKey("deployments.id"), default=None, index=True)
    event_key: Mapped[str | None] = mapped_column(String(200), default=None)  # a Camtrap DP eventID, as it came
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    images: Mapped[list[Image]] = relationship(back_populates="sighting")


class Photo(Base):
    """A file as it came in: its bytes (content-addressed), size and EXIF, and what a detector saw in it.

    The animals in it are its annotations (:class:`Image` rows). A frame in which a detector found no animal is
    a photo without annotations (kept only with ``--keep-empty``); ``people`` holds the person boxes that its
    thumbnails blur.
    """

    __tablename__ = "photos"
    id: Mapped[int] = mapped_column(primary_key=True)
    content_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)  # sha256 of the stored bytes
    original_name: Mapped[str] = mapped_column(String(500))
    blob_path: Mapped[str] = mapped_column(String(300))  # relative to the data directory
    thumb_path: Mapped[str | None] = mapped_column(String(300), default=None)  # person boxes blurred
    format: Mapped[str] = mapped_column(String(16))
    mode: Mapped[str] = mapped_column(String(16))
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)
    size_bytes: Mapped[int] = mapped_column(Integer)
    exif_time: Mapped[str | None] = mapped_column(String(40), default=None)
    gps_lat: Mapped[float | None] = mapped_column(Float, default=None)
    gps_lon: Mapped[float | None] = mapped_column(Float, default=None)
    sighting_id: Mapped[int | None] = mapped_column(ForeignKey("sightings.id"), default=None, index=True)
    # person boxes [[x, y, w, h, confidence], ...] from a detector: never catalogued, blurred in thumbnails
    people: Mapped[list[Any] | None] = mapped_column(JSONType, default=None)
    # where the boxes came from: {"source": "megadetector", "detector": ..., "min_confidence": ..., "file": ...}
    detections: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    deployment_id: Mapped[int | None] = mapped_column(ForeignKey("deployments.id"), default=None, index=True)
    # when it was taken, ISO 8601 with the UTC offset (Camtrap DP media.timestamp; EXIF time + the deployment's)
    taken_at: Mapped[str | None] = mapped_column(String(40), default=None)
    media_key: Mapped[str | None] = mapped_column(String(200), default=None, unique=True)  # Camtrap DP mediaID
    # the other Camtrap DP media fields as they came (captureMethod, favorite, mediaComments, ...)
    media_details: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    imported_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    annotations: Mapped[list[Image]] = relationship(back_populates="photo", order_by="Image.id")
    sighting: Mapped[Sighting | None] = relationship()
    deployment: Mapped[Deployment | None] = relationship()

    @property
    def has_people(self) -> bool:
        return bool(self.people)


class Image(Base):
    """An annotation: one animal in a photo (docs/DESIGN.md section 8), the unit of identity.

    The table keeps its historic name ``images`` (a catalogue made before annotations has one whole-photo
    annotation per photo, with the photo's id), so every id, decision and training set stays valid. The file
    columns repeat its photo's (they are content-addressed and never change); the box (normalised x, y, w, h,
    origin top-left) says which part of the photo is this animal, and everything about the animal (embedding,
    mask, spots, diagnostics) reads the box's crop (:func:`core.annotations.crop_rect`).
    """

    __tablename__ = "images"
    __table_args__ = {"sqlite_autoincrement": True}  # a deleted row's id is never given to a new one (SQLite)
    id: Mapped[int] = mapped_column(primary_key=True)
    photo_id: Mapped[int] = mapped_column(ForeignKey("photos.id"), index=True)
    content_hash: Mapped[str] = mapped_column(String(64), index=True)  # sha256 of the photo's stored bytes
    original_name: Mapped[str] = mapped_column(String(500))
    blob_path: Mapped[str] = mapped_column(String(300))  # relative to the data directory
    thumb_path: Mapped[str | None] = mapped_column(String(300), default=None)  # of the crop
    format: Mapped[str] = mapped_column(String(16))
    mode: Mapped[str] = mapped_column(String(16))  # PIL mode of the original file
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)
    size_bytes: Mapped[int] = mapped_column(Integer)
    exif_time: Mapped[str | None] = mapped_column(String(40), default=None)
    gps_lat: Mapped[float | None] = mapped_column(Float, default=None)
    gps_lon: Mapped[float | None] = mapped_column(Float, default=None)
    bbox_x: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    bbox_y: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    bbox_w: Mapped[float] = mapped_column(Float, default=1.0, server_default="1")
    bbox_h: Mapped[float] = mapped_column(Float, default=1.0, server_default="1")
    # whole-photo | drawn | megadetector | camtrap-dp | detector:<name> (core.annotations.BOX_SOURCES)
    box_source: Mapped[str] = mapped_column(String(80), default="whole-photo", server_default="whole-photo")
    box_confidence: Mapped[float | None] = mapped_column(Float, default=None)  # a machine box's confidence
    flank: Mapped[Flank] = mapped_column(_enum(Flank, "flank"), default=Flank.unknown)
    flank_source: Mapped[str | None] = mapped_column(String(40), default=None)  # manifest | curator | suggested
    sighting_id: Mapped[int | None] = mapped_column(ForeignKey("sightings.id"), default=None, index=True)
    individual_id: Mapped[int | None] = mapped_column(ForeignKey("individuals.id"), default=None, index=True)
    species_id: Mapped[int] = mapped_column(ForeignKey("species.id"), default=DEFAULT_SPECIES_ID,
                                            server_default=str(DEFAULT_SPECIES_ID), index=True)
    # bumped by every match decision on this annotation (and its undo): a decision names the version it saw and
    # is applied with a conditional UPDATE, so of two simultaneous decisions exactly one wins
    decision_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    mask_path: Mapped[str | None] = mapped_column(String(300), default=None)  # in the crop's pixels
    mask_source: Mapped[str | None] = mapped_column(String(40), default=None)  # alpha | sam2 | grabcut
    mask_details: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    solidity: Mapped[float | None] = mapped_column(Float, default=None)
    mask_flags: Mapped[list[Any] | None] = mapped_column(JSONType, default=None)
    # a Camtrap DP observation: its observationID, the lifeStage and sex it stated, its other fields as they came
    observation_key: Mapped[str | None] = mapped_column(String(200), default=None, unique=True)
    life_stage: Mapped[str | None] = mapped_column(String(20), default=None)
    sex: Mapped[str | None] = mapped_column(String(20), default=None)
    observation_details: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    imported_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    individual: Mapped[Individual | None] = relationship(back_populates="images", foreign_keys=[individual_id])
    sighting: Mapped[Sighting | None] = relationship(back_populates="images")
    photo: Mapped[Photo] = relationship(back_populates="annotations")

    @property
    def box(self) -> Box:
        return Box(self.bbox_x, self.bbox_y, self.bbox_w, self.bbox_h)

    @box.setter
    def box(self, value: Box) -> None:
        self.bbox_x, self.bbox_y, self.bbox_w, self.bbox_h = value.x, value.y, value.w, value.h


class BoxEdit(Base):
    """A curator's change to the boxes of a photo (add, move, delete), with what undo needs to restore it."""

    __tablename__ = "box_edits"
    id: Mapped[int] = mapped_column(primary_key=True)
    photo_id: Mapped[int] = mapped_column(ForeignKey("photos.id"), index=True)
    annotation_id: Mapped[int] = mapped_column(Integer)  # no foreign key: a deleted annotation is named too
    kind: Mapped[str] = mapped_column(String(16))  # add | move | delete
    before: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)  # the annotation's row before
    after: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    user: Mapped[str] = mapped_column(String(120))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    undone_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)


#: What an annotation repeats of its photo (the file columns).
PHOTO_FILE_COLUMNS = ("content_hash", "original_name", "blob_path", "format", "mode", "width", "height",
                      "size_bytes", "exif_time", "gps_lat", "gps_lon")


@event.listens_for(Image, "before_insert")
def _photo_for_annotation(mapper: Any, connection: Any, target: Image) -> None:
    """An annotation inserted without its photo (older writers: one photo, one animal) gets a photo row made
    from its own file columns, or the one already holding these bytes: every annotation belongs to a photo."""
    if target.photo_id is not None or target.photo is not None:
        return
    photos = Photo.__table__
    found = connection.execute(photos.select().with_only_columns(photos.c.id)
                               .where(photos.c.content_hash == target.content_hash)).scalar()
    if found is None:
        values = {c: getattr(target, c) for c in PHOTO_FILE_COLUMNS}
        values.update(thumb_path=target.thumb_path, sighting_id=target.sighting_id, imported_at=utcnow())
        found = connection.execute(insert(photos).values(**values)).inserted_primary_key[0]
    target.photo_id = found


class IdentityEvent(Base):
    """One change to who-is-who; ``payload`` holds what undo needs to restore the exact previous state."""

    __tablename__ = "identity_events"
    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[EventKind] = mapped_column(_enum(EventKind, "event_kind"))
    individual_id: Mapped[int | None] = mapped_column(ForeignKey("individuals.id"), default=None)
    other_individual_id: Mapped[int | None] = mapped_column(ForeignKey("individuals.id"), default=None)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    user: Mapped[str] = mapped_column(String(120))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    undone_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    undone_by_id: Mapped[int | None] = mapped_column(ForeignKey("identity_events.id"), default=None)


class MatchDecision(Base):
    __tablename__ = "match_decisions"
    id: Mapped[int] = mapped_column(primary_key=True)
    query_image_id: Mapped[int] = mapped_column(ForeignKey("images.id"), index=True)
    candidate_image_id: Mapped[int | None] = mapped_column(ForeignKey("images.id"), default=None)
    candidate_individual_id: Mapped[int | None] = mapped_column(ForeignKey("individuals.id"), default=None)
    decision: Mapped[DecisionKind] = mapped_column(_enum(DecisionKind, "decision_kind"))
    score: Mapped[float | None] = mapped_column(Float, default=None)
    rank: Mapped[int | None] = mapped_column(Integer, default=None)
    model_name: Mapped[str | None] = mapped_column(String(200), default=None)
    model_id: Mapped[int | None] = mapped_column(ForeignKey("models.id"), default=None)
    user: Mapped[str] = mapped_column(String(120))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    identity_event_id: Mapped[int | None] = mapped_column(ForeignKey("identity_events.id"), default=None)
    undone_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)


class Model(Base):
    __tablename__ = "models"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    backbone: Mapped[str] = mapped_column(String(200))  # backbone registry name
    head: Mapped[str | None] = mapped_column(String(100), default=None)  # head registry name, None = frozen features
    config: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)  # backbone config incl. preprocessing
    checkpoint_path: Mapped[str | None] = mapped_column(String(300), default=None)
    checkpoint_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    training_config: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    loss: Mapped[str | None] = mapped_column(String(100), default=None)  # loss registry name (trained models)
    # the exact training data: image ids, identities and their hash (trained models)
    data_snapshot: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"), default=None)  # the job that trained it
    species_id: Mapped[int | None] = mapped_column(ForeignKey("species.id"), default=None)  # trained for
    status: Mapped[ModelStatus] = mapped_column(_enum(ModelStatus, "model_status"), default=ModelStatus.candidate)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Benchmark(Base):
    """A named image set with identities and flanks and a fixed split."""

    __tablename__ = "benchmarks"
    __table_args__ = {"sqlite_autoincrement": True}  # a deleted row's id is never given to a new one (SQLite)
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    split_kind: Mapped[str] = mapped_column(String(40))  # identity | sighting | test-only | column:<name>
    species_id: Mapped[int | None] = mapped_column(ForeignKey("species.id"), default=None)
    config: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)  # test_fraction, seed, source
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    members: Mapped[list[BenchmarkImage]] = relationship(
        back_populates="benchmark", cascade="all, delete-orphan", order_by="BenchmarkImage.position"
    )


class BenchmarkImage(Base):
    __tablename__ = "benchmark_images"
    __table_args__ = (UniqueConstraint("benchmark_id", "image_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    benchmark_id: Mapped[int] = mapped_column(ForeignKey("benchmarks.id", ondelete="CASCADE"), index=True)
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id"))
    position: Mapped[int] = mapped_column(Integer)
    identity: Mapped[str] = mapped_column(String(200))  # frozen label at creation time
    flank: Mapped[str] = mapped_column(String(16))
    sighting: Mapped[str | None] = mapped_column(String(200), default=None)
    split: Mapped[str] = mapped_column(String(16))  # train | test

    benchmark: Mapped[Benchmark] = relationship(back_populates="members")
    image: Mapped[Image] = relationship()


class Evaluation(Base):
    __tablename__ = "evaluations"
    id: Mapped[int] = mapped_column(primary_key=True)
    model_id: Mapped[int | None] = mapped_column(ForeignKey("models.id"), default=None)
    model_name: Mapped[str] = mapped_column(String(200))
    model_config: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)  # exact backbone/head config
    benchmark_id: Mapped[int | None] = mapped_column(ForeignKey("benchmarks.id"), default=None)
    benchmark_name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(40), default="retrieval")  # retrieval | diagnose
    variant: Mapped[str] = mapped_column(String(40), default="full_rgb")
    masker: Mapped[str | None] = mapped_column(String(40), default=None)
    inpainter: Mapped[str | None] = mapped_column(String(80), default=None)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class EmbeddingSet(Base):
    """Embeddings on disk for (model, variant); ``image_ids`` keeps the row order."""

    __tablename__ = "embedding_sets"
    id: Mapped[int] = mapped_column(primary_key=True)
    model_name: Mapped[str] = mapped_column(String(200))
    config_fingerprint: Mapped[str] = mapped_column(String(64))
    variant: Mapped[str] = mapped_column(String(40))
    path: Mapped[str] = mapped_column(String(300))
    image_ids: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Job(Base):
    __tablename__ = "jobs"
    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(40))
    queue: Mapped[str] = mapped_column(String(16), default="light", index=True)  # light | heavy
    params: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    status: Mapped[JobStatus] = mapped_column(_enum(JobStatus, "job_status"), default=JobStatus.queued, index=True)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    message: Mapped[str | None] = mapped_column(Text, default=None)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    cancelled_by: Mapped[str | None] = mapped_column(String(120), default=None)  # who asked it to stop
    worker: Mapped[str | None] = mapped_column(String(120), default=None)
    pid: Mapped[int | None] = mapped_column(Integer, default=None)  # the child process running it
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # how many times a worker started it
    max_attempts: Mapped[int] = mapped_column(Integer, default=2)  # crashes are retried until this many
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)


class MatchSuggestion(Base):
    """A photo's best gallery match under a model, stored so that the review queue of a large catalogue is one
    indexed query (``db.identify.suggestions``) instead of a pending x gallery score matrix."""

    __tablename__ = "match_suggestions"
    __table_args__ = (Index("ix_match_suggestions_model_score", "model_name", "top_score", "image_id"),)
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id", ondelete="CASCADE"), primary_key=True)
    model_name: Mapped[str] = mapped_column(String(200), primary_key=True)
    top_image_id: Mapped[int | None] = mapped_column(ForeignKey("images.id", ondelete="SET NULL"), default=None)
    top_score: Mapped[float] = mapped_column(Float)
    computed_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class FlankLinkDecision(Base):
    """A curator's answer to a link the two-flank partial-identity fit suggested (``jobs.actions.flank_links``):
    a confirmed pair is merged (``identity_event_id``, undone by undoing that merge), a rejected pair is kept here
    so that the next fit never links it. One standing answer per pair: a second curator is told, not recorded."""

    __tablename__ = "flank_link_decisions"
    __table_args__ = (Index("ix_flank_link_decisions_standing", "left_individual_id", "right_individual_id",
                            unique=True, sqlite_where=text("undone_at IS NULL"),
                            postgresql_where=text("undone_at IS NULL")),)
    id: Mapped[int] = mapped_column(primary_key=True)
    left_individual_id: Mapped[int] = mapped_column(ForeignKey("individuals.id"))
    right_individual_id: Mapped[int] = mapped_column(ForeignKey("individuals.id"), index=True)
    decision: Mapped[FlankLinkKind] = mapped_column(_enum(FlankLinkKind, "flank_link_kind"))
    probability: Mapped[float | None] = mapped_column(Float, default=None)  # as the curator was shown it
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id"), default=None)  # the fit that suggested it
    identity_event_id: Mapped[int | None] = mapped_column(ForeignKey("identity_events.id"), default=None)  # the merge
    user: Mapped[str] = mapped_column(String(120))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    undone_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)
