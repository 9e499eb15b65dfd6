"""The Population tab's density from one-flank photos (built by :mod:`app.tabs.population` under the density
section): the two-flank partial-identity model of Augustine et al. (2018) on the study the form describes, offered
when the species holds one-flank identities in the window (else one sentence says why not), fitted by a background
job whose progress is polled only while it runs, and shown as N, D, sigma and p0 with their 95% credible intervals,
the diagnostics and the most probable links between left and right identities."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from app.ui_base import UIContext, curator_action, guarded_viewer, markdown_text
from db.models import Role
from jobs.actions import partial_id_jobs as pj
from jobs.requests.partial_id import (
    DEFAULT_CHAINS,
    DEFAULT_ITERATIONS,
    MAX_CHAINS,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    PartialIdRequest,
)
from jobs.requests.population import PopulationRequest

FLANKS_HELP = """\
**One-flank photos**: a jaguar's or an ocelot's left and right coats differ, so at a station with one camera an
animal photographed on its left and one photographed on its right may be one animal or two. The two-flank
partial-identity model fits both sides at once: where both flanks were photographed together at a station with two
cameras, or a curator matched an individual's two sides, the link is known; elsewhere the model weighs which left
goes with which right by where they were caught. Each detection's flank is its photo's flank label (front and other
views are left out). It is Bayesian: *chains* of *iterations* each (a quarter warm-up) from *seed*; fewer
iterations finish sooner but may not converge, and a fit whose chains disagree (R-hat above 1.1) or mix too little
is refused in one sentence with no figure.
"""


def _lines(text: str) -> str:
    """The answer's plain lines as Markdown, each on its own line and shown literally."""
    return "  \n".join(markdown_text(line.strip()) for line in text.splitlines() if line.strip())


def _shown(view: dict) -> tuple:
    return markdown_text(view["status"]), pd.DataFrame(view["table"], columns=pj.ESTIMATE_HEADERS), \
        _lines(view["text"])


def build_flanks(ctx: UIContext, species: gr.Dropdown, days: gr.Number, first: gr.Textbox, last: gr.Textbox,
                 timer: gr.Timer) -> None:
    """The accordion, reading the study from the Population form's fields; ``timer`` polls the job."""
    cat = ctx.catalogue
    with gr.Accordion("Density from one-flank photos (two-flank partial identity)", open=False,
                      elem_id="dens-flanks-panel"):
        gr.Markdown(FLANKS_HELP, elem_classes=["help-text"])
        offered = gr.Markdown(elem_id="dens-flanks-offered", elem_classes=["status-line"])
        with gr.Row(equal_height=True):
            chains = gr.Number(value=DEFAULT_CHAINS, minimum=1, maximum=MAX_CHAINS, precision=0, label="Chains",
                               elem_id="dens-flanks-chains", scale=1, info="3 or more for R-hat")
            iterations = gr.Number(value=DEFAULT_ITERATIONS, minimum=MIN_ITERATIONS, maximum=MAX_ITERATIONS,
                                   precision=0, label="Iterations per chain", elem_id="dens-flanks-iterations",
                                   scale=1, info=f"a quarter warm-up; at least {MIN_ITERATIONS:,}")
            seed = gr.Number(value=0, minimum=0, precision=0, label="Seed", elem_id="dens-flanks-seed", scale=1)
            fit = gr.Button("Fit from one-flank photos", variant="primary", elem_id="dens-flanks-fit", scale=0,
                            min_width=220)
        job = gr.State(None)
        shown = gr.State(None)  # the job whose answer is on screen: polled no further
        status = gr.Markdown(elem_id="dens-flanks-status", elem_classes=["status-line"])
        result = gr.Dataframe(headers=pj.ESTIMATE_HEADERS, value=[], interactive=False, wrap=True,
                              label="Posterior medians and 95% credible intervals", elem_id="dens-flanks-result")
        about = gr.Markdown(elem_id="dens-flanks-about", elem_classes=["status-line"])

    def offer(sp, n_days, d_from, d_to):
        request = PopulationRequest(species=sp or None, occasion_days=n_days if n_days is not None else 1.0,
                                    date_from=d_from or None, date_to=d_to or None)
        found = pj.flank_offer(cat, request)
        return markdown_text(found["words"]), gr.update(interactive=found["offered"])

    # the species is picked (once a change); the numbers and days are typed (once they are left)
    for event in (species.change, days.blur, first.blur, last.blur):
        event(guarded_viewer(offer), inputs=[species, days, first, last], outputs=[offered, fit],
              api_visibility="private", show_progress="hidden")
    ctx.on_refresh(offer, inputs=[species, days, first, last], outputs=[offered, fit])

    def _empty() -> tuple:
        return "", pd.DataFrame([], columns=pj.ESTIMATE_HEADERS), ""

    @curator_action(role=Role.viewer)
    def start(sp, n_days, d_from, d_to, n_chains, n_iterations, n_seed):
        request = PartialIdRequest(species=sp or None, occasion_days=n_days if n_days is not None else 1.0,
                                   date_from=d_from or None, date_to=d_to or None,
                                   chains=n_chains if n_chains is not None else DEFAULT_CHAINS,
                                   iterations=n_iterations if n_iterations is not None else DEFAULT_ITERATIONS,
                                   seed=n_seed if n_seed is not None else 0)
        job_id, words = pj.queue_flank_density(cat, request)
        return job_id, None, markdown_text(words), *_empty()[1:]

    outputs = [job, shown, status, result, about]
    ctx.polls_after(fit.click(start, inputs=[species, days, first, last, chains, iterations, seed], outputs=outputs,
                              api_name="flank_density"), timer)

    def forget():
        """A changed form: the fit shown (or running) no longer answers it, so it is put away."""
        return None, None, *_empty()

    for field in (species, days, first, last):
        field.input(guarded_viewer(forget), outputs=outputs, api_visibility="private", queue=False)

    def poll(job_id, shown_id):
        """The running job's progress; its answer once it finished, and the timer stopped: nothing left to poll."""
        if not job_id or job_id == shown_id:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.Timer(active=False)
        view = pj.flank_view(cat, job_id)
        if not view["done"]:
            return gr.skip(), markdown_text(view["status"]), gr.skip(), gr.skip(), gr.skip()
        return job_id, *_shown(view), gr.Timer(active=False)

    timer.tick(guarded_viewer(poll), [job, shown], [shown, status, result, about, timer], show_progress="hidden")

    def latest(current):
        """After a page reload the newest fit is shown again (and polled while it runs)."""
        if current:
            return (gr.skip(),) * 6
        job_id = pj.latest_flank_density_job(cat)
        if not job_id:
            return (gr.skip(),) * 6
        view = pj.flank_view(cat, job_id)
        if not view["done"]:
            return job_id, gr.skip(), markdown_text(view["status"]), gr.skip(), gr.skip(), gr.Timer(active=True)
        return job_id, job_id, *_shown(view), gr.skip()

    ctx.on_refresh(latest, inputs=[job], outputs=[job, shown, status, result, about, timer], on_tab_select=False)
