"""Small nyala catalogues for tests: pick a few animals and write them out with a manifest."""

from __future__ import annotations

import csv
import shutil
from collections import defaultdict
from pathlib import Path

MANIFEST_COLUMNS = ("filename", "identity", "flank", "sighting")


def nyala_subset(manifest: list[dict[str, str]], *, n_animals: int = 3, photos_each: int = 3) -> list[dict[str, str]]:
    """The first ``n_animals`` identities (by name) with photos of both flanks from >= 2 sightings;
    ``photos_each`` photos each (two left, then right)."""
    by_id: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in manifest:
        by_id[row["identity"]].append(row)
    chosen: list[dict[str, str]] = []
    for identity in sorted(by_id):
        rows = by_id[identity]
        if {r["flank"] for r in rows} >= {"left", "right"} and len({r["sighting"] for r in rows}) >= 2:
            left = [r for r in rows if r["flank"] == "left"]
            right = [r for r in rows if r["flank"] == "right"]
            chosen.extend((left[:2] + right[:1])[:photos_each])
        if len(chosen) >= n_animals * photos_each:
            break
    return chosen


def write_subset(rows: list[dict[str, str]], nyala_dir: Path, dest: Path) -> Path:
    """Copy the rows' photos to ``dest/images`` and write ``dest/manifest.csv``; returns the manifest path."""
    (dest / "images").mkdir(parents=True, exist_ok=True)
    for r in rows:
        shutil.copy(nyala_dir / "images" / r["filename"], dest / "images" / r["filename"])
    with open(dest / "manifest.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(MANIFEST_COLUMNS))
        w.writeheader()
        w.writerows({k: r[k] for k in MANIFEST_COLUMNS} for r in rows)
    return dest / "manifest.csv"
