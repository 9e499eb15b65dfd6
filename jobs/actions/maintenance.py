"""Upkeep of a catalogue: backup and restore (``rosette backup`` / ``restore``), copying it into another database
(``rosette catalogue copy``), the photo store's unreferenced files (``rosette doctor``), what a server says about itself (the app's provenance line, a database problem in
words), and getting a server ready (the demo catalogue, a warm backbone)."""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.engine import make_url
from sqlalchemy.exc import InterfaceError, OperationalError

from core.identify.backbones import DEFAULT_BACKBONE
from core.readers import IngestReport
from db import backup as store
from db import catalogue_copy, doctor
from db.catalogue_copy import CopyReport
from db.demo import seed_demo_if_empty
from db.doctor import Orphans
from db.embeddings import get_backbone
from db.session import Catalogue, _db_reason
from jobs.requests.maintenance import BackupRequest, CatalogueCopyRequest, OrphansRequest, RestoreRequest

# --------------------------------------------------------------------------- backup and restore


def backup(cat: Catalogue, request: BackupRequest) -> dict[str, Any]:
    """Write a consistent backup (database + files) to a new folder; what it holds (counts, files, seconds)."""
    return store.backup(cat, request.path)


def restore(request: RestoreRequest) -> dict[str, Any]:
    """Copy a verified backup into a data directory (no catalogue open: it is the one being replaced); the
    backup's info (when it was made, its counts)."""
    return store.restore(request.path, request.data_dir, force=request.force)


def copy_catalogue(cat: Catalogue, request: CatalogueCopyRequest, *,
                   progress: Callable[[str, int], None] | None = None) -> CopyReport:
    """Copy every row of the catalogue (ids kept) into the database ``request.to`` (SQLite or PostgreSQL), then
    compare the row counts per table and verify the target's audit chain (``report.ok``). The photo files stay
    in the data directory's content-addressed store. A target holding rows is refused unless ``force``."""
    return catalogue_copy.copy_catalogue(cat, request.to, force=request.force, progress=progress)


# --------------------------------------------------------------------------- the photo store


def remove_orphans(cat: Catalogue, request: OrphansRequest) -> Orphans:
    """Files of the photo store that nothing references (left by an import killed mid-way), removed unless
    ``dry_run``; young files are left alone (an import may still be writing them)."""
    orphans = doctor.find_orphans(cat, min_age_s=request.min_age_s)
    if not request.dry_run and orphans.files:
        doctor.remove_orphans(cat, orphans)
    return orphans


# --------------------------------------------------------------------------- provenance


def database_label(url: str) -> str:
    """The database URL with any password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a malformed URL is still worth showing, minus credentials
        return url.split("@")[-1]


def provenance_line(cat: Catalogue) -> str:
    try:
        v = version("rosette")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        v = "dev"
    return f"Rosette {v} · data directory `{cat.data_dir}` · database `{database_label(cat.url)}`"


def database_problem(exc: BaseException, *, data_dir: Path | None = None) -> str | None:
    """Why the catalogue database could not be used, in words, when ``exc`` is the database refusing (locked,
    disk full, a PostgreSQL server gone or refusing the password ...); None for any other error."""
    return _db_reason(exc, data_dir=data_dir) if isinstance(exc, (OperationalError, InterfaceError)) else None


# --------------------------------------------------------------------------- getting a server ready


def seed_demo(cat: Catalogue, *, user: str = "demo") -> IngestReport | None:
    """Import the demo animals into an empty catalogue; None when the catalogue holds photos already."""
    return seed_demo_if_empty(cat, user=user)


def preload_backbone(cat: Catalogue, name: str = DEFAULT_BACKBONE) -> float:
    """Build the backbone (the same per-process instance the matcher uses) and embed one blank picture, so
    weights and kernels are warm; the seconds it took."""
    t0 = time.perf_counter()
    backbone = get_backbone(cat, name)
    backbone.embed([np.zeros((224, 224, 3), dtype=np.uint8)])
    return time.perf_counter() - t0
