"""Kaggle re-identification format: read train/test CSVs, score pairs, write the submission.

Input as in the Kaggle jaguar re-ID challenge (``train.csv``, ``test.csv`` of pairs, RGBA PNGs whose alpha is the
mask); output ``submission.csv`` with ``row_id,similarity`` in ``test.csv``'s order. Parsing is strict: every
error is a :class:`KaggleFormatError` naming the file, the line and the problem.

The columns, the similarity written, and what the parser tolerates: docs/io.md."""

from __future__ import annotations

import csv
import io
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np

from core.io.csv_safety import is_formula
from core.similarity import METRICS, l2_normalize, paired_scores, pairwise_scores

TEST_COLUMNS = ("row_id", "query_image", "gallery_image")
TRAIN_COLUMNS = ("filename", "ground_truth")
SUBMISSION_COLUMNS = ("row_id", "similarity")

#: How many missing files / bad rows an error message lists before "... and N more".
MAX_LISTED = 10


class KaggleFormatError(ValueError):
    """A Kaggle CSV or image folder does not follow the expected format (message: file, line, problem)."""


@dataclass(frozen=True)
class PairRow:
    """One ``test.csv`` row: score ``query_image`` against ``gallery_image`` under ``row_id``."""

    row_id: str
    query_image: str
    gallery_image: str
    #: Line in the source CSV (header = 1); 0 when built by hand. Not part of equality.
    line: int = field(default=0, compare=False)


CsvSource = str | bytes | os.PathLike


def _read_source(source: CsvSource) -> tuple[str, str]:
    """(text, display name). A str that is blank or holds a newline or comma (and is no file) is CSV text; else a path."""
    if isinstance(source, bytes):
        return source.decode("utf-8-sig"), "<text>"
    looks_like_text = isinstance(source, str) and (not source.strip() or "\n" in source or "," in source)
    if looks_like_text and not os.path.isfile(source):
        return source.lstrip("\ufeff"), "<text>"
    path = Path(source)
    if not path.is_file():
        raise KaggleFormatError(f"{path}: file not found")
    try:
        return path.read_text(encoding="utf-8-sig"), str(path)
    except UnicodeDecodeError as exc:
        raise KaggleFormatError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _read_table(source: CsvSource, required: Sequence[str], *, label: str | None = None
                ) -> tuple[str, list[tuple[int, dict[str, str]]]]:
    """Parse a CSV with the ``required`` columns: (display name, [(line, {column: stripped cell})]); ``label``
    replaces the path in messages (an upload's own file name, never the server's temporary folder)."""
    text, name = _read_source(source)
    name = label or name
    if not text.strip():
        raise KaggleFormatError(f"{name}: file is empty (expected a header {','.join(required)})")
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    rows: list[tuple[int, dict[str, str]]] = []
    try:
        for raw in reader:
            cells = [c.strip() for c in raw]
            if not any(cells):
                continue  # blank line
            line = reader.line_num
            if header is None:
                header = cells
                dupes = sorted({c for c in header if header.count(c) > 1})
                if dupes:
                    raise KaggleFormatError(f"{name}, line {line}: duplicate column(s) {', '.join(dupes)}")
                missing = [c for c in required if c not in header]
                if missing:
                    raise KaggleFormatError(
                        f"{name}, line {line}: missing column(s) {', '.join(missing)}; "
                        f"expected {','.join(required)}, found {','.join(header) or '(nothing)'}"
                    )
                positions = [(c, header.index(c)) for c in required]
                continue
            if len(cells) != len(header):
                raise KaggleFormatError(
                    f"{name}, line {line}: {len(cells)} field(s), the header has {len(header)}"
                )
            row = {c: cells[i] for c, i in positions}
            if not all(row.values()):
                blank = [c for c in required if not row[c]]
                raise KaggleFormatError(f"{name}, line {line}: blank {', '.join(blank)}")
            rows.append((line, row))
    except csv.Error as exc:
        raise KaggleFormatError(f"{name}, line {reader.line_num}: malformed CSV ({exc})") from None
    if header is None:
        raise KaggleFormatError(f"{name}: file is empty (expected a header {','.join(required)})")
    if not rows:
        raise KaggleFormatError(f"{name}: header only, no data rows")
    return name, rows


def _check_unique(name: str, rows: Iterable[tuple[int, str]], what: str) -> None:
    first_line: dict[str, int] = {}
    for line, key in rows:
        if key in first_line:
            raise KaggleFormatError(f"{name}, line {line}: duplicate {what} {key!r} (first on line {first_line[key]})")
        first_line[key] = line


