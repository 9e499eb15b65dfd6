"""The SCR density engine (core.field) against secr's own published figures, on simulated studies with a known
density, and on the inputs it must refuse."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import core.field.density as density_module
from core.field.capthist import Trap, secr_captures_text, secr_traps_text
from core.field.density import fit_density, fit_model, numerical_gradient
from core.field.scr_data import Capture, build_capture_history, read_secr_captures, read_secr_traps
from core.field.scr_errors import (
    DensityInputError,
    DetectorLayoutError,
    FitNotConverged,
    MaskError,
    OccasionNotCovered,
    SigmaNotEstimable,
    UnknownDetector,
)
from core.field.scr_likelihood import link_parameters, log_likelihood, prepare
from core.field.scr_mask import read_mask_csv, trapbuffer_mask
from core.field.scr_simulate import grid_traps, simulate_study

SECR = Path(__file__).parent / "fixtures" / "secr"


@pytest.fixture(scope="module")
def captdata() -> tuple[list[Trap], list[Capture]]:
    """secr's ``captdata``: read.capthist("capt.txt", "trap.txt", fmt = "XY")."""
    traps = read_secr_traps(SECR / "trap.txt")
    return traps, read_secr_captures(SECR / "capt.txt", fmt="XY", traps=traps)


@pytest.fixture(scope="module")
def secrdemo_0(captdata):
    """secr.fit(captdata): multi-catch likelihood, HN, buffer 100 m, full likelihood."""
    traps, captures = captdata
    return fit_density(captures, traps, detector="multi", detectfn="HN", buffer_m=100, check_buffer=False)


@pytest.fixture(scope="module")
def secrdemo_cl(captdata):
    """secr.fit(captdata, CL = TRUE), with the buffer check."""
    traps, captures = captdata
    return fit_density(captures, traps, detector="multi", detectfn="HN", buffer_m=100, conditional=True)


# --------------------------------------------------------------------------- secr's figures


def test_captdata_reads_as_secr_describes_it(captdata):
    traps, captures = captdata
    history = build_capture_history(captures, traps, detector_type="multi")
    # "235 fictional captures of 76 animals over 5 occasions in 100 single-catch traps 30 metres apart"
    assert (history.n_animals, history.n_detections, history.n_occasions, len(traps)) == (76, 235, 5, 100)
    assert {(t.x, t.y) for t in traps} == {(365.0 + 30 * i, 365.0 + 30 * j) for i in range(10) for j in range(10)}


def test_loglik_at_secr_values(captdata):
    """test-initial.R: LL at D = 5.4798, g0 = 0.2732, sigma = 29.3658 with buffer 100 is -759.02575."""
    traps, captures = captdata
    history = build_capture_history(captures, traps, detector_type="multi")
    mask = trapbuffer_mask(history.xy, buffer_m=100)
    assert mask.spacing_m == pytest.approx(470 / 64)  # 64 points across the traps' x-range plus two buffers
    model = prepare(history, mask, detectfn="HN", conditional=False)
    beta = link_parameters(model, {"D": 5.4798, "g0": 0.2732, "sigma": 29.3658})
    assert log_likelihood(model, beta) == pytest.approx(-759.02575, abs=1e-4)
    # not a constant: another sigma gives another likelihood
    assert log_likelihood(model, beta + np.array([0, 0, 0.1])) < -759.1


def test_mle_matches_secr(secrdemo_0):
    """test-start.R: secrdemo.0's MLE on the link scale (log D, logit g0, log sigma)."""
    assert secrdemo_0.link_names == ("log D", "logit g0", "log sigma")
    np.testing.assert_allclose(secrdemo_0.link_estimates, (1.7010692, -0.9784937, 3.3798317), atol=1e-3)
    assert secrdemo_0.loglik == pytest.approx(-759.02575, abs=1e-3)
    assert secrdemo_0.aic == pytest.approx(-2 * secrdemo_0.loglik + 6)
    d = secrdemo_0.density_per_ha
    assert d.lcl < d.value < d.ucl and d.se > 0
    assert secrdemo_0.density_per_100km2.value == pytest.approx(d.value * 10_000)
    assert 0 < secrdemo_0.detection.lcl < secrdemo_0.detection.value < secrdemo_0.detection.ucl < 1


