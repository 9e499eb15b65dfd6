"""``rosette activity`` and the activity service over a small catalogue built with the ORM, and over the camtrapR
record table ``rosette export capthist`` writes from it.

Jaguars (local time -04:00) are seen in 25 events, each a sighting of three photos 20 s apart: Ana (female) in 11,
Bia (female) in 2, Caio (male) in 10, Duda (sex unknown) in 1, and an animal not yet identified in 1; two more
jaguar photos have no time. Ocelots are seen in 15 single photos (no sighting: each photo is an event), pumas in 9.
So the jaguars' activity rests on 25 times (one per event, its first photo's), not 75; by individual Ana and Caio
are fitted and Bia and Duda set aside (fewer than 10); by sex 13 female and 10 male times.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from app.cli import main as cli_main
from core.field.activity import overlap, times_to_radians
from db.field.activity import activity_times
from db.models import Deployment, Individual, Sighting, Species
from db.session import open_catalogue
from jobs.actions import activity as act
from jobs.requests.density import ActivityRequest
from tests.test_population_service import _annotation, _photo

JAGUAR, OCELOT, PUMA = "Panthera onca", "Leopardus pardalis", "Puma concolor"
JAGUAR_EVENTS = ["Ana"] * 11 + ["Bia"] * 2 + ["Caio"] * 10 + ["Duda"] + [None]
DAY0 = datetime(2024, 5, 1)


def _jaguar_hour(k: int) -> float:
    return (19.0 + 0.45 * k + (k % 3) * 0.37) % 24  # mostly at night


def _ocelot_hour(k: int) -> float:
    return 6.0 + 0.8 * k  # through the day


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S") + "-04:00"


def _event_start(k: int, hour: float) -> datetime:
    return DAY0 + timedelta(days=k, hours=hour)


def build(data_dir: Path) -> None:
    cat = open_catalogue(data_dir)
    with cat.unit_of_work() as s:
        jaguar, ocelot, puma = Species(name=JAGUAR), Species(name=OCELOT), Species(name=PUMA)
        s.add_all([jaguar, ocelot, puma])
        s.flush()
        dep = Deployment(key="D1", location_id="L1", lat=-16.5, lon=-56.5, start="2024-05-01T00:00:00-04:00",
                         end="2024-06-01T00:00:00-04:00")
        s.add(dep)
        individuals = {"Ana": "female", "Bia": "female", "Caio": "male", "Duda": None}
        ind = {n: Individual(name=n, species_id=jaguar.id, sex=sex) for n, sex in individuals.items()}
        s.add_all(ind.values())
        s.flush()
        n = iter(range(1, 1000))
        for k, who in enumerate(JAGUAR_EVENTS):
            sighting = Sighting(key=f"jaguar-{k}", deployment_id=dep.id)
            s.add(sighting)
            s.flush()
            start = _event_start(k, _jaguar_hour(k))
            for burst in (40, 0, 20):  # stored out of order: the event's time is its earliest photo's
                photo = _photo(s, next(n), deployment=dep, taken_at=_iso(start + timedelta(seconds=burst)))
                photo.sighting_id = sighting.id
                img = _annotation(s, photo, jaguar, ind[who] if who else None)
                img.sighting_id = sighting.id
        for _ in range(2):
            _annotation(s, _photo(s, next(n), deployment=dep, taken_at=None), jaguar, ind["Ana"])
        for k in range(15):
            _annotation(s, _photo(s, next(n), deployment=dep, taken_at=_iso(_event_start(k, _ocelot_hour(k)))),
                        ocelot, None)
        for k in range(9):
            _annotation(s, _photo(s, next(n), deployment=dep, taken_at=_iso(_event_start(k, 12.0 + k))), puma, None)
        s.commit()
    cat.close()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("activity") / "rosette-data"
    build(path)
    return path


@pytest.fixture()
def cat(data_dir):
    catalogue = open_catalogue(data_dir)
    try:
        yield catalogue
    finally:
        catalogue.close()


def _jaguar_times(events: list[int]) -> np.ndarray:
    return times_to_radians([_event_start(k, _jaguar_hour(k)) for k in events])


def _cli(capsys, data_dir: Path, *args: str) -> tuple[int, str, str]:
    rc = cli_main(["--data-dir", str(data_dir), "activity", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_one_time_per_event_its_first_photo_s(cat):
    found = activity_times(cat, species=JAGUAR)
    assert found.annotations == 25 * 3 + 2 and found.photos == 75 and found.events == 25
    assert found.left_out == {"no_time": 2}
    assert list(found.groups) == [JAGUAR]
    assert list(found.groups[JAGUAR]) == sorted(_event_start(k, _jaguar_hour(k)) for k in range(25))


def test_the_species_curve_rests_on_its_events_not_its_photos(data_dir, capsys):
    rc, out, err = _cli(capsys, data_dir, "--species", JAGUAR, "--json")
    assert rc == 0, err
    summary = json.loads(out)
    [group] = summary["groups"]
    assert group["label"] == JAGUAR and group["n"] == 25
    assert summary["overlaps"] == [] and summary["refused"] == {}
    assert summary["basis"]["events"] == 25 and summary["basis"]["photos"] == 75
    # the curve is a density over the day: it integrates to 1 over 24 hours, and peaks at night
    hours, dens = np.array(group["hours"]), np.array(group["density_per_hour"])
    assert np.trapezoid(dens, hours) == pytest.approx(1.0, abs=1e-3)
    assert not 7 < hours[int(np.argmax(dens))] < 18
    rc, out, _ = _cli(capsys, data_dir, "--species", JAGUAR)
    assert "25 event(s) on 75 photo(s)" in out and "one detection per event" in out and "most active about" in out


def test_two_species_overlap_with_a_bootstrap_interval(data_dir, capsys):
    rc, out, err = _cli(capsys, data_dir, "--species", JAGUAR, "--species", OCELOT, "--bootstrap", "200", "--json")
    assert rc == 0, err
    summary = json.loads(out)
    assert [g["label"] for g in summary["groups"]] == [JAGUAR, OCELOT]
    [pair] = summary["overlaps"]
    ocelot = times_to_radians([_event_start(k, _ocelot_hour(k)) for k in range(15)])
    expected = overlap(_jaguar_times(list(range(25))), ocelot)
    for name in ("Dhat1", "Dhat4", "Dhat5"):
        assert pair[name] == pytest.approx(expected.estimates[name], rel=1e-12)
    assert pair["recommended"] == "Dhat1" and pair["estimate"] == pair["Dhat1"]  # 15 < 75 detections
    assert pair["ci_low"] < pair["Dhat1"] < pair["ci_high"]
    assert pair["bootstrap"]["Dhat1"]["n_resamples"] == 200
    rows = act.overlap_rows(summary)
    assert rows[0][:2] == [f"{JAGUAR} / {OCELOT}", "25 / 15"]
    assert rows[0][6] == f"{pair['ci_low']:.3f} – {pair['ci_high']:.3f}"
    assert act.activity_figure(summary).data[1].name == f"{OCELOT} (15)"


def test_by_individual_and_by_sex(cat):
    by_individual = act.activity_summary(cat, ActivityRequest(species=(JAGUAR,), by="individual", resamples=0))
    assert {g["label"]: g["n"] for g in by_individual["groups"]} == {"Ana": 11, "Caio": 10}
    assert set(by_individual["refused"]) == {"Bia", "Duda"}
    assert "only 2 detection(s); an activity curve needs at least 10" in by_individual["refused"]["Bia"]
    assert by_individual["basis"]["left_out"] == {"no_time": 2, "no_individual": 3}
    [pair] = by_individual["overlaps"]
    assert (pair["a"], pair["b"]) == ("Ana", "Caio") and pair["ci_low"] is None  # no resamples asked
    by_sex = act.activity_summary(cat, ActivityRequest(species=(JAGUAR,), by="sex", resamples=100, seed=3))
    assert {g["label"]: g["n"] for g in by_sex["groups"]} == {"female": 13, "male": 10}
    assert by_sex["basis"]["left_out"] == {"no_time": 2, "no_individual": 3, "unknown_sex": 3}
    [pair] = by_sex["overlaps"]
    ana_bia = [k for k, who in enumerate(JAGUAR_EVENTS) if who in ("Ana", "Bia")]
    caio = [k for k, who in enumerate(JAGUAR_EVENTS) if who == "Caio"]
    assert pair["Dhat4"] == pytest.approx(overlap(_jaguar_times(ana_bia), _jaguar_times(caio)).dhat4, rel=1e-12)
    assert math.isfinite(pair["ci_low"]) and pair["ci_low"] < pair["ci_high"]
    assert "Left out: 2 annotation(s) on photos without a readable time" in act.basis_text(by_sex)


def test_the_record_table_export_capthist_writes_gives_the_same_curves(data_dir, capsys, tmp_path):
    rc = cli_main(["--data-dir", str(data_dir), "export", "capthist", str(tmp_path / "ch"), "--species", JAGUAR])
    err = capsys.readouterr().err
    assert rc == 0, err
    table = tmp_path / "ch" / "record_table.csv"
    rc, out, err = _cli(capsys, data_dir, "--record-table", str(table), "--by", "individual", "--bootstrap", "0",
                        "--json")
    assert rc == 0, err
    from_table = json.loads(out)
    rc, out, _ = _cli(capsys, data_dir, "--species", JAGUAR, "--by", "individual", "--bootstrap", "0", "--json")
    from_catalogue = json.loads(out)
    # a row per identified animal's photo with a time, thinned to one per 30 minutes at a station: its events again
    assert from_table["basis"]["rows"] == 24 * 3 and from_table["basis"]["independent_rows"] == 24
    assert [(g["label"], g["n"]) for g in from_table["groups"]] == [("Ana", 11), ("Caio", 10)]
    for a, b in zip(from_table["groups"], from_catalogue["groups"]):
        assert a["bandwidth"] == pytest.approx(b["bandwidth"], rel=1e-9)
        assert a["density_per_hour"] == pytest.approx(b["density_per_hour"], rel=1e-9)


def test_fewer_than_ten_detections_and_other_bad_requests_are_refused_with_what_to_do(data_dir, capsys, tmp_path):
    rc, out, err = _cli(capsys, data_dir, "--species", PUMA)
    assert rc == 1 and out == ""
    assert "only 9 detection(s); an activity curve needs at least 10 independent detections" in err
    assert "Widen the date window, add stations, or pool groups" in err
    rc, _, err = _cli(capsys, data_dir, "--species", JAGUAR, "--species", PUMA)
    assert rc == 1 and f"{PUMA}: only 9 detection(s)" in err  # a comparison with one side missing is none
    rc, _, err = _cli(capsys, data_dir, "--species", PUMA, "--by", "sex")
    assert rc == 1 and "no sex of Puma concolor has 10 or more independent detections" in err
    table = tmp_path / "t.csv"
    table.write_text("Station,Species,DateTimeOriginal\nL1,Puma concolor,2024-05-01 10:00:00\n")
    rc, _, err = _cli(capsys, data_dir, "--record-table", str(table), "--by", "sex")
    assert rc == 1 and "a camtrapR record table has no sex column" in err
    rc, _, err = _cli(capsys, data_dir, "--record-table", str(tmp_path / "none.csv"), "--species", PUMA)
    assert rc == 1 and "none.csv does not exist" in err
    with pytest.raises(ValueError, match="activity compares at most two"):
        ActivityRequest(species=(JAGUAR, OCELOT, PUMA))
    with pytest.raises(ValueError, match="splitting by individual or sex works with one species"):
        ActivityRequest(species=(JAGUAR, OCELOT), by="sex")
    with pytest.raises(ValueError, match="between 40 and"):
        ActivityRequest(species=(JAGUAR,), resamples=10)


def test_a_refusal_stays_on_the_panel_beside_the_curves_drawn_before(cat):
    """A split the detections cannot carry is refused as a refusal (not any error): the panel shows why on its
    status line and keeps the curves it drew before, named, instead of a toast over an emptied chart."""
    import gradio as gr

    from app.tabs._activity import refused_outputs

    drawn = act.curves_of(act.activity_summary(cat, ActivityRequest(species=(JAGUAR,))))
    assert drawn == JAGUAR
    with pytest.raises(act.ActivityRefused, match="no sex of Puma concolor has 10 or more") as refused:
        act.activity_summary(cat, ActivityRequest(species=(PUMA,), by="sex"))
    text = act.refusal_text(str(refused.value), drawn=drawn)
    assert text.startswith("No activity curve drawn: no sex of Puma concolor has 10 or more independent detections")
    assert text.endswith(f"The curves shown are still those of {JAGUAR}.")
    status, *kept = refused_outputs(str(refused.value), drawn)
    assert "No activity curve drawn" in status and kept == [gr.skip()] * 4  # basis, curves, overlaps, drawn kept
    assert act.changed_choice_text(drawn).startswith(f"The curves shown are those of {JAGUAR}; press Show activity")