def read_test_csv(path_or_text: CsvSource, *, label: str | None = None) -> list[PairRow]:
    """Rows of ``test.csv`` (``row_id,query_image,gallery_image``) in file order.

    Rejects a missing column, an empty file, a duplicate ``row_id`` and blank
    cells, naming the line (and the file as ``label`` when given).
    """
    name, table = _read_table(path_or_text, TEST_COLUMNS, label=label)
    _check_unique(name, ((line, r["row_id"]) for line, r in table), "row_id")
    for line, r in table:
        if is_formula(r["row_id"]):
            raise KaggleFormatError(f"{name} line {line}: row_id {r['row_id']!r} starts like a spreadsheet formula "
                                    "(=, +, @, a tab or a line break); it would run as one when the CSV is opened")
    return [PairRow(r["row_id"], r["query_image"], r["gallery_image"], line=line) for line, r in table]


def read_train_csv(path_or_text: CsvSource) -> list[tuple[str, str]]:
    """Rows of ``train.csv`` as (filename, ground_truth) in file order; a filename may appear once."""
    name, table = _read_table(path_or_text, TRAIN_COLUMNS)
    _check_unique(name, ((line, r["filename"]) for line, r in table), "filename")
    return [(r["filename"], r["ground_truth"]) for _, r in table]


def distinct_images(rows: Iterable[PairRow]) -> list[str]:
    """Every image named by the rows once, in first-seen order (query before gallery within a row)."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.setdefault(row.query_image, None)
        seen.setdefault(row.gallery_image, None)
    return list(seen)


def _unsafe_name(name: str) -> bool:
    for pure in (PurePosixPath(name), PureWindowsPath(name)):
        if pure.is_absolute() or pure.anchor or ".." in pure.parts:
            return True
    return False


def check_images_exist(names: Iterable[str], images_dir: str | os.PathLike, *, max_listed: int = MAX_LISTED) -> None:
    """Raise :class:`KaggleFormatError` listing (up to ``max_listed``) names not found as files in ``images_dir``.

    Names are relative to ``images_dir``; absolute names and names with ``..``
    are rejected as unsafe.
    """
    root = Path(images_dir)
    if not root.is_dir():
        raise KaggleFormatError(f"{root}: images directory not found")
    names = list(names)
    unsafe = [n for n in names if _unsafe_name(n)]
    if unsafe:
        raise KaggleFormatError(
            f"{root}: image name(s) must be relative and stay inside the folder: {_listing(unsafe, max_listed)}"
        )
    missing = [n for n in names if not (root / n).is_file()]
    if missing:
        raise KaggleFormatError(f"{root}: {len(missing)} image(s) not found: {_listing(missing, max_listed)}")


def _listing(items: Sequence[str], max_listed: int) -> str:
    shown = ", ".join(repr(x) for x in items[:max_listed])
    more = len(items) - max_listed
    return shown + (f" ... and {more} more" if more > 0 else "")


def score_pairs(
    rows: Sequence[PairRow],
    embeddings: np.ndarray,
    names: Sequence[str],
    *,
    metric: str = "cosine",
    dense_limit: int = 1 << 24,
) -> np.ndarray:
    """Similarity of every row (float32, length len(rows)), higher = more similar.

    ``embeddings[i]`` belongs to image ``names[i]``. ``cosine``: rows are
    L2-normalised first, score = <q, g>; ``lorentz``: score = exp(-d(q, g)).
    Vectorised: the score matrix over the images the rows use is computed once
    (when it has at most ``dense_limit`` entries) and gathered at (query, gallery);
    otherwise paired scores are computed in chunks. An image named by a row but
    absent from ``names`` is a :class:`KaggleFormatError` naming the row.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
    emb = np.asarray(embeddings)
    if emb.ndim != 2 or emb.shape[0] != len(names):
        raise ValueError(f"embeddings must be len(names) x D = {len(names)} x D, got shape {emb.shape}")
    position: dict[str, int] = {}
    for i, n in enumerate(names):
        if n in position:
            raise ValueError(f"image name {n!r} appears twice in names (positions {position[n]} and {i})")
        position[n] = i
    q_idx = np.empty(len(rows), dtype=np.int64)
    g_idx = np.empty(len(rows), dtype=np.int64)
    unknown: list[str] = []
    for r, row in enumerate(rows):
        qi = position.get(row.query_image, -1)
        gi = position.get(row.gallery_image, -1)
        if qi < 0 or gi < 0:
            missing = row.query_image if qi < 0 else row.gallery_image
            where = f"line {row.line}, " if row.line else ""
            unknown.append(f"{where}row_id {row.row_id!r}: {missing!r}")
        q_idx[r], g_idx[r] = qi, gi
    if unknown:
        raise KaggleFormatError(f"no embedding for {len(unknown)} row(s): {_listing(unknown, MAX_LISTED)}")
    if len(rows) == 0:
        return np.zeros(0, dtype=np.float32)
    used, inverse = np.unique(np.concatenate([q_idx, g_idx]), return_inverse=True)
    sub = emb[used]
    if not np.all(np.isfinite(sub)):
        bad = names[int(used[np.flatnonzero(~np.all(np.isfinite(sub), axis=1))[0]])]
        raise ValueError(f"embedding of {bad!r} contains NaN or inf")
    if metric == "cosine":
        sub = l2_normalize(sub)
    qi_local, gi_local = inverse[: len(rows)], inverse[len(rows):]
    if len(used) ** 2 <= dense_limit:
        return pairwise_scores(sub, sub, metric=metric)[qi_local, gi_local].astype(np.float32)
    out = np.empty(len(rows), dtype=np.float32)
    chunk = 65_536
    for start in range(0, len(rows), chunk):
        sl = slice(start, start + chunk)
        out[sl] = paired_scores(sub[qi_local[sl]], sub[gi_local[sl]], metric=metric)
    return out


