"""``rosette density --identities decided|confirmed|uncertain``: the density by spatial capture-recapture on the
three bases of identities that ``rosette population`` has.

Two small imports of the simulated jaguar study (tests/sim_study.py, 30 animals round 12 cameras): one in which
every identity is a curator's (then ``uncertain`` and ``confirmed`` are the answer as decided, exactly), and one in
which a seeded 30% of the observations are machine classifications of probability 0.5 (then each draw gives some
of them another animal or a new one, and the interval holds that error too). The draws' machinery itself
(core.field.density_draws) is checked on a simulated SCR study whose draws are all the truth.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from app.cli import main as cli_main
from core.field import density_draws as dd
from core.field import identities as ids
from core.field.density import fit_density
from core.field.scr_simulate import grid_traps, simulate_study as simulate_scr
from db.field import identities as db_ids
from db.models import JobStatus
from db.io.ingest import ingest_path
from db.session import open_catalogue
from jobs.actions import density as ds
from jobs.context import JobContext
from jobs.queue import get_job, request_cancel
from jobs.requests.density import DensityRequest
from jobs.worker import run_one
from tests.sim_study import simulate_study
from tests.test_identities_study import MODEL, add_decisions, rewrite_and_import

FIGURES = ("D_per_100km2", "ci_low", "ci_high", "g0", "g0_ci", "sigma_m", "sigma_ci_m", "N_in_mask", "loglik",
           "n_animals", "n_detections")


def _import_study(root: Path, *, machine_share: float) -> Path:
    """The simulated study imported into ``root / "data"``, a seeded ``machine_share`` of its observations machine
    classifications of probability 0.5 (the rest labels a person gave)."""
    sim = simulate_study(root / "package", n_animals=30, seed=5)
    path = root / "package" / "observations.csv"
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    rng = np.random.default_rng(0)
    for r in rows:
        if rng.random() < machine_share:
            r.update(classificationMethod="machine", classificationProbability="0.5")
    return rewrite_and_import(root, sim, rows)


@pytest.fixture(scope="module")
def all_confirmed(tmp_path_factory) -> Path:
    return _import_study(tmp_path_factory.mktemp("density-confirmed"), machine_share=0.0)


@pytest.fixture(scope="module")
def machine_identified(tmp_path_factory) -> Path:
    data_dir = _import_study(tmp_path_factory.mktemp("density-machine"), machine_share=0.3)
    add_decisions(data_dir)  # the model's calibration rests on them
    return data_dir


def _cli(data_dir: Path, capsys, *args: str) -> tuple[int, str, str]:
    rc = cli_main(["--data-dir", str(data_dir), "density", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _density(data_dir: Path, capsys, *args: str) -> dict:
    """The JSON answer on a mask of 500 m cells (about 900 points, not 3,200: four times faster fits)."""
    rc, out, err = _cli(data_dir, capsys, "--json", "--spacing", "500", *args)
    assert rc == 0, err
    return json.loads(out)


def test_with_every_identity_confirmed_uncertain_and_confirmed_are_decided_exactly(all_confirmed, capsys):
    decided = _density(all_confirmed, capsys)
    assert decided["identities"] == "decided" and decided["draws"] == 0
    assert decided["provenance_counts"] == {"curator": decided["study"]["annotations"], "machine": 0, "unreviewed": 0}
    uncertain = _density(all_confirmed, capsys, "--identities", "uncertain", "--draws", "20")
    confirmed = _density(all_confirmed, capsys, "--identities", "confirmed")
    for answer in (uncertain, confirmed):
        assert {k: answer[k] for k in FIGURES} == {k: decided[k] for k in FIGURES}
        assert answer["estimates_decided"]["D_per_100km2"] == decided["D_per_100km2"]
    assert uncertain["draws"] == 0 and uncertain["share_from_identification"] == {"D": 0.0, "g0": 0.0, "sigma": 0.0}
    assert any("with identification uncertainty is the density as decided" in n for n in uncertain["notes"])


@pytest.mark.parametrize("draws", ["0", "10001"])
def test_draws_out_of_range_are_refused(machine_identified, capsys, draws):
    rc, out, err = _cli(machine_identified, capsys, "--identities", "uncertain", "--draws", draws)
    assert rc != 0 and out == "" and "from 1 to 10,000" in err


def test_uncertain_without_a_calibration_is_refused_naming_the_command(machine_identified, capsys, monkeypatch):
    monkeypatch.setattr(db_ids, "calibrator_for", lambda *a, **k: None)
    rc, out, err = _cli(machine_identified, capsys, "--identities", "uncertain", "--draws", "5")
    assert rc != 0 and out == ""
    assert "--identities uncertain refused" in err and f"rosette calibration {MODEL}" in err


def test_secr_files_take_decided_identities_only():
    for basis in ("confirmed", "uncertain"):
        with pytest.raises(ValueError, match="secr's files do not say who identified each animal"):
            DensityRequest(captures="c.txt", traps="t.txt", identities=basis)
    assert DensityRequest(captures="c.txt", traps="t.txt").identities == "decided"


def _kept_or_new(cat, ident, **_) -> ids.ImputationInput:
    """The imputation input :func:`db.field.identities.imputation_input` builds when no catalogue photo resembles a
    machine-identified one: its individual kept with its classificationProbability, the rest "an animal not in the
    catalogue" (:func:`core.field.identities.machine_distribution` with no other candidate). It stands in for the
    model's scoring, which tests/test_identities_study.py checks, so that this test takes a second, not fifteen."""
    curator = [d for d in ident.detections if d.provenance == db_ids.CURATOR]
    machine = [d for d in ident.detections if d.provenance == db_ids.MACHINE]
    individuals = list(dict.fromkeys([*sorted(ident.gallery), *(d.individual for d in curator + machine)]))
    index = {n: k for k, n in enumerate(individuals)}
    units = []
    for d in machine:
        cands, probs = ids.machine_distribution(index[d.individual], d.weight, (), (), 1.0)
        units.append(ids.UncertainUnit(key=d.annotation_id, occasions=(d.occasion,), candidates=cands,
                                       probabilities=probs, provenance=d.provenance,
                                       annotation_ids=(d.annotation_id,)))
    return ids.ImputationInput(n_occasions=ident.study.histories.n_occasions, individuals=tuple(individuals),
                               fixed=[(index[d.individual], d.occasion) for d in curator], units=tuple(units))


