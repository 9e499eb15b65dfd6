"""``rosette density`` and the density service over the catalogue and over secr's files.

The simulated study (tests/sim_study.py: 60 jaguars whose centres lie in a 10 x 8 km region round 12 cameras,
sigma 1.5 km, 10 daily occasions), here with one catchability for every animal, imported as a Camtrap DP package:
its density fitted with the region as the habitat mask must hold the simulation's true density, 75 per 100 km², in
its 95% interval; the same study written by ``rosette export capthist`` and read back as secr files gives the same
fit; the Population tab's background job gives the same answer again. Then each bad input is refused with words
that say what to do, and nothing is stored.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.cli import main as cli_main
from core.field.capthist import utm_coordinates
from core.field import density as engine
from db.io.ingest import ingest_path
from db.models import Deployment, Individual, Job, JobStatus, Species
from db.session import open_catalogue
from jobs.actions import density as ds
from jobs.requests.density import DensityRequest
from jobs.worker import run_one
from tests.sim_study import SPECIES, region_lat_lon, simulate_study
from tests.test_population_service import _annotation, _photo

#: The Beta(0.8, 5) catchability's mean: every animal of the density study is given it (SCR assumes one g0).
CATCHABILITY = 0.8 / 5.8
REQUIRED_KEYS = ("D_per_100km2", "ci_low", "ci_high", "g0", "sigma_m", "loglik", "AIC", "n_animals", "n_detections",
                 "mask", "buffer_check")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    root = tmp_path_factory.mktemp("density-sim")
    study = simulate_study(root / "package", catchability=CATCHABILITY)
    cat = open_catalogue(root / "rosette-data")
    try:
        ingest_path(cat, study.package, format="camtrap-dp", user="tester")
    finally:
        cat.close()
    epsg, corners = utm_coordinates(region_lat_lon(), epsg=32721)
    region = root / "region.geojson"
    region.write_text(json.dumps({"type": "Polygon", "coordinates": [[list(c) for c in corners]]}))
    return study, root / "rosette-data", region


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli_main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _density_json(capsys, data_dir: Path, *args: str) -> dict:
    rc, out, err = _cli(capsys, "--data-dir", str(data_dir), "density", "--json", *args)
    assert rc == 0, err
    return json.loads(out)


def test_the_simulated_study_s_interval_holds_its_true_density(sim, capsys):
    study, data_dir, region = sim
    assert study.true_density_per_100km2 == pytest.approx(75.0)
    out = _density_json(capsys, data_dir, "--occasion-days", "1", "--buffer", "6000", "--mask", str(region))
    assert all(key in out for key in REQUIRED_KEYS)
    assert out["ci_low"] < study.true_density_per_100km2 < out["ci_high"], out
    assert out["ci_low"] < out["D_per_100km2"] < out["ci_high"]
    # what the fit used is the simulation's own: its photographed animals, its animal x day x station detections
    assert out["n_animals"] == len(study.capture_counts)
    assert out["n_detections"] == len(study.station_days)
    assert out["n_detectors"] == 12 and out["n_occasions"] == 10
    assert 1000 < out["sigma_m"] < 2200  # the simulation's sigma is 1.5 km
    # the region (80 km²) clipped the mask: its area is the region's, within a cell's width round the edge
    assert set(out["mask"]) >= {"points", "spacing_m", "buffer_m", "area_km2"}
    assert 75 < out["mask"]["area_km2"] < 85 and out["mask"]["source"] == "polygon"
    assert out["study"]["epsg"] == 32721 and out["study"]["species"] == SPECIES
    assert out["buffer_check"]["changed"] is False


def test_the_default_mask_without_the_region_says_what_it_assumed(sim, capsys):
    _, data_dir, _ = sim
    rc, out, err = _cli(capsys, "--data-dir", str(data_dir), "density", "--occasion-days", "1")
    assert rc == 0, err
    assert "D (animals per 100 km²)" in out and "What it assumes" not in out.splitlines()[0]
    # the default buffer is widened by itself, as secr's suggest.buffer widens it, until D is stable
    widened = re.search(r"buffer ([\d,]+) m \(widened by itself from 5,500 m, 4 × the spread of the animals' "
                        r"detections, until D was stable\)", out)
    assert widened and int(widened[1].replace(",", "")) > 5500, out
    assert re.search(r"Buffer check: buffer widened from 5500 m to \d+ m, where D changes by [+-]0\.\d\d% from the "
                     r"buffer of \d+ m \(under 1%\)", out), out
    assert "[100%]" in err or "done" in err  # progress is reported on stderr


def test_secr_files_written_by_export_capthist_give_the_same_fit(sim, capsys, tmp_path):
    _, data_dir, region = sim
    rc, _, err = _cli(capsys, "--data-dir", str(data_dir), "export", "capthist", str(tmp_path / "ch"),
                      "--occasion-days", "1")
    assert rc == 0, err
    options = ("--buffer", "6000", "--mask", str(region))
    from_catalogue = _density_json(capsys, data_dir, "--occasion-days", "1", *options)
    from_files = _density_json(capsys, tmp_path / "no-catalogue", "--captures", str(tmp_path / "ch" / "captures.txt"),
                               "--traps", str(tmp_path / "ch" / "traps.txt"), *options)
    assert not (tmp_path / "no-catalogue").exists()  # secr files need no catalogue, and none is made
    assert from_files["study"]["source"] == "files"
    assert from_files["n_animals"] == from_catalogue["n_animals"]
    assert from_files["n_detections"] == from_catalogue["n_detections"]
    # the traps file keeps coordinates to the centimetre and usage to 4 decimals: the same fit to 6 digits
    for key in ("D_per_100km2", "ci_low", "ci_high", "g0", "sigma_m", "loglik"):
        assert from_files[key] == pytest.approx(from_catalogue[key], rel=1e-5), key


def test_the_tab_s_background_job_gives_the_same_answer_and_a_report(sim, capsys):
    _, data_dir, region = sim
    foreground = _density_json(capsys, data_dir, "--occasion-days", "1", "--buffer", "6000", "--mask", str(region),
                               "--detectfn", "EX", "--cl")
    cat = open_catalogue(data_dir)
    try:
        request = DensityRequest(species=SPECIES, occasion_days=1, buffer_m=6000, mask=str(region), detectfn="EX",
                                 conditional=True)
        job_id, words = ds.queue_density(cat, request)
        assert f"job #{job_id}" in words
        waiting, words = ds.density_status(cat, job_id)
        assert waiting is None and words.startswith(f"Density fit job #{job_id} queued: 0%")
        assert run_one(cat, isolate=False) == job_id
        answer, words = ds.density_status(cat, job_id)
        assert answer is not None and words == f"Density fit job #{job_id} done: {answer['summary']}."
        assert answer["likelihood"] == "conditional" and answer["detectfn"] == "EX"
        assert answer["D_per_100km2"] == pytest.approx(foreground["D_per_100km2"], rel=1e-9)
        assert len(answer["mask_xy"]) == answer["mask"]["points"]
        assert len(answer["stations"]) == 12 and sum(s["detections"] for s in answer["stations"]) == \
            answer["n_detections"]
        assert answer["curve"]["probability"][0] == pytest.approx(answer["g0"])
        assert ds.latest_density_job(cat) == job_id
        rows = ds.estimate_rows(answer)
        assert [r[0].split(" ")[0] for r in rows] == ["D", "g0", "sigma", "N"]
        assert "Horvitz-Thompson" in rows[0][3] and "exponential" in rows[2][3]
        report = Path(ds.write_density_report(cat, answer))
        text = report.read_text()
        assert report.parent == cat.data_dir / "exports"
        assert f"{answer['D_per_100km2']:,.1f}" in text and '"D_per_100km2"' in text and "mask_xy" not in text
        figure = ds.map_figure(answer)
        assert [t.name for t in figure.data] == ["habitat mask", "animals (mean detection)", "stations"]
        # first seen zoomed to the stations (the whole mask a double-click away), with a scale bar
        (x0, x1), _ = ds.map_view(answer)
        xs = [s["x"] for s in answer["stations"]]
        assert tuple(figure.layout.xaxis.range) == (x0, x1) and x0 < min(xs) and max(xs) < x1
        assert figure.layout.annotations[0].text in ("<b>1 km</b>", "<b>2 km</b>", "<b>5 km</b>")
        assert figure.data[2].textfont.size >= 14  # station names legible
        assert ds.curve_figure(answer).data[0].y[0] == pytest.approx(answer["g0"])
    finally:
        cat.close()


# --------------------------------------------------------------------------- bad input


def _small_catalogue(data_dir: Path, stations: dict[str, tuple[float, float] | None],
                     seen: list[tuple[str, str, str]]) -> None:
    """Deployments at ``stations`` (name -> lat, lon or None) from 2024-05-01 to 05-06, and a jaguar photo per
    (individual, station, local time)."""
    cat = open_catalogue(data_dir)
    with cat.unit_of_work() as s:
        jaguar = Species(name=SPECIES)
        s.add(jaguar)
        s.flush()
        deployments = {}
        for name, where in stations.items():
            lat, lon = where if where else (None, None)
            deployments[name] = Deployment(key=f"dep-{name}", location_id=name, lat=lat, lon=lon,
                                           start="2024-05-01T00:00:00-04:00", end="2024-05-06T00:00:00-04:00")
        s.add_all(deployments.values())
        individuals = {n: Individual(name=n, species_id=jaguar.id) for n in sorted({a for a, _, _ in seen})}
        s.add_all(individuals.values())
        s.flush()
        for k, (animal, station, when) in enumerate(seen, start=1):
            _annotation(s, _photo(s, k, deployment=deployments[station], taken_at=f"{when}-04:00"), jaguar,
                        individuals[animal])
        s.commit()
    cat.close()


def _refused(capsys, data_dir: Path, *args: str) -> str:
    rc, out, err = _cli(capsys, "--data-dir", str(data_dir), "density", *args)
    assert rc != 0 and out == ""
    return err


def _jobs_and_rows(data_dir: Path) -> tuple[int, int]:
    cat = open_catalogue(data_dir)
    try:
        with cat.unit_of_work() as s:
            return s.scalar(select(func.count(Job.id))), s.scalar(select(func.count(Individual.id)))
    finally:
        cat.close()


def test_no_animal_at_two_detectors_is_refused_with_what_to_do(tmp_path, capsys):
    data_dir = tmp_path / "rosette-data"
    _small_catalogue(data_dir, {"A": (-16.50, -56.50), "B": (-16.51, -56.50), "C": (-16.52, -56.50)},
                     [("Ana", "A", "2024-05-01T10:00:00"), ("Ana", "A", "2024-05-02T10:00:00"),
                      ("Bia", "B", "2024-05-03T10:00:00"), ("Caio", "C", "2024-05-01T22:00:00")])
    before = _jobs_and_rows(data_dir)
    err = _refused(capsys, data_dir, "--buffer", "3000")
    assert "no animal was detected at two different detectors" in err and "sigma" in err
    assert "more detectors may catch some animal at a second detector" in err
    # the tab's job fails with the same words and stores no answer; the catalogue is as it was
    cat = open_catalogue(data_dir)
    try:
        job_id, _ = ds.queue_density(cat, DensityRequest(buffer_m=3000))
        assert run_one(cat, isolate=False) == job_id
        answer, words = ds.density_status(cat, job_id)
        assert answer is None and "failed: no animal was detected at two different detectors" in words
        with cat.unit_of_work() as s:
            job = s.get(Job, job_id)
            assert job.status == JobStatus.failed and not job.result
    finally:
        cat.close()
    assert _jobs_and_rows(data_dir) == (before[0] + 1, before[1])


def test_stations_without_coordinates_or_all_at_one_point_are_refused(tmp_path, capsys):
    seen = [("Ana", "A", "2024-05-01T10:00:00"), ("Ana", "B", "2024-05-02T10:00:00")]
    nowhere = tmp_path / "nowhere"
    _small_catalogue(nowhere, {"A": None, "B": None}, seen)
    err = _refused(capsys, nowhere, "--buffer", "3000")
    assert "no station of the Panthera onca study has coordinates" in err and "latitude and longitude" in err
    one_point = tmp_path / "one-point"
    _small_catalogue(one_point, {"A": (-16.5, -56.5), "B": (-16.5, -56.5)}, seen)
    err = _refused(capsys, one_point, "--buffer", "3000")
    assert "all detectors stand at one point" in err and "check the stations' coordinates" in err


def test_a_buffer_of_zero_or_less_and_a_mask_far_from_every_detector_are_refused(sim, capsys, tmp_path):
    _, data_dir, _ = sim
    for bad in ("0", "-100"):
        err = _refused(capsys, data_dir, "--buffer", bad)
        assert "the buffer must be more than 0 m" in err and "about 4 times" in err
    with pytest.raises(ValueError, match="the buffer must be more than 0 m"):
        DensityRequest(buffer_m=0)
    far = tmp_path / "far.csv"
    far.write_text("x,y\n" + "\n".join(f"{100_000 + 500 * i},{100_000 + 500 * j}" for i in range(5) for j in range(5)))
    err = _refused(capsys, data_dir, "--occasion-days", "1", "--buffer", "6000", "--mask", str(far))
    assert "no mask point lies within 6000 m of a detector" in err and "covers them" in err
    err = _refused(capsys, data_dir, "--mask", str(tmp_path / "missing.geojson"), "--buffer", "6000")
    assert "missing.geojson does not exist" in err


def test_a_fit_that_does_not_converge_names_the_start_values_tried(sim, capsys, monkeypatch):
    _, data_dir, region = sim
    # the engine's maximiser made to fail, for this test only
    monkeypatch.setattr(engine, "_maximise", lambda model, start: (start, -1e10, False))
    err = _refused(capsys, data_dir, "--occasion-days", "1", "--buffer", "6000", "--mask", str(region))
    assert "the fit did not converge from any start (" in err
    assert "g0=" in err and "sigma=" in err and "D=" in err  # each start tried, by its real values


def test_secr_files_with_an_unknown_detector_or_an_uncovered_occasion_are_refused(tmp_path, capsys):
    traps = tmp_path / "traps.txt"
    traps.write_text("# Detector X Y usage\nA 0 0 1 1 1\nB 500 0 1 1 1\nC 0 500 1 1 1\n")
    unknown = tmp_path / "unknown.txt"
    unknown.write_text("1 Ana 1 A\n1 Ana 2 B\n1 Bia 1 Z9\n")
    err = _refused(capsys, tmp_path, "--captures", str(unknown), "--traps", str(traps), "--buffer", "2000")
    assert "captures name detector(s) the traps do not list: Z9" in err and "add them to the traps file" in err
    late = tmp_path / "late.txt"
    late.write_text("1 Ana 1 A\n1 Ana 2 B\n1 Bia 5 C\n")
    err = _refused(capsys, tmp_path, "--captures", str(late), "--traps", str(traps), "--buffer", "2000")
    assert "occasion(s) 5 but the traps' usage covers 3 occasion(s)" in err and "give usage for every occasion" in err
    err = _refused(capsys, tmp_path, "--captures", str(late), "--buffer", "2000")
    assert "the captures file was given without the traps file" in err
    err = _refused(capsys, tmp_path, "--captures", str(late), "--traps", str(traps), "--detector", "hair")
    assert "detector 'hair' unknown; use one of proximity, count, multi" in err
    assert not (tmp_path / "rosette-data").exists()  # nothing was made for a fit refused
