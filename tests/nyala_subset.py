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


def animals_with_sightings(manifest: list[dict[str, str]], *, n: int = 3, min_sightings: int = 3,
                           prefer: tuple[str, ...] = ()) -> list[str]:
    """``n`` identities with at least ``min_sightings`` sightings: the ``prefer``red ones when the set has them
    (the shared nyala set), else the first eligible ones by name (the demo photos the repository ships)."""
    sightings: dict[str, set[str]] = defaultdict(set)
    for row in manifest:
        if row["identity"].strip():
            sightings[row["identity"]].add(row["sighting"])
    eligible = [i for i in sorted(sightings) if len(sightings[i]) >= min_sightings]
    if prefer and all(p in eligible for p in prefer):
        return list(prefer)[:n]
    if len(eligible) < n:
        raise AssertionError(f"the nyala set has only {len(eligible)} identities with {min_sightings} sightings")
    return eligible[:n]