def test_conditional_derived_density_matches_secr(secrdemo_cl):
    """test-derived.R: derived(secrdemo.CL)['D', ] = 5.4798074, SE 0.6445541, CI 4.3549957 - 6.8951365."""
    d = secrdemo_cl.density_per_ha
    assert d.value == pytest.approx(5.4798074, abs=1e-3)
    assert d.se == pytest.approx(0.6445541, abs=1e-3)
    assert (d.lcl, d.ucl) == (pytest.approx(4.3549957, abs=1e-3), pytest.approx(6.8951365, abs=1e-3))
    np.testing.assert_allclose(secrdemo_cl.link_estimates, (-0.9784944, 3.3798320), atol=1e-3)  # secrdemo.CL
    assert secrdemo_cl.n_parameters == 2


def test_buffer_check_on_captdata(secrdemo_cl, captdata):
    check = secrdemo_cl.buffer_check
    assert check is not None and check.doubled_buffer_m == 200
    assert abs(check.relative_change) < 0.01 and not check.changed
    doc = json.loads(json.dumps(secrdemo_cl.as_dict()))
    assert doc["likelihood"] == "conditional" and doc["buffer_check"]["changed"] is False
    assert doc["D_per_100km2"] == pytest.approx(54798.074, abs=10)
    traps, captures = captdata  # a buffer narrower than sigma misses animals that were detected
    heard: list[tuple[float, str]] = []
    narrow = fit_density(captures, traps, detector="multi", detectfn="HN", buffer_m=20,
                         progress=lambda f, m: heard.append((f, m)))
    assert [f for f, _ in heard] == sorted(f for f, _ in heard) and heard[-1] == (1.0, "done")
    assert any("twice the buffer (40 m)" in m for _, m in heard)
    assert narrow.buffer_check.changed and "too narrow" in narrow.buffer_check.message
    assert any("too narrow" in n for n in narrow.notes)


def test_gradients_are_finite_and_vanish_at_the_maximum(captdata, secrdemo_0):
    traps, captures = captdata
    history = build_capture_history(captures, traps, detector_type="multi")
    model = prepare(history, trapbuffer_mask(history.xy, buffer_m=100), detectfn="HN", conditional=False)
    grad = numerical_gradient(lambda b: log_likelihood(model, b), np.array(secrdemo_0.link_estimates))
    assert np.all(np.isfinite(grad)) and np.max(np.abs(grad)) < 1e-2
    away = numerical_gradient(lambda b: log_likelihood(model, b), np.array([1.0, -2.0, 4.0]))
    assert np.all(np.isfinite(away)) and np.max(np.abs(away)) > 1


@pytest.mark.parametrize("detector", ["proximity", "count", "multi"])
@pytest.mark.parametrize("detectfn", ["HN", "HHN", "EX"])
def test_every_detector_and_function_has_finite_gradients(detector, detectfn):
    rng = np.random.default_rng(7)
    traps = grid_traps(16, spacing_m=60, columns=4, n_occasions=6)
    first = 0.3 if detectfn != "HHN" else 0.3
    study = simulate_study(traps, density_per_ha=2.0, detectfn=detectfn, detection=first, sigma_m=40.0,
                           detector=detector, buffer_m=160, rng=rng)
    history = build_capture_history(study.captures, traps, detector_type=detector)
    model = prepare(history, trapbuffer_mask(history.xy, buffer_m=160, nx=32), detectfn=detectfn,
                    conditional=False)
    for real in ({"D": 2.0, "g0": 0.3, "lambda0": 0.3, "sigma": 40.0}, {"D": 0.5, "g0": 0.9, "lambda0": 3.0,
                                                                            "sigma": 500.0}):
        beta = link_parameters(model, real)
        assert math.isfinite(log_likelihood(model, beta))
        assert np.all(np.isfinite(numerical_gradient(lambda b: log_likelihood(model, b), beta)))


