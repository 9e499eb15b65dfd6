"""``rosette density --model`` and ``--compare`` on secr's files, through the CLI: secr's stored fits reproduced
(captdata's secrdemo.0 and secrdemo.b ranked by AICc, ovenbird's five sessions with D ~ Session) and bad input
refused in one line.

The fits start at secr's stored estimates (tests/test_density_models.py fits them from our own starts), so each
converges in a few steps and the file stays fast; what is checked here is the command's reading of the files, its
pairing of traps and masks with sessions, and its answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import core.field.scr_select as scr_select
import jobs.actions.density_models as density_models
from app.cli import main
from core.field.scr_fit import fit_scr_model

SECR = Path(__file__).parent / "fixtures" / "secr"
CAPT, TRAP = str(SECR / "capt.txt"), str(SECR / "trap.txt")
OVEN = ["--captures", str(SECR / "ovenbird_capt.txt"), "--traps", str(SECR / "ovenbird_trap.txt"), "--detector",
        "multi"]
# secr's stored fits (fit$par, -fit$minimum), as tests/test_density_models.py gives them
SECRDEMO_0 = ([1.7010691499857131, -0.978494143655482, 3.379831898920274], -759.02574573)
SECRDEMO_B = ([1.6981397445231214, -0.9537307917435194, -0.03200813324443232, 3.37986687909797], -759.01642294)
OVENBIRD_D = ([0.031709005961229796, -0.0638587644429462, -3.5619296999089296, 4.364109862294589], -930.72538699)
STARTS = {"g0~1": SECRDEMO_0[0], "g0~b": SECRDEMO_B[0], "D~Session": OVENBIRD_D[0]}


@pytest.fixture(autouse=True)
def secr_starts(monkeypatch):
    """Start each known model at secr's estimates."""
    def fitted(sessions, model, **options):
        return fit_scr_model(sessions, model, start=STARTS.get(str(model).replace(" ", "")), **options)

    monkeypatch.setattr(scr_select, "fit_scr_model", fitted)
    monkeypatch.setattr(density_models, "fit_scr_model", fitted)


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(["density", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def captdata_table() -> dict:
    """AIC(secrdemo.0, secrdemo.b, criterion = "AICc") as the command gives it (--json)."""
    import contextlib
    import io

    with pytest.MonkeyPatch.context() as mp:
        def fitted(sessions, model, **options):
            return fit_scr_model(sessions, model, start=STARTS.get(str(model).replace(" ", "")), **options)

        mp.setattr(scr_select, "fit_scr_model", fitted)
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = main(["density", "--captures", CAPT, "--traps", TRAP, "--detector", "multi", "--buffer", "100",
                       "--compare", "g0~1; g0~b", "--json"])
    assert rc == 0
    return json.loads(out.getvalue())


def test_compare_ranks_secrdemo_models_as_secr(captdata_table):
    """secr's AIC(): AICc 1524.385 (g0~1) and 1526.596 (g0~b); the g0~b fit is secrdemo.b's (log L, names)."""
    table = captdata_table["table"]
    assert [r["model"] for r in table] == ["g0~1", "g0~b"]
    assert [r["npar"] for r in table] == [3, 4]
    assert [round(r["AICc"], 3) for r in table] == [1524.385, 1526.596]
    assert table[1]["dAICc"] == pytest.approx(2.211, abs=1e-3)
    assert sum(r["AICcwt"] for r in table) == pytest.approx(1.0)
    b = next(f for f in captdata_table["fits"] if f["model"] == "g0~b")
    assert list(b["coefficients"]) == ["D", "g0", "g0.bTRUE", "sigma"]
    assert b["loglik"] == pytest.approx(SECRDEMO_B[1], abs=1e-5)
    assert b["coefficients"]["g0.bTRUE"]["beta"] == pytest.approx(SECRDEMO_B[0][2], abs=1e-4)
    assert b["likelihood_form"].startswith("multi")
    (averaged,) = captdata_table["model_averaged"]
    d = averaged["D_per_100km2"]
    assert d["lcl"] < d["estimate"] < d["ucl"]
    d0 = next(f for f in captdata_table["fits"] if f["model"] == "g0~1")["sessions"][0]["D_per_100km2"]["estimate"]
    db = b["sessions"][0]["D_per_100km2"]["estimate"]
    assert min(d0, db) <= d["estimate"] <= max(d0, db)


def test_compare_text_prints_the_table_and_averaged_density(captdata_table):
    text = density_models.models_text(captdata_table)
    lines = text.splitlines()
    assert lines[0].split() == ["model", "detectfn", "npar", "logLik", "AIC", "AICc", "dAICc", "AICcwt"]
    assert lines[1].split()[:4] == ["g0~1", "halfnormal", "3", "-759.026"]
    assert "Model-averaged D, session 1:" in text


def test_model_on_five_sessions_matches_ovenbird_model_d(capsys):
    """ovenbird.model.D = secr.fit(ovenCH, model = D ~ Session, mask = ovenmask): one traps and one mask file for
    all five sessions; every session's D, g0 and sigma in the JSON."""
    rc, out, _ = _run([*OVEN, "--mask", str(SECR / "ovenbird_mask.csv"), "--model", "D ~ Session", "--json"],
                      capsys)
    assert rc == 0
    answer = json.loads(out)
    assert answer["loglik"] == pytest.approx(OVENBIRD_D[1], abs=1e-5)
    assert list(answer["coefficients"]) == ["D", "D.Session", "g0", "sigma"]
    assert answer["coefficients"]["D.Session"]["beta"] == pytest.approx(OVENBIRD_D[0][1], abs=1e-4)
    assert [s["session"] for s in answer["sessions"]] == ["2005", "2006", "2007", "2008", "2009"]
    for s in answer["sessions"]:
        assert {"D_per_100km2", "g0", "sigma_m"} <= set(s)
    densities = [s["D_per_100km2"]["estimate"] for s in answer["sessions"]]
    assert densities == sorted(densities, reverse=True)  # D.Session < 0: a decline
    assert answer["likelihood_form"]


@pytest.mark.parametrize(("argv", "words"), [
    (["--captures", CAPT, "--traps", TRAP, "--buffer", "100", "--model", "g0~colour"], "colour"),
    (["--captures", CAPT, "--traps", TRAP, "--buffer", "100", "--model", "g0~b", "--compare", "g0~1"], "not both"),
    (["--captures", CAPT, "--traps", TRAP, "--model", "g0~b"], "--buffer"),
    (["--captures", CAPT, "--traps", TRAP, "--buffer", "100", "--model", "g0~b", "--link", "sigma=identity"],
     "only density's link"),
    ([*OVEN, "--traps", str(SECR / "ovenbird_trap.txt"), "--buffer", "100", "--model", "D~session"],
     "2 --traps files for 5 session(s)"),
    ([*OVEN, "--mask", str(SECR / "ovenbird_mask.csv"), "--model", "D~elevation"], "not a covariate of the mask"),
    (["--captures", CAPT, "--traps", TRAP, "--traps", TRAP], "--model or --compare"),
])
def test_bad_input_is_refused_in_one_line(argv, words, capsys):
    rc, out, err = _run(argv, capsys)
    assert rc != 0 and not out
    refusal = [line for line in err.splitlines() if not line.startswith("[")]  # progress lines aside
    assert words in err and len(refusal) == 1 and refusal[0].startswith("error: "), err


def test_unknown_sex_code_is_refused(tmp_path, capsys):
    """A sex column with a code that is neither F nor M (nor empty/NA) is refused, naming the animal."""
    rows = (SECR / "blackbear_capt.txt").read_text().splitlines()
    rows[1] = rows[1].rsplit(" ", 1)[0] + " X"
    capt = tmp_path / "capt.txt"
    capt.write_text("\n".join(rows) + "\n")
    rc, out, err = _run(["--captures", str(capt), "--traps", str(SECR / "blackbear_trap.txt"), "--mask",
                         str(SECR / "blackbear_mask.csv"), "--model", "g0~sex"], capsys)
    refusal = [line for line in err.splitlines() if not line.startswith("[")]
    assert rc != 0 and "sex code 'X'" in err and len(refusal) == 1, err


def test_a_geojson_habitat_gives_the_fit_of_the_same_mask_as_a_csv(tmp_path, capsys):
    """D~hab with the habitat's attribute read per mask point from GeoJSON polygons (west half 1, east half 2):
    the same figures as the mask written out as a CSV with a hab column; a point outside every polygon is not
    in the mask."""
    import numpy as np

    from core.field.scr_data import read_secr_traps
    from core.field.scr_mask import read_geojson_polygon, trapbuffer_mask
    from core.field.scr_models import mask_covariate_from_geojson

    xy = np.array([[t.x, t.y] for t in read_secr_traps(TRAP)])
    (x0, y0), (x1, y1), mid = xy.min(0) - 100, xy.max(0) + 100, float(np.median(xy[:, 0]))

    def rect(a, b, hab):
        ring = [[a, y0], [b, y0], [b, y1], [a, y1], [a, y0]]
        return {"type": "Feature", "properties": {"hab": hab, "name": "w" if hab == 1 else "e"},
                "geometry": {"type": "Polygon", "coordinates": [ring]}}

    habitat = tmp_path / "habitat.geojson"
    habitat.write_text(json.dumps({"type": "FeatureCollection",
                                   "features": [rect(x0, mid, 1), rect(mid, x1 - 40, 2)]}))
    mask = trapbuffer_mask(xy, buffer_m=100, polygon=read_geojson_polygon(habitat))
    hab = mask_covariate_from_geojson(mask, habitat, "hab")
    assert set(np.unique(hab)) == {1.0, 2.0} and mask.xy[:, 0].max() <= x1 - 40
    csv = tmp_path / "mask.csv"
    csv.write_text("x,y,hab\n" + "".join(f"{x},{y},{h:g}\n" for (x, y), h in zip(mask.xy, hab)))
    answers = []
    for mask_file in (habitat, csv):
        rc, out, err = _run(["--captures", CAPT, "--traps", TRAP, "--detector", "multi", "--buffer", "100",
                             "--mask", str(mask_file), "--model", "D~hab", "--json"], capsys)
        assert rc == 0, err
        answers.append(json.loads(out))
    geo, table = answers
    assert "D.hab" in geo["coefficients"]
    assert geo["loglik"] == pytest.approx(table["loglik"], abs=1e-6)
    assert geo["coefficients"]["D.hab"]["beta"] == pytest.approx(table["coefficients"]["D.hab"]["beta"], abs=1e-5)
