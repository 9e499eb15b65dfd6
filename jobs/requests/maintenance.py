"""Requests of the catalogue's upkeep: backup, restore, removing the photo store's unreferenced files, and copying
the catalogue into another database."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from core.requests import Request


@dataclass(frozen=True)
class BackupRequest(Request):
    """A consistent copy of the catalogue (database and files) in the new folder ``path``."""

    path: str


@dataclass(frozen=True)
class RestoreRequest(Request):
    """Restore the backup in ``path`` into ``data_dir`` (which must hold no catalogue unless ``force``)."""

    path: str
    data_dir: str
    force: bool = False


@dataclass(frozen=True)
class OrphansRequest(Request):
    """Find (and unless ``dry_run`` remove) files of the photo store that nothing references, leaving alone those
    younger than ``min_age_s`` seconds (an import may still be writing them)."""

    min_age_s: float = 600.0
    dry_run: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.min_age_s, bool) or not isinstance(self.min_age_s, (int, float)) or self.min_age_s < 0:
            raise ValueError("--min-age must be 0 or more seconds")
        object.__setattr__(self, "min_age_s", float(self.min_age_s))


@dataclass(frozen=True)
class CatalogueCopyRequest(Request):
    """Copy the whole catalogue (every row, every id) into the database at ``to`` (a SQLAlchemy URL such as
    ``postgresql+psycopg://user:pw@host/db`` or ``sqlite:////path/catalogue.db``), which must hold no catalogue
    unless ``force`` (then everything in it is replaced)."""

    to: str
    force: bool = False

    def __post_init__(self) -> None:
        to = (self.to or "").strip() if isinstance(self.to, str) else ""
        if not to:
            raise ValueError("--to needs the target database URL (postgresql+psycopg://... or sqlite:////...)")
        try:
            url = make_url(to)
        except ArgumentError:
            raise ValueError(f"--to {to.split('@')[-1]!r} is not a database URL; expected one like "
                             "postgresql+psycopg://user:password@host/db or sqlite:////path/catalogue.db") from None
        if url.get_backend_name() not in ("sqlite", "postgresql"):
            raise ValueError(f"--to: a catalogue lives in SQLite or PostgreSQL, not {url.get_backend_name()}")
        if url.get_backend_name() == "sqlite" and not url.database:
            raise ValueError("--to: a SQLite target needs a file path (sqlite:////path/catalogue.db)")
        object.__setattr__(self, "to", to)