# --------------------------------------------------------------------------- the model's properties


def _loop_loglik(history, mask, detectfn, D, first, sigma):
    """The full likelihood written out term by term, one animal, mask point, occasion and detector at a time."""
    n_cells, area = mask.n_points, mask.area_ha
    per_animal = np.zeros((history.n_animals, n_cells))
    never = np.zeros(n_cells)
    for m, (mx, my) in enumerate(mask.xy):
        h = []
        for x, y in history.xy:
            d2 = (x - mx) ** 2 + (y - my) ** 2
            if detectfn == "HHN":
                h.append(first * math.exp(-d2 / 2 / sigma ** 2))
            else:
                g = first * (math.exp(-d2 / 2 / sigma ** 2) if detectfn == "HN" else math.exp(-math.sqrt(d2) / sigma))
                h.append(-math.log(1 - g))
        never[m] = math.exp(-sum(history.usage[k, s] * h[k] for k in range(len(h))
                                 for s in range(history.n_occasions)))
        for i in range(history.n_animals):
            p = 1.0
            for s in range(history.n_occasions):
                hazards = [history.usage[k, s] * h[k] for k in range(len(h))]
                if history.detector_type == "multi":
                    total = sum(hazards)
                    hit = [k for k in range(len(h)) if history.counts[i, s, k]]
                    p *= math.exp(-total) if not hit else (1 - math.exp(-total)) * hazards[hit[0]] / total
                    continue
                for k, lam in enumerate(hazards):
                    y = int(history.counts[i, s, k])
                    if history.detector_type == "proximity":
                        p *= (1 - math.exp(-lam)) if y else math.exp(-lam)
                    else:
                        p *= math.exp(-lam) * lam ** y / math.factorial(y)
            per_animal[i, m] = p
    n = history.n_animals
    pdot = 1 - never.mean()
    _, sharing = np.unique(history.counts.reshape(n, -1), axis=0, return_counts=True)
    multinomial = math.lgamma(n + 1) - sum(math.lgamma(c + 1) for c in sharing)
    expected = D * area * pdot
    return (float(np.log(per_animal.mean(axis=1)).sum()) - n * math.log(pdot) + multinomial
            + n * math.log(expected) - expected - math.lgamma(n + 1))


@pytest.mark.parametrize(("detector", "detectfn"), [("proximity", "HN"), ("count", "HHN"), ("multi", "EX"),
                                                    ("count", "HN")])
def test_vectorised_likelihood_matches_the_formula_term_by_term(detector, detectfn):
    rng = np.random.default_rng(3)
    usage = rng.choice([0.0, 0.5, 1.0, 2.5], size=(9, 4), p=[0.15, 0.2, 0.45, 0.2])
    traps = grid_traps(9, spacing_m=50, columns=3, n_occasions=4, usage=usage)
    study = simulate_study(traps, density_per_ha=4.0, detectfn=detectfn, detection=0.4, sigma_m=35,
                           detector=detector, buffer_m=120, rng=rng)
    history = build_capture_history(study.captures, traps, detector_type=detector)
    mask = trapbuffer_mask(history.xy, buffer_m=120, nx=12)
    model = prepare(history, mask, detectfn=detectfn, conditional=False)
    real = {"D": 3.0, "g0": 0.3, "lambda0": 0.3, "sigma": 40.0}
    expected = _loop_loglik(history, mask, detectfn, 3.0, 0.3, 40.0)
    assert log_likelihood(model, link_parameters(model, real)) == pytest.approx(expected, abs=1e-8)


