"""secr's text inputs read back, and the capture history a density fit works on.

The files are those ``read.capthist`` reads and :mod:`core.field.capthist` writes (``rosette export capthist``):

- captures, one line ``Session ID Occasion Detector`` per detection (``fmt="trapID"``, secr's default), or
  ``Session ID Occasion X Y`` where the detector is named by its coordinates (``fmt="XY"``, the format of secr's
  own ``capt.txt``); occasions count from 1; further fields (covariates) are ignored;
- traps, one line ``Detector X Y [usage]`` per detector, X and Y in metres; the usage is either one number per
  occasion (``binary.usage = FALSE``: e.g. active days) or secr's string of 0/1 codes, one per occasion; anything
  after ``/`` (secr's covariates) is ignored. Without usage every detector counts as used once on every occasion.

In both files fields are separated by white space and ``#`` starts a comment, as R's ``read.table`` reads them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.field.capthist import Trap
from core.field.scr_errors import (
    DensityInputError,
    DetectorLayoutError,
    OccasionNotCovered,
    SigmaNotEstimable,
    UnknownDetector,
)

DETECTOR_TYPES = ("proximity", "count", "multi")
_BINARY_USAGE = re.compile(r"^[01]+$")


@dataclass(frozen=True)
class Capture:
    """One detection as secr's captures file gives it."""

    session: str
    animal: str
    occasion: int
    detector: str
    removed: bool = False  # secr's negative occasion: the animal left the study (died, was removed) after it


def _data_lines(path: str | Path) -> list[tuple[int, list[str]]]:
    lines = []
    text = Path(path).read_text(encoding="utf-8-sig")
    for number, raw in enumerate(text.splitlines(), start=1):
        body = raw.split("#", 1)[0].strip()
        if body:
            lines.append((number, body.split()))
    return lines


