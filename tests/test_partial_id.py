"""The two-flank partial-identity model (core.field.partial_id) and ``rosette density --flanks``: the sampler agrees
with an independent full-identity data-augmentation sampler when every capture is both-sided, keeps known links,
links flanks by where they were caught, and the command refuses bad files in one line. Short chains throughout."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.special import xlog1py, xlogy

from app.cli import main
from core.field.partial_id import (
    FlankCapture,
    FlankStation,
    StateSpace,
    _Chain,
    effective_sample_size,
    fit_partial_id,
    flank_data,
    grid_stations,
    read_flank_traps,
    simulate_flanks,
    split_rhat,
    write_flank_files,
)
from core.field.scr_errors import DensityInputError
from core.field.scr_mask import read_mask_csv
from jobs.actions.partial_id import answer_of, read_flank_files, state_space
from jobs.requests.partial_id import PartialIdRequest


def _space(stations: list[FlankStation], buffer_m: float) -> StateSpace:
    return StateSpace.around(np.array([[s.x, s.y] for s in stations]), buffer_m=buffer_m)


def _full_identity_n(data, space: StateSpace, *, iterations: int, chains: int, M: int, seed: int) -> np.ndarray:
    """Posterior draws of N by a plain full-identity data-augmentation sampler written apart from the module's:
    every animal's history known, the binomial likelihoods written out, one Metropolis step per parameter."""
    rng = np.random.default_rng(seed)
    n = data.n_fixed
    yb = np.zeros((M, data.xy.shape[0]))
    yb[:n] = data.y_both
    ys = np.zeros_like(yb)
    ys[:n] = data.y_left2 + data.y_right2 + data.y_left1 + data.y_right1
    k1, k2 = data.k1, data.k2

    def loglik(s: np.ndarray, sigma: float, p0s: float, p0b: float) -> np.ndarray:
        dist2 = ((s[:, None, :] - data.xy[None]) ** 2).sum(axis=2)
        k = np.exp(-dist2 / (2 * sigma ** 2))
        side = 1 - (1 - p0s * k) ** 2  # two cameras: two chances for each side
        pb = p0b * k
        return (xlogy(yb, pb) + xlog1py(k2 - yb, -pb) + xlogy(ys, side) + xlog1py(2 * k2 - ys, -side)
                + xlog1py(2 * k1, -p0s * k)).sum(axis=1)

    out = []
    for _ in range(chains):
        s = space.sample(rng, M)
        s[:n] = [data.xy[row > 0].mean(axis=0) for row in yb[:n]]
        z = np.arange(M) < 2 * n
        sigma, p0s, p0b, psi = 700.0, 0.05, 0.2, 0.5
        draws = []
        for it in range(iterations):
            ll = loglik(s, sigma, p0s, p0b)
            for name, step in (("sigma", 60.0), ("p0s", 0.01), ("p0b", 0.03)):
                trial = {"sigma": sigma, "p0s": p0s, "p0b": p0b}
                trial[name] += rng.normal(0, step)
                if trial[name] <= 0 or (name != "sigma" and trial[name] >= 1):
                    continue
                new = loglik(s, trial["sigma"], trial["p0s"], trial["p0b"])
                if np.log(rng.random()) < (new[z] - ll[z]).sum():
                    sigma, p0s, p0b, ll = trial["sigma"], trial["p0s"], trial["p0b"], new
            prop = s + rng.normal(0, 300.0, s.shape)
            new = loglik(prop, sigma, p0s, p0b)
            ok = space.contains(prop) & (np.log(rng.random(M)) < np.where(z, new - ll, 0.0))
            s[ok], ll[ok] = prop[ok], new[ok]
            odds = psi * np.exp(ll) / (psi * np.exp(ll) + 1 - psi)
            z = np.where(np.arange(M) < n, True, rng.random(M) < odds)
            psi = rng.beta(1 + z.sum(), 1 + M - z.sum())
            if it >= iterations // 4:
                draws.append(z.sum())
        out.append(draws)
    return np.array(out, dtype=float)


