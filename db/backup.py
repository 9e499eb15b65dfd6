"""Backups of a catalogue: ``rosette backup PATH`` / ``rosette restore PATH``.

A backup is a folder: ``catalogue.db`` written with SQLite's online backup API (a consistent snapshot even
while the server runs and curators decide: readers and writers keep going, the copy sees one committed
state), then the data directory's files (photos, thumbnails, masks, trained models, inpainted backgrounds,
job folders) copied after it, and ``backup.json`` (when, counts, the database's SHA-256). Files are content-
addressed and written before the row that names them is committed, so every file the snapshot references
already exists when it is copied. The feature cache is left out: it is recomputed on demand.

Restore copies a backup into an empty data directory (or over one, with ``force``), checks
``PRAGMA integrity_check`` and the database hash, and migrates it to the current schema.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

from core.identify.backbones.weights import sha256_file
from db.audit import reanchor_head
from db.session import Catalogue, open_catalogue

COPIED = ("images", "thumbs", "masks", "inpainted", "variants", "models", "jobs", "exports")
DB_NAME = "catalogue.db"


def _sha256(path: Path) -> str:

    return sha256_file(path)


def _sqlite_file(cat: Catalogue) -> Path:
    if not cat.url.startswith("sqlite:///"):
        raise ValueError(f"rosette backup copies SQLite catalogues; this one is {cat.url.split(':')[0]} "
                         "(use pg_dump, or `rosette catalogue copy --to sqlite:////path/catalogue.db` for a SQLite "
                         "copy of the tables, and copy the data directory)")
    return Path(cat.url[len("sqlite:///"):])


def backup(cat: Catalogue, dest: str | Path) -> dict[str, Any]:
    """Write a consistent backup of the catalogue and its files to the new folder ``dest``."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise ValueError(f"{dest} is not empty; choose a new folder for the backup")
    src_db = _sqlite_file(cat)
    dest.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    target = dest / DB_NAME
    with sqlite3.connect(f"file:{src_db}?mode=ro", uri=True, timeout=30) as src, sqlite3.connect(target) as dst:
        src.backup(dst, pages=1024, sleep=0.001)  # copies in steps; writers are never blocked for long
    with sqlite3.connect(target) as conn:
        counts = {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                  for t in ("images", "individuals", "match_decisions", "identity_events", "models")}
    n_files = 0
    for kind in COPIED:
        src_dir = cat.data_dir / kind
        if not src_dir.is_dir():
            continue
        for path in src_dir.rglob("*"):
            if path.is_file() and not path.name.startswith(".tmp-"):
                out = dest / path.relative_to(cat.data_dir)
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, out)
                n_files += 1
    info = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "source": str(cat.data_dir),
            "database_sha256": _sha256(target), "counts": counts, "files": n_files,
            "seconds": round(time.perf_counter() - t0, 3)}
    (dest / "backup.json").write_text(json.dumps(info, indent=2))
    return info


def restore(src: str | Path, data_dir: str | Path, *, force: bool = False) -> dict[str, Any]:
    """Copy the backup ``src`` into ``data_dir`` (empty, or overwritten with ``force``); returns its info."""
    src, data_dir = Path(src), Path(data_dir)
    info_path = src / "backup.json"
    if not info_path.exists() or not (src / DB_NAME).exists():
        raise ValueError(f"{src} is not a Rosette backup (no backup.json / {DB_NAME})")
    info = json.loads(info_path.read_text())
    if _sha256(src / DB_NAME) != info.get("database_sha256"):
        raise ValueError(f"{src / DB_NAME} does not match the hash recorded in its backup.json: damaged backup")
    with sqlite3.connect(f"file:{src / DB_NAME}?mode=ro", uri=True) as conn:
        check = conn.execute("PRAGMA integrity_check").fetchone()[0]
    if check != "ok":
        raise ValueError(f"the backup's database fails SQLite's integrity check: {check}")
    if data_dir.exists() and (data_dir / DB_NAME).exists() and not force:
        raise ValueError(f"{data_dir} already holds a catalogue; restore into a new folder, or pass --force")
    data_dir.mkdir(parents=True, exist_ok=True)
    for name in (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm"):
        (data_dir / name).unlink(missing_ok=True)
    shutil.copy2(src / DB_NAME, data_dir / DB_NAME)
    for kind in COPIED:
        if (src / kind).is_dir():
            shutil.copytree(src / kind, data_dir / kind, dirs_exist_ok=True)


    cat = open_catalogue(data_dir)  # migrates an older backup to the current schema
    try:
        reanchor_head(cat)  # the verified backup's newest change is the audit trail's head now
    finally:
        cat.close()
    return info
