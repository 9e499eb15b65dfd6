"""Density that refuses what an array cannot estimate, and the inputs secr's files can carry.

A 3-station season with the stations 1 km apart, whose animals are caught at every station alike: sigma cannot be
measured there, so the catalogue's fit, the background job and the season's own ``rosette export capthist`` files
fed back to ``rosette density`` are refused in one and the same sentence, at the default buffer and at any buffer a
user gives. Then the identifiability checks one by one, a fit at wide buffers that never overflows, a fixed buffer
whose failed check is in the headline and the table, removals, and the words of the answer.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from app.cli import main as cli_main
import core.field.density as density_module
from core.field import scr_identifiability as idf
from core.field.capthist import Trap
from core.field.density import fit_density, suggest_buffer
from core.field.scr_data import build_capture_history, read_secr_captures, read_secr_traps
from core.field.scr_errors import DensityInputError
from core.field.scr_likelihood import link_parameters, log_likelihood, prepare
from core.field.scr_mask import trapbuffer_mask
from db.field.density import fit_answer
from db.models import Deployment, Individual, Species
from db.session import open_catalogue
from jobs import queue
from jobs.actions import density as ds
from jobs.requests.density import DensityRequest
from jobs.worker import run_one
from tests.sim_study import SPECIES
from tests.test_population_service import _annotation, _photo

SECR = Path(__file__).parent / "fixtures" / "secr"
#: What the 3-station season lacks, in the words every screen gives.
SENTENCE = ("3 stations 1 km apart cannot measure how far these animals move; SCR needs stations closer than about "
            "2 sigma and animals caught at several stations.")
#: Stations 0.009 degrees of latitude (1 km) apart, in a line.
STATIONS = {"A": (-16.500, -56.5), "B": (-16.509, -56.5), "C": (-16.518, -56.5)}
#: Each animal caught at two or three of the stations alike, on days 1-5: nothing says how far it moves.
SEEN = {"Ana": [(1, "A"), (2, "B"), (4, "C")], "Bia": [(1, "B"), (3, "C"), (5, "A")], "Caio": [(2, "A"), (5, "C")],
        "Dora": [(2, "C"), (4, "A"), (5, "B")], "Edu": [(3, "A"), (5, "C")], "Fia": [(1, "C")],
        "Gil": [(5, "B"), (3, "A")], "Hugo": [(4, "B"), (1, "A")]}
ROWS = [("1", animal, day, station) for animal, days in SEEN.items() for day, station in days]
LINE = [Trap(name, 1000.0 * k, 0.0, (1.0,) * 5) for k, name in enumerate("ABC")]


def _season(data_dir: Path) -> None:
    """The season in a catalogue: deployments 2024-05-01 to 05-06, a jaguar photo per detection, and two
    annotations nobody identified."""
    cat = open_catalogue(data_dir)
    with cat.unit_of_work() as s:
        jaguar = Species(name=SPECIES)
        s.add(jaguar)
        s.flush()
        deps = {name: Deployment(key=f"dep-{name}", location_id=name, lat=lat, lon=lon,
                                 start="2024-05-01T00:00:00-04:00", end="2024-05-06T00:00:00-04:00")
                for name, (lat, lon) in STATIONS.items()}
        s.add_all(deps.values())
        individuals = {n: Individual(name=n, species_id=jaguar.id) for n in SEEN}
        s.add_all(individuals.values())
        s.flush()
        n = 0
        for animal, days in SEEN.items():
            for day, station in days:
                n += 1
                _annotation(s, _photo(s, n, deployment=deps[station], taken_at=f"2024-05-0{day}T10:00:00-04:00"),
                            jaguar, individuals[animal])
        for day in (2, 3):
            n += 1
            _annotation(s, _photo(s, n, deployment=deps["B"], taken_at=f"2024-05-0{day}T22:00:00-04:00"), jaguar, None)
        s.commit()
    cat.close()


@pytest.fixture(scope="module")
def season(tmp_path_factory) -> Path:
    data_dir = tmp_path_factory.mktemp("three-stations") / "rosette-data"
    _season(data_dir)
    return data_dir


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli_main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_season_s_capthist_files_are_refused_alike_at_every_buffer(season, capsys, tmp_path):
    rc, _, err = _cli(capsys, "--data-dir", str(season), "export", "capthist", str(tmp_path / "ch"))
    assert rc == 0, err
    files = ("--captures", str(tmp_path / "ch" / "captures.txt"), "--traps", str(tmp_path / "ch" / "traps.txt"))
    for buffer in ((), ("--buffer", "10000"), ("--buffer", "18000")):
        rc, out, err = _cli(capsys, "--data-dir", str(tmp_path / "none"), "density", "--json", *files, *buffer)
        answer = json.loads(out)
        assert rc == 1 and "OverflowError" not in err and "math range error" not in err
        assert answer["refused"] is True and answer["reason"] == SENTENCE, buffer
        assert not any(k.startswith(("D_", "ci_")) for k in answer), answer.keys()  # no number to take
        assert answer["n_detectors"] == 3 and answer["spatial_recaptures"] == 7


def test_the_catalogue_s_fit_and_the_tab_s_job_are_refused_with_the_same_sentence(season, capsys):
    rc, out, _ = _cli(capsys, "--data-dir", str(season), "density")
    assert rc == 1 and out.startswith(f"No density: {SENTENCE}") and "D = " not in out and "Estimate" not in out
    cat = open_catalogue(season)
    try:
        job_id, _ = ds.queue_density(cat, DensityRequest(buffer_m=18000))
        assert run_one(cat, isolate=False) == job_id
        answer, words = ds.density_status(cat, job_id)
        assert words == f"Density fit job #{job_id} refused: {SENTENCE}"
        assert queue.get_job(cat, job_id).message == f"no density: {SENTENCE}"  # the Jobs tab's line
        assert answer["refused"] and "D_per_100km2" not in answer
        assert ds.estimate_rows(answer) == [["D (animals per 100 km²)", "no estimate", "—", SENTENCE]]
        # the map shows the array the sentence speaks of, with every station named
        assert list(ds.map_figure(answer).data[-1].text) == ["A", "B", "C"]
        report = Path(ds.write_density_report(cat, answer)).read_text()
        assert f"**No density: {SENTENCE}**" in report
        # the identities the refusal rests on, and the two annotations nobody identified left out
        assert "Identities as decided: 18 annotation(s) identified by a curator and 0 by a machine; 2 unreviewed " \
               "annotation(s) left out." in report
    finally:
        cat.close()


# --------------------------------------------------------------------------- the checks


def test_the_checks_and_their_thresholds():
    shape = idf.array_shape(np.array([[0.0, 0.0], [1000.0, 0.0], [2000.0, 0.0]]))
    assert (shape.n_detectors, shape.spacing_m, shape.extent_m) == (3, 1000.0, 2000.0)
    assert shape.words == "3 stations 1 km apart" and idf.distance_words(450.0) == "450 m"
    good = dict(sigma=800.0, sigma_lcl=600.0, sigma_ucl=1100.0, d_lcl=1e-3, d_ucl=5e-3, information=np.eye(3),
                shape=shape, mask_extent_m=10_000.0)
    assert idf.failed_criterion(**good) is None
    for change, criterion in ((dict(sigma=2500.0), "sigma_beyond_array"),
                              (dict(information=np.diag([1.0, 1.0, 1e-12])), "singular_information"),
                              (dict(information=np.full((3, 3), np.nan)), "singular_information"),
                              (dict(sigma_ucl=12_000.0), "sigma_interval_beyond_mask"),
                              (dict(sigma_lcl=5.0), "sigma_interval_too_wide"),
                              (dict(d_lcl=1e-5), "density_interval_too_wide")):
        assert idf.failed_criterion(**{**good, **change}) == criterion
    assert str(idf.refusal("singular_information", shape)) == SENTENCE
    assert "too few animals to estimate density" in str(idf.refusal("density_interval_too_wide", shape))


def test_one_animal_or_one_spatial_recapture_is_refused_before_any_fit():
    with pytest.raises(idf.NotIdentifiable, match="Only one animal was detected, at 3 stations 1 km apart: no "
                                                  "density can be trusted from one animal") as one:
        fit_density([("1", "a", 1, "A"), ("1", "a", 2, "B")], LINE, detector="proximity", buffer_m=3000)
    assert one.value.criterion == "one_animal"
    with pytest.raises(idf.NotIdentifiable, match="caught only 1 animal at more than one station"):
        fit_density([("1", "a", 1, "A"), ("1", "a", 2, "B"), ("1", "b", 1, "C")], LINE, detector="proximity",
                    buffer_m=3000)


def test_a_fit_at_wide_buffers_never_overflows():
    # unchecked, the fit runs to its end: sigma far beyond the array, but no OverflowError on the way
    fit = fit_density(ROWS, LINE, detector="proximity", buffer_m=18_000, check_identifiable=False)
    assert fit.sigma_m.value > 2000
    history = build_capture_history(ROWS, LINE, detector_type="proximity")
    model = prepare(history, trapbuffer_mask(history.xy, buffer_m=5000), detectfn="HN", conditional=False)
    # a start from a fit at its limits (g0 of 1, sigma of 1e308) has finite link values and a likelihood
    beta = link_parameters(model, {"D": 1e-3, "g0": 1.0, "sigma": 1e308})
    value = log_likelihood(model, beta)
    assert np.all(np.isfinite(beta)) and (math.isfinite(value) or value == -math.inf)
    # an interval of a sigma whose log has an SE of 400 reaches infinity instead of raising "math range error"
    assert density_module._wald(8.0, 400.0, density_module._exp).ucl == math.inf
    with pytest.raises(idf.NotIdentifiable, match="cannot measure how far"):
        fit_density(ROWS, LINE, detector="proximity", buffer_m=30_000)


# --------------------------------------------------------------------------- the buffer


@pytest.fixture(scope="module")
def captdata() -> tuple[list[Trap], list]:
    traps = read_secr_traps(SECR / "trap.txt")
    return traps, read_secr_captures(SECR / "capt.txt", fmt="XY", traps=traps)


def test_a_fixed_buffer_that_fails_its_check_says_so_in_the_headline_and_the_table(captdata):
    traps, captures = captdata
    answer, fit = fit_answer(captures, traps, study={"source": "files", "captures": "capt.txt", "traps": "trap.txt"},
                             detector="multi", buffer_m=20, spacing_m=15, conditional=True)
    assert fit is not None and answer["buffer_check"]["changed"]
    assert "; buffer check failed: D changes by" in answer["summary"] and "too narrow" in answer["summary"]
    assert ds.estimate_rows(answer)[0][3].startswith("Buffer check failed: D changes by")
    assert ds.basis_text(answer).startswith("Buffer check failed: D changes by")


def test_suggest_buffer_scales_with_sigma_and_stops_at_secr_s_bias_target(captdata):
    traps, captures = captdata
    history = build_capture_history(captures, traps, detector_type="multi")
    narrow = suggest_buffer(history, detectfn="HN", first=0.27, sigma=29.4)
    wide = suggest_buffer(history, detectfn="HN", first=0.27, sigma=58.8)
    assert 2.5 * 29.4 < narrow < 6 * 29.4 and wide > 1.8 * narrow
    assert suggest_buffer(history, detectfn="HN", first=0.27, sigma=29.4, rb_target=0.05) < narrow


def test_a_mask_of_points_speaks_of_no_default_buffer(captdata, tmp_path):
    traps, captures = captdata
    points = trapbuffer_mask(np.array([[t.x, t.y] for t in traps]), buffer_m=100, nx=32).xy
    (tmp_path / "mask.csv").write_text("x,y\n" + "\n".join(f"{x},{y}" for x, y in points))
    answer, _ = fit_answer(captures, traps, study={"source": "files", "captures": "capt.txt", "traps": "trap.txt"},
                           detector="multi", mask=str(tmp_path / "mask.csv"), conditional=True)
    text = ds.basis_text(answer)
    assert "mask from mask.csv" in text and "default" not in text and "buffer" not in text.split(";")[3]


# --------------------------------------------------------------------------- removals and detectors


def test_a_removal_ends_the_animal_s_exposure_as_secr_reads_it(tmp_path):
    traps = tmp_path / "traps.txt"
    traps.write_text("A 0 0\nB 100 0\nC 200 0\n")
    (tmp_path / "alive.txt").write_text("1 a 1 A\n1 a 2 B\n1 b 1 B\n1 b 3 C\n")
    (tmp_path / "removed.txt").write_text("1 a 1 A\n1 a -2 B\n1 b 1 B\n1 b 3 C\n")
    trap_rows = read_secr_traps(traps)
    removed = read_secr_captures(tmp_path / "removed.txt", traps=trap_rows)
    assert [c.removed for c in removed] == [False, True, False, False] and removed[1].occasion == 2
    alive_h = build_capture_history(read_secr_captures(tmp_path / "alive.txt"), trap_rows, detector_type="proximity")
    removed_h = build_capture_history(removed, trap_rows, detector_type="proximity")
    assert np.array_equal(alive_h.counts, removed_h.counts) and list(removed_h.removed_on) == [1, 2]
    # animal a is not exposed on occasion 3: a likelihood of its own, higher (no chance to miss it there)
    mask = trapbuffer_mask(alive_h.xy, buffer_m=300)
    beta = link_parameters(prepare(alive_h, mask, detectfn="HN", conditional=False),
                           {"D": 5.0, "g0": 0.3, "sigma": 60.0})
    alive_ll = log_likelihood(prepare(alive_h, mask, detectfn="HN", conditional=False), beta)
    removed_ll = log_likelihood(prepare(removed_h, mask, detectfn="HN", conditional=False), beta)
    assert removed_ll > alive_ll
    (tmp_path / "late.txt").write_text("1 a -1 A\n1 a 2 B\n1 b 1 B\n1 b 3 C\n")
    with pytest.raises(DensityInputError, match="'a' is captured on occasion 2 after its removal on occasion 1"):
        build_capture_history(read_secr_captures(tmp_path / "late.txt"), trap_rows, detector_type="proximity")


def test_single_catch_traps_are_sent_to_multi_as_secr_fits_them(capsys):
    with pytest.raises(ValueError, match="detector 'single' is fitted as secr fits it, with the multi-catch "
                                         "likelihood.*give detector multi"):
        DensityRequest(detector="single")
    with pytest.raises(DensityInputError, match="use detector 'multi'"):
        build_capture_history(ROWS, LINE, detector_type="single")


def test_the_identities_sentence_on_each_basis():
    counts = {"curator": 5, "machine": 3, "unreviewed": 2}
    assert ds.identities_sentence({"provenance_counts": counts, "identities": "confirmed", "outside_occasions": 1}) == (
        "Identities confirmed only: the 5 annotation(s) a curator identified; 3 machine-identified and 3 unreviewed "
        "annotation(s) left out.")
    assert "3 machine-identified and 2 unreviewed annotation(s) given an animal in each draw; 1 unreviewed" in \
        ds.identities_sentence({"provenance_counts": counts, "identities": "uncertain", "outside_occasions": 1})
    assert "secr files" in ds.identities_sentence({"provenance_counts": None})


def test_the_map_opens_on_the_stations_of_a_wide_mask_with_their_names_and_a_scale():
    grid = np.arange(-15_000.0, 17_001.0, 1000.0)
    answer = {"stations": [{"name": n, "x": 1000.0 * k, "y": 0.0, "detections": 3, "animals": 2, "usage": 5.0}
                           for k, n in enumerate("ABC")],
              "animals": [{"name": "a", "x": 500.0, "y": 0.0, "detections": 2, "detectors": 2}],
              "mask_xy": [[x, y] for x in grid for y in grid], "sigma_m": 400.0, "parameters": {"buffer_m": 15_000}}
    figure = ds.map_figure(answer)
    (x0, x1), (y0, y1) = figure.layout.xaxis.range, figure.layout.yaxis.range
    assert x0 < 0 and x1 > 2000 and x1 - x0 < 4000 < 32_000  # the 3 km of stations, not the 32 km of mask
    stations = figure.data[-1]  # drawn last, over the mask and the animals
    assert stations.name == "stations" and list(stations.text) == ["A", "B", "C"] and stations.textfont.size >= 14
    assert figure.layout.annotations[0].text == "<b>500 m</b>" and figure.layout.shapes[0].x1 - \
        figure.layout.shapes[0].x0 == 500
