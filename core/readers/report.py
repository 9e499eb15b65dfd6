"""What happened to each file of an import: one :class:`IngestItemResult` per file (or manifest row), and the
:class:`IngestReport` of the whole import with its counts and summary line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

#: Result statuses, in the order reports list their counts. ``note``: something the curator should know about
#: what came in (a time zone taken, a deployment without coordinates), nothing lost.
STATUSES = ("imported", "updated", "duplicate", "would-import", "would-update", "empty", "skipped", "note", "error")


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
    # a line about the import as a whole (a package's deployments, its rows, its schema check), not one of its
    # files: listed, but left out of the file counts
    about_import: bool = False
    # a photo already catalogued that this import gave new animals (boxes or observations): those annotations
    added_ids: tuple[int, ...] = ()

    @property
    def needs_attention(self) -> bool:
        """Errors, notes, skipped files, updates and duplicates under another name (not plain re-imports)."""
        return self.status in ("error", "note", "skipped", "updated", "would-update", "empty") or (
            self.status == "duplicate" and self.same_as is not None)


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"


@dataclass
class ImportTally:
    """What an import brought, counted in things rather than files: photos, animals (annotations), person boxes
    blurred, and what a detector's boxes left out (boxes below the threshold, boxes refused as invalid, empty
    frames). ``boxes`` is False when no detector or package gave boxes (then only photos and animals are said)."""

    photos: int = 0
    animals: int = 0  # every animal this import added: in its new photos and in photos catalogued before
    photos_given_animals: int = 0  # photos catalogued before that this import gave new animals (a lower threshold)
    animals_added: int = 0  # of ``animals``, those added to photos catalogued before
    people_blurred: int = 0
    below_threshold: int = 0
    invalid_boxes: int = 0
    empty_left_out: int = 0
    empty_kept: int = 0
    boxes: bool = False
    min_confidence: float | None = None

    def words(self, *, keep_empty: str = "import with --keep-empty") -> str:
        """``4 photos, 5 animals, 1 person blurred, 2 boxes below 0.2, 1 box refused as invalid, 1 empty frame
        left out (tick "keep empty frames" to keep them)``; ``keep_empty`` says how to keep empty frames in the
        words of the screen or command the import came from."""
        parts = [_n(self.photos, "photo"), _n(self.animals, "animal")]
        if self.animals_added:
            parts[-1] += (f" ({self.animals_added} of them added to {_n(self.photos_given_animals, 'photo')} "
                          "already catalogued)")
        if self.boxes:
            parts.append(f"{_n(self.people_blurred, 'person', 'people')} blurred")
            below = f" below {self.min_confidence:g}" if self.min_confidence is not None else " below the threshold"
            parts.append(_n(self.below_threshold, "box", "boxes") + below)
            parts.append(_n(self.invalid_boxes, "box", "boxes") + " refused as invalid"
                         + (" (each named below with its reason)" if self.invalid_boxes else ""))
            if self.empty_kept:
                parts.append(_n(self.empty_kept, "empty frame") + " kept")
            parts.append(_n(self.empty_left_out, "empty frame") + " left out"
                         + (f" ({keep_empty} to keep them)" if self.empty_left_out else ""))
        return ", ".join(parts)


def about_words(counts: dict[str, int]) -> str:
    """``1 imported, 2 notes, 1 error``: the lines about an import as a whole, by status."""
    return ", ".join(f"{n} {s}{'s' if n != 1 and s in ('error', 'note') else ''}" for s, n in counts.items() if n)


@dataclass
class IngestReport:
    """Per-file outcome of one import, with counts for the summary line."""

    items: list[IngestItemResult] = field(default_factory=list)
    source: str = ""
    format: str = ""
    dry_run: bool = False
    seconds: float = 0.0
    tally: ImportTally = field(default_factory=ImportTally)
    interrupted: bool = False  # Ctrl-C stopped it: what was stored stays, the same import again resumes

    @property
    def counts(self) -> dict[str, int]:
        """Number of files (or manifest rows) per status, every status present, zeros included; the lines about
        the import as a whole (:attr:`IngestItemResult.about_import`) are not files and not counted here."""
        out = {s: 0 for s in STATUSES}
        for it in self.items:
            if not it.about_import:
                out[it.status] = out.get(it.status, 0) + 1
        return out

    @property
    def about_counts(self) -> dict[str, int]:
        """Number of lines about the import as a whole per status (only statuses present)."""
        out: dict[str, int] = {}
        for it in self.items:
            if it.about_import:
                out[it.status] = out.get(it.status, 0) + 1
        return {s: out[s] for s in STATUSES if s in out}

    @property
    def files(self) -> list[IngestItemResult]:
        """The lines of files (or manifest rows, or a package's media), without those about the import."""
        return [it for it in self.items if not it.about_import]

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
        """CLI exit code: 130 when interrupted (as for any command stopped by Ctrl-C), else 0 if at least one file
        was fine or nothing failed, 1 if everything failed."""
        if self.interrupted:
            return 130
        return 0 if self.ok else 1

    def rows(self, *, statuses: Sequence[str] | None = None, attention_only: bool = False) -> list[tuple[str, str, str]]:
        """``(name, status, message)`` rows for tables: all, some statuses, or those needing attention."""
        return [(it.name, it.status, it.message) for it in self.items
                if (statuses is None or it.status in statuses) and (not attention_only or it.needs_attention)]

    def summary(self) -> str:
        """One line such as ``1213 imported, 0 errors (1213 files, 14.2 s, 85 files/s)``."""
        c = self.counts
        parts = [f"{n} {s if s not in ('error', 'note') else (s + 's' if n != 1 else s)}" for s, n in c.items()
                 if n or s in ("imported", "error")]
        files = self.files
        unit = "media" if self.format.startswith("camtrap-dp") else "files"
        rate = f", {len(files) / self.seconds:.0f} {unit}/s" if self.seconds > 0 and files else ""
        prefix = "dry run (nothing written): " if self.dry_run else ""
        text = f"{prefix}{', '.join(parts)} ({len(files)} {unit}, {self.seconds:.1f} s{rate})"
        about = about_words(self.about_counts)
        return text + (f"; about the import as a whole: {about}" if about else "")