def test_every_capture_both_sided_agrees_with_a_full_identity_fit():
    """Two cameras everywhere and only both-side captures: nothing is latent but z and s, so the posterior of N
    must match a full-identity sampler's within Monte Carlo error."""
    rng = np.random.default_rng(11)
    stations = grid_stations(4, 4, spacing_m=800, n_occasions=8, cameras=2)
    space = _space(stations, 1600)
    study = simulate_flanks(stations, n_animals=40, p0_single=0.0, p0_both=0.3, sigma_m=600, space=space, rng=rng)
    data = flank_data(study.captures, study.stations)
    assert data.n_left == data.n_right == data.n_fixed > 10
    fit = fit_partial_id(data, space, chains=2, iterations=1500, augmented=100, seed=1, min_ess=0)
    ours = fit.draws["N"]
    theirs = _full_identity_n(data, space, iterations=1300, chains=2, M=100, seed=2)
    se = math.sqrt(ours.var() / effective_sample_size(ours) + theirs.var() / effective_sample_size(theirs))
    assert abs(ours.mean() - theirs.mean()) < 3.5 * se + 0.5, (ours.mean(), theirs.mean(), se)
    assert fit.linked_pairs == data.n_fixed  # every pair is known, and nothing else can link


def test_known_links_stay_and_probabilities_are_probabilities():
    rng = np.random.default_rng(4)
    stations = grid_stations(5, 5, spacing_m=700, n_occasions=8, two_camera=(0, 12, 24))
    space = _space(stations, 1500)
    study = simulate_flanks(stations, n_animals=35, p0_single=0.2, p0_both=0.3, sigma_m=500, space=space, rng=rng)
    truth = [(left, right) for left, a in study.animal_of_left.items() for right, b in study.animal_of_right.items()
             if a == b and left != right][:3]
    assert truth, "the simulation should hold one-flank animals seen on both sides"
    data = flank_data(study.captures, study.stations, truth)
    assert data.n_fixed == data.n_both + len(truth)
    chain = _Chain(data, space, augmented=120, rng=np.random.default_rng(0), prop_scale=1.0)
    moved = 0
    start = chain.at_l.copy()
    for _ in range(150):
        chain.sweep()
        assert np.array_equal(chain.at_l[: data.n_fixed], np.arange(data.n_fixed))
        assert np.array_equal(chain.at_r[: data.n_fixed], np.arange(data.n_fixed))
        assert np.array_equal(chain.owner_l[chain.at_l], np.arange(data.n_left))  # one left per individual
        assert chain.z[chain.at_l].all() and chain.z[chain.at_r].all()
        moved += int((chain.at_l != start).sum())
    assert moved > 0  # the free identities do move
    fit = fit_partial_id(data, space, chains=2, iterations=400, augmented=120, seed=3, min_ess=0)
    p = fit.link_probabilities
    assert np.all((p >= 0) & (p <= 1))
    assert np.all(p.sum(axis=1) <= 1 + 1e-9) and np.all(p.sum(axis=0) <= 1 + 1e-9)
    nf = data.n_fixed
    assert np.allclose(np.diag(p[:nf, :nf]), 1.0)
    assert p[:nf, nf:].sum() == 0 and p[nf:, :nf].sum() == 0
    known = [r for r in fit.link_list() if r["known"]]
    assert {(r["left"], r["right"]) for r in known} >= set(truth)


def _line_study() -> tuple[list[FlankStation], list[FlankCapture]]:
    """Eight one-camera stations 500 m apart on a line: left L1 and right R1 caught at the same two stations, right
    R2 only at the far end (3.5 km away), where left L2 was caught too."""
    stations = [FlankStation(f"S{j + 1}", 500.0 * j, 0.0, (1,) * 10) for j in range(8)]
    caps = [("L1", 1, "S1"), ("L1", 3, "S2"), ("L1", 6, "S1"), ("R1", 2, "S1"), ("R1", 5, "S2"), ("R1", 8, "S1"),
            ("R2", 1, "S8"), ("R2", 4, "S7"), ("R2", 9, "S8"), ("L2", 2, "S8"), ("L2", 7, "S7"),
            ("L3", 3, "S4"), ("L3", 4, "S5"), ("R3", 6, "S4"), ("R3", 9, "S5")]
    flanks = [FlankCapture(i, o, s, i[0]) for i, o, s in caps]
    return stations, flanks


