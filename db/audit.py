"""The audit trail: every change to the catalogue, attributed to the person who made it, hash-chained.

Nothing has to remember to write it: a SQLAlchemy ``after_flush`` listener looks at what each flush inserted,
changed or deleted in the audited tables and writes one ``audit_events`` row per change, in the same transaction
(a change and its audit row are committed or rolled back together).

Who made the change is :func:`acting_user`, set with :func:`acting_as` by whoever runs the change on someone's
behalf: the web app sets it from the signed-in session (never from a form field), the CLI from ``--user``, a job
runner from the user who submitted the job. Nothing set means ``system``.

Each row carries ``prev_hash`` and ``row_hash = sha256(prev_hash + canonical JSON of the row)``; SQLite lets one
writer at a time hold the write lock, and a flush that writes an audited change already holds it, so the chain
never forks. PostgreSQL lets writers run side by side, so there the listener first takes a transaction-level
advisory lock (``pg_advisory_xact_lock``) before it reads the chain's tail: writers of audited changes commit one
after the other, on one server or several. :func:`verify_chain` recomputes it: a past row rewritten or deleted in the database file shows up as
the first broken link.
"""

from __future__ import annotations

import csv
import enum
import hashlib
import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import event, insert, inspect, select, text
from sqlalchemy.orm import Session

from core.io.csv_safety import defuse_cell
from db.catalogue import check_date
from db.models import (
    AuditEvent,
    Benchmark,
    Deployment,
    FlankLinkDecision,
    IdentityEvent,
    Image,
    Individual,
    Job,
    MatchDecision,
    Model,
    Sighting,
    Species,
    User,
    utcnow,
)

GENESIS = "0" * 64
#: The key of the transaction-level advisory lock that serialises the chain's tail on PostgreSQL.
AUDIT_CHAIN_LOCK = 7_263_011_702
SYSTEM = "system"
MAX_DETAIL_CHARS = 300  # a long value (a payload, a path list) is cut in the audit row, never the change itself

_acting_user: ContextVar[str | None] = ContextVar("rosette_acting_user", default=None)


def acting_user() -> str:
    """Who the change being made now is attributed to (``system`` when nobody set it)."""
    return _acting_user.get() or SYSTEM


def known_actor() -> str | None:
    """The user set with :func:`acting_as`, or None when nobody set one (unlike :func:`acting_user`)."""
    return _acting_user.get()


@contextmanager
def acting_as(user: str | None) -> Iterator[None]:
    """Attribute every change made inside the block (in this thread or task) to ``user``."""
    token = _acting_user.set((user or "").strip() or None)
    try:
        yield
    finally:
        _acting_user.reset(token)


# --------------------------------------------------------------------------- what is audited, and how it is named

@dataclass(frozen=True)
class Audited:
    """How changes to one table read in the trail."""

    label: str  # "photo", "individual", ...
    on_update: dict[str, str]  # column -> action suffix; columns not named here are not audited on update
    on_insert: str | None = "add"
    insert_fields: tuple[str, ...] = ()
    on_delete: str | None = "delete"


