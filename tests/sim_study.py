"""A simulated camera-trap study written as a Camtrap DP 1.0 package (issue 23): jaguars walking among camera
stations in the Pantanal, each animal with its own catchability, so that not every animal is photographed.

- 12 stations on a 4 x 3 grid about 2 km apart around (-16.5, -56.5), one deployment each, active from
  2024-05-01 08:00 to 2024-05-10 18:00 local time (UTC-04:00): 10 calendar days.
- 60 animals, each with a home-range centre drawn in the grid's extent (plus 2 km) and a baseline detection
  probability p0 drawn from Beta(0.8, 5) (heterogeneous catchability). On each day, animal i is photographed at
  station j with probability p0_i * exp(-d_ij^2 / (2 sigma^2)), sigma = 1.5 km, at a random time in the
  station's active part of that day; a third of the visits leave a second photo 40 s later (the same day, so the
  same occasion).
- Every photo is a tiny distinct 16x16 JPEG with one media-level observation: ``scientificName`` Panthera onca and
  the animal's ``individualID``.

:func:`simulate_study` returns what the package holds, including each detected animal's capture count (the number
of distinct local days on which it was photographed), the truth an import plus ``rosette population
--occasion-days 1`` must reproduce.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from tests.camtrapdp_package import tiny_jpeg, write_package

SPECIES = "Panthera onca"
LOCAL = timezone(timedelta(hours=-4))
START = datetime(2024, 5, 1, 8, 0, tzinfo=LOCAL)
END = datetime(2024, 5, 10, 18, 0, tzinfo=LOCAL)
DAYS = 10
ORIGIN = (-16.5, -56.5)
SPACING_KM = 2.0
SIGMA_KM = 1.5
KM_PER_DEG_LAT = 110.57
#: Where the animals' centres are drawn: the grid's extent (x 0..6 km east, y 0..4 km south) plus 2 km each side.
REGION_KM = ((-2.0, 8.0), (-6.0, 2.0))  # (x east, y north) ranges


@dataclass(frozen=True)
class SimulatedStudy:
    """The package written and the simulation's truth."""

    package: Path  # its datapackage.json
    n_animals: int
    stations: tuple[tuple[str, float, float], ...]  # (locationID, lat, lon)
    photos: tuple[tuple[str, str, datetime], ...]  # (animal, locationID, local time), one per media row
    capture_counts: Mapping[str, int]  # detected animals -> distinct days photographed

    @property
    def frequencies(self) -> dict[int, int]:
        """k -> number of animals photographed on exactly k days (k = 1..10)."""
        counts = list(self.capture_counts.values())
        return {k: counts.count(k) for k in range(1, DAYS + 1)}

    @property
    def chao_n(self) -> float:
        """Mh-Chao's bias-corrected N = M + f1(f1 - 1)/(2(f2 + 1)) from the simulation's own counts."""
        f = self.frequencies
        return len(self.capture_counts) + f[1] * (f[1] - 1) / (2 * (f[2] + 1))

    @property
    def true_density_per_100km2(self) -> float:
        """The animals per 100 km² of the region their centres were drawn in (60 in 80 km²: 75)."""
        (x0, x1), (y0, y1) = REGION_KM
        return 100.0 * self.n_animals / ((x1 - x0) * (y1 - y0))

    @property
    def station_days(self) -> set[tuple[str, int, str]]:
        """Distinct (animal, day number from 05-01, station) detections: secr's capture lines."""
        return {(a, (t.date() - START.date()).days, s) for a, s, t in self.photos}


def _lat_lon(x_km: float, y_km: float) -> tuple[float, float]:
    """A point of the grid's plane (km east and north of the first station) as (lat, lon)."""
    km_per_deg_lon = KM_PER_DEG_LAT * math.cos(math.radians(ORIGIN[0]))
    return ORIGIN[0] + y_km / KM_PER_DEG_LAT, ORIGIN[1] + x_km / km_per_deg_lon


