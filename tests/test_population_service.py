"""``population_summary`` and ``export_capthist`` over a small catalogue built with the ORM, every number worked by
hand (issue 23, items 6-7).

Deployments (local time -04:00), occasions of 2 days from 2024-05-01 (local midnight of the first start):
  D1 at L1 (-16.50, -56.50) 05-01 08:00 .. 05-06 08:00    occasions 1..3: 1.6667, 2, 1.3333 days
  D2 at L2 (-16.52, -56.48) 05-01 00:00 .. 05-03 00:00    occasion 1: 2 days
  D3 at L2 (a gap, same location) 05-05 00:00 .. 05-07 00:00   occasion 3: 2 days
  D4 at L3 (no coordinates) 05-02 00:00 .. 05-04 00:00   occasions 1, 2: 1 day each
The last day is 05-07, so a 4th occasion [05-07, 05-09) exists but has no effort and no detection: left out.
Effort per occasion = 4.6667, 3, 3.3333 deployment-days.

Detections (species Panthera onca):
  Ana  05-01 10:00 D1, 05-01 11:00 D1 (same occasion), 05-03 12:00 D4, 05-05 09:00 D3    -> 111
  Bia  05-02 06:00 D2, 05-06 01:00 D3                                                   -> 101
  Eva  05-02 06:00 D2 (a second animal in Bia's photo)                                  -> 100
  Fabi 05-02 23:30-04:00 D2 (03:30 on 05-03 in UTC: the local day decides, occasion 1)  -> 100
  Caio 05-04 10:00 D1                                                                   -> 010
  Duda 05-05 20:00 D1, and 05-01 09:00 D1 as "Duda-old", merged into Duda               -> 101
So M = 6, f1 = 3 (Eva, Fabi, Caio), f2 = 2 (Bia, Duda), f3 = 1 (Ana); Mh-Chao N = 6 + 3*2/(2*3) = 7;
discovery = 5, 6, 6; n_j = 5, 2, 3.
Left out (one each): no individual, no deployment (Caio), no time (Caio), outside the window (Eva on 04-20).
An ocelot (another species, individual Zeca) is never counted for the jaguars.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from sqlalchemy import select

from app.cli import main as cli_main
from core.field import population as pop
from db.catalogue import assign_image
from db.models import DecisionKind, Deployment, Image, Individual, MatchDecision, Photo, Species
from db.session import open_catalogue
from jobs.actions import population as ps
from jobs.requests.population import CapthistExportRequest, PopulationRequest

JAGUAR = "Panthera onca"


def _photo(s, n: int, *, deployment: Deployment | None, taken_at: str | None, name: str | None = None) -> Photo:
    ph = Photo(content_hash=f"{n:064x}", original_name=name or f"cam/IMG_{n:04d}.JPG", blob_path=f"images/{n}.jpg",
               format="JPEG", mode="RGB", width=16, height=16, size_bytes=100, deployment=deployment,
               taken_at=taken_at)
    s.add(ph)
    return ph


def _annotation(s, photo: Photo, species: Species, individual: Individual | None) -> Image:
    img = Image(photo=photo, content_hash=photo.content_hash, original_name=photo.original_name,
                blob_path=photo.blob_path, format="JPEG", mode="RGB", width=16, height=16, size_bytes=100,
                species_id=species.id, individual=individual)
    s.add(img)
    s.flush()
    return img


def build(data_dir: Path) -> dict[str, int]:
    cat = open_catalogue(data_dir)
    ids: dict[str, int] = {}
    with cat.unit_of_work() as s:
        jaguar, ocelot = Species(name=JAGUAR), Species(name="Leopardus pardalis")
        s.add_all([jaguar, ocelot])
        s.flush()
        tz = "-04:00"
        d1 = Deployment(key="D1", location_id="L1", lat=-16.50, lon=-56.50, start=f"2024-05-01T08:00:00{tz}",
                        end=f"2024-05-06T08:00:00{tz}")
        d2 = Deployment(key="D2", location_id="L2", lat=-16.52, lon=-56.48, start=f"2024-05-01T00:00:00{tz}",
                        end=f"2024-05-03T00:00:00{tz}")
        d3 = Deployment(key="D3", location_id="L2", lat=-16.52, lon=-56.48, start=f"2024-05-05T00:00:00{tz}",
                        end=f"2024-05-07T00:00:00{tz}")
        d4 = Deployment(key="D4", location_id="L3", start=f"2024-05-02T00:00:00{tz}", end=f"2024-05-04T00:00:00{tz}")
        s.add_all([d1, d2, d3, d4])
        names = ["Ana", "Bia", "Caio", "Duda", "Eva", "Fabi"]
        ind = {n: Individual(name=n, species_id=jaguar.id) for n in names}
        s.add_all(ind.values())
        s.flush()
        old = Individual(name="Duda-old", species_id=jaguar.id, active=False, merged_into_id=ind["Duda"].id)
        zeca = Individual(name="Zeca", species_id=ocelot.id)
        s.add_all([old, zeca])
        s.flush()
        n = iter(range(1, 100))

        def seen(who, dep, when, species=jaguar):
            return _annotation(s, _photo(s, next(n), deployment=dep, taken_at=when), species, who)

        seen(old, d1, f"2024-05-01T09:00:00{tz}")
        ids["ana_first"] = seen(ind["Ana"], d1, f"2024-05-01T10:00:00{tz}").id
        seen(ind["Ana"], d1, f"2024-05-01T11:00:00{tz}")
        ids["ana_at_l3"] = seen(ind["Ana"], d4, f"2024-05-03T12:00:00{tz}").id
        seen(ind["Ana"], d3, f"2024-05-05T09:00:00{tz}")
        shared = _photo(s, next(n), deployment=d2, taken_at=f"2024-05-02T06:00:00{tz}")
        _annotation(s, shared, jaguar, ind["Bia"])
        _annotation(s, shared, jaguar, ind["Eva"])
        seen(ind["Bia"], d3, f"2024-05-06T01:00:00{tz}")
        seen(ind["Fabi"], d2, f"2024-05-02T23:30:00{tz}")
        seen(ind["Caio"], d1, f"2024-05-04T10:00:00{tz}")
        seen(ind["Duda"], d1, f"2024-05-05T20:00:00{tz}")
        ids["no_individual"] = seen(None, d1, f"2024-05-02T10:00:00{tz}").id
        ids["no_deployment"] = seen(ind["Caio"], None, f"2024-05-02T10:00:00{tz}").id
        ids["no_time"] = seen(ind["Caio"], d1, None).id
        ids["outside_window"] = seen(ind["Eva"], d1, f"2024-04-20T10:00:00{tz}").id
        seen(zeca, d1, f"2024-05-02T12:00:00{tz}", species=ocelot)
        s.commit()
    cat.close()
    return ids


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("population") / "rosette-data"
    ids = build(data_dir)
    cat = open_catalogue(data_dir)
    try:
        yield cat, ids
    finally:
        cat.close()


@pytest.fixture(scope="module")
def summary(study):
    cat, _ = study
    return ps.population_summary(cat, PopulationRequest(species=JAGUAR, occasion_days=2))


def test_capture_histories_counts_and_frequencies_worked_by_hand(summary):
    assert summary["individuals"] == 6
    assert summary["occasions"] == 3
    assert summary["capture_counts"] == {"Ana": 3, "Bia": 2, "Caio": 1, "Duda": 2, "Eva": 1, "Fabi": 1}
    assert summary["capture_histories"] == {"Duda": "101", "Ana": "111", "Bia": "101", "Eva": "100",
                                            "Fabi": "100", "Caio": "010"}
    assert summary["capture_frequencies"] == {"1": 3, "2": 2, "3": 1}
    assert summary["discovery"] == [5, 6, 6]
    assert [o["individuals"] for o in summary["occasion_table"]] == [5, 2, 3]


def test_effort_parameters_and_what_the_numbers_rest_on(summary, study):
    _, ids = study
    assert summary["effort"] == pytest.approx([4.6667, 3.0, 3.3333], abs=1e-4)
    assert summary["parameters"] == {"species": JAGUAR, "occasion_days": 2.0, "from": None, "to": None,
                                     "start": "2024-05-01", "last_day": "2024-05-07"}
    assert [o["begins"] for o in summary["occasion_table"]] == ["2024-05-01T00:00:00", "2024-05-03T00:00:00",
                                                                "2024-05-05T00:00:00"]
    d = summary["data"]
    assert (d["annotations"], d["photos"], d["deployments"], d["stations"]) == (11, 10, 4, 3)
    assert d["deployments_with_detections"] == 4
    assert d["annotations_of_species"] == 15
    assert d["left_out"] == {"no_individual": 1, "no_deployment": 1, "no_time": 1, "outside_window": 1}
    assert {k: v for k, v in d["left_out_annotation_ids"].items()} == {
        k: [ids[k]] for k in ("no_individual", "no_deployment", "no_time", "outside_window")}
    assert any("occasion(s) without any active camera" in n for n in summary["notes"])


def test_estimates_mh_chao_by_the_formula_and_m0_mt_from_the_counts(summary):
    est = {e["model"]: e for e in summary["estimates"]}
    assert list(est) == ["M0", "Mt", "Mh-Chao"]
    chao = est["Mh-Chao"]
    assert chao["N"] == pytest.approx(6 + 3 * 2 / (2 * 3)) == pytest.approx(7.0)
    assert 6 <= chao["ci_low"] < 7 < chao["ci_high"]
    m0 = pop.m0_from_counts(individuals=6, captures=10, occasions=3)
    assert (est["M0"]["N"], est["M0"]["ci_low"], est["M0"]["ci_high"]) == (m0.N, m0.ci_low, m0.ci_high)
    assert est["Mt"]["N"] == pytest.approx(pop.darroch_root([5, 2, 3], 6))
    for e in est.values():
        assert e["assumption"] == pop.ASSUMPTIONS[e["model"]]


def test_a_window_cuts_the_detections_and_the_effort(study):
    cat, _ = study
    s = ps.population_summary(cat, PopulationRequest(species=JAGUAR, occasion_days=1, date_from="2024-05-03",
                                                     date_to="2024-05-04"))
    assert s["capture_histories"] == {"Ana": "10", "Caio": "01"}
    assert s["effort"] == pytest.approx([2.0, 1.0])  # D1 both days, D4 until 05-04 00:00
    assert s["data"]["left_out"]["outside_window"] == 10
    chao = {e["model"]: e for e in s["estimates"]}["Mh-Chao"]
    assert chao["N"] == pytest.approx(2 + 2 * 1 / (2 * 1))


def test_bad_input_is_refused_in_plain_words(study):
    cat, _ = study
    with pytest.raises(ValueError, match="2 species are catalogued .*Leopardus pardalis, Panthera onca"):
        ps.population_summary(cat, PopulationRequest())
    with pytest.raises(ValueError, match="no species 'Lynx'"):
        ps.population_summary(cat, PopulationRequest(species="Lynx"))
    with pytest.raises(ValueError, match="occasion length must be more than 0"):
        PopulationRequest(occasion_days=0)
    with pytest.raises(ValueError, match="must be a day written YYYY-MM-DD, got '05/03/2024'"):
        PopulationRequest(date_from="05/03/2024")
    with pytest.raises(ValueError, match="before the first day"):
        PopulationRequest(date_from="2024-05-04", date_to="2024-05-03")


def test_the_cli_prints_the_same_json(study, capsys):
    cat, _ = study
    rc = cli_main(["--data-dir", str(cat.data_dir), "population", "--species", JAGUAR, "--occasion-days", "2",
                   "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["capture_counts"]["Ana"] == 3
    assert {e["model"]: e["N"] for e in out["estimates"]}["Mh-Chao"] == pytest.approx(7.0)
    rc = cli_main(["--data-dir", str(cat.data_dir), "population", "--species", JAGUAR, "--occasion-days", "2"])
    text = capsys.readouterr().out
    assert rc == 0 and "6 Panthera onca individual(s) detected on 3 occasion(s)" in text and "Mh-Chao" in text
    rc = cli_main(["--data-dir", str(cat.data_dir), "population", "--occasion-days", "-1"])
    assert rc == 1 and "occasion length" in capsys.readouterr().err


def test_capthist_export_writes_secr_camtrapr_and_mark_files(study, tmp_path):
    cat, ids = study
    done = ps.export_capthist(cat, CapthistExportRequest(species=JAGUAR, occasion_days=2, out=str(tmp_path / "ch"),
                                                         as_zip=True))
    assert set(done.files) == {"captures", "traps", "record_table", "mark", "readme"}
    assert done.epsg == 32721  # UTM zone 21 south holds -56.5
    assert done.stations_without_coordinates == ("L3",)
    assert done.detections_without_coordinates == (ids["ana_at_l3"],)
    captures = [ln for ln in Path(done.files["captures"]).read_text().splitlines() if not ln.startswith("#")]
    assert captures == ["Panthera_onca Ana 1 L1", "Panthera_onca Ana 3 L2", "Panthera_onca Bia 1 L2",
                        "Panthera_onca Bia 3 L2", "Panthera_onca Caio 2 L1", "Panthera_onca Duda 1 L1",
                        "Panthera_onca Duda 3 L1", "Panthera_onca Eva 1 L2", "Panthera_onca Fabi 1 L2"]
    traps = [ln.split() for ln in Path(done.files["traps"]).read_text().splitlines() if not ln.startswith("#")]
    assert [t[0] for t in traps] == ["L1", "L2"]
    assert [t[3:] for t in traps] == [["1.6667", "2", "1.3333"], ["2", "0", "2"]]
    # L2 lies ~2.2 km east and ~2.2 km south of L1
    dx, dy = float(traps[1][1]) - float(traps[0][1]), float(traps[1][2]) - float(traps[0][2])
    assert 2000 < dx < 2300 and -2300 < dy < -2100
    assert "EPSG:32721" in Path(done.files["traps"]).read_text()
    mark = [ln for ln in Path(done.files["mark"]).read_text().splitlines() if not ln.startswith("/* Rosette")]
    assert mark == ["/* Duda */ 101 1;", "/* Ana */ 111 1;", "/* Bia */ 101 1;", "/* Eva */ 100 1;",
                    "/* Fabi */ 100 1;", "/* Caio */ 010 1;"]
    with open(done.files["record_table"], newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 11
    ana_l1 = [r for r in rows if r["Individual"] == "Ana" and r["Station"] == "L1"]
    assert [(r["DateTimeOriginal"], r["delta.time.secs"]) for r in ana_l1] == [
        ("2024-05-01 10:00:00", "0"), ("2024-05-01 11:00:00", "3600")]
    assert ana_l1[0]["Directory"] == "cam" and ana_l1[0]["Species"] == JAGUAR
    readme = Path(done.files["readme"]).read_text()
    assert "binary.usage = FALSE" in readme and "L3" in readme
    assert done.zip_path and Path(done.zip_path).stat().st_size > 0


def test_capthist_cli_refuses_a_file_as_the_folder(study, tmp_path, capsys):
    cat, _ = study
    target = tmp_path / "a-file"
    target.write_text("keep me")
    rc = cli_main(["--data-dir", str(cat.data_dir), "export", "capthist", str(target), "--species", JAGUAR])
    assert rc == 1 and "is a file, not a folder" in capsys.readouterr().err
    assert target.read_text() == "keep me"
    rc = cli_main(["--data-dir", str(cat.data_dir), "export", "capthist", str(tmp_path / "out"), "--species",
                   JAGUAR, "--binary-usage"])
    assert rc == 0 and "EPSG:32721" in capsys.readouterr().out
    traps = [ln.split() for ln in (tmp_path / "out" / "traps.txt").read_text().splitlines()
             if not ln.startswith("#")]
    assert [t[3] for t in traps] == ["111111", "110011"]  # days 05-01..05-06; 05-07 had no camera


def test_a_species_without_detections_says_there_is_nothing_to_estimate(study):
    cat, _ = study
    s = ps.population_summary(cat, PopulationRequest(species="default", occasion_days=2))
    assert (s["individuals"], s["capture_counts"], s["discovery"]) == (0, {}, [0, 0, 0])
    est = {e["model"]: e for e in s["estimates"]}
    assert all(e["N"] is None and e["ci_low"] is None and not e["estimable"] for e in est.values())
    assert any("nothing to estimate" in n for n in s["notes"])
    assert [r[1:3] for r in ps.estimate_rows(s)] == [["no estimate", "—"]] * 3


def test_no_deployments_or_an_empty_window_is_said_plainly(study, tmp_path):
    cat, _ = study
    with pytest.raises(ValueError, match="no deployment was active in the window from 2025-01-01 to 2025-01-31"):
        ps.population_summary(cat, PopulationRequest(species=JAGUAR, date_from="2025-01-01", date_to="2025-01-31"))
    empty = open_catalogue(tmp_path / "empty")
    try:
        with pytest.raises(ValueError, match="no camera deployments: import a Camtrap DP package"):
            ps.population_summary(empty, PopulationRequest())
    finally:
        empty.close()


def test_a_result_shown_says_how_many_changes_it_predates(tmp_path):
    """Two results on one screen computed either side of a decision disagree: the older one says it is older,
    by how many changes, and what to press, instead of standing beside the newer one without a word."""
    ids = build(tmp_path / "rosette-data")
    cat = open_catalogue(tmp_path / "rosette-data")
    try:
        request = PopulationRequest(species=JAGUAR, occasion_days=2)
        state = ps.catalogue_state(cat)
        before = ps.population_summary(cat, request)
        assert ps.stale_text(cat, state, again="Estimate") == "" and ps.stale_text(cat, None, again="Estimate") == ""
        with cat.unit_of_work() as s:
            caio = s.scalar(select(Individual.id).where(Individual.name == "Caio"))
            assign_image(s, ids["no_individual"], caio, user="ana")  # Caio seen on an occasion more
            s.add(MatchDecision(query_image_id=ids["no_time"], decision=DecisionKind.not_same, user="ana"))
            s.commit()
        after = ps.population_summary(cat, request)
        assert after["capture_histories"] != before["capture_histories"]  # the results now disagree
        assert ps.stale_text(cat, state, again="Estimate") == (
            "⚠ Computed before 2 newer changes to who is who (decisions, moves, undos): these numbers are out of "
            "date. Press **Estimate** again.")
        assert ps.stale_text(cat, ps.catalogue_state(cat), again="Estimate") == ""
    finally:
        cat.close()