AUDITED: dict[type, Audited] = {
    Individual: Audited("individual", {"name": "rename", "notes": "notes", "species_id": "species",
                                       "active": "merge", "merged_into_id": "merge",
                                       "sex": "traits", "life_stage": "traits"},
                        insert_fields=("name",)),
    Image: Audited("photo", {"flank": "flank", "flank_source": "flank", "mask_path": "mask", "mask_source": "mask",
                             "species_id": "species", "individual_id": "assign", "sighting_id": "sighting",
                             **{f: "box" for f in ("bbox_x", "bbox_y", "bbox_w", "bbox_h", "box_source")}},
                   on_insert="import", insert_fields=("original_name", "content_hash", "individual_id", "photo_id",
                                                       "box_source", "bbox_x", "bbox_y", "bbox_w", "bbox_h")),
    # a sighting's facts changed by a re-import with "update metadata" (new sightings come with their photos)
    Sighting: Audited("sighting", {f: "metadata" for f in ("date", "place", "lat", "lon", "camera", "observer")},
                      on_insert=None, on_delete=None),
    IdentityEvent: Audited("history", {"undone_at": "undone"}, on_insert="event",
                           insert_fields=("kind", "individual_id", "other_individual_id")),
    MatchDecision: Audited("decision", {"undone_at": "undo"}, on_insert="add",
                           insert_fields=("decision", "query_image_id", "candidate_image_id",
                                          "candidate_individual_id", "model_name", "score", "rank")),
    Model: Audited("model", {"status": "status", "name": "rename"}, on_insert="register",
                   insert_fields=("name", "backbone", "head", "status")),
    Species: Audited("species", {"name": "rename", "common_name": "rename", "active_model_id": "promote",
                                 "new_individual_threshold": "threshold"}, insert_fields=("name", "common_name")),
    User: Audited("user", {"role": "role", "password_hash": "password", "active": "active"},
                  insert_fields=("name", "role")),
    Benchmark: Audited("benchmark", {}, on_insert="create", insert_fields=("name",)),
    # camera stations (db.records.deployments): a curator's add / edit / delete, and those a deployments CSV adds
    Deployment: Audited("deployment", {f: "edit" for f in ("key", "location_id", "location_name", "lat", "lon", "start",
                                                            "end", "camera_id", "camera_model", "details")},
                        insert_fields=("key", "location_id", "start", "end")),
    # a curator's answer to a flank link the two-flank density fit suggested (db.field.flank_links)
    FlankLinkDecision: Audited("flank_link", {"undone_at": "undo"}, on_insert="add",
                               insert_fields=("decision", "left_individual_id", "right_individual_id", "probability",
                                              "job_id", "identity_event_id")),
    Job: Audited("job", {"cancel_requested": "cancel"}, on_insert="submit", insert_fields=("kind",),
                 on_delete=None),
}
SECRET_COLUMNS = {"password_hash"}  # audited as "changed", never with their values


def _plain(value: Any) -> Any:
    """A JSON-safe, bounded form of a column value."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= MAX_DETAIL_CHARS else text[:MAX_DETAIL_CHARS] + "..."


def _changes(obj: Any, spec: Audited) -> dict[str, dict[str, Any]]:
    """Per action suffix, the changed audited columns as ``{column: [old, new]}``."""
    state = inspect(obj)
    out: dict[str, dict[str, Any]] = {}
    for column, suffix in spec.on_update.items():
        hist = state.attrs[column].history
        if not hist.has_changes():
            continue
        old = hist.deleted[0] if hist.deleted else None
        new = hist.added[0] if hist.added else None
        if _plain(old) == _plain(new):
            continue
        value = ["(set)" if old else None, "(changed)"] if column in SECRET_COLUMNS else [_plain(old), _plain(new)]
        out.setdefault(suffix, {})[column] = value
    return out


def _collect(session: Session) -> list[tuple[str, str, dict[str, Any]]]:
    rows: list[tuple[str, str, dict[str, Any]]] = []
    for obj in list(session.new):
        spec = AUDITED.get(type(obj))
        if isinstance(obj, User) and not obj.password_hash:
            continue  # a name recorded with a change, not an account: the change itself is audited
        if spec is not None and spec.on_insert:
            details = {f: _plain(getattr(obj, f, None)) for f in spec.insert_fields}
            if isinstance(obj, IdentityEvent):
                details["payload"] = _plain(obj.payload)
            action = f"{spec.label}.{obj.kind.value}" if isinstance(obj, IdentityEvent) else \
                f"{spec.label}.{spec.on_insert}"
            rows.append((action, f"{spec.label}#{obj.id}", details))
    for obj in list(session.dirty):
        spec = AUDITED.get(type(obj))
        if spec is None or not session.is_modified(obj, include_collections=False):
            continue
        for suffix, details in _changes(obj, spec).items():
            rows.append((f"{spec.label}.{suffix}", f"{spec.label}#{obj.id}", details))
    for obj in list(session.deleted):
        spec = AUDITED.get(type(obj))
        if spec is not None and spec.on_delete:
            rows.append((f"{spec.label}.{spec.on_delete}", f"{spec.label}#{obj.id}",
                         {f: _plain(getattr(obj, f, None)) for f in spec.insert_fields}))
    return rows


def row_hash(prev_hash: str, *, at: datetime, user: str, action: str, target: str,
             details: dict[str, Any]) -> str:
    """``sha256(prev_hash + canonical JSON of [at, user, action, target, details])``."""
    body = json.dumps([at.isoformat(timespec="microseconds"), user, action, target, details], sort_keys=True,
                      separators=(",", ":"), default=str, ensure_ascii=False)
    return hashlib.sha256((prev_hash + body).encode("utf-8")).hexdigest()


@event.listens_for(Session, "after_flush")
def _write_audit_rows(session: Session, _flush_context: Any) -> None:
    rows = _collect(session)
    if rows:
        _append_rows(session, rows)


def record_action(session: Session, *, action: str, target: str, details: dict[str, Any]) -> None:
    """Write one audit row for something done that changes no audited table (an export that keeps people
    unblurred), chained and attributed like every other row, in ``session``'s transaction."""
    _append_rows(session, [(action, target, {k: _plain(v) for k, v in details.items()})])