def test_full_and_conditional_agree_on_density():
    """With a homogeneous Poisson density the full likelihood's D is n / (p. A) at the shared detection MLE."""
    rng = np.random.default_rng(11)
    traps = grid_traps(20, spacing_m=75, n_occasions=10)
    study = simulate_study(traps, density_per_ha=1.0, detectfn="HN", detection=0.2, sigma_m=50,
                           detector="proximity", buffer_m=200, rng=rng)
    full = fit_density(study.captures, traps, detector="proximity", detectfn="HN", buffer_m=200, check_buffer=False)
    cl = fit_density(study.captures, traps, detector="proximity", detectfn="HN", buffer_m=200, conditional=True,
                     check_buffer=False)
    assert full.density_per_ha.value == pytest.approx(cl.density_per_ha.value, rel=1e-4)
    np.testing.assert_allclose(full.link_estimates[1:], cl.link_estimates, atol=1e-4)
    assert full.n_in_mask.value == pytest.approx(full.density_per_ha.value * full.mask.area_km2 * 100)


def test_usage_scales_the_hazard():
    """Counts at detectors used twice as long say half the hazard per unit of usage; D and sigma stay."""
    rng = np.random.default_rng(5)
    traps = grid_traps(16, spacing_m=60, columns=4, n_occasions=8)
    study = simulate_study(traps, density_per_ha=2.0, detectfn="HHN", detection=0.2, sigma_m=40,
                           detector="count", buffer_m=160, rng=rng)
    doubled = [Trap(t.name, t.x, t.y, tuple(2 * u for u in t.usage)) for t in traps]
    one = fit_density(study.captures, traps, detector="count", detectfn="HHN", buffer_m=160, check_buffer=False)
    two = fit_density(study.captures, doubled, detector="count", detectfn="HHN", buffer_m=160, check_buffer=False)
    assert one.detection_name == "lambda0"
    assert two.detection.value == pytest.approx(one.detection.value / 2, rel=1e-3)
    assert two.density_per_ha.value == pytest.approx(one.density_per_ha.value, rel=1e-3)
    assert two.loglik == pytest.approx(one.loglik, abs=1e-6)  # T h is all the data can see
    uneven = [Trap(t.name, t.x, t.y, tuple(3.0 if k % 2 else 1.0 for _ in t.usage)) for k, t in enumerate(traps)]
    three = fit_density(study.captures, uneven, detector="count", detectfn="HHN", buffer_m=160, check_buffer=False)
    assert not three.detection.value == pytest.approx(one.detection.value, rel=0.05)  # usage per detector counts


def test_detection_curve_and_json(secrdemo_0):
    curve = secrdemo_0.detection_curve([0, secrdemo_0.sigma_m.value, 200])
    assert curve[0] == pytest.approx(secrdemo_0.detection.value, rel=1e-9)
    assert curve[1] == pytest.approx(secrdemo_0.detection.value * math.exp(-0.5), rel=1e-6)
    doc = json.loads(json.dumps(secrdemo_0.as_dict()))
    for key in ("D_per_100km2", "ci_low", "ci_high", "g0", "sigma_m", "loglik", "AIC", "n_animals",
                "n_detections", "mask", "buffer_check"):
        assert key in doc
    assert doc["n_animals"] == 76 and doc["n_detections"] == 235
    assert doc["mask"]["points"] == secrdemo_0.mask.points and doc["mask"]["buffer_m"] == 100
    assert doc["ci_low"] < doc["D_per_100km2"] < doc["ci_high"]


# --------------------------------------------------------------------------- files and masks


