"""The two-flank partial-identity density as the Population tab runs it: the offer (one-flank identities of the
species in the window, else one sentence why not), the ``flank_density`` job that fits the catalogue's study and
stores the answer of ``rosette density --flanks`` with its link probabilities, and the words and table of a done,
refused or failed job, through the section's own handlers (no browser).

The catalogue is :func:`tests.test_partial_id_catalogue.build_flank_catalogue`'s: six jaguar stations, two left-flank
and two right-flank identities, two animals seen on both sides at once, two known links, one front view; an ocelot
seen on both flanks only. The chains are short (seconds): where a test needs an estimate, the convergence limits are
lifted, as the command's test of the keys does.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from db.catalogue import CatalogueError
from db.models import JobStatus
from db.session import open_catalogue
from jobs import queue
from jobs.actions import partial_id as pid
from jobs.actions import partial_id_jobs as pj
from jobs.requests.partial_id import PartialIdRequest
from jobs.requests.population import PopulationRequest
from jobs.worker import run_one
from tests.test_partial_id_catalogue import JAGUAR, OCELOT, build_flank_catalogue

SHORT = {"chains": 2, "iterations": 300}


@pytest.fixture(scope="module")
def flank_catalogue(tmp_path_factory) -> Path:
    data_dir = tmp_path_factory.mktemp("flank-jobs") / "rosette-data"
    build_flank_catalogue(data_dir)
    return data_dir


@pytest.fixture
def cat(flank_catalogue):
    handle = open_catalogue(flank_catalogue)
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def lifted(monkeypatch):
    """Short chains converge poorly: the limits are lifted so that the answer's estimates exist to be checked."""
    fit = pid.fit_partial_id
    monkeypatch.setattr(pid, "fit_partial_id", lambda *a, **k: fit(*a, **{**k, "rhat_limit": math.inf, "min_ess": 0}))


def _timeless(answer: dict) -> dict:
    """The answer without the seconds the fit took (the one figure two runs of a seed differ by)."""
    return {k: _timeless(v) if isinstance(v, dict) else v for k, v in answer.items() if k != "seconds"}


def _plain(markdown: str) -> str:
    return markdown.replace("\\", "")


def test_the_offer_says_what_the_fit_rests_on_or_why_not(cat, tmp_path):
    offer = pj.flank_offer(cat, PopulationRequest(species=JAGUAR))
    assert offer == {"offered": True, "words": (
        "Offered: Panthera onca holds 2 left-flank and 2 right-flank identities that no photo links, with 2 animal(s) "
        "seen on both sides at once and 2 known link(s), at 6 stations; left out for showing no flank: 1 front "
        "view(s).")}
    # every ocelot was photographed on both flanks: the ordinary density, which the tab shows above, applies
    offer = pj.flank_offer(cat, PopulationRequest(species=OCELOT))
    assert not offer["offered"]
    assert offer["words"].startswith("Not offered: every Leopardus pardalis individual in the window was "
                                     "photographed on both flanks")
    assert offer["words"].endswith("the ordinary density applies (Fit density above).")
    assert "--flanks" not in offer["words"]
    offer = pj.flank_offer(cat, PopulationRequest(species=JAGUAR, date_from="2024-06-08", date_to="2024-06-08"))
    assert not offer["offered"] and "nothing to fit" in offer["words"]
    # detections whose flank nobody set: how many, and where to set them
    unset = tmp_path / "rosette-data"
    build_flank_catalogue(unset, unset=3)
    other = open_catalogue(unset)
    try:
        offer = pj.flank_offer(other, PopulationRequest(species=JAGUAR))
    finally:
        other.close()
    assert not offer["offered"]
    assert offer["words"].startswith("Not offered: 3 of the 24 Panthera onca detection(s) have no flank set")
    assert "set each one's flank in the Mask or Match review tab" in offer["words"]
    assert len(re.findall(r"\.(\s|$)", offer["words"])) == 1  # one sentence


