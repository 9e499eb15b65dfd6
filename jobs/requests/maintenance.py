"""Requests of the catalogue's upkeep: backup, restore, and removing the photo store's unreferenced files."""

from __future__ import annotations

from dataclasses import dataclass

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