def test_reads_what_export_capthist_writes(tmp_path):
    traps = [Trap("Station A", 0.0, 0.0, (1.0, 0.5, 0.0)), Trap("B", 100.0, 0.0, (1.0, 1.0, 1.0))]
    rows = [("s1", "leo 1", 1, "Station A"), ("s1", "leo 1", 3, "B"), ("s1", "leo2", 2, "B")]
    (tmp_path / "capt.txt").write_text(secr_captures_text(rows, header=["study x"]))
    (tmp_path / "trap.txt").write_text(secr_traps_text(traps, header=["study x"]))
    back = read_secr_traps(tmp_path / "trap.txt")
    assert [(t.name, t.x, t.y, t.usage) for t in back] == [("Station_A", 0.0, 0.0, (1.0, 0.5, 0.0)),
                                                          ("B", 100.0, 0.0, (1.0, 1.0, 1.0))]
    captures = read_secr_captures(tmp_path / "capt.txt")
    assert [(c.session, c.animal, c.occasion, c.detector) for c in captures] == [
        ("s1", "leo2", 2, "B"), ("s1", "leo_1", 1, "Station_A"), ("s1", "leo_1", 3, "B")]
    (tmp_path / "binary.txt").write_text(secr_traps_text(traps, binary=True))
    assert [t.usage for t in read_secr_traps(tmp_path / "binary.txt")] == [(1.0, 1.0, 0.0), (1.0, 1.0, 1.0)]


def test_reader_conventions(tmp_path):
    (tmp_path / "trap.txt").write_text("# Detector X Y usage\nA 0 0 10 / covariate\nB 50 0 3 # comment\n")
    # 0/1 codes on one line but a number on another: numbers, one per occasion (covariates after / ignored)
    assert [t.usage for t in read_secr_traps(tmp_path / "trap.txt")] == [(10.0,), (3.0,)]
    (tmp_path / "binary.txt").write_text("A 0 0 10\nB 50 0 01\n")
    assert [t.usage for t in read_secr_traps(tmp_path / "binary.txt")] == [(1.0, 0.0), (0.0, 1.0)]
    assert [t.usage for t in read_secr_traps(tmp_path / "binary.txt", binary_usage=False)] == [(10.0,), (1.0,)]
    (tmp_path / "capt.txt").write_text("# Session ID Occasion Detector\nS1 a 1 A\nS2 a -2 B sex=F\n")
    captures = read_secr_captures(tmp_path / "capt.txt")
    assert [(c.session, c.occasion) for c in captures] == [("S1", 1), ("S2", 2)]  # -2: removed on occasion 2
    traps = [Trap("A", 0.0, 0.0, ()), Trap("B", 50.0, 0.0, ())]
    with pytest.raises(DensityInputError, match="2 sessions .*choose one session"):
        build_capture_history(captures, traps, detector_type="proximity")
    with pytest.raises(DensityInputError, match="detector 'trap' unknown"):
        build_capture_history(captures, traps, detector_type="trap", session="S1")
    (tmp_path / "bad.txt").write_text("S1 a first A\n")
    with pytest.raises(DensityInputError, match="line 1: occasion 'first' is not a whole number"):
        read_secr_captures(tmp_path / "bad.txt")


def test_masks_from_csv_and_polygon(tmp_path, captdata):
    traps, captures = captdata
    history = build_capture_history(captures, traps, detector_type="multi")
    full = trapbuffer_mask(history.xy, buffer_m=100)
    # every point within the buffer of some detector, and the grid starts half a cell in
    nearest = np.sqrt(((full.xy[:, None, :] - history.xy[None]) ** 2).sum(axis=2).min(axis=1))
    assert nearest.max() <= 100 and full.xy[:, 0].min() == pytest.approx(265 + full.spacing_m / 2)
    csv_path = tmp_path / "mask.csv"
    csv_path.write_text("x,y\n" + "\n".join(f"{x},{y}" for x, y in full.xy))
    from_csv = read_mask_csv(csv_path)
    assert from_csv.n_points == full.n_points and from_csv.spacing_m == pytest.approx(full.spacing_m)
    half = {"type": "Feature", "geometry": {"type": "Polygon", "coordinates": [
        [[0, 0], [500, 0], [500, 1000], [0, 1000], [0, 0]]]}}
    (tmp_path / "habitat.geojson").write_text(json.dumps(half))
    clipped = fit_density(captures, traps, detector="multi", detectfn="HN", buffer_m=100,
                          mask=tmp_path / "habitat.geojson", check_buffer=False)
    assert clipped.mask.source == "polygon" and clipped.mask.points == int((full.xy[:, 0] < 500).sum())
    given = fit_density(captures, traps, detector="multi", detectfn="HN", buffer_m=100, mask=csv_path,
                        check_buffer=False)
    assert given.density_per_ha.value == pytest.approx(5.4798, abs=1e-3)  # the same mask, the same fit
    assert given.buffer_check is None