def test_a_pair_seen_together_links_more_than_a_pair_seen_far_apart():
    stations, captures = _line_study()
    data = flank_data(captures, stations)
    space = _space(stations, 1200)
    fit = fit_partial_id(data, space, chains=2, iterations=1000, augmented=60, seed=5, min_ess=0)
    left, right = list(data.left_names), list(data.right_names)
    near = fit.link_probabilities[left.index("L1"), right.index("R1")]
    far = fit.link_probabilities[left.index("L1"), right.index("R2")]
    assert far < 0.02 and near > 0.25 and near > 10 * max(far, 1e-3), (near, far)


def test_rhat_and_ess_of_known_chains():
    rng = np.random.default_rng(0)
    ar = np.zeros(4000)
    for t in range(1, ar.size):
        ar[t] = 0.9 * ar[t - 1] + rng.normal()
    same = np.tile(ar, (3, 1))
    assert abs(split_rhat(same) - 1.0) < 0.01
    apart = np.stack([ar, ar + 5.0, ar - 5.0])
    assert split_rhat(apart) > 1.1
    iid = rng.normal(size=(3, 2000))
    assert 0.85 * iid.size < effective_sample_size(iid) < 1.15 * iid.size
    expected = 4000 * 0.1 / 1.9  # AR(1): n (1 - phi) / (1 + phi)
    assert 0.6 * expected < effective_sample_size(ar[None]) < 1.5 * expected
    assert math.isnan(split_rhat(np.ones((2, 50))))


def test_traps_give_cameras_per_occasion(tmp_path: Path):
    traps = tmp_path / "traps.txt"
    traps.write_text("Detector X Y cameras\nA 0 0 2210\nB 500 0 1\n", encoding="utf-8")
    stations = read_flank_traps(traps)
    assert stations[0].cameras == (2, 2, 1, 0) and stations[1].cameras == (1,)
    data = flank_data([FlankCapture("X", 1, "A", "B"), FlankCapture("Y", 3, "B", "L")], stations)
    assert data.k2.tolist() == [2, 0] and data.k1.tolist() == [1, 4]
    with pytest.raises(ValueError, match="one camera sees one flank"):
        flank_data([FlankCapture("X", 3, "A", "B")], stations)


