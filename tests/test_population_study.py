"""End to end: a simulated jaguar study (tests/sim_study.py: 60 animals, 12 stations, 10 days) imported as a
Camtrap DP package, then ``rosette population --occasion-days 1 --json`` must give back the simulation's own
numbers: the animals photographed, each one's number of days photographed, f_k, and Mh-Chao's N computed from
them by hand; and ``rosette export capthist`` one secr capture line per animal x day x station."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import main as cli_main
from db.io.ingest import ingest_path
from db.session import open_catalogue
from tests.sim_study import DAYS, SPECIES, simulate_study


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("sim-study")
    sim = simulate_study(root / "package")
    cat = open_catalogue(root / "rosette-data")
    try:
        report = ingest_path(cat, sim.package, format="camtrap-dp", user="tester")
        media = [it for it in report.items if it.name.startswith("media/")]
        assert len(media) == len(sim.photos) and all(it.status == "imported" for it in media), report.summary()
    finally:
        cat.close()
    return sim, root / "rosette-data"


def _population_json(data_dir: Path, capsys, *args: str) -> dict:
    rc = cli_main(["--data-dir", str(data_dir), "population", "--occasion-days", "1", "--json", *args])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return json.loads(captured.out)


def test_the_population_answer_is_the_simulations_own(imported, capsys):
    sim, data_dir = imported
    out = _population_json(data_dir, capsys)
    assert 0 < len(sim.capture_counts) < sim.n_animals  # the simulation leaves some animals unseen
    assert out["parameters"]["species"] == SPECIES
    assert out["individuals"] == len(sim.capture_counts)
    assert out["occasions"] == DAYS
    assert out["capture_counts"] == dict(sim.capture_counts)
    assert out["capture_frequencies"] == {str(k): v for k, v in sim.frequencies.items()}
    f = sim.frequencies
    M = len(sim.capture_counts)
    chao = {e["model"]: e for e in out["estimates"]}["Mh-Chao"]
    assert chao["N"] == pytest.approx(M + f[1] * (f[1] - 1) / (2 * (f[2] + 1)), rel=1e-12)
    assert M <= chao["ci_low"] <= chao["N"] <= chao["ci_high"]
    assert out["discovery"][-1] == M
    # 12 cameras from 08:00 on the first day to 18:00 on the last: 12 x 16/24, then 12 a day, then 12 x 18/24
    assert out["effort"] == pytest.approx([8.0] + [12.0] * 8 + [9.0])
    assert out["data"]["annotations"] == len(sim.photos) and out["data"]["deployments"] == 12
    assert out["data"]["left_out"] == {"no_individual": 0, "no_deployment": 0, "no_time": 0, "outside_window": 0}


def test_the_capthist_export_has_one_secr_line_per_animal_day_station(imported, capsys, tmp_path):
    sim, data_dir = imported
    rc = cli_main(["--data-dir", str(data_dir), "export", "capthist", str(tmp_path / "ch"), "--occasion-days", "1"])
    assert rc == 0, capsys.readouterr().err
    lines = [ln.split() for ln in (tmp_path / "ch" / "captures.txt").read_text().splitlines()
             if not ln.startswith("#")]
    assert {(i, int(o) - 1, d) for _, i, o, d in lines} == sim.station_days
    traps = [ln.split() for ln in (tmp_path / "ch" / "traps.txt").read_text().splitlines() if not ln.startswith("#")]
    assert sorted(t[0] for t in traps) == sorted(s[0] for s in sim.stations)
    assert all([float(u) for u in t[3:]] == pytest.approx([16 / 24] + [1.0] * 8 + [18 / 24], abs=1e-4)
               for t in traps)
    mark = (tmp_path / "ch" / "histories.inp").read_text().splitlines()
    assert len([ln for ln in mark if ln.endswith(" 1;")]) == len(sim.capture_counts)
