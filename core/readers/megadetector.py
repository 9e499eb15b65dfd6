"""MegaDetector batch output (format 1.x): which boxes the detector found in each frame of a camera-trap folder.

The JSON has ``info`` (``format_version`` "1.0".."1.5", ``detector``), ``detection_categories``
(``{"1": "animal", "2": "person", "3": "vehicle"}``) and ``images``: one entry per frame with its relative
``file``, its ``detections`` (``category``, ``conf``, ``bbox`` = [x, y, width, height] normalised, origin top-left)
and, when the detector could not read it, a ``failure``. Old 1.0 files without ``info.format_version`` are read
as 1.0 when they have an ``images`` list.

:func:`read_megadetector_json` keeps the boxes at or above ``min_confidence`` and lists what it could not use
(a box outside the frame, an unknown category, a confidence that is not a number) as problem lines, never
failing on one bad detection; :func:`match_frames` pairs the JSON's paths with the files of an import folder.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from core.annotations import DEFAULT_MIN_CONFIDENCE, DETECTION_CATEGORIES, Box, Detection, InvalidBoxError

#: Largest MegaDetector JSON read (bytes): a batch of millions of frames stays well below it.
MAX_JSON_BYTES = 1024 * 1024 * 1024
#: A box edge this far past the frame's edge is MegaDetector's rounding (4 decimals) and is clipped, not refused.
ROUNDING_TOLERANCE = 1e-3
#: Category names (lower case) as detectors have written them -> Rosette's category.
CATEGORY_NAMES = {"animal": "animal", "person": "person", "human": "person", "people": "person",
                  "vehicle": "vehicle"}

_VERSION = re.compile(r"^\d+(\.\d+)*$")


class DetectionsFormatError(ValueError):
    """The file is not MegaDetector batch output Rosette can read (not JSON, another format, a 2.x version)."""


@dataclass(frozen=True)
class FrameDetections:
    """What MegaDetector found in one frame: the boxes kept (at or above the threshold) and counts of the rest."""

    file: str
    animals: tuple[Detection, ...]
    people: tuple[Detection, ...]
    vehicles: int
    below_threshold: int
    failure: str | None
    invalid: tuple[str, ...] = ()  # why each of its detections that could not be used was refused

    @property
    def is_empty(self) -> bool:
        """Nothing kept and the detector read the frame (a failed frame is not empty: it is unknown; nor is one
        whose boxes were refused as invalid: what they showed is unknown too)."""
        return self.failure is None and not self.animals and not self.people and not self.vehicles \
            and not self.invalid


@dataclass(frozen=True)
class MegaDetectorOutput:
    """One MegaDetector JSON: frames keyed by normalised relative POSIX path, and the lines it could not use."""

    format_version: str
    detector: str | None
    min_confidence: float
    frames: dict[str, FrameDetections]
    problems: tuple[str, ...]


def normalise_path(name: str) -> str:
    """``cam1\\IMG_1.JPG`` / ``./cam1/IMG_1.JPG`` -> ``cam1/IMG_1.JPG``."""
    p = name.replace("\\", "/")
    while p.startswith("./"):
        p = p[2:]
    return p


def _load(source: str | os.PathLike | bytes) -> object:
    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
        where = "the data"
    else:
        where = os.fspath(source)
        try:
            with open(where, "rb") as fh:
                data = fh.read(MAX_JSON_BYTES + 1)
        except OSError as exc:
            raise DetectionsFormatError(f"cannot read MegaDetector output {where}: {exc.strerror or exc}") from None
        if len(data) > MAX_JSON_BYTES:
            raise DetectionsFormatError(f"{where} is larger than {MAX_JSON_BYTES // (1024 * 1024)} MB; "
                                        "refused as MegaDetector output")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DetectionsFormatError(f"not MegaDetector batch output: {where} is not UTF-8 text "
                                    "(expected a JSON file)") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DetectionsFormatError(f"not MegaDetector batch output: {where} is not valid JSON "
                                    f"({exc.msg} at line {exc.lineno} column {exc.colno})") from None


def _type_name(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false",
            type(None): "null"}.get(type(value), "a number")


def _version(data: dict) -> str:
    info = data.get("info")
    if info is not None and not isinstance(info, dict):
        raise DetectionsFormatError(f"not MegaDetector batch output: 'info' is {_type_name(info)}, "
                                    "expected an object with 'format_version'")
    raw = (info or {}).get("format_version")
    if raw is None:
        return "1.0"
    version = str(raw).strip() if isinstance(raw, (str, int, float)) and not isinstance(raw, bool) else None
    if version is None or not _VERSION.match(version):
        raise DetectionsFormatError(f"MegaDetector output format_version {raw!r} is not a version number; "
                                    "Rosette reads format 1.x ('1.0' to '1.5')")
    if version.split(".")[0] != "1":
        raise DetectionsFormatError(f"MegaDetector output format {version} is not supported; "
                                    "Rosette reads format 1.x")
    return version


def _check_shape(data: object) -> dict:
    if not isinstance(data, dict):
        raise DetectionsFormatError(f"not MegaDetector batch output: the JSON is {_type_name(data)}, "
                                    "expected an object with an 'images' list")
    images = data.get("images")
    keys = ", ".join(sorted(str(k) for k in data)) or "none"
    if not isinstance(images, list):
        hint = ""
        if "resources" in data:
            hint = "; this looks like a data package (Camtrap DP datapackage.json)"
        elif "annotations" in data:
            hint = "; this looks like COCO"
        raise DetectionsFormatError(f"not MegaDetector batch output: no 'images' list (found keys: {keys}){hint}")
    if images and not any(isinstance(e, dict) and "file" in e for e in images):
        first = images[0]
        found = ", ".join(sorted(str(k) for k in first)) if isinstance(first, dict) else _type_name(first)
        hint = "; this looks like COCO" if "annotations" in data else ""
        raise DetectionsFormatError("not MegaDetector batch output: no 'images' entry has a 'file' "
                                    f"(first entry: {found}){hint}")
    return data


def _categories(data: dict) -> tuple[dict[str, str], str]:
    """The file's category ids -> Rosette's category (by the file's own names), and a text of the ids for errors."""
    raw = data.get("detection_categories")
    if raw is None:
        cats = dict(DETECTION_CATEGORIES)
        return cats, ", ".join(f"{k} {v}" for k, v in cats.items())
    if not isinstance(raw, dict):
        raise DetectionsFormatError(f"not MegaDetector batch output: 'detection_categories' is {_type_name(raw)}, "
                                    "expected an object of id -> name")
    cats = {}
    for cid, name in raw.items():
        mapped = CATEGORY_NAMES.get(str(name).strip().lower())
        if mapped is not None:
            cats[str(cid)] = mapped
    return cats, ", ".join(f"{k} {v}" for k, v in raw.items()) or "none"


def _frame(file: str, entry: dict, *, cats: dict[str, str], known: str, min_confidence: float,
           problems: list[str]) -> FrameDetections:
    failure = entry.get("failure")
    failure = str(failure) if failure not in (None, "") else None
    dets = entry.get("detections")
    if dets is None:
        dets = []
    elif not isinstance(dets, list):
        problems.append(f"{file}: 'detections' is {_type_name(dets)}, expected a list; its detections are skipped")
        dets = []
    animals: list[Detection] = []
    people: list[Detection] = []
    vehicles = below = 0
    invalid: list[str] = []
    for i, det in enumerate(dets, start=1):
        if not isinstance(det, dict):
            problems.append(f"{file}: detection #{i} is {_type_name(det)}, expected an object; skipped")
            invalid.append(f"detection #{i} is {_type_name(det)}, not an object")
            continue
        bbox = det.get("bbox")
        label = f"{file}: detection #{i} (bbox {bbox!r})"
        cid = det.get("category")
        category = cats.get(str(cid)) if isinstance(cid, (str, int)) and not isinstance(cid, bool) else None
        if category is None:
            problems.append(f"{label} skipped: unknown category {cid!r} (this file's categories: {known})")
            invalid.append(f"detection #{i}: unknown category {cid!r}")
            continue
        conf = det.get("conf")
        if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not math.isfinite(conf) \
                or not 0 <= conf <= 1:
            problems.append(f"{label} skipped: conf {conf!r} is not a number in [0, 1]")
            invalid.append(f"detection #{i}: conf {conf!r} is not a number in [0, 1]")
            continue
        try:
            box = Box.from_sequence(_clip_rounding(bbox))
        except InvalidBoxError as exc:
            problems.append(f"{label} skipped: {exc}")
            invalid.append(f"detection #{i}: {exc}")
            continue
        if conf < min_confidence:
            below += 1
        elif category == "animal":
            animals.append(Detection("animal", box, float(conf)))
        elif category == "person":
            people.append(Detection("person", box, float(conf)))
        else:
            vehicles += 1
    return FrameDetections(file, tuple(animals), tuple(people), vehicles, below, failure, tuple(invalid))


def _clip_rounding(bbox: object) -> object:
    """Clip an edge at most :data:`ROUNDING_TOLERANCE` past the frame back onto it; anything else is left for
    :class:`Box` to judge."""
    if not isinstance(bbox, (list, tuple)) or len(bbox) != 4:
        return bbox
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in bbox):
        return bbox
    x, y, w, h = (float(v) for v in bbox)
    if -ROUNDING_TOLERANCE <= x < 0:
        w, x = w + x, 0.0
    if -ROUNDING_TOLERANCE <= y < 0:
        h, y = h + y, 0.0
    if 1 < x + w <= 1 + ROUNDING_TOLERANCE:
        w = 1.0 - x
    if 1 < y + h <= 1 + ROUNDING_TOLERANCE:
        h = 1.0 - y
    return [x, y, w, h]