def write_submission(path: str | os.PathLike, rows: Sequence[PairRow], similarities: np.ndarray) -> None:
    """Write ``row_id,similarity`` in the order of ``rows``; every row_id exactly once, every similarity finite.

    Written to a temporary file in the same folder and renamed, so a failed
    write never leaves half a submission behind.
    """
    sims = np.asarray(similarities)
    if sims.ndim != 1 or sims.shape[0] != len(rows):
        raise ValueError(f"need one similarity per row: {len(rows)} rows, similarities of shape {sims.shape}")
    if not np.issubdtype(sims.dtype, np.number):
        raise ValueError(f"similarities must be numeric, got dtype {sims.dtype}")
    if not np.all(np.isfinite(sims)):
        i = int(np.flatnonzero(~np.isfinite(sims))[0])
        raise ValueError(f"similarity of row_id {rows[i].row_id!r} is {sims[i]} (must be finite)")
    seen: set[str] = set()
    for row in rows:
        if row.row_id in seen:
            raise ValueError(f"row_id {row.row_id!r} appears more than once; each must be written exactly once")
        seen.add(row.row_id)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".submission-", suffix=".csv", dir=target.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(SUBMISSION_COLUMNS)
            for row, s in zip(rows, sims.tolist()):
                writer.writerow((row.row_id, f"{float(s):.9g}"))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_submission(path_or_text: CsvSource) -> dict[str, float]:
    """``submission.csv`` as {row_id: similarity} (file order); rejects duplicates and non-numeric or non-finite values."""
    name, table = _read_table(path_or_text, SUBMISSION_COLUMNS)
    _check_unique(name, ((line, r["row_id"]) for line, r in table), "row_id")
    out: dict[str, float] = {}
    for line, r in table:
        try:
            value = float(r["similarity"])
        except ValueError:
            raise KaggleFormatError(f"{name}, line {line}: similarity {r['similarity']!r} is not a number") from None
        if not math.isfinite(value):
            raise KaggleFormatError(f"{name}, line {line}: similarity {r['similarity']!r} is not finite")
        out[r["row_id"]] = value
    return out


def check_submission(submission: dict[str, float], rows: Sequence[PairRow]) -> None:
    """Raise :class:`KaggleFormatError` unless ``submission`` has exactly the row_ids of ``rows``."""
    expected = [r.row_id for r in rows]
    missing = [r for r in expected if r not in submission]
    extra = sorted(set(submission) - set(expected))
    problems = []
    if missing:
        problems.append(f"{len(missing)} row_id(s) missing: {_listing(missing, MAX_LISTED)}")
    if extra:
        problems.append(f"{len(extra)} unexpected row_id(s): {_listing(extra, MAX_LISTED)}")
    if problems:
        raise KaggleFormatError("submission: " + "; ".join(problems))