# --------------------------------------------------------------------------- bad input


def _traps(n: int = 4) -> list[Trap]:
    return [Trap(f"T{k}", float(k * 50), 0.0, (1.0, 1.0, 1.0)) for k in range(n)]


def test_refuses_when_no_animal_reaches_two_detectors():
    rows = [("1", "a", 1, "T0"), ("1", "a", 2, "T0"), ("1", "b", 1, "T1")]
    with pytest.raises(SigmaNotEstimable, match="two different detectors"):
        fit_density(rows, _traps(), detector="proximity", buffer_m=200)


def test_refuses_detectors_at_one_point_or_without_coordinates(tmp_path):
    same = [Trap(f"T{k}", 10.0, 10.0, (1.0,)) for k in range(3)]
    with pytest.raises(DetectorLayoutError, match="one point"):
        fit_density([("1", "a", 1, "T0"), ("1", "a", 1, "T1")], same, detector="proximity", buffer_m=100)
    (tmp_path / "trap.txt").write_text("A 10 10\nB NA 20\n")
    with pytest.raises(DetectorLayoutError, match="line 2.*X 'NA' is not a number"):
        read_secr_traps(tmp_path / "trap.txt")
    nan_trap = [Trap("A", 0.0, 0.0, (1.0,)), Trap("B", math.nan, 5.0, (1.0,))]
    with pytest.raises(DetectorLayoutError, match="'B' has no coordinates"):
        fit_density([("1", "a", 1, "A")], nan_trap, detector="proximity", buffer_m=100)


@pytest.mark.parametrize("buffer_m", [0, -10])
def test_refuses_a_buffer_of_zero_or_less(buffer_m):
    rows = [("1", "a", 1, "T0"), ("1", "a", 2, "T1")]
    with pytest.raises(MaskError, match="buffer must be more than 0"):
        fit_density(rows, _traps(), detector="proximity", buffer_m=buffer_m)


def test_refuses_a_mask_far_from_every_detector(tmp_path):
    (tmp_path / "far.csv").write_text("x,y\n" + "\n".join(f"{10000 + 10 * i},{10000 + 10 * j}"
                                                          for i in range(5) for j in range(5)))
    rows = [("1", "a", 1, "T0"), ("1", "a", 2, "T1")]
    with pytest.raises(MaskError, match="no mask point lies within 200 m of a detector"):
        fit_density(rows, _traps(), detector="proximity", buffer_m=200, mask=tmp_path / "far.csv")


def test_refuses_unknown_detectors_and_uncovered_occasions(tmp_path):
    with pytest.raises(UnknownDetector, match="T9"):
        fit_density([("1", "a", 1, "T0"), ("1", "a", 2, "T9")], _traps(), detector="proximity", buffer_m=100)
    with pytest.raises(OccasionNotCovered, match="occasion.*4.*covers 3"):
        fit_density([("1", "a", 1, "T0"), ("1", "a", 4, "T1")], _traps(), detector="proximity", buffer_m=100)
    off = [Trap("T0", 0.0, 0.0, (1.0, 0.0)), Trap("T1", 50.0, 0.0, (1.0, 1.0))]
    with pytest.raises(OccasionNotCovered, match="'T0' has a capture on occasion 2, when its usage is 0"):
        fit_density([("1", "a", 2, "T0"), ("1", "a", 1, "T1")], off, detector="proximity", buffer_m=100)
    (tmp_path / "trap.txt").write_text("# detectors\nA 0 0\nB 30 0\n")
    (tmp_path / "capt.txt").write_text("1 a 1 0 0\n1 a 2 99 99\n")
    with pytest.raises(UnknownDetector, match="X=99 Y=99"):
        read_secr_captures(tmp_path / "capt.txt", fmt="XY", traps=read_secr_traps(tmp_path / "trap.txt"))