def _stations() -> list[tuple[str, float, float]]:
    out = []
    for row in range(3):
        for col in range(4):
            lat, lon = _lat_lon(col * SPACING_KM, -row * SPACING_KM)
            out.append((f"PT{row * 4 + col + 1:02d}", round(lat, 6), round(lon, 6)))
    return out


def region_lat_lon() -> list[tuple[float, float]]:
    """The corners (lat, lon) of the region the animals' centres are drawn in, closed (the first repeated)."""
    (x0, x1), (y0, y1) = REGION_KM
    return [_lat_lon(x, y) for x, y in ((x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0))]


def simulate_study(directory: Path, *, n_animals: int = 60, seed: int = 23,
                   catchability: float | None = None) -> SimulatedStudy:
    """Simulate the study and write it as a Camtrap DP package into ``directory``; ``catchability`` gives every
    animal that same p0 instead of its own (the draws are made all the same, so the centres and the rest of the
    random stream are those of the heterogeneous study)."""
    rng = np.random.default_rng(seed)
    stations = _stations()
    xy = np.array([[col * SPACING_KM, -row * SPACING_KM] for row in range(3) for col in range(4)])
    lo, hi = np.array([r[0] for r in REGION_KM]), np.array([r[1] for r in REGION_KM])
    centres = rng.uniform(lo, hi, size=(n_animals, 2))
    p0 = rng.beta(0.8, 5.0, size=n_animals)
    if catchability is not None:
        p0 = np.full(n_animals, float(catchability))
    d2 = ((centres[:, None, :] - xy[None, :, :]) ** 2).sum(axis=2)
    p = p0[:, None] * np.exp(-d2 / (2 * SIGMA_KM**2))  # animals x stations, per day

    names = [f"Onca-{i + 1:02d}" for i in range(n_animals)]
    photos: list[tuple[str, str, datetime]] = []
    for day in range(DAYS):
        day_start = datetime(2024, 5, 1, tzinfo=LOCAL) + timedelta(days=day)
        begin, end = max(day_start, START), min(day_start + timedelta(days=1), END)
        seen = rng.random(p.shape) < p
        for i, j in zip(*np.nonzero(seen)):
            when = begin + timedelta(seconds=int(rng.integers(0, int((end - begin).total_seconds()) - 60)))
            photos.append((names[i], stations[j][0], when))
            if rng.random() < 1 / 3:
                photos.append((names[i], stations[j][0], when + timedelta(seconds=40)))
    photos.sort(key=lambda x: (x[2], x[1], x[0]))

    directory = Path(directory)
    deployments = [{"deploymentID": f"dep-{sid}", "locationID": sid, "locationName": f"Station {sid}",
                    "latitude": lat, "longitude": lon, "deploymentStart": START.isoformat(),
                    "deploymentEnd": END.isoformat(), "cameraID": f"cam-{sid}", "cameraModel": "Reconyx HF2X"}
                   for sid, lat, lon in stations]
    media, observations = [], []
    for k, (animal, sid, when) in enumerate(photos):
        rel = f"media/{sid}/IMG_{k:04d}.JPG"
        target = directory / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(tiny_jpeg(seed * 100_000 + k, (16, 16)))
        media.append({"mediaID": f"m{k:04d}", "deploymentID": f"dep-{sid}", "captureMethod": "activityDetection",
                      "timestamp": when.isoformat(), "filePath": rel, "filePublic": "false",
                      "fileName": f"IMG_{k:04d}.JPG", "fileMediatype": "image/jpeg"})
        observations.append({"observationID": f"o{k:04d}", "deploymentID": f"dep-{sid}", "mediaID": f"m{k:04d}",
                             "observationLevel": "media", "observationType": "animal", "scientificName": SPECIES,
                             "count": 1, "individualID": animal})
    package = write_package(directory, deployments, media, observations, photos=False)
    days_seen: dict[str, set] = {}
    for animal, _, when in photos:
        days_seen.setdefault(animal, set()).add(when.date())
    counts = {a: len(days_seen[a]) for a in names if a in days_seen}
    return SimulatedStudy(package=package, n_animals=n_animals, stations=tuple(stations), photos=tuple(photos),
                          capture_counts=counts)