def test_a_mask_gives_the_state_space(tmp_path: Path):
    mask_csv = tmp_path / "mask.csv"
    points = [(x, y) for x in range(-500, 2600, 200) for y in range(-500, 1600, 200) if not (x > 1500 and y > 900)]
    mask_csv.write_text("x,y\n" + "".join(f"{x},{y}\n" for x, y in points), encoding="utf-8")
    space = StateSpace.from_mask(read_mask_csv(mask_csv))
    assert space.area_km2 == pytest.approx(len(points) * 0.04)
    assert space.contains(np.array([[0.0, 0.0], [2000.0, 0.0], [2000.0, 1300.0], [-700.0, 0.0]])).tolist() == [
        True, True, False, False]
    drawn = space.sample(np.random.default_rng(0), 2000)
    assert space.contains(drawn).all()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("flanks")
    rng = np.random.default_rng(8)
    stations = grid_stations(4, 4, spacing_m=600, n_occasions=8, two_camera=(0, 15))
    study = simulate_flanks(stations, n_animals=25, p0_single=0.25, p0_both=0.3, sigma_m=450,
                            space=_space(stations, 1400), rng=rng)
    write_flank_files(study, folder / "capt.txt", folder / "traps.txt")
    lefts = sorted({c.identity for c in study.captures if c.flank == "L"} - {c.identity for c in study.captures
                                                                            if c.flank == "B"})
    return {"capt": folder / "capt.txt", "traps": folder / "traps.txt", "dir": folder, "lefts": lefts,
            "one_camera": stations[1].name, "two_camera": stations[0].name}


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(["density", "--flanks", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_answer_keeps_the_density_keys(files):
    request = PartialIdRequest(captures=str(files["capt"]), traps=str(files["traps"]), buffer_m=1400, chains=2,
                               iterations=400, seed=2, min_ess=0)
    data = read_flank_files(request)
    fit = fit_partial_id(data, state_space(request, data.xy), chains=2, iterations=400, seed=2, min_ess=0,
                         rhat_limit=math.inf)  # short chains: the keys, not the convergence, are checked here
    answer = answer_of(fit, data, request)
    assert not answer["refused"]
    for key in ("D_per_100km2", "ci_low", "ci_high", "sigma_m", "N", "N_ci_low", "N_ci_high", "linked_pairs",
                "rhat_max", "ess_min", "link_probabilities"):
        assert key in answer, key
    assert answer["ci_low"] <= answer["D_per_100km2"] <= answer["ci_high"]
    assert answer["N_ci_low"] <= answer["N"] <= answer["N_ci_high"]
    assert answer["D_per_100km2"] == pytest.approx(answer["N"] / answer["area_km2"] * 100, rel=0.05)
    assert all(0 < r["probability"] <= 1 for r in answer["link_probabilities"])
    json.dumps(answer)  # plain JSON


def test_cli_refuses_an_unconverged_fit_in_one_sentence(files, capsys):
    rc, out, _ = _cli(["--captures", str(files["capt"]), "--traps", str(files["traps"]), "--buffer", "1400",
                       "--chains", "2", "--iterations", "200", "--json"], capsys)
    answer = json.loads(out)
    assert rc == 1 and answer["refused"] and "D_per_100km2" not in answer
    assert "\n" not in answer["reason"] and "--iterations" in answer["reason"]


@pytest.mark.parametrize("case, words", [
    ("b_at_one_camera", "one camera sees one flank"),
    ("two_lefts", "both are left-flank identities"),
    ("flank_code", "flank 'X' unknown"),
    ("no_buffer", "give the state space"),
])
def test_cli_refuses_bad_input_in_one_line(files, capsys, case, words):
    capt, extra = files["capt"], []
    if case == "b_at_one_camera":
        capt = files["dir"] / "bad_b.txt"
        capt.write_text(files["capt"].read_text() + f"1 Z9 2 {files['one_camera']} B\n", encoding="utf-8")
    elif case == "two_lefts":
        links = files["dir"] / "links.txt"
        links.write_text(f"{files['lefts'][0]} {files['lefts'][1]}\n", encoding="utf-8")
        extra = ["--flank-links", str(links)]
    elif case == "flank_code":
        capt = files["dir"] / "bad_code.txt"
        capt.write_text(files["capt"].read_text() + f"1 Z9 2 {files['two_camera']} X\n", encoding="utf-8")
    buffer = [] if case == "no_buffer" else ["--buffer", "1400"]
    rc, out, err = _cli(["--captures", str(capt), "--traps", str(files["traps"]), *buffer, "--iterations", "200",
                         *extra], capsys)
    errors = [line for line in err.splitlines() if not line.startswith("[")]  # after the progress lines
    assert rc == 1 and out == ""
    assert len(errors) == 1 and errors[0].startswith("error: ") and words in errors[0], err


def test_the_id_sampler_draws_the_exact_conditional_of_the_links():
    """With the centres, z and the parameters held, the left identities' assignment must follow
    exp(sum of their gains) over one-to-one assignments: enumerated exactly for two lefts on four individuals."""
    stations = [FlankStation(f"S{j}", 400.0 * j, 0.0, (1,) * 6) for j in range(4)]
    captures = [FlankCapture("L1", 1, "S0", "L"), FlankCapture("L1", 2, "S1", "L"), FlankCapture("L2", 3, "S2", "L"),
                FlankCapture("L2", 5, "S3", "L"), FlankCapture("R1", 4, "S1", "R")]
    data = flank_data(captures, stations)
    space = _space(stations, 800)
    chain = _Chain(data, space, augmented=4, rng=np.random.default_rng(1), prop_scale=1.0)
    chain.s = np.array([[0.0, 100.0], [500.0, -50.0], [900.0, 0.0], [1300.0, 80.0]])
    chain.d2 = chain._d2(chain.s)
    chain.z = np.ones(4, dtype=bool)
    chain.sigma, chain.p0s = 450.0, 0.3
    chain.terms = chain._terms(chain.d2, chain.sigma, chain.p0s, chain.p0b)
    gains = data.y_left1 @ chain.terms[0].T + data.y_left2 @ chain.terms[1].T
    states = [(a, b) for a in range(4) for b in range(4) if a != b]
    weights = np.array([math.exp(gains[0, a] + gains[1, b]) for a, b in states])
    exact = weights / weights.sum()
    counts = dict.fromkeys(states, 0)
    sweeps = 10_000
    for _ in range(sweeps):
        chain._id_update()
        counts[(int(chain.at_l[0]), int(chain.at_l[1]))] += 1
    observed = np.array([counts[s] for s in states]) / sweeps
    assert np.abs(observed - exact).max() < 0.025, np.round(np.c_[observed, exact], 3)


@pytest.mark.parametrize("fields, words", [
    ({"chains": 0}, "chains must number"),
    ({"iterations": 50}, "iterations must be"),
    ({"seed": -1}, "seed must be"),
    ({"buffer_m": -5}, "more than 0 m"),
    ({"captures": ""}, "--captures FILE"),
])
def test_the_request_refuses_bad_values_when_made(fields, words):
    values = {"captures": "c.txt", "traps": "t.txt", "buffer_m": 1000.0} | fields
    with pytest.raises(ValueError, match=words):
        PartialIdRequest(**values)
    assert PartialIdRequest.from_dict(PartialIdRequest(captures="c.txt", traps="t.txt", buffer_m=900).to_dict())


def test_a_rejected_pair_is_never_linked_and_the_others_follow_the_exact_conditional():
    """A curator's rejected pair (cannot_link) has target density 0: with two lefts and two rights on four
    individuals, the sampler's link probabilities must match those enumerated over the one-to-one assignments that
    keep L1 and R1 apart, and L1-R1 must never be drawn together."""
    stations = [FlankStation(f"S{j}", 400.0 * j, 0.0, (1,) * 6) for j in range(4)]
    captures = [FlankCapture("L1", 1, "S0", "L"), FlankCapture("L1", 2, "S1", "L"), FlankCapture("L2", 3, "S2", "L"),
                FlankCapture("L2", 5, "S3", "L"), FlankCapture("R1", 4, "S0", "R"), FlankCapture("R2", 6, "S3", "R")]
    data = flank_data(captures, stations, cannot_link=[("L1", "R1"), ("L9", "R2")])  # L9: no such identity, dropped
    assert data.cannot_link == ((0, 0),)
    with pytest.raises(DensityInputError, match="also rejected"):
        flank_data(captures, stations, [("L1", "R1")], cannot_link=[("L1", "R1")])
    space = _space(stations, 800)
    chain = _Chain(data, space, augmented=4, rng=np.random.default_rng(3), prop_scale=1.0)
    chain.s = np.array([[0.0, 100.0], [500.0, -50.0], [900.0, 0.0], [1300.0, 80.0]])
    chain.d2 = chain._d2(chain.s)
    chain.z = np.ones(4, dtype=bool)
    chain.sigma, chain.p0s = 450.0, 0.3
    chain.terms = chain._terms(chain.d2, chain.sigma, chain.p0s, chain.p0b)
    gl = data.y_left1 @ chain.terms[0].T + data.y_left2 @ chain.terms[1].T
    gr = data.y_right1 @ chain.terms[0].T + data.y_right2 @ chain.terms[1].T
    sides = [(a, b) for a in range(4) for b in range(4) if a != b]
    states = [(lf, rt) for lf in sides for rt in sides if lf[0] != rt[0]]  # L1 and R1 never on one individual
    weights = np.array([math.exp(gl[0, lf[0]] + gl[1, lf[1]] + gr[0, rt[0]] + gr[1, rt[1]]) for lf, rt in states])
    weights /= weights.sum()
    exact = np.zeros((2, 2))
    for w, (lf, rt) in zip(weights, states):
        for i in range(2):
            for j in range(2):
                exact[i, j] += w * (lf[i] == rt[j])
    free = [(lf, rt) for lf in sides for rt in sides]  # without the rejection L1-R1, caught at S0, is probable
    unbanned = np.array([math.exp(gl[0, lf[0]] + gl[1, lf[1]] + gr[0, rt[0]] + gr[1, rt[1]]) for lf, rt in free])
    assert unbanned[[lf[0] == rt[0] for lf, rt in free]].sum() / unbanned.sum() > 0.3
    assert exact[1, 1] > 0.3 and exact[0, 1] > 0.05 and exact[1, 0] > 0.05  # the others do link
    together = np.zeros((2, 2))
    sweeps = 10_000
    for _ in range(sweeps):
        chain._id_update()
        assert chain.at_l[0] != chain.at_r[0]
        together += chain.at_l[:, None] == chain.at_r[None, :]
    observed = together / sweeps
    assert observed[0, 0] == 0.0
    assert np.abs(observed - exact).max() < 0.025, np.round(np.c_[observed, exact], 3)