def test_refuses_two_traps_on_one_occasion_for_multi_catch():
    rows = [("1", "a", 1, "T0"), ("1", "a", 1, "T1")]
    with pytest.raises(DensityInputError, match="two traps on occasion 1"):
        fit_density(rows, _traps(), detector="multi", buffer_m=100)


def test_non_convergence_names_the_starts(captdata, monkeypatch):
    traps, captures = captdata
    history = build_capture_history(captures, traps, detector_type="multi")
    model = prepare(history, trapbuffer_mask(history.xy, buffer_m=100, nx=32), detectfn="HN", conditional=False)
    monkeypatch.setattr(density_module, "GRADIENT_TOLERANCE", 0.0)  # no maximum is ever good enough
    with pytest.raises(FitNotConverged, match=r"did not converge from any start \(g0=.*sigma=") as caught:
        fit_model(model, max_starts=2)
    assert len(caught.value.starts) == 2 and all("sigma" in s for s in caught.value.starts)


# --------------------------------------------------------------------------- simulation: bias and coverage


SIGMA_M = 500.0
TRUE_D_PER_HA = 0.02  # 2 per km^2


def _simulated_fits(detector: str, detectfn: str, detection: float, *, studies: int, seed: int):
    rng = np.random.default_rng(seed)
    ratios, covered = [], []
    for _ in range(studies):
        cameras = int(rng.integers(15, 26))
        occasions = int(rng.integers(8, 13))
        traps = grid_traps(cameras, spacing_m=1.5 * SIGMA_M, n_occasions=occasions)
        buffer_m = 4 * SIGMA_M
        study = simulate_study(traps, density_per_ha=TRUE_D_PER_HA, detectfn=detectfn, detection=detection,
                               sigma_m=SIGMA_M, detector=detector, buffer_m=buffer_m, rng=rng)
        width = max(t.x for t in traps) - min(t.x for t in traps) + 2 * buffer_m
        fit = fit_density(study.captures, traps, detector=detector, detectfn=detectfn, buffer_m=buffer_m,
                          spacing_m=width / 32, check_buffer=False,  # a 32 x 32 grid before the buffer's cut
                          check_identifiable=False)  # the estimator's own bias and coverage, every study kept
        d = fit.density_per_ha
        ratios.append(d.value / TRUE_D_PER_HA - 1)
        covered.append(d.lcl <= TRUE_D_PER_HA <= d.ucl)
    return float(np.mean(ratios)), float(np.mean(covered))


@pytest.mark.slow
@pytest.mark.parametrize(("detector", "detectfn", "detection", "seed"),
                         [("proximity", "HN", 0.15, 2026), ("count", "HHN", 0.15, 2027)])
def test_simulated_studies_show_little_bias_and_nominal_coverage(detector, detectfn, detection, seed):
    """200 camera studies (15-25 cameras 1.5 sigma apart, 8-12 occasions, D = 2 per km^2, about 34 animals
    detected): mean relative bias of D under 5%, 95% CI coverage between 90% and 98%."""
    bias, coverage = _simulated_fits(detector, detectfn, detection, studies=200, seed=seed)
    print(f"{detector}/{detectfn}: mean relative bias {bias:+.4f}, coverage {coverage:.3f}")
    assert abs(bias) < 0.05
    assert 0.90 <= coverage <= 0.98