def test_nothing_is_queued_that_the_tab_would_not_offer(cat):
    before = len(queue.list_jobs(cat, kind=pj.FLANK_DENSITY_JOB))
    with pytest.raises(CatalogueError, match="^Not offered: every Leopardus pardalis individual"):
        pj.queue_flank_density(cat, PartialIdRequest(species=OCELOT, **SHORT))
    with pytest.raises(ValueError, match="fit text files with rosette density --flanks"):
        pj.queue_flank_density(cat, PartialIdRequest(captures="c.txt", traps="t.txt", buffer_m=2000, **SHORT))
    assert len(queue.list_jobs(cat, kind=pj.FLANK_DENSITY_JOB)) == before


def test_the_job_fits_the_catalogue_and_stores_the_link_probabilities(cat, lifted):
    request = PartialIdRequest(species=JAGUAR, seed=3, **SHORT)
    job_id, words = pj.queue_flank_density(cat, request)
    assert f"job #{job_id}: 2 chain(s) of 300 iterations from seed 3" in words
    job = queue.get_job(cat, job_id)
    assert job.kind == "flank_density" and job.queue == "light"  # numpy only: never behind a training run
    assert PartialIdRequest.from_dict(job.params) == request
    assert pj.flank_density_status(cat, job_id)[1] == f"Flank density job #{job_id} queued: 0% waiting for a worker"
    assert pj.flank_view(cat, job_id)["done"] is False
    assert run_one(cat, isolate=False) == job_id
    assert queue.get_job(cat, job_id).status == JobStatus.succeeded
    assert pj.latest_flank_density_job(cat) == job_id
    answer, words = pj.flank_density_status(cat, job_id)
    assert answer["source"] == "catalogue" and answer["catalogue"]["species"] == JAGUAR
    known = {(r["left"], r["right"]) for r in answer["link_probabilities"] if r["known"]}
    assert known == {("Linked1", "Linked1"), ("Linked2", "Linked2"), ("Both1", "Both1"), ("Both2", "Both2")}
    suggested = {(r["left"], r["right"]) for r in answer["link_probabilities"] if not r["known"]}
    assert suggested and suggested <= {(a, b) for a in ("Lefty1", "Lefty2") for b in ("Righty1", "Righty2")}
    # the stored answer is the command's on the same request and seed
    again = pid.partial_id_density(request, cat=cat)
    assert _timeless(answer) == _timeless(again)
    assert re.fullmatch(rf"Flank density job #{job_id} done: D [\d,.]+ animals per 100 km² \(95% credible "
                        r"interval [\d,.]+ – [\d,.]+\); R-hat at most [\d.]+, least effective sample size [\d,]+\.",
                        words), words
    # the Jobs list says what the fit found, as the tab does (not "done")
    assert queue.get_job(cat, job_id).message == words.removeprefix(f"Flank density job #{job_id} done: ")
    view = pj.flank_view(cat, job_id)
    assert view["done"] and [r[0] for r in view["table"]] == [
        "N (animals in the state space)", "D (animals per 100 km²)", "sigma (m)", "p0, one side",
        "p0, both sides at once"]
    d = answer["posterior"]["D_per_100km2"]
    assert view["table"][1][1:] == [f"{d['median']:,.1f}", f"{d['lcl']:,.1f} – {d['ucl']:,.1f}"]
    assert view["text"] == pid.flanks_text(answer) and "Most probable links" in view["text"]


def test_a_refused_fit_shows_its_reason_and_no_number(cat):
    # effective draws no short chain reaches: the sampler refuses, and the job succeeds with that answer
    job_id, _ = pj.queue_flank_density(cat, PartialIdRequest(species=JAGUAR, min_ess=1e9, **SHORT))
    assert run_one(cat, isolate=False) == job_id
    answer, words = pj.flank_density_status(cat, job_id)
    assert answer["refused"] and "D_per_100km2" not in answer
    assert "run more iterations (--iterations)" in answer["reason"]  # the chains disagree, or mix too little
    # the command's option is named as the tab's field
    reason = answer["reason"].rstrip(".").replace("(--iterations)", "(Iterations per chain)")
    assert words == f"Flank density job #{job_id} refused: {reason}." and "--" not in words
    assert queue.get_job(cat, job_id).message == f"refused: {reason}."
    view = pj.flank_view(cat, job_id)
    assert view == {"status": words, "done": True, "table": [], "text": ""}
    assert "per 100 km²" not in words and "credible" not in words


