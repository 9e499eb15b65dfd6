"""Small Camtrap DP 1.0 packages for tests: :func:`write_package` writes ``datapackage.json``, the three CSVs and
a tiny distinct JPEG for every media row whose ``filePath`` is a relative path not written yet."""

from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image as PILImage

PROFILE = "https://raw.githubusercontent.com/tdwg/camtrap-dp/1.0/camtrap-dp-profile.json"
#: The columns each CSV starts with (Camtrap DP 1.0 order); a row's other keys are added after them.
COLUMNS = {
    "deployments": ["deploymentID", "locationID", "locationName", "latitude", "longitude", "deploymentStart",
                    "deploymentEnd", "cameraID", "cameraModel"],
    "media": ["mediaID", "deploymentID", "captureMethod", "timestamp", "filePath", "filePublic", "fileName",
              "fileMediatype"],
    "observations": ["observationID", "deploymentID", "mediaID", "eventID", "eventStart", "eventEnd",
                     "observationLevel", "observationType", "scientificName", "count", "lifeStage", "sex",
                     "individualID", "bboxX", "bboxY", "bboxWidth", "bboxHeight"],
}


def tiny_jpeg(seed: int, size: tuple[int, int] = (64, 48)) -> bytes:
    """A small JPEG whose bytes differ per seed."""
    w, h = size
    arr = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    PILImage.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
    header = list(columns)
    for row in rows:
        header.extend(k for k in row if k not in header)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=header)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})


def _package_metadata(deployments: Sequence[Mapping[str, Any]],
                      observations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The descriptor's package-level properties Camtrap DP requires (contributors, project, spatial, temporal,
    taxonomic), so a package whose rows are valid passes the schema check."""
    points = [[float(d["longitude"]), float(d["latitude"])] for d in deployments
              if d.get("latitude") not in (None, "") and d.get("longitude") not in (None, "")]
    days = sorted(str(d[k])[:10] for d in deployments for k in ("deploymentStart", "deploymentEnd") if d.get(k))
    names = sorted({str(o["scientificName"]) for o in observations if o.get("scientificName")})
    return {"contributors": [{"title": "Test Curator", "role": "contact"}],
            "project": {"title": "test", "samplingDesign": "opportunistic", "captureMethod": ["activityDetection"],
                        "individualAnimals": any(o.get("individualID") for o in observations),
                        "observationLevel": ["media", "event"]},
            "spatial": {"type": "MultiPoint", "coordinates": points or [[4.2, 51.05]]},
            "temporal": {"start": days[0] if days else "2024-01-01", "end": days[-1] if days else "2024-01-01"},
            "taxonomic": [{"scientificName": n} for n in names]}


def write_package(directory: Path, deployments: Sequence[Mapping[str, Any]], media: Sequence[Mapping[str, Any]],
                  observations: Sequence[Mapping[str, Any]], *, profile: str | None = PROFILE,
                  photos: bool = True, seed: int = 0) -> Path:
    """Write a Camtrap DP package into ``directory`` and return its ``datapackage.json``.

    Rows are dicts keyed by Camtrap DP column names (missing columns are empty cells; ``None`` is an empty cell).
    With ``photos`` every media row with a relative ``filePath`` gets a tiny JPEG there (seeded by ``seed`` + its
    row number, so two packages with different seeds hold different bytes). ``profile=None`` leaves it out."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, rows in (("deployments", deployments), ("media", media), ("observations", observations)):
        _write_csv(directory / f"{name}.csv", rows, COLUMNS[name])
    if photos:
        for i, row in enumerate(media):
            rel = str(row.get("filePath") or "")
            if not rel or "://" in rel:
                continue
            target = directory / rel
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tiny_jpeg(seed * 10_000 + i))
    descriptor: dict[str, Any] = {
        "name": "test-package", "created": "2024-06-01T00:00:00Z",
        "resources": [{"name": name, "path": f"{name}.csv", "profile": "tabular-data-resource", "format": "csv",
                       "mediatype": "text/csv", "encoding": "utf-8",
                       "schema": f"https://raw.githubusercontent.com/tdwg/camtrap-dp/1.0/{name}-table-schema.json"}
                      for name in ("deployments", "media", "observations")],
    }
    descriptor.update(_package_metadata(deployments, observations))
    if profile is not None:
        descriptor["profile"] = profile
    path = directory / "datapackage.json"
    path.write_text(json.dumps(descriptor, indent=2))
    return path


def zip_package(directory: Path, target: Path, *, wrapper: str | None = None) -> Path:
    """Zip a package's folder (every file under it), optionally inside one top folder ``wrapper``."""
    directory = Path(directory)
    with zipfile.ZipFile(target, "w") as zf:
        for p in sorted(directory.rglob("*")):
            if p.is_file():
                rel = p.relative_to(directory).as_posix()
                zf.write(p, f"{wrapper}/{rel}" if wrapper else rel)
    return Path(target)
