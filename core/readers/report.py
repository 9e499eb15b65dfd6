"""What happened to each file of an import: one :class:`IngestItemResult` per file (or manifest row), and the
:class:`IngestReport` of the whole import with its counts and summary line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

#: Result statuses, in the order reports list their counts.
STATUSES = ("imported", "updated", "duplicate", "would-import", "would-update", "empty", "skipped", "error")


@dataclass
class IngestItemResult:
    """What happened to one file (or one manifest row)."""

    name: str
    status: str  # one of STATUSES
    message: str = ""
    image_id: int | None = None
    same_as: str | None = None  # duplicates: the name the same bytes already have, when it differs
    photo_id: int | None = None
    annotation_ids: tuple[int, ...] = ()  # every annotation (animal) of the photo this import made or found

    @property
    def needs_attention(self) -> bool:
        """Errors, skipped files, updates and duplicates under another name (not plain re-imports)."""
        return self.status in ("error", "skipped", "updated", "would-update", "empty") or (
            self.status == "duplicate" and self.same_as is not None)


@dataclass
class IngestReport:
    """Per-file outcome of one import, with counts for the summary line."""

    items: list[IngestItemResult] = field(default_factory=list)
    source: str = ""
    format: str = ""
    dry_run: bool = False
    seconds: float = 0.0

    @property
    def counts(self) -> dict[str, int]:
        """Number of items per status (every status present, zeros included)."""
        out = {s: 0 for s in STATUSES}
        for it in self.items:
            out[it.status] = out.get(it.status, 0) + 1
        return out

    @property
    def errors(self) -> list[IngestItemResult]:
        return [it for it in self.items if it.status == "error"]

    @property
    def image_ids(self) -> list[int]:
        """Catalogue ids of every image this import touched (imported, updated or already there)."""
        return [it.image_id for it in self.items if it.image_id is not None]

    @property
    def ok(self) -> bool:
        """True unless every item failed (an empty import is ok)."""
        return not self.items or any(it.status != "error" for it in self.items)

    @property
    def exit_code(self) -> int:
        """CLI exit code: 0 if at least one file was fine or nothing failed, 1 if everything failed."""
        return 0 if self.ok else 1

    def rows(self, *, statuses: Sequence[str] | None = None, attention_only: bool = False) -> list[tuple[str, str, str]]:
        """``(name, status, message)`` rows for tables: all, some statuses, or those needing attention."""
        return [(it.name, it.status, it.message) for it in self.items
                if (statuses is None or it.status in statuses) and (not attention_only or it.needs_attention)]

    def summary(self) -> str:
        """One line such as ``1213 imported, 0 errors (1213 files, 14.2 s, 85 files/s)``."""
        c = self.counts
        parts = [f"{n} {s if s != 'error' else ('errors' if n != 1 else 'error')}" for s, n in c.items()
                 if n or s in ("imported", "error")]
        rate = f", {len(self.items) / self.seconds:.0f} files/s" if self.seconds > 0 and self.items else ""
        prefix = "dry run (nothing written): " if self.dry_run else ""
        return f"{prefix}{', '.join(parts)} ({len(self.items)} files, {self.seconds:.1f} s{rate})"