def read_megadetector_json(source: str | os.PathLike | bytes, *,
                           min_confidence: float = DEFAULT_MIN_CONFIDENCE) -> MegaDetectorOutput:
    """Read MegaDetector batch output from a path (``str`` or path-like) or from the JSON's bytes.

    Detections at or above ``min_confidence`` are kept; bad detections and duplicate ``file`` entries (the first
    is kept) become problem lines. A file that is not MegaDetector 1.x output is a :class:`DetectionsFormatError`.
    """
    if isinstance(min_confidence, bool) or not isinstance(min_confidence, (int, float)) \
            or not 0 <= min_confidence <= 1:
        raise ValueError(f"min_confidence must be a number in [0, 1], got {min_confidence!r}")
    data = _load(source)
    version = _version(data) if isinstance(data, dict) else None
    data = _check_shape(data)
    version = version or "1.0"
    info = data.get("info") or {}
    detector = info.get("detector")
    detector = str(detector) if detector not in (None, "") else None
    cats, known = _categories(data)
    frames: dict[str, FrameDetections] = {}
    problems: list[str] = []
    for n, entry in enumerate(data["images"]):
        raw_file = entry.get("file") if isinstance(entry, dict) else None
        if not isinstance(raw_file, str) or not normalise_path(raw_file).strip():
            problems.append(f"images[{n}]: no 'file' name (got {raw_file!r}); skipped")
            continue
        file = normalise_path(raw_file)
        if file in frames:
            problems.append(f"{file}: listed again in the JSON (images[{n}]); the first entry is kept, "
                            "this one ignored")
            continue
        frames[file] = _frame(file, entry, cats=cats, known=known, min_confidence=float(min_confidence),
                              problems=problems)
    return MegaDetectorOutput(version, detector, float(min_confidence), frames, tuple(problems))