def test_a_failed_job_says_why_and_a_job_of_another_kind_is_not_shown(cat, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the sampler ran out of memory")

    monkeypatch.setattr(pid, "fit_partial_id", broken)
    job_id, _ = pj.queue_flank_density(cat, PartialIdRequest(species=JAGUAR, **SHORT))
    assert run_one(cat, isolate=False) == job_id
    view = pj.flank_view(cat, job_id)
    assert view == {"status": f"Flank density job #{job_id} failed: the sampler ran out of memory", "done": True,
                    "table": [], "text": ""}
    other = queue.submit(cat, "sleep", {"seconds": 0})
    with pytest.raises(CatalogueError, match="is a sleep job, not a density from one-flank photos"):
        pj.flank_view(cat, other)
    assert run_one(cat, isolate=False) == other


def test_the_population_tab_s_section_offers_fits_and_shows_the_answer(cat, lifted, monkeypatch):
    """The section through its handlers: the offer enables the button, the fit is queued as a job, its answer is
    shown once it is done and the poll stops; a species that cannot carry it disables the button with the reason."""
    import gradio as gr

    from app import ui_base
    from app.tabs._flanks import build_flanks

    monkeypatch.setattr(ui_base, "_POLICY", ui_base.AccessPolicy(catalogue=cat, single_user="tester"))
    with gr.Blocks() as demo:
        ctx = ui_base.UIContext(catalogue=cat, user=gr.State("tester"), version=gr.State(0), demo=demo)
        build_flanks(ctx, gr.Dropdown([]), gr.Number(1), gr.Textbox(), gr.Textbox(), gr.Timer(active=False))
    fns = {getattr(f.fn, "__name__", ""): f.fn for f in demo.fns.values()
           if getattr(f.fn, "__module__", "") == "app.tabs._flanks"}
    start = next(f.fn for f in demo.fns.values() if getattr(f, "api_name", None) == "flank_density")
    words, button = fns["offer"](None, OCELOT, 1, "", "")  # the guard takes the request first
    assert _plain(words).startswith("Not offered: every Leopardus pardalis") and button["interactive"] is False
    words, button = fns["offer"](None, JAGUAR, 1, "", "")
    assert _plain(words).startswith("Offered: Panthera onca holds 2 left-flank") and button["interactive"] is True
    job_id, shown, words, table, about = start(None, JAGUAR, 1, "", "", 2, 300, 0)
    assert shown is None and f"#{job_id}" in _plain(words) and len(table) == 0 and about == ""
    poll = fns["poll"]
    shown, words, table, about, timer = poll(None, job_id, None)
    assert "queued: 0%" in _plain(words) and timer == gr.skip()  # still polled
    assert run_one(cat, isolate=False) == job_id
    shown, words, table, about, timer = poll(None, job_id, None)
    assert shown == job_id and "done: D " in _plain(words) and timer.active is False
    assert list(table["Parameter"])[:2] == ["N (animals in the state space)", "D (animals per 100 km²)"]
    assert "Two-flank partial identity" in _plain(about)
    assert poll(None, job_id, job_id)[-1].active is False  # the answer is shown: nothing left to poll
    with pytest.raises(gr.Error, match="iterations must be 200"):
        start(None, JAGUAR, 1, "", "", 2, 50, 0)


def test_a_cancel_stops_the_fit_at_its_next_progress_line_and_keeps_nothing(cat, monkeypatch):
    fit = pid.fit_partial_id
    asked: list[int] = []

    def cancelled_meanwhile(*args, **kwargs):
        asked.append(queue.request_cancel(cat, job_id, by="tester"))  # a curator presses Cancel in the Jobs tab
        return fit(*args, **kwargs)

    monkeypatch.setattr(pid, "fit_partial_id", cancelled_meanwhile)
    job_id, _ = pj.queue_flank_density(cat, PartialIdRequest(species=JAGUAR, **SHORT))
    assert run_one(cat, isolate=False) == job_id
    job = queue.get_job(cat, job_id)
    assert asked == [JobStatus.running] and job.status == JobStatus.cancelled and not job.result
    assert pj.flank_view(cat, job_id) == {"status": f"Flank density job #{job_id} cancelled: cancelled by tester",
                                          "done": True, "table": [], "text": ""}