def test_uncertain_carries_the_machine_identities_error_into_a_wider_interval(machine_identified, capsys,
                                                                              monkeypatch):
    monkeypatch.setattr(db_ids, "imputation_input", _kept_or_new)
    decided = _density(machine_identified, capsys)
    counts = decided["provenance_counts"]
    assert counts["machine"] > 10 and counts["unreviewed"] == 0
    uncertain = _density(machine_identified, capsys, "--identities", "uncertain", "--draws", "12", "--seed", "1")
    for key in ("identities", "provenance_counts", "draws", "share_from_identification"):
        assert key in uncertain and key in decided
    assert uncertain["identities"] == "uncertain" and uncertain["draws"] == 12
    assert uncertain["provenance_counts"] == counts
    assert 10 <= uncertain["draws_used"] <= 12 and uncertain["uncertain_units"] == counts["machine"]
    assert uncertain["estimates_decided"]["D_per_100km2"] == decided["D_per_100km2"]
    # half the machine identities become animals seen once: more animals, and the draws disagree on how many
    assert uncertain["animals_per_draw"]["min"] > decided["n_animals"]
    assert uncertain["animals_per_draw"]["max"] > uncertain["animals_per_draw"]["min"]
    assert uncertain["ci_high"] - uncertain["ci_low"] >= decided["ci_high"] - decided["ci_low"]
    share = uncertain["share_from_identification"]
    assert set(share) == {"D", "g0", "sigma"} and 0.0 < share["D"] <= 1.0
    assert "draw mixture" in uncertain["combination_method"] and "split log-normal" in uncertain["combination_method"]
    text = ds.summary_text(uncertain)
    assert "With identification uncertainty" in text and f"{100 * share['D']:.0f}%" in text


