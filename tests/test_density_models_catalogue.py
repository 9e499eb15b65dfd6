"""Density models beyond the null on the catalogue's own study: sessions by year or by deployment group, sex from
the individuals, the null fit's refusals, the background job and the Population tab's services.

The catalogue (built with the ORM, :func:`build_two_year_study`): 12 camera stations on a 4 x 3 grid 1.5 km apart,
one deployment per station per year (deploymentGroups 'season:2023' and 'season:2024'), 12 daily occasions each
May. Each year 60 animals (half female, half male, the same names both years) have centres drawn in the grid's
extent plus 2.5 km; a female is photographed at a station on a day with probability 0.2 exp(-d²/2σ²), σ 900 m, a
male with σ 1,400 m. Two animals are catalogued with sex unknown, so that sex is fitted as secr's hcov mixture.
README's worked example is this catalogue. A thin one-week season at three stations in a line is another catalogue.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from app.cli import main as cli_main
from core.field.capthist import secr_token
from db.field.density_sessions import catalogue_sessions, deployment_group, parse_grouping
from db.io.ingest import ingest_path
from db.models import Deployment, Individual, JobStatus, Species
from db.session import open_catalogue
from jobs import queue
from jobs.actions import density_models as dm
from jobs.requests.density import DensityModelFiguresRequest, DensityModelsRequest
from jobs.worker import run_one
from tests import camtrapdp_package
from tests.test_population_service import _annotation, _photo

SPECIES = "Leopardus geoffroyi"
YEARS = (2023, 2024)
DAYS = 12
SPACING_KM = 1.5
SIGMA_KM = {"F": 0.9, "M": 1.4}
G0 = 0.2
N_ANIMALS = 60
ORIGIN = (-31.0, -64.0)
KM_PER_DEG_LAT = 110.57
#: The animals catalogued without a sex (one female, one male).
UNSEXED = {"Geo-01", "Geo-02"}
#: Small masks keep every fit of this file to a few seconds.
SPACING_M = "500"
BUFFER_M = "4000"


def _lat_lon(x_km: float, y_km: float) -> tuple[float, float]:
    km_per_deg_lon = KM_PER_DEG_LAT * math.cos(math.radians(ORIGIN[0]))
    return round(ORIGIN[0] + y_km / KM_PER_DEG_LAT, 6), round(ORIGIN[1] + x_km / km_per_deg_lon, 6)


def build_two_year_study(data_dir: Path, *, seed: int = 5) -> dict[str, dict[str, set[str]]]:
    """The two-year study as a catalogue (see the module's notes); returns year -> sex -> the animals detected."""
    rng = np.random.default_rng(seed)
    grid = [(col * SPACING_KM, -row * SPACING_KM) for row in range(3) for col in range(4)]
    xy = np.array(grid)
    names = [f"Geo-{i + 1:02d}" for i in range(N_ANIMALS)]
    sexes = ["F" if i % 2 == 0 else "M" for i in range(N_ANIMALS)]
    detected: dict[str, dict[str, set[str]]] = {}
    cat = open_catalogue(data_dir)
    with cat.unit_of_work() as s:
        sp = Species(name=SPECIES)
        s.add(sp)
        s.flush()
        individuals = {n: Individual(name=n, species_id=sp.id,
                                     sex=None if n in UNSEXED else ("female" if x == "F" else "male"))
                       for n, x in zip(names, sexes)}
        s.add_all(individuals.values())
        s.flush()
        k = 0
        for year in YEARS:
            deps = []
            for j, (x, y) in enumerate(grid):
                lat, lon = _lat_lon(x, y)
                deps.append(Deployment(key=f"dep-{year}-C{j + 1:02d}", location_id=f"C{j + 1:02d}", lat=lat, lon=lon,
                                       start=f"{year}-05-01T00:00:00-03:00", end=f"{year}-05-13T00:00:00-03:00",
                                       details={"deploymentGroups": f"season:{year} | grid:main"}))
            s.add_all(deps)
            s.flush()
            centres = rng.uniform(xy.min(axis=0) - 2.5, xy.max(axis=0) + 2.5, size=(N_ANIMALS, 2))
            sigma = np.array([SIGMA_KM[x] for x in sexes])
            d2 = ((centres[:, None, :] - xy[None, :, :]) ** 2).sum(axis=2)
            p = G0 * np.exp(-d2 / (2 * sigma[:, None] ** 2))
            seen_year: dict[str, set[str]] = {"F": set(), "M": set()}
            for day in range(DAYS):
                caught = rng.random(p.shape) < p
                for i, j in zip(*np.nonzero(caught)):
                    k += 1
                    photo = _photo(s, k, deployment=deps[j], taken_at=f"{year}-05-{day + 1:02d}T21:00:00-03:00")
                    _annotation(s, photo, sp, individuals[names[i]])
                    seen_year[sexes[i]].add(names[i])
            detected[str(year)] = seen_year
        s.commit()
    cat.close()
    return detected


def build_thin_season(data_dir: Path) -> None:
    """One week at three stations 1 km apart in a line, each animal caught at one station only but one."""
    cat = open_catalogue(data_dir)
    with cat.unit_of_work() as s:
        sp = Species(name=SPECIES)
        s.add(sp)
        s.flush()
        deps = [Deployment(key=f"thin-{c}", location_id=c, lat=-31.0 - 0.009 * k, lon=-64.0,
                           start="2024-05-01T00:00:00-03:00", end="2024-05-08T00:00:00-03:00")
                for k, c in enumerate("ABC")]
        s.add_all(deps)
        animals = {n: Individual(name=n, species_id=sp.id, sex=x)
                   for n, x in (("Ana", "female"), ("Bia", "female"), ("Caio", "male"), ("Duda", "male"))}
        s.add_all(animals.values())
        s.flush()
        seen = [("Ana", 0, 1), ("Ana", 0, 3), ("Ana", 1, 5), ("Bia", 1, 2), ("Bia", 1, 4), ("Caio", 2, 1),
                ("Caio", 2, 6), ("Duda", 0, 2)]
        for k, (name, station, day) in enumerate(seen, start=1):
            _annotation(s, _photo(s, k, deployment=deps[station], taken_at=f"2024-05-0{day}T22:00:00-03:00"), sp,
                        animals[name])
        s.commit()
    cat.close()


@pytest.fixture(scope="module")
def two_years(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("two-years") / "rosette-data"
    detected = build_two_year_study(data_dir)
    return data_dir, detected


@pytest.fixture(scope="module")
def thin(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("thin") / "rosette-data"
    build_thin_season(data_dir)
    return data_dir


def _plain(markdown: str) -> str:
    """Words as shown, without Markdown's escapes."""
    return markdown.replace("\\", "")


def _cli(capsys, data_dir: Path, *args: str) -> tuple[int, str, str]:
    rc = cli_main(["--data-dir", str(data_dir), "density", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_groupings_are_read_and_bad_ones_refused():
    assert parse_grouping(None) == (None, None)
    assert parse_grouping(" Year ") == ("year", None)
    assert parse_grouping("deployment-group:season") == ("deployment-group", "season")
    assert deployment_group("season:2023 | grid:main", "season") == "2023"
    assert deployment_group("season:2023 | grid:main", "grid") == "main"
    assert deployment_group("season:2023 | grid:main", None) == "season:2023 | grid:main"
    assert deployment_group("season:2023", "site") is None
    with pytest.raises(ValueError, match="sessions 'month' unknown"):
        DensityModelsRequest(model="g0~1", sessions="month")
    with pytest.raises(ValueError, match="secr's captures file names its own sessions"):
        DensityModelsRequest(model="g0~1", captures="c.txt", traps=("t.txt",), buffer_m=100, sessions="year")
    with pytest.raises(ValueError, match="--traps goes with --captures"):
        DensityModelsRequest(model="g0~1", traps=("t.txt",))
    # on the catalogue no file and no buffer are needed, and the request survives a job's storage
    request = DensityModelsRequest(compare="g0~1; g0~sex, sigma~sex", sessions="deployment-group:season")
    assert DensityModelsRequest.from_dict(request.to_dict()) == request and not request.from_files


def test_two_years_give_two_sessions_with_their_animals_and_sexes(two_years):
    data_dir, detected = two_years
    cat = open_catalogue(data_dir)
    try:
        by_year = catalogue_sessions(cat, grouping="year")
        by_group = catalogue_sessions(cat, grouping="deployment-group:season")
    finally:
        cat.close()
    for found in (by_year, by_group):
        assert [s.name for s in found.sessions] == ["2023", "2024"]
        for s in found.sessions:
            animals = {c.animal for c in s.captures}
            assert animals == {secr_token(n) for n in detected[s.name]["F"] | detected[s.name]["M"]}
            assert len(s.study.secr.traps) == 12
            # each session's occasions are its own May, not the two years' whole span
            assert s.study.population.histories.n_occasions == DAYS
            assert {c.occasion for c in s.captures} <= set(range(1, DAYS + 1))
    seen = detected["2023"]
    female, male = sorted(seen["F"] - UNSEXED)[0], sorted(seen["M"] - UNSEXED)[0]
    assert by_year.sex[secr_token(female)] == "female" and by_year.sex[secr_token(male)] == "male"
    assert all(by_year.sex[secr_token(n)] is None for n in UNSEXED & (seen["F"] | seen["M"]))


def test_a_two_year_two_sex_model_fits_sex_from_the_catalogue(two_years, capsys):
    data_dir, detected = two_years
    began = time.perf_counter()
    rc, out, err = _cli(capsys, data_dir, "--model", "g0~sex, sigma~sex", "--sessions", "year", "--buffer", BUFFER_M,
                        "--spacing", SPACING_M, "--json")
    assert rc == 0, err
    answer = json.loads(out)
    assert time.perf_counter() - began < 20
    assert answer["study"]["source"] == "catalogue" and answer["sex"] == "hcov mixture"
    rows = {r["session"]: r for r in answer["study"]["sessions"]}
    for year in ("2023", "2024"):
        seen = detected[year]
        unknown = len(UNSEXED & (seen["F"] | seen["M"]))
        assert rows[year]["animals"] == len(seen["F"]) + len(seen["M"])
        assert rows[year]["sex"] == {"F": len(seen["F"] - UNSEXED), "M": len(seen["M"] - UNSEXED), "unknown": unknown}
    sessions = {s["session"]: s for s in answer["sessions"]}
    assert set(sessions) == {"2023", "2024"}
    for s in sessions.values():
        # the sexes' ranges reach the fit: the males' sigma is the wider, near the simulation's
        sigma = s["sigma_m"]
        assert set(sigma) == {"F", "M"}
        assert sigma["M"]["estimate"] > sigma["F"]["estimate"]
        assert 500 < sigma["F"]["estimate"] < 1400 and 1000 < sigma["M"]["estimate"] < 2100
        assert s["D_per_100km2"]["lcl"] < s["D_per_100km2"]["estimate"] < s["D_per_100km2"]["ucl"]
    assert {"D", "g0", "g0.h2M", "sigma", "sigma.h2M", "pmix.h2M"} <= set(answer["coefficients"])


def test_the_aicc_table_on_deployment_groups_in_words(two_years, capsys):
    data_dir, _ = two_years
    rc, out, err = _cli(capsys, data_dir, "--compare", "g0~1; sigma~sex", "--sessions", "deployment-group:season",
                        "--buffer", BUFFER_M, "--spacing", SPACING_M)
    assert rc == 0, err
    assert "sessions by deployment-group:season" in out
    assert "session 2023: 2023-05-01 to 2023-05-12" in out  # the session spans its own deployments
    assert out.index("sigma~h2") < out.index("g0~1")  # sex-specific sigma (as the mixture) ranks first here
    assert "Model-averaged D, session 2023:" in out and "Model-averaged D, session 2024:" in out
    assert "hcov mixture" in out  # every model fitted with the mixture, so their AICc compare


def test_a_thin_season_is_refused_in_one_sentence(thin, capsys):
    rc, out, err = _cli(capsys, thin, "--model", "g0~sex, sigma~sex", "--buffer", "3000", "--spacing", "300")
    assert rc == 1
    assert "No density: 3 stations 1 km apart caught only 1 animal at more than one station" in out
    assert "D_per_100km2" not in out and "per 100 km²" not in out
    rc, out, err = _cli(capsys, thin, "--model", "D~session", "--json")
    assert rc == 1 and json.loads(out)["criterion"] == "one_session"


def test_a_session_term_needs_sessions_and_sex_needs_sexed_individuals(two_years, capsys):
    data_dir, _ = two_years
    cat = open_catalogue(data_dir)
    try:
        with cat.unit_of_work() as s:
            saved = {i.name: i.sex for i in s.query(Individual)}
            for i in s.query(Individual):
                i.sex = "unknown"
            s.commit()
        answer = dm.density_models(DensityModelsRequest(model="sigma~sex", sessions="year", buffer_m=4000,
                                                        spacing_m=500), cat=cat)
        assert answer["refused"] and answer["criterion"] == "no_sex"
        assert "has a sex in the catalogue" in answer["reason"]
        with cat.unit_of_work() as s:
            for i in s.query(Individual):
                i.sex = "female" if i.name != "Geo-03" else "hermaphrodite"
            s.commit()
        # a code the models cannot read is refused by name where a model uses sex, and ignored where none does
        with pytest.raises(ValueError, match="sex code 'hermaphrodite' for animal 'Geo-03'"):
            dm.density_models(DensityModelsRequest(model="sigma~sex", sessions="year", buffer_m=4000, spacing_m=500),
                              cat=cat)
        rows = dm.density_models(DensityModelsRequest(model="g0~1", sessions="year", buffer_m=4000, spacing_m=500),
                                 cat=cat)["study"]["sessions"]
        assert all(r["sex"]["M"] == 0 for r in rows) and 1 <= sum(r["sex"]["unknown"] for r in rows) <= 2
    finally:
        with cat.unit_of_work() as s:
            for i in s.query(Individual):
                i.sex = saved[i.name]
            s.commit()
        cat.close()


def test_the_job_kind_runs_the_stored_request_and_stores_the_aicc_table(two_years):
    data_dir, detected = two_years
    cat = open_catalogue(data_dir)
    try:
        request = DensityModelsRequest(compare="g0~1; sigma~sex", sessions="year", buffer_m=4000, spacing_m=500)
        job_id, words = dm.queue_density_models(cat, request)
        assert f"#{job_id}" in words and "2 models by AICc" in words
        job = queue.get_job(cat, job_id)
        assert job.kind == dm.DENSITY_MODELS_JOB and DensityModelsRequest.from_dict(job.params) == request
        assert dm.density_models_status(cat, job_id)[1].startswith(f"Density models job #{job_id} queued: 0%")
        assert run_one(cat, isolate=False) == job_id
        answer, words = dm.density_models_status(cat, job_id)
        assert [r["model"] for r in answer["table"]] == ["sigma~h2, pmix~h2", "g0~1, pmix~h2"]
        assert "the best by AICc is sigma~h2, pmix~h2" in words
        job = queue.get_job(cat, job_id)
        assert job.status == JobStatus.succeeded
        assert job.message == "2 models ranked; the best by AICc is sigma~h2, pmix~h2."  # the Jobs list's line
        # the stored answer is the one the CLI prints for the same request
        assert answer["table"] == dm.density_models(request, cat=cat)["table"]
        view = dm.model_view(cat, DensityModelFiguresRequest(job_id=job_id))
        rows, line = view["figures"], view["about"]
        assert line.startswith("Best model sigma~h2, pmix~h2") and view["models"][0] == view["model"]
        assert [(r[0], r[1]) for r in rows] == [("2023", "female"), ("2023", "male"), ("2024", "female"),
                                                ("2024", "male")]
        assert rows[0][2] == f"{len(detected['2023']['F'] - UNSEXED)} sexed F"
        rows = dm.model_view(cat, DensityModelFiguresRequest(job_id=job_id, model="g0~1, pmix~h2"))["figures"]
        assert [(r[0], r[1]) for r in rows] == [("2023", "both"), ("2024", "both")]
        with pytest.raises(ValueError, match="the background job fits the catalogue's study"):
            dm.queue_density_models(cat, DensityModelsRequest(model="g0~1", captures="c", traps=("t",), buffer_m=9))
    finally:
        cat.close()


def test_the_population_tab_offers_the_catalogue_s_models_and_shows_the_table(two_years, thin, monkeypatch):
    """The section through its handlers (no browser): models offered from the catalogue's covariates, the
    comparison queued as a job, and its table and the best model's figures once it is done."""
    import gradio as gr

    from app import ui_base
    from app.tabs._density import build_density

    cat = open_catalogue(two_years[0])
    monkeypatch.setattr(ui_base, "_POLICY", ui_base.AccessPolicy(catalogue=cat, single_user="tester"))
    try:
        with gr.Blocks() as demo:
            ctx = ui_base.UIContext(catalogue=cat, user=gr.State("tester"), version=gr.State(0), demo=demo)
            build_density(ctx, gr.Dropdown([]), gr.Number(1), gr.Textbox(), gr.Textbox(),
                          gr.Radio(["decided", "confirmed", "uncertain"], value="decided"), gr.Timer(active=False))
        fns = {getattr(f.fn, "__name__", ""): f.fn for f in demo.fns.values()
               if getattr(f.fn, "__module__", "") == "app.tabs._density"}
        start = next(f.fn for f in demo.fns.values() if getattr(f, "api_name", None) == "density_models")
        polls = [f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "poll"]
        offer = fns["offer"]
        update, words = offer(None, None, 1, "", "", "year")  # the guard takes the request first
        assert "D~session" in update["choices"] and "g0~sex, sigma~sex" in update["choices"]
        assert "2 session(s) (2023, 2024)" in _plain(words)
        update, words = offer(None, None, 1, "", "", "")
        assert "D~session" not in update["choices"] and "sigma~sex" in update["choices"]
        assert "Models by session need more than one session" in _plain(words)
        out = start(None, "", 1, "", "", "year", ["g0~1", "sigma~sex"], "proximity", "HN", "4000", "500", False)
        job_id = out[0]
        assert run_one(cat, isolate=False) == job_id
        poll = polls[-1]  # the models' poll is built after the null fit's
        shown, words, table, chosen, figures, about, timer = poll(None, job_id, None)
        assert shown == job_id and "the best by AICc is sigma~h2" in _plain(words)
        assert timer.active is False  # the job is over: its poll stops
        assert list(table["Model"]) == ["sigma~h2, pmix~h2", "g0~1, pmix~h2"]
        assert chosen["value"] == "sigma~h2, pmix~h2" and len(figures) == 4  # two sessions, two sexes
        assert "Best model sigma~h2, pmix~h2" in _plain(about)
        figures, about = fns["show"](None, job_id, "g0~1, pmix~h2")  # another model picked from the table's list
        assert list(figures["Sex"]) == ["both", "both"] and _plain(about).startswith("Model g0~1, pmix~h2")
    finally:
        cat.close()
    thin_cat = open_catalogue(thin)
    monkeypatch.setattr(ui_base, "_POLICY", ui_base.AccessPolicy(catalogue=thin_cat, single_user="tester"))
    try:
        with gr.Blocks() as demo:
            ctx = ui_base.UIContext(catalogue=thin_cat, user=gr.State("tester"), version=gr.State(0), demo=demo)
            build_density(ctx, gr.Dropdown([]), gr.Number(1), gr.Textbox(), gr.Textbox(),
                          gr.Radio(["decided"], value="decided"), gr.Timer(active=False))
        start = next(f.fn for f in demo.fns.values() if getattr(f, "api_name", None) == "density_models")
        poll = [f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "poll"][-1]
        out = start(None, "", 1, "", "", "", ["g0~1"], "proximity", "HN", "3000", "300", False)
        assert run_one(thin_cat, isolate=False) == out[0]
        shown, words, table, chosen, figures, about, timer = poll(None, out[0], None)
        assert timer.active is False  # a refusal ends the job: its poll stops
        assert "refused: 3 stations 1 km apart caught only 1 animal" in _plain(words)
        assert queue.get_job(thin_cat, out[0]).message.startswith("refused: 3 stations 1 km apart caught only 1")
        assert len(table) == 0 and len(figures) == 0 and chosen["choices"] == []
    finally:
        thin_cat.close()


def test_camtrap_dp_deployment_groups_and_sexes_become_sessions(tmp_path, monkeypatch):
    """A Camtrap DP package whose deployments name their season in deploymentGroups and whose observations give
    each animal's sex: imported, its seasons are the sessions and its animals' sexes reach them."""
    monkeypatch.setitem(camtrapdp_package.COLUMNS, "deployments",
                        [*camtrapdp_package.COLUMNS["deployments"], "deploymentGroups"])
    seasons = {"dry": "2024-07", "wet": "2025-01"}
    deployments = [{"deploymentID": f"{season}-{c}", "locationID": c, "latitude": -31.0 - 0.01 * k,
                    "longitude": -64.0 + 0.01 * (k % 2), "deploymentStart": f"{month}-01T00:00:00-03:00",
                    "deploymentEnd": f"{month}-06T00:00:00-03:00", "deploymentGroups": f"season:{season} | grid:A"}
                   for season, month in seasons.items() for k, c in enumerate("ABCD")]
    seen = {"dry": [("Ana", "female", "A", 1), ("Ana", "female", "B", 3), ("Bia", "male", "C", 2),
                    ("Bia", "male", "D", 4)],
            "wet": [("Ana", "female", "B", 2), ("Caio", "unknown", "C", 1), ("Caio", "unknown", "A", 5)]}
    media, observations = [], []
    for season, rows in seen.items():
        for animal, sex, station, day in rows:
            k = len(media)
            media.append({"mediaID": f"m{k}", "deploymentID": f"{season}-{station}", "captureMethod": "activityDetection",
                          "timestamp": f"{seasons[season]}-0{day}T22:00:00-03:00", "filePath": f"media/{k}.jpg",
                          "filePublic": "false", "fileName": f"{k}.jpg", "fileMediatype": "image/jpeg"})
            observations.append({"observationID": f"o{k}", "deploymentID": f"{season}-{station}", "mediaID": f"m{k}",
                                 "observationLevel": "media", "observationType": "animal", "scientificName": SPECIES,
                                 "count": 1, "sex": sex, "individualID": animal})
    package = camtrapdp_package.write_package(tmp_path / "package", deployments, media, observations)
    cat = open_catalogue(tmp_path / "rosette-data")
    try:
        ingest_path(cat, package, format="camtrap-dp", user="tester")
        found = catalogue_sessions(cat, grouping="deployment-group:season")
        assert [s.name for s in found.sessions] == ["dry", "wet"]
        assert [sorted({c.animal for c in s.captures}) for s in found.sessions] == [["Ana", "Bia"], ["Ana", "Caio"]]
        assert [s.study.population.histories.n_occasions for s in found.sessions] == [5, 5]
        assert found.sex == {"Ana": "female", "Bia": "male", "Caio": "unknown"}
        grid = catalogue_sessions(cat, grouping="deployment-group:grid")  # one group holding both seasons
        assert [s.name for s in grid.sessions] == ["A"]
    finally:
        cat.close()


def test_a_group_without_identified_detections_is_left_out_with_a_note(tmp_path):
    """A third season whose cameras caught nothing identified: the two seasons with captures are the sessions,
    and the note names the one left out."""
    data_dir = tmp_path / "rosette-data"
    build_thin_season(data_dir)
    cat = open_catalogue(data_dir)
    try:
        with cat.unit_of_work() as s:
            for dep in s.query(Deployment):
                dep.details = {"deploymentGroups": "season:spring"}
            s.add(Deployment(key="late-A", location_id="A", lat=-31.0, lon=-64.0, start="2024-09-01T00:00:00-03:00",
                             end="2024-09-08T00:00:00-03:00", details={"deploymentGroups": "season:late"}))
            s.add(Deployment(key="loose", location_id="A", lat=-31.0, lon=-64.0, start="2024-10-01T00:00:00-03:00",
                             end="2024-10-08T00:00:00-03:00"))
            s.commit()
        found = catalogue_sessions(cat, grouping="deployment-group:season")
        assert [x.name for x in found.sessions] == ["spring"]
        assert any(n.startswith("session late: no identified") for n in found.notes), found.notes
        assert any("1 deployment(s) without a season:value group in deploymentGroups left out: loose" in n
                   for n in found.notes), found.notes
    finally:
        cat.close()
