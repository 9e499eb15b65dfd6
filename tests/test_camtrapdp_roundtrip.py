"""Round trip: a Camtrap DP export imported into a new catalogue (``ingest_path(..., format="camtrap-dp")``) gives
the same deployments, media, individuals and detections; exported again, it gives the same tables back (but for
what the import itself decides: who classified, when, and the events it forms for photos without an eventID)."""

from __future__ import annotations

import csv
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

import pytest
from sqlalchemy import select

from core.field.stations import parse_timestamp
from db.io.ingest import ingest_path
from db.models import Deployment, Individual, Photo, Species
from db.session import open_catalogue
from jobs.actions.camtrapdp import export_camtrap_dp
from jobs.requests.camtrapdp import ExportCamtrapDPRequest
from tests.test_camtrapdp_export import build_catalogue

#: Columns the second export may differ in: what the import decides itself, not what the package said.
IMPORT_DECIDES = {"eventID", "classifiedBy", "classificationTimestamp"}


@pytest.fixture(scope="module")
def trip(tmp_path_factory):
    root = tmp_path_factory.mktemp("camtrapdp-roundtrip")
    first = build_catalogue(root)
    assert first.done.valid, first.done.details["problems"]
    again = open_catalogue(root / "again")
    report = ingest_path(again, first.out / "datapackage.json", format="camtrap-dp", user="ana", keep_empty=True)
    second = export_camtrap_dp(again, ExportCamtrapDPRequest(user="exporter", out=str(root / "package-2")))
    yield SimpleNamespace(first=first, again=again, report=report, second=second)
    again.close()
    first.cat.close()


def _deployments(cat) -> list[tuple]:
    with cat.unit_of_work() as s:
        return sorted((d.key, d.location_id, d.location_name, d.lat, d.lon, parse_timestamp(d.start).when,
                       parse_timestamp(d.end).when, d.camera_id, d.camera_model,
                       {k: str(v) for k, v in (d.details or {}).items() if k != "notACamtrapField"})
                      for d in s.scalars(select(Deployment)) if d.lat is not None)


def _file(photo: Photo) -> str:
    """A photo's file name (not its content: the photo showing a person went out, and came back, blurred)."""
    return PurePosixPath(photo.original_name).name


def _media(cat) -> dict[str, tuple]:
    """Photos with a located deployment, by file name: deployment, time (to the second) and Camtrap DP extras."""
    with cat.unit_of_work() as s:
        out = {}
        for p in s.scalars(select(Photo)):
            if p.deployment is None or p.deployment.lat is None:
                continue
            when = parse_timestamp(p.taken_at).when.replace(microsecond=0)
            extras = {k: str(v).lower() for k, v in (p.media_details or {}).items()
                      if k in ("captureMethod", "favorite", "mediaComments")}
            out[_file(p)] = (p.deployment.key, when, extras)
        return out


def _detections(cat) -> dict[str, list[tuple]]:
    """Each exported photo's animals: box (to 6 places), species, current individual."""
    with cat.unit_of_work() as s:
        species = {sp.id: sp.name for sp in s.scalars(select(Species))}
        names = {i.id: i.name for i in s.scalars(select(Individual))}
        out = {}
        for p in s.scalars(select(Photo)):
            if p.deployment is None or p.deployment.lat is None:
                continue
            out[_file(p)] = sorted((tuple(round(v, 6) for v in (a.bbox_x, a.bbox_y, a.bbox_w, a.bbox_h)),
                                          species[a.species_id], names.get(a.individual_id))
                                         for a in p.annotations)
        return out


def _individuals(cat) -> set[tuple[str, str, int]]:
    """Active individuals with their species and how many photos of them were exported."""
    with cat.unit_of_work() as s:
        found = set()
        for ind in s.scalars(select(Individual).where(Individual.active.is_(True))):
            n = sum(1 for a in ind.images if a.photo.deployment is not None and a.photo.deployment.lat is not None)
            if n:
                found.add((ind.name, s.get(Species, ind.species_id).name, n))
        return found


def test_the_import_takes_every_exported_photo(trip):
    photos = [i for i in trip.report.items if i.photo_id is not None]
    assert [i.status for i in photos] == ["imported"] * 6 and trip.report.counts["error"] == 0, \
        [(i.name, i.status, i.message) for i in trip.report.items]


def test_same_deployments(trip):
    assert _deployments(trip.again) == _deployments(trip.first.cat)
    assert len(_deployments(trip.again)) == 1


def test_same_media(trip):
    first, again = _media(trip.first.cat), _media(trip.again)
    assert again == first and len(first) == 6


def test_same_individuals(trip):
    assert _individuals(trip.again) == _individuals(trip.first.cat) == {("Ayla", "Tragelaphus angasii", 4)}


def test_same_detections(trip):
    first, again = _detections(trip.first.cat), _detections(trip.again)
    assert again == first
    boxes = sorted(d[0] for found in first.values() for d in found)
    assert boxes.count((0.0, 0.0, 1.0, 1.0)) == 4 and (0.1, 0.2, 0.3, 0.4) in boxes


def _table(folder: Path, name: str, key: str) -> dict[str, dict[str, str]]:
    with open(folder / f"{name}.csv", newline="", encoding="utf-8") as fh:
        return {r[key]: {k: v for k, v in r.items() if k not in IMPORT_DECIDES}
                for r in csv.DictReader(fh)}


def test_exported_again_the_tables_are_the_same(trip):
    assert trip.second.valid, trip.second.details["problems"]
    one, two = trip.first.out, Path(trip.second.path)
    assert _table(two, "deployments", "deploymentID") == _table(one, "deployments", "deploymentID")
    assert _table(two, "media", "mediaID") == _table(one, "media", "mediaID")
    first_obs, second_obs = _table(one, "observations", "observationID"), _table(two, "observations", "observationID")
    # a person box comes back as a person box, but the import keeps no classifier for it (the detector's name and
    # confidence were the package's, not the catalogue's)
    person = "photo-5-person-1"
    assert first_obs[person]["classificationMethod"] == "machine"
    assert second_obs[person]["classificationMethod"] == second_obs[person]["classificationProbability"] == ""
    for row in (first_obs[person], second_obs[person]):
        row.pop("classificationMethod"), row.pop("classificationProbability")
    assert second_obs == first_obs
    with open(two / "observations.csv", newline="") as fh:  # the re-importing curator now stands behind them
        assert {r["classifiedBy"] for r in csv.DictReader(fh) if r["individualID"]} == {"ana"}