def test_the_tab_s_background_job_on_uncertain_identities_gives_the_foreground_answer(machine_identified,
                                                                                     monkeypatch):
    """The Population tab queues the fit with identification uncertainty: the job (run here in this process) gives
    the figures ``rosette density --identities uncertain`` gives for the same request."""
    monkeypatch.setattr(db_ids, "imputation_input", _kept_or_new)
    request = DensityRequest(spacing_m=500, identities="uncertain", draws=3, seed=1)
    cat = open_catalogue(machine_identified)
    try:
        foreground = ds.density_summary(cat, request)
        job_id, words = ds.queue_density(cat, request)
        assert f"job #{job_id} with identification uncertainty (3 draws, seed 1)" in words
        assert run_one(cat, isolate=False) == job_id
        answer, words = ds.density_status(cat, job_id)
        assert answer is not None and words.startswith(f"Density fit job #{job_id} with identification uncertainty "
                                                       "done: ")
    finally:
        cat.close()
    assert answer["identities"] == "uncertain" and answer["draws"] == 3 and answer["uncertain_units"] > 0
    same = json.loads(json.dumps(foreground))  # the job's result is stored as JSON
    keys = (*FIGURES, "estimates_decided", "share_from_identification", "provenance_counts", "animals_per_draw")
    assert {k: answer[k] for k in keys} == {k: same[k] for k in keys}
    assert ds.identity_rows(answer)[0][0] == "D (per 100 km²)"
    assert ds.identity_lines(answer, table=False)[-1].startswith("3 draws of the identities (seed 1)")


def test_a_cancel_during_the_draws_leaves_the_job_cancelled_with_nothing_stored(machine_identified, monkeypatch):
    monkeypatch.setattr(db_ids, "imputation_input", _kept_or_new)
    report = JobContext.progress

    def cancel_at_the_first_draw(ctx, fraction, message=None):
        report(ctx, fraction, message)
        if message == "density draw 1 of 5":
            request_cancel(ctx.cat, ctx.job_id, by="tester")

    monkeypatch.setattr(JobContext, "progress", cancel_at_the_first_draw)
    cat = open_catalogue(machine_identified)
    try:
        job_id, _ = ds.queue_density(cat, DensityRequest(spacing_m=500, identities="uncertain", draws=5))
        assert run_one(cat, isolate=False) == job_id
        job = get_job(cat, job_id)
        assert job.status == JobStatus.cancelled and job.result is None and "tester" in job.message
        answer, words = ds.density_status(cat, job_id)
        assert answer is None and words == (f"Density fit job #{job_id} with identification uncertainty cancelled: "
                                            "cancelled by tester")
    finally:
        cat.close()


def test_the_density_section_fits_on_the_chosen_identities_and_shows_them_beside_decided(machine_identified,
                                                                                         monkeypatch):
    """The section through its handlers (no browser): the basis and draws go into the job, and the answer on
    another basis than decided comes with the side-by-side table and where the identities come from."""
    import gradio as gr

    from app import ui_base
    from app.tabs._density import build_density

    monkeypatch.setattr(db_ids, "imputation_input", _kept_or_new)
    cat = open_catalogue(machine_identified)
    monkeypatch.setattr(ui_base, "_POLICY", ui_base.AccessPolicy(catalogue=cat, single_user="tester"))
    try:
        with gr.Blocks() as demo:  # the section alone, under a stand-in for the Population form
            ctx = ui_base.UIContext(catalogue=cat, user=gr.State("tester"), version=gr.State(0), demo=demo)
            build_density(ctx, gr.Dropdown([]), gr.Number(1), gr.Textbox(), gr.Textbox(),
                          gr.Radio(["decided", "confirmed", "uncertain"], value="decided"), gr.Timer(active=False))
        ids_shown = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
        assert {"dens-draws", "dens-identities", "dens-provenance"} <= ids_shown
        start = next(f.fn for f in demo.fns.values() if getattr(f, "api_name", None) == "density")
        poll = next(f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "poll"
                    and getattr(f.fn, "__module__", "") == "app.tabs._density")
        # species, days, first, last, detector, curve, buffer, spacing, conditional, mask, identities, draws
        out = start(None, "", 1, "", "", "proximity", "HN", "", "500", False, None, "uncertain", 2)
        job_id = out[0]
        assert "2 draws, seed 0" in out[3] and out[6]["visible"] is False
        assert run_one(cat, isolate=False) == job_id
        shown, answer, words, _, _, side, provenance, _, _, timer = poll(None, job_id, None)  # the request first
        assert shown == job_id and answer["identities"] == "uncertain" and answer["draws"] == 2
        assert timer.active is False  # the job is over: its poll stops
        assert "with identification uncertainty" in words
        columns = list(side["value"].columns)  # each told apart: Gradio warns of a table whose columns repeat
        assert columns[2] == "95% interval (as decided)" and len(set(columns)) == len(ds.SIDE_BY_SIDE_HEADERS)
        assert len(side["value"]) == 3 and "identified by a curator" in provenance and "2 draws" in provenance
        out = start(None, "", 1, "", "", "proximity", "HN", "", "500", False, None, "decided", 2)
        assert run_one(cat, isolate=False) == out[0]
        *_, side, provenance, _, _, _ = poll(None, out[0], job_id)
        assert side["visible"] is False and provenance == ""
    finally:
        cat.close()