def _append_rows(session: Session, rows: list[tuple[str, str, dict[str, Any]]]) -> None:
    connection = session.connection()
    table = AuditEvent.__table__
    if connection.dialect.name == "postgresql":
        # PostgreSQL lets many writers in at once: hold the chain's tail until this transaction ends, so the next
        # writer reads this one's last row (SQLite's single write lock already does this)
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": AUDIT_CHAIN_LOCK})
    prev = connection.execute(select(table.c.row_hash).order_by(table.c.id.desc()).limit(1)).scalar() or GENESIS
    user = acting_user()
    for action, target, details in rows:
        at = utcnow()
        digest = row_hash(prev, at=at, user=user, action=action, target=target, details=details)
        result = connection.execute(insert(table).values(at=at, user=user, action=action, target=target,
                                                         details=details, prev_hash=prev, row_hash=digest))
        prev = digest
        session.info["audit_head"] = (int(result.inserted_primary_key[0]), digest)


# --------------------------------------------------------------------------- the chain's anchored head

#: Where the newest audit row's id and hash are kept, outside the table: a truncated tail (the newest rows
#: deleted) leaves a chain that still links, but no longer reaches this head.
HEAD_FILE = "audit-head.json"


@event.listens_for(Session, "after_commit")
def _anchor_head(session: Session) -> None:
    head = session.info.pop("audit_head", None)
    data_dir = session.info.get("data_dir")
    if head is not None and data_dir:
        try:
            write_head(Path(data_dir), *head)
        except OSError:  # a read-only or full folder: the chain itself is committed; verify says what it can
            pass


@event.listens_for(Session, "after_soft_rollback")
def _forget_head(session: Session, _previous_transaction: Any) -> None:
    session.info.pop("audit_head", None)