def _number(text: str, *, what: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DetectorLayoutError(f"{where}: {what} {text!r} is not a number; give coordinates in metres") from None
    if not math.isfinite(value):
        raise DetectorLayoutError(f"{where}: {what} is {text!r}; give finite coordinates in metres")
    return value


def read_secr_traps(path: str | Path, *, binary_usage: bool | None = None) -> list[Trap]:
    """The detectors of a secr traps file, each with its usage (empty when the file gives none).

    ``binary_usage=None`` reads a single run of 0/1 codes (two or more, the same length on every line) as secr's
    usage string and anything else as one number per occasion; say ``True`` or ``False`` when that guess is wrong
    (a one-occasion study whose usage is ``10`` days, say)."""
    rows = _data_lines(path)
    if not rows:
        raise DetectorLayoutError(f"{path}: no detector lines (expected 'Detector X Y [usage]')")
    parsed: list[tuple[str, float, float, list[str], str]] = []
    for number, fields in rows:
        where = f"{Path(path).name} line {number}"
        if len(fields) < 3:
            raise DetectorLayoutError(f"{where}: expected 'Detector X Y [usage]', got {' '.join(fields)!r}; "
                                      "every station needs its X and Y in metres")
        extra = fields[3:]
        if "/" in extra:
            extra = extra[:extra.index("/")]
        extra = [e.split("/", 1)[0] for e in extra if e.split("/", 1)[0]]
        parsed.append((fields[0], _number(fields[1], what="X", where=where), _number(fields[2], what="Y", where=where),
                       extra, where))
    if binary_usage is None:
        codes = [p[3] for p in parsed]
        binary_usage = (all(len(c) == 1 and _BINARY_USAGE.match(c[0]) for c in codes)
                        and len({len(c[0]) for c in codes}) == 1 and len(codes[0][0]) > 1)
    traps: list[Trap] = []
    seen: set[str] = set()
    for name, x, y, extra, where in parsed:
        if name in seen:
            raise DetectorLayoutError(f"{where}: detector {name!r} is listed twice; give each detector one line")
        seen.add(name)
        if binary_usage and extra:
            if len(extra) != 1 or not _BINARY_USAGE.match(extra[0]):
                raise DensityInputError(f"{where}: usage {' '.join(extra)!r} is not a string of 0/1 codes")
            usage = tuple(float(c) for c in extra[0])
        else:
            try:
                usage = tuple(float(v) for v in extra)
            except ValueError:
                raise DensityInputError(f"{where}: usage {' '.join(extra)!r} is not one number per occasion") from None
            if any(not math.isfinite(v) or v < 0 for v in usage):
                raise DensityInputError(f"{where}: usage must be finite and not negative, got {' '.join(extra)!r}")
        traps.append(Trap(name=name, x=x, y=y, usage=usage))
    lengths = {len(t.usage) for t in traps}
    if len(lengths) > 1:
        raise DensityInputError(f"{path}: detectors give usage for different numbers of occasions "
                                f"({sorted(lengths)}); give every detector one value per occasion")
    return traps


def read_secr_captures(path: str | Path, *, fmt: str = "trapID",
                       traps: Sequence[Trap] = ()) -> list[Capture]:
    """The detections of a secr captures file. ``fmt="XY"`` names each detector by its coordinates, which must
    match one of ``traps`` (to 1 cm)."""
    if fmt not in ("trapID", "XY"):
        raise DensityInputError(f"captures format {fmt!r} unknown; use 'trapID' or 'XY'")
    by_xy = {(round(t.x, 2), round(t.y, 2)): t.name for t in traps}
    if fmt == "XY" and not traps:
        raise DensityInputError("captures in XY format need the traps to name their detectors")
    out: list[Capture] = []
    for number, fields in _data_lines(path):
        where = f"{Path(path).name} line {number}"
        need = 5 if fmt == "XY" else 4
        if len(fields) < need:
            layout = "Session ID Occasion X Y" if fmt == "XY" else "Session ID Occasion Detector"
            raise DensityInputError(f"{where}: expected '{layout}', got {' '.join(fields)!r}")
        try:
            occasion_value = float(fields[2])
        except ValueError:
            occasion_value = math.nan
        if not (math.isfinite(occasion_value) and occasion_value == int(occasion_value) and occasion_value != 0):
            raise DensityInputError(f"{where}: occasion {fields[2]!r} is not a whole number counted from 1")
        # secr marks an animal removed (dead) with a negative occasion; it was still detected on that occasion and
        # is exposed to detection on no later one
        occasion = abs(int(occasion_value))
        removed = occasion_value < 0
        if fmt == "XY":
            key = (round(_number(fields[3], what="X", where=where), 2),
                   round(_number(fields[4], what="Y", where=where), 2))
            if key not in by_xy:
                raise UnknownDetector(f"{where}: no detector at X={fields[3]} Y={fields[4]}; "
                                      "add it to the traps file or correct the coordinates")
            detector = by_xy[key]
        else:
            detector = fields[3]
        out.append(Capture(session=fields[0], animal=fields[1], occasion=occasion, detector=detector,
                           removed=removed))
    if not out:
        raise DensityInputError(f"{path}: no capture lines (expected 'Session ID Occasion Detector')")
    return out


@dataclass(frozen=True, eq=False)
class CaptureHistory:
    """Detections as an animal x occasion x detector array of counts, with the detectors' layout and usage."""

    animals: tuple[str, ...]
    detectors: tuple[str, ...]
    xy: np.ndarray  # (K, 2) metres
    usage: np.ndarray  # (K, S)
    counts: np.ndarray  # (n, S, K) detections
    detector_type: str
    removed_on: np.ndarray | None = None  # (n,) occasion (from 0) after which each animal left; S when it stayed

    @property
    def n_removed(self) -> int:
        return 0 if self.removed_on is None else int((self.removed_on < self.usage.shape[1] - 1).sum())

    def exposure(self) -> np.ndarray | None:
        """(n, K) each animal's usage summed over the occasions it was in the study (None: no removal)."""
        if self.removed_on is None:
            return None
        alive = np.arange(self.usage.shape[1])[None, :] <= self.removed_on[:, None]
        return alive.astype(float) @ self.usage.T

    @property
    def n_animals(self) -> int:
        return len(self.animals)

    @property
    def n_occasions(self) -> int:
        return int(self.usage.shape[1])

    @property
    def n_detections(self) -> int:
        """Detections as the detector counts them: animal x occasion x detector presences for proximity and
        multi-catch traps, the summed counts for count detectors."""
        return int(self.counts.sum())


def _as_capture(item: Capture | Sequence) -> Capture:
    if isinstance(item, Capture):
        return item
    session, animal, occasion, detector = item
    return Capture(session=str(session), animal=str(animal), occasion=abs(int(occasion)), detector=str(detector),
                   removed=int(occasion) < 0)


def _trap_fields(item) -> tuple[str, float, float, tuple[float, ...]]:
    return str(item.name), float(item.x), float(item.y), tuple(float(u) for u in item.usage)


def build_capture_history(captures: Iterable[Capture | Sequence], traps: Sequence[Trap], *,
                          detector_type: str, session: str | None = None,
                          require_spread: bool = True) -> CaptureHistory:
    """The capture history of one session, every input fault refused with what to do about it.
    ``require_spread=False`` leaves the check that some animal reached two detectors to the caller (a session
    fitted jointly with others may share their sigma)."""
    if detector_type == "single":
        raise DensityInputError("detector 'single' is fitted as secr fits it, with the multi-catch likelihood: "
                                "use detector 'multi'")
    if detector_type not in DETECTOR_TYPES:
        raise DensityInputError(f"detector {detector_type!r} unknown; use one of {', '.join(DETECTOR_TYPES)}")
    rows = [_as_capture(c) for c in captures]
    if not rows:
        raise DensityInputError("no captures: a density needs detected animals")
    sessions = sorted({r.session for r in rows})
    if session is None:
        if len(sessions) > 1:
            raise DensityInputError(f"the captures hold {len(sessions)} sessions ({', '.join(sessions[:5])}); "
                                    "choose one session to fit")
        session = sessions[0]
    rows = [r for r in rows if r.session == session]
    if not rows:
        raise DensityInputError(f"no captures in session {session!r} (sessions: {', '.join(sessions)})")

    fields = [_trap_fields(t) for t in traps]
    if not fields:
        raise DetectorLayoutError("no detectors: give each station's name and its X and Y in metres")
    names = [f[0] for f in fields]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise DetectorLayoutError(f"detector {dupes[0]!r} is listed twice; give each detector one line")
    xy = np.array([[f[1], f[2]] for f in fields], dtype=float)
    if not np.all(np.isfinite(xy)):
        bad = names[int(np.flatnonzero(~np.isfinite(xy).all(axis=1))[0])]
        raise DetectorLayoutError(f"station {bad!r} has no coordinates; give every station its X and Y in metres")
    if np.unique(np.round(xy, 2), axis=0).shape[0] < 2:
        raise DetectorLayoutError("all detectors stand at one point, so distances (and sigma) cannot be "
                                  "estimated; check the stations' coordinates")

    index = {n: k for k, n in enumerate(names)}
    unknown = sorted({r.detector for r in rows if r.detector not in index})
    if unknown:
        raise UnknownDetector(f"captures name detector(s) the traps do not list: {', '.join(unknown[:5])}"
                              f"{' ...' if len(unknown) > 5 else ''}; add them to the traps file or correct the "
                              "captures")
    max_occasion = max(r.occasion for r in rows)
    lengths = {len(f[3]) for f in fields}
    if len(lengths) > 1:
        raise DensityInputError(f"detectors give usage for different numbers of occasions ({sorted(lengths)})")
    n_usage = lengths.pop()
    if n_usage == 0:
        usage = np.ones((len(names), max_occasion))
    else:
        usage = np.array([f[3] for f in fields], dtype=float)
        if max_occasion > n_usage:
            late = sorted({r.occasion for r in rows if r.occasion > n_usage})
            raise OccasionNotCovered(f"captures fall on occasion(s) {', '.join(map(str, late[:5]))} but the "
                                     f"traps' usage covers {n_usage} occasion(s); give usage for every occasion")
    if np.any(usage < 0) or not np.all(np.isfinite(usage)):
        raise DensityInputError("usage must be finite and not negative")

    animals = tuple(sorted({r.animal for r in rows}))
    a_index = {a: i for i, a in enumerate(animals)}
    counts = np.zeros((len(animals), usage.shape[1], len(names)), dtype=np.int64)
    for r in rows:
        counts[a_index[r.animal], r.occasion - 1, index[r.detector]] += 1
    removed_on = _removals(rows, animals, n_occasions=usage.shape[1])
    off = np.argwhere((counts.sum(axis=0) > 0) & (usage.T <= 0))
    if off.size:
        s, k = off[0]
        raise OccasionNotCovered(f"detector {names[k]!r} has a capture on occasion {s + 1}, when its usage is 0; "
                                 "correct the usage or the capture")
    if detector_type in ("proximity", "multi"):
        counts = np.minimum(counts, 1)
    if detector_type == "multi":
        doubled = np.argwhere(counts.sum(axis=2) > 1)
        if doubled.size:
            i, s = doubled[0]
            raise DensityInputError(f"animal {animals[i]!r} is caught at two traps on occasion {s + 1}, which a "
                                    "multi-catch trap cannot do; use detector 'proximity' or correct the captures")
    spread = (counts.sum(axis=1) > 0).sum(axis=1)
    if require_spread and not np.any(spread >= 2):
        raise SigmaNotEstimable("no animal was detected at two different detectors, so sigma (how far an animal "
                                "ranges) cannot be estimated; a longer study or more detectors may catch some "
                                "animal at a second detector")
    return CaptureHistory(animals=animals, detectors=tuple(names), xy=xy, usage=usage, counts=counts,
                          detector_type=detector_type, removed_on=removed_on)


def _removals(rows: Sequence[Capture], animals: Sequence[str], *, n_occasions: int) -> np.ndarray | None:
    """Each animal's last occasion in the study (from 0; the last occasion when it was not removed), None when no
    capture is a removal; a capture after an animal's removal is refused."""
    removed = {}
    for r in rows:
        if r.removed:
            removed[r.animal] = min(removed.get(r.animal, r.occasion), r.occasion)
    if not removed:
        return None
    late = [r for r in rows if r.animal in removed and r.occasion > removed[r.animal]]
    if late:
        r = late[0]
        raise DensityInputError(f"animal {r.animal!r} is captured on occasion {r.occasion} after its removal on "
                                f"occasion {removed[r.animal]} (a negative occasion in secr's captures file); "
                                "correct the captures")
    return np.array([removed.get(a, n_occasions) - 1 for a in animals], dtype=int)