# --------------------------------------------------------------------------- the draws' machinery


def test_draws_that_are_all_the_truth_give_the_truth_s_fit():
    """Units that every draw gives back to their own animal: each draw is the study itself, so every draw's fit
    (from the previous draw's estimates) is the direct fit's, and the combined interval is its interval."""
    sigma = 1000.0
    rng = np.random.default_rng(4)
    traps = grid_traps(12, spacing_m=1.5 * sigma, columns=4, n_occasions=5)
    sim = simulate_scr(traps, density_per_ha=0.004, detectfn="HN", detection=0.3, sigma_m=sigma,
                       detector="proximity", buffer_m=4 * sigma, rng=rng)
    direct = fit_density(sim.captures, traps, detector="proximity", buffer_m=4 * sigma, spacing_m=400.0,
                         check_buffer=False)
    names = sorted({c.animal for c in sim.captures})
    open_ = [k % 4 == 0 for k in range(len(sim.captures))]
    detections = dd.DrawDetections(
        session="1", fixed=tuple((c.animal, c.occasion, c.detector) for c, o in zip(sim.captures, open_) if not o),
        units=tuple(((c.occasion, c.detector),) for c, o in zip(sim.captures, open_) if o),
        individuals=tuple(names))
    truth = np.array([names.index(c.animal) for c, o in zip(sim.captures, open_) if o])
    labels = np.tile(truth, (3, 1))
    draws = dd.fit_draws(detections, labels, traps, mask=dd.mask_of(direct), detector="proximity", detectfn="HN",
                         conditional=False, start=dd.start_of(direct))
    assert draws.from_previous == 3 and draws.failed == 0 and list(draws.animals) == [len(names)] * 3
    d = direct.density_per_100km2
    assert draws.D == pytest.approx(np.full(3, d.value), rel=1e-4)
    combined = dd.combine_density(draws)
    assert (combined["D"].N, combined["D"].ci_low, combined["D"].ci_high) == \
        pytest.approx((d.value, d.lcl, d.ucl), rel=1e-3)
    assert combined["D"].share_from_identification == pytest.approx(0.0, abs=1e-3)
    # a unit drawn as a new animal makes one more animal; a draw naming too few units is refused
    K = len(names)
    rows = detections.captures(np.where(np.arange(truth.size) == 0, K + 0, truth))
    assert len({r[1] for r in rows}) == K + (1 if sum(r[1] == names[truth[0]] for r in rows) > 0 else 0)
    assert any(r[1] == f"{dd.NEW_ANIMAL}0" for r in rows)
    with pytest.raises(ValueError, match="units"):
        detections.captures(truth[:-1])
    assert math.isfinite(combined["sigma"].N) and combined["g0"].method == dd.DENSITY_COMBINE_METHOD
    with pytest.raises(ids.ImputationCancelled, match="nothing was kept"):
        dd.fit_draws(detections, labels, traps, mask=dd.mask_of(direct), detector="proximity", detectfn="HN",
                     conditional=False, should_stop=lambda: True)
