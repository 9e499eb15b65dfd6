"""Catalogue health: files in the content-addressed store that nothing references (an import killed with
SIGKILL between writing a photo and committing its row leaves them), found and removed by ``rosette doctor``.

A file counts as referenced when an image row names it (photo, thumbnail, mask) or, for masks, when the audit
trail names it (a replaced mask stays part of the history). Files younger than ``min_age_s`` are left alone:
they may belong to an import that is still running. Half-written temporary files (``.tmp-*``) count as
unreferenced."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select

from db.models import AuditEvent, Image, Photo
from db.session import Catalogue

STORE_KINDS = ("images", "thumbs", "masks")
DEFAULT_MIN_AGE_S = 600.0
_BLOB = re.compile(r"(?:images|thumbs|masks)/[0-9a-f]{2}/[0-9a-f]{64}\.[a-z0-9]+")


@dataclass
class Orphans:
    """Unreferenced files found (relative paths), their total size, and the young ones left alone."""

    files: list[str] = field(default_factory=list)
    bytes: int = 0
    too_young: list[str] = field(default_factory=list)
    removed: int = 0

    def summary(self, *, removed: bool) -> str:
        what = f"{len(self.files)} unreferenced file(s), {self.bytes / 1024 ** 2:.1f} MB"
        young = f"; {len(self.too_young)} recent one(s) left alone (an import may still be running)" \
            if self.too_young else ""
        return (f"removed {what}" if removed else f"found {what} (run without --dry-run to remove them)") + young \
            if self.files else f"no unreferenced files{young}"


def referenced_files(cat: Catalogue) -> set[str]:
    with cat.unit_of_work() as s:
        refs = {p for row in s.execute(select(Image.blob_path, Image.thumb_path, Image.mask_path)) for p in row if p}
        # a photo's own files: its bytes and its thumbnail (person boxes blurred), also for a frame kept empty
        refs |= {p for row in s.execute(select(Photo.blob_path, Photo.thumb_path)) for p in row if p}
        for details in s.scalars(select(AuditEvent.details)):
            refs.update(_BLOB.findall(str(details)))
    return refs


def find_orphans(cat: Catalogue, *, min_age_s: float = DEFAULT_MIN_AGE_S, now: float | None = None) -> Orphans:
    refs = referenced_files(cat)
    now = time.time() if now is None else now
    out = Orphans()
    for kind in STORE_KINDS:
        root = cat.data_dir / kind
        if not root.is_dir():
            continue
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            rel = path.relative_to(cat.data_dir).as_posix()
            if rel in refs:
                continue
            if now - path.stat().st_mtime < min_age_s:
                out.too_young.append(rel)
                continue
            out.files.append(rel)
            out.bytes += path.stat().st_size
    return out


def remove_orphans(cat: Catalogue, orphans: Orphans) -> int:
    """Delete the files of ``orphans`` that are still unreferenced now (checked again just before)."""
    refs = referenced_files(cat)
    removed = 0
    for rel in orphans.files:
        if rel in refs:
            continue
        Path(cat.data_dir / rel).unlink(missing_ok=True)
        removed += 1
    orphans.removed = removed
    return removed