def read_head(data_dir: Path) -> dict[str, Any] | None:
    """The anchored head ``{"id", "row_hash"}``, or None when there is none (yet)."""
    try:
        data = json.loads((Path(data_dir) / HEAD_FILE).read_text())
        return {"id": int(data["id"]), "row_hash": str(data["row_hash"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_head(data_dir: Path, row_id: int, digest: str, *, force: bool = False) -> None:
    """Anchor the head at (row_id, digest): only forward (a process committing an older row later never moves it
    back), under an exclusive lock, written atomically; ``force`` sets it as given (a restore)."""
    import fcntl
    import os
    import tempfile

    data_dir = Path(data_dir)
    with open(data_dir / ".audit-head.lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        current = read_head(data_dir)
        if not force and current is not None and current["id"] >= row_id:
            return
        fd, tmp = tempfile.mkstemp(prefix=".audit-head.", dir=data_dir)
        with os.fdopen(fd, "w") as fh:
            json.dump({"id": int(row_id), "row_hash": digest}, fh)
        os.replace(tmp, data_dir / HEAD_FILE)


def reanchor_head(cat) -> None:
    """Anchor the head at the catalogue's newest audit row as it is now (after a verified restore)."""
    with cat.unit_of_work() as s:
        last = s.execute(select(AuditEvent.id, AuditEvent.row_hash).order_by(AuditEvent.id.desc()).limit(1)).first()
    if last is not None:
        write_head(cat.data_dir, int(last[0]), str(last[1]), force=True)
    else:
        (Path(cat.data_dir) / HEAD_FILE).unlink(missing_ok=True)


# --------------------------------------------------------------------------- reading, checking and exporting


@dataclass(frozen=True)
class AuditRow:
    id: int
    at: datetime
    user: str
    action: str
    target: str
    details: dict[str, Any]

    def details_text(self) -> str:
        return json.dumps(self.details, sort_keys=True, ensure_ascii=False, default=str)

    def details_readable(self) -> str:
        """The details as fields a person reads: ``name: Amber -> Amber II; photos: 3, 4``."""
        return readable_details(self.details)


def readable_details(details: Any) -> str:
    """``{"name": {"old": "A", "new": "B"}, "ids": [3, 4], "by": "ana"}`` -> ``by: ana; ids: 3, 4; name: A -> B``."""
    def value(v: Any) -> str:
        if isinstance(v, dict):
            if set(v) <= {"old", "new"} and v:
                return f"{value(v.get('old'))} -> {value(v.get('new'))}"
            return "(" + ", ".join(f"{k} {value(x)}" for k, x in sorted(v.items())) + ")"
        if isinstance(v, (list, tuple)):
            return ", ".join(value(x) for x in v) if v else "none"
        return "none" if v is None else str(v)

    if not isinstance(details, dict):
        return value(details)
    return "; ".join(f"{str(k).replace('_', ' ')}: {value(v)}" for k, v in sorted(details.items()))


def _parse_day(text: str | None, what: str) -> datetime | None:
    text = check_date(text, what=what)
    return datetime.fromisoformat(text) if text else None


def audit_rows(cat, *, user: str | None = None, action: str | None = None, target: str | None = None,
               since: str | None = None, until: str | None = None, limit: int | None = 1000) -> list[AuditRow]:
    """The trail, newest first, filtered: exact ``user``; ``action`` and ``target`` as prefixes
    (``photo`` finds every photo change, ``photo#12`` that photo); ``since``/``until`` as ISO dates (inclusive)."""
    table = AuditEvent
    q = select(table).order_by(table.id.desc())
    if user and user.strip():
        q = q.where(table.user == user.strip())
    if action and action.strip():
        q = q.where(table.action.startswith(action.strip(), autoescape=True))
    if target and target.strip():
        t = target.strip()
        q = q.where((table.target == t) | table.target.startswith(t if "#" in t else t + "#", autoescape=True))
    start, end = _parse_day(since, "the 'since' date"), _parse_day(until, "the 'until' date")
    if start is not None:
        q = q.where(table.at >= start)
    if end is not None:
        q = q.where(table.at < datetime.combine(end.date(), datetime.max.time()))
    if limit:
        q = q.limit(int(limit))
    with cat.unit_of_work() as s:
        return [AuditRow(id=r.id, at=r.at, user=r.user, action=r.action, target=r.target, details=dict(r.details))
                for r in s.scalars(q)]


def submitter_of_job(cat, job_id: int) -> str | None:
    """Who queued job ``job_id`` (from its ``job.submit`` audit row); a job's changes are attributed to them."""
    with cat.unit_of_work() as s:
        return s.scalar(select(AuditEvent.user).where(AuditEvent.target == f"job#{int(job_id)}",
                                                      AuditEvent.action == "job.submit").limit(1))


def audit_users(cat) -> list[str]:
    with cat.unit_of_work() as s:
        return list(s.scalars(select(AuditEvent.user).distinct().order_by(AuditEvent.user)))


def _cell(value: Any) -> str:
    """A CSV cell a spreadsheet shows as text: a formula-like cell gets a leading apostrophe (OWASP advice)."""
    return defuse_cell(str(value))


def audit_csv(rows: list[AuditRow]) -> str:
    """The rows as CSV (id, at, user, action, target, details), formula-like cells defused."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["id", "at_utc", "user", "action", "target", "details"])
    for r in rows:
        writer.writerow([r.id, r.at.isoformat(timespec="seconds"), _cell(r.user), _cell(r.action), _cell(r.target),
                         _cell(r.details_text())])
    return out.getvalue()


@dataclass(frozen=True)
class ChainCheck:
    rows: int
    first_broken_id: int | None  # None: the chain is whole
    head_missing: bool = False  # the anchored newest row is gone: the newest changes were deleted

    @property
    def ok(self) -> bool:
        return self.first_broken_id is None


def verify_chain(cat) -> ChainCheck:
    """Recompute every row's hash in id order; the first row whose hash or link does not match is named."""
    prev, n = GENESIS, 0
    head = read_head(cat.data_dir) if getattr(cat, "data_dir", None) else None
    head_found = head is None
    with cat.unit_of_work() as s:
        for r in s.scalars(select(AuditEvent).order_by(AuditEvent.id)).yield_per(2000):
            n += 1
            expected = row_hash(prev, at=r.at, user=r.user, action=r.action, target=r.target, details=r.details)
            if r.prev_hash != prev or r.row_hash != expected:
                return ChainCheck(rows=n, first_broken_id=r.id)
            prev = r.row_hash
            if head is not None and r.id == head["id"]:
                head_found = r.row_hash == head["row_hash"]
                if not head_found:
                    return ChainCheck(rows=n, first_broken_id=r.id)
    if not head_found:  # the chain links, but stops short of the newest change ever written
        return ChainCheck(rows=n, first_broken_id=head["id"], head_missing=True)
    return ChainCheck(rows=n, first_broken_id=None)