def _suffix_of(longer: str, shorter: str) -> bool:
    return longer == shorter or longer.endswith("/" + shorter)


def match_frames(output: MegaDetectorOutput,
                 available: Iterable[str]) -> tuple[dict[str, FrameDetections], list[str]]:
    """Pair the JSON's frames with the files of an import folder (relative POSIX paths).

    Returns the frames found, keyed by the folder's path, and the JSON's names missing from the folder (sorted).
    A name matches exactly, else case-insensitively, else by path suffix ("cam1/IMG_1.JPG" and "IMG_1.JPG", either
    way round) — the last two only when the pairing is unique on both sides.
    """
    avail = {normalise_path(a): a for a in available}
    matched: dict[str, FrameDetections] = {}
    left_json = []
    for name, frame in output.frames.items():
        if name in avail:
            matched[avail.pop(name)] = frame
        else:
            left_json.append(name)

    # Case-insensitive: only names unique (ignoring case) on both sides.
    json_by_lower: dict[str, list[str]] = {}
    for name in left_json:
        json_by_lower.setdefault(name.lower(), []).append(name)
    avail_by_lower: dict[str, list[str]] = {}
    for norm in avail:
        avail_by_lower.setdefault(norm.lower(), []).append(norm)
    still = []
    for name in left_json:
        hits = avail_by_lower.get(name.lower(), [])
        if len(hits) == 1 and len(json_by_lower[name.lower()]) == 1:
            matched[avail.pop(hits[0])] = output.frames[name]
        else:
            still.append(name)

    # Suffix (case-insensitive): candidates share the file name; the pairing must be one-to-one.
    by_base: dict[str, list[str]] = {}
    for norm in avail:
        by_base.setdefault(PurePosixPath(norm).name.lower(), []).append(norm)
    cands: dict[str, list[str]] = {}
    reverse: dict[str, list[str]] = {}
    for name in still:
        low = name.lower()
        hits = [a for a in by_base.get(PurePosixPath(low).name, [])
                if _suffix_of(low, a.lower()) or _suffix_of(a.lower(), low)]
        cands[name] = hits
        for a in hits:
            reverse.setdefault(a, []).append(name)
    missing = []
    for name in still:
        hits = cands[name]
        if len(hits) == 1 and len(reverse[hits[0]]) == 1:
            matched[avail.pop(hits[0])] = output.frames[name]
        else:
            missing.append(name)
    return matched, sorted(missing)


def summary_line(output: MegaDetectorOutput, matched: Mapping[str, FrameDetections],
                 missing: Sequence[str]) -> str:
    """One report line: what the JSON holds (frames, animal boxes kept, frames with people, empty frames, boxes
    below the threshold) and how it met the folder (frames matched, files missing, the first five named)."""
    frames = output.frames.values()
    animals = sum(len(f.animals) for f in frames)
    people = sum(1 for f in frames if f.people)
    empty = sum(1 for f in frames if f.is_empty)
    below = sum(f.below_threshold for f in frames)
    failed = sum(1 for f in frames if f.failure is not None)
    who = f"{output.detector}, " if output.detector else ""
    parts = [f"{len(output.frames)} frames read", f"{animals} animal boxes kept", f"{people} frames with people",
             f"{empty} empty frames", f"{below} boxes below {output.min_confidence:g}"]
    if failed:
        parts.append(f"{failed} frames the detector could not read")
    if output.problems:
        parts.append(f"{len(output.problems)} problems")
    parts.append(f"{len(matched)} matched in the folder")
    if missing:
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        parts.append(f"{len(missing)} files missing from the folder ({shown})")
    else:
        parts.append("0 files missing from the folder")
    return f"MegaDetector ({who}format {output.format_version}, min confidence {output.min_confidence:g}): " \
        + ", ".join(parts)
