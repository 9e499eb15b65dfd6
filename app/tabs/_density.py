"""The Population tab's density section (built by :mod:`app.tabs.population` under its form).

Density: spatial capture-recapture fitted as secr fits it to the study the form describes, on a basis of identities
(as decided, confirmed only, with identification uncertainty: the bases of the population's identities section), by
a background job (a fit and its buffer check take seconds to a minute, each draw of the identities under a second):
the estimates with what each assumes, on another basis than decided beside the estimates as decided, a map of the
stations, mask and detections, the fitted detection curve and a report to download. Activity: each group's curve
over the day (one detection per event) and the overlap of two species (or sexes) with its 95% interval.
Models beyond the null: sessions by year or deployment group, sex from the individuals, a learned response; the
models the catalogue's covariates carry are offered, fitted and ranked by AICc by a background job, and the chosen
model's figures are shown per session and per sex.
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from app.tabs._identities import unique_headers
from app.ui_base import UIContext, curator_action, guarded_viewer, markdown_text
from core.field.scr_data import DETECTOR_TYPES
from core.field.scr_likelihood import DETECTION_FUNCTIONS
from db.models import Role
from jobs.actions import density as ds
from jobs.actions import density_models as dm
from jobs.actions.common import upload_path
from jobs.actions.identities import basis_headers
from jobs.requests.density import (
    DEFAULT_DENSITY_DRAWS,
    DensityModelChoicesRequest,
    DensityModelFiguresRequest,
    DensityModelsRequest,
    DensityRequest,
)

DENSITY_HELP = """\
**Density** (animals per 100 km²) by spatial capture-recapture, as secr fits it: each animal has a centre of
activity, and its chance of being photographed falls with the distance from that centre to a camera. The study is
the one above (species, occasions, window); the cameras are placed by their coordinates (UTM metres). The habitat
*mask* is the area round the cameras where a detected animal's centre may lie: a *buffer* of about 4 times sigma
(empty: it starts at 4 × the spread of the animals' detections and is widened by itself, as secr's suggest.buffer
widens it, until the density is stable), or your own habitat as a GeoJSON polygon or a CSV of x,y points in the same
metres. The fit runs in the background; a buffer you give is checked by fitting again with twice it. Where the
cameras cannot measure how far the animals move (too few animals caught at several cameras, or cameras much farther
apart than an animal ranges), no density is shown and one sentence says what the array lacks.
**Identities**: as decided (every assigned annotation as assigned), confirmed only (the curators'), or with
identification uncertainty (the unreviewed and machine-identified annotations given an animal at random by the
species' calibrated model, each of the *draws* fitted, under a second each); the last two are shown beside the
density as decided.
"""

MODELS_HELP = """\
**Models** beyond the null, as secr fits them: the study split into *sessions* (by the calendar year of each
detection, or by the deployments' group, Camtrap DP deploymentGroups; `deployment-group:season` takes the
`season:...` part), fitted together; *sex* from each individual's sex in the catalogue (unsexed animals are mixed
over both sexes, secr's hcov); `b` a learned response to the cameras. Only the models the catalogue's own covariates
carry are offered. *Compare models* fits each in the background (with the detectors, curve, buffer and spacing
above) and ranks them by AICc; pick a model in the table's list to see its figures per session and per sex. Where
the sessions cannot carry a model, one sentence says why and no figure is shown.
"""
SESSION_CHOICES = [("one session", ""), ("by year", "year"), ("by deployment group", "deployment-group")]


def _side_by_side(answer) -> tuple:
    """The estimates as decided beside the answer's basis, and where its identities come from: shown only when the
    basis is another than decided (the estimates table above is then the basis's)."""
    if not answer or answer.get("identities", "decided") == "decided" or answer.get("refused"):
        return gr.update(visible=False, value=pd.DataFrame([], columns=unique_headers(ds.SIDE_BY_SIDE_HEADERS))), ""
    headers = basis_headers(answer["identities"], ds.SIDE_BY_SIDE_HEADERS, confirmed_header=ds.CONFIRMED_HEADER)
    return (gr.update(visible=True, value=pd.DataFrame(ds.identity_rows(answer), columns=unique_headers(headers))),
            markdown_text(" ".join(ds.identity_lines(answer, table=False))))


def _no_results() -> tuple:
    """Every shown result put away: the estimates, the basis, the side-by-side table, the charts, the report."""
    return (pd.DataFrame([], columns=ds.ESTIMATE_HEADERS), "", *_side_by_side(None), None, None, None)


def _density_outputs(answer) -> tuple:
    """The answer on screen; a refused fit shows its one sentence, the stations and no number or curve."""
    return (pd.DataFrame(ds.estimate_rows(answer), columns=ds.ESTIMATE_HEADERS), markdown_text(ds.basis_text(answer)),
            *_side_by_side(answer), ds.map_figure(answer),
            None if answer.get("refused") else ds.curve_figure(answer))


def build_density(ctx: UIContext, species: gr.Dropdown, days: gr.Number, first: gr.Textbox, last: gr.Textbox,
                  identities: gr.Radio, timer: gr.Timer) -> None:
    """The density section, reading the study from the Population form's fields and the tab's one choice of
    identities (``identities``, which the identities section reads too)."""
    cat = ctx.catalogue
    gr.Markdown(DENSITY_HELP, elem_classes=["help-text"])
    with gr.Row(equal_height=True):
        detector = gr.Dropdown(list(DETECTOR_TYPES), value="proximity", label="Detectors", elem_id="dens-detector",
                               info="camera traps: proximity", scale=1)
        detectfn = gr.Dropdown(list(DETECTION_FUNCTIONS), value="HN", label="Detection curve", elem_id="dens-detectfn",
                               info="HN half-normal, HHN hazard, EX exponential", scale=1)
        buffer = gr.Textbox(label="Buffer (m)", elem_id="dens-buffer", max_lines=1, scale=1,
                            placeholder="widened until D is stable", info="empty: about 4 sigma, widened by itself")
        spacing = gr.Textbox(label="Mask spacing (m)", elem_id="dens-spacing", max_lines=1, scale=1,
                             placeholder="64 points across", info="empty: 64 points across the mask")
        conditional = gr.Checkbox(value=False, label="Conditional likelihood (D derived)", elem_id="dens-cl", scale=1)
    with gr.Row(equal_height=True):
        mask = gr.File(label="Habitat (optional): GeoJSON polygon or CSV of x,y",
                       file_types=[".geojson", ".json", ".csv"], elem_id="dens-mask", scale=2)
        draws = gr.Number(value=DEFAULT_DENSITY_DRAWS, minimum=1, maximum=10_000, precision=0, label="Draws",
                          elem_id="dens-draws", scale=1, info="with identification uncertainty: a fit each")
        fit = gr.Button("Fit density", variant="primary", elem_id="dens-fit", scale=0, min_width=160)
    job = gr.State(None)
    shown = gr.State(None)  # the job whose answer is on screen: polled no further
    answer_state = gr.State(None)
    status = gr.Markdown(elem_id="dens-status", elem_classes=["status-line"])
    estimates = gr.Dataframe(headers=ds.ESTIMATE_HEADERS, value=[], interactive=False, wrap=True,
                             label="Density estimates (95% intervals)", elem_id="dens-estimates",
                             column_widths=["200px", "90px", "140px", "520px"])
    basis = gr.Markdown(elem_id="dens-basis", elem_classes=["status-line"])
    provenance = gr.Markdown(elem_id="dens-provenance", elem_classes=["status-line"])
    side = gr.Dataframe(headers=unique_headers(ds.SIDE_BY_SIDE_HEADERS), value=[], interactive=False, wrap=True, visible=False,
                        label="Each estimate as decided and on the chosen identities (95% intervals)",
                        elem_id="dens-identities")
    with gr.Row():
        density_map = gr.Plot(label="Stations, mask and detections", elem_id="dens-map")
        curve = gr.Plot(label="Detection curve", elem_id="dens-curve")
    with gr.Row(equal_height=True):
        report = gr.Button("Write the density report", elem_id="dens-report", scale=0, min_width=240)
        report_file = gr.File(label="Density report (Markdown)", interactive=False, elem_id="dens-report-file")

    @curator_action(role=Role.viewer)
    def start(sp, n_days, d_from, d_to, det, fn, buf, space, cl, mask_file, basis_of, n_draws):
        request = DensityRequest(species=sp or None, occasion_days=n_days if n_days is not None else 1.0,
                                 date_from=d_from or None, date_to=d_to or None, detector=det, detectfn=fn,
                                 buffer_m=buf, spacing_m=space, conditional=bool(cl),
                                 mask=upload_path(mask_file) if mask_file else None,
                                 identities=basis_of or "decided",
                                 draws=n_draws if n_draws is not None else DEFAULT_DENSITY_DRAWS)
        job_id, words = ds.queue_density(cat, request)
        return (job_id, None, None, markdown_text(words), *_no_results())

    results = [estimates, basis, side, provenance, density_map, curve]
    outputs = [job, shown, answer_state, status, *results, report_file]
    ctx.polls_after(fit.click(start, inputs=[species, days, first, last, detector, detectfn, buffer, spacing,
                                             conditional, mask, identities, draws],
                              outputs=outputs, api_name="density"), timer)

    def forget():
        """A changed form: the fit shown (or running) no longer answers it, so it is put away."""
        return None, None, None, "", *_no_results()

    for field in (species, days, first, last, detector, detectfn, buffer, spacing, conditional, identities, draws):
        field.input(guarded_viewer(forget), outputs=outputs, api_visibility="private", queue=False)
    mask.change(guarded_viewer(forget), outputs=outputs, api_visibility="private", queue=False)

    def poll(job_id, shown_id):
        """The running fit's progress; its answer once it finished. The timer stops when nothing is left to poll
        (the tab's selection starts it again, and so does a fit queued)."""
        if not job_id or job_id == shown_id:
            return (gr.skip(),) * (3 + len(results)) + (gr.Timer(active=False),)
        answer, words = ds.density_status(cat, job_id)
        if answer is None:
            finished = " failed: " in words or " cancelled: " in words
            return (job_id if finished else gr.skip(), gr.skip(), markdown_text(words), *(gr.skip(),) * len(results),
                    gr.Timer(active=False) if finished else gr.skip())
        return (job_id, answer, markdown_text(words), *_density_outputs(answer), gr.Timer(active=False))

    timer.tick(guarded_viewer(poll), [job, shown], [shown, answer_state, status, *results, timer],
               show_progress="hidden")

    @curator_action(role=Role.viewer)
    def write_report(answer):
        if not answer:
            return None, "Fit density first: the report is of the fit shown."
        path = ds.write_density_report(cat, answer)
        return path, markdown_text(f"Wrote the density report to {path}.")

    report.click(write_report, inputs=[answer_state], outputs=[report_file, status], api_name="density_report")

    def latest(current):
        # after a page reload the newest fit is shown again
        job_id = current or ds.latest_density_job(cat)
        return job_id if job_id else gr.skip()

    ctx.on_refresh(latest, inputs=[job], outputs=[job], on_tab_select=False)
    _build_models(ctx, species, days, first, last, detector, detectfn, buffer, spacing, conditional,
                  ctx.tab_timer(2.0))  # its own poll: each stops itself when its job is over


def _build_models(ctx: UIContext, species: gr.Dropdown, days: gr.Number, first: gr.Textbox, last: gr.Textbox,
                  detector: gr.Dropdown, detectfn: gr.Dropdown, buffer: gr.Textbox, spacing: gr.Textbox,
                  conditional: gr.Checkbox, timer: gr.Timer) -> None:
    """The models part of the density section: sessions, the model picker, the comparison job and its table."""
    cat = ctx.catalogue
    gr.Markdown(MODELS_HELP, elem_classes=["help-text"])
    with gr.Row(equal_height=True):
        by = gr.Dropdown(SESSION_CHOICES, value="", allow_custom_value=True, label="Sessions",
                         elem_id="dens-sessions", scale=1, info="or deployment-group:KEY")
        models = gr.CheckboxGroup([], value=[], label="Models", elem_id="dens-models", scale=3)
        compare = gr.Button("Compare models", variant="primary", elem_id="dens-compare", scale=0, min_width=180)
    offered = gr.Markdown(elem_id="dens-models-offered", elem_classes=["status-line"])
    job = gr.State(None)
    shown = gr.State(None)
    status = gr.Markdown(elem_id="dens-models-status", elem_classes=["status-line"])
    table = gr.Dataframe(headers=dm.AIC_HEADERS, value=[], interactive=False, wrap=True,
                         label="Models ranked by AICc", elem_id="dens-aic")
    chosen = gr.Dropdown([], value=None, label="Model shown", elem_id="dens-model-shown")
    figures = gr.Dataframe(headers=dm.FIGURE_HEADERS, value=[], interactive=False, wrap=True,
                           label="The model's figures per session and sex", elem_id="dens-model-figures")
    about = gr.Markdown(elem_id="dens-model-about", elem_classes=["status-line"])

    def offer(sp, n_days, d_from, d_to, grouping):
        request = DensityModelChoicesRequest(species=sp or None, occasion_days=n_days if n_days is not None else 1.0,
                                             date_from=d_from or None, date_to=d_to or None,
                                             sessions=grouping or None)
        choices = dm.model_choices(cat, request)
        return gr.update(choices=choices["models"], value=choices["default"]), markdown_text(choices["words"])

    # the sessions and species are picked (once a change); the numbers and days are typed (once they are left)
    for event in (by.change, species.change, days.blur, first.blur, last.blur):
        event(guarded_viewer(offer), inputs=[species, days, first, last, by], outputs=[models, offered],
              api_visibility="private", show_progress="hidden")
    ctx.on_refresh(guarded_viewer(offer), inputs=[species, days, first, last, by], outputs=[models, offered])

    def _empty() -> tuple:
        return pd.DataFrame([], columns=dm.AIC_HEADERS), gr.update(choices=[], value=None), \
            pd.DataFrame([], columns=dm.FIGURE_HEADERS), ""

    @curator_action(role=Role.viewer)
    def start(sp, n_days, d_from, d_to, grouping, picked, det, fn, buf, space, cl):
        picked = list(picked or [])
        if not picked:
            raise ValueError("choose at least one model to fit")
        request = DensityModelsRequest(species=sp or None, occasion_days=n_days if n_days is not None else 1.0,
                                       date_from=d_from or None, date_to=d_to or None, sessions=grouping or None,
                                       model=picked[0] if len(picked) == 1 else None,
                                       compare="; ".join(picked) if len(picked) > 1 else None, detector=det,
                                       detectfn=fn, buffer_m=buf, spacing_m=space, conditional=bool(cl))
        job_id, words = dm.queue_density_models(cat, request)
        return (job_id, None, markdown_text(words), *_empty())

    results = [table, chosen, figures, about]
    ctx.polls_after(compare.click(start, inputs=[species, days, first, last, by, models, detector, detectfn, buffer,
                                                 spacing, conditional],
                                  outputs=[job, shown, status, *results], api_name="density_models"), timer)

    def poll(job_id, shown_id):
        """As the fit's poll: progress, then the answer, and the timer stopped when nothing is left to poll."""
        if not job_id or job_id == shown_id:
            return (gr.skip(),) * (2 + len(results)) + (gr.Timer(active=False),)
        view = dm.model_view(cat, DensityModelFiguresRequest(job_id=int(job_id)))
        if not view["done"]:
            finished = " failed: " in view["status"] or " cancelled: " in view["status"]
            return (job_id if finished else gr.skip(), markdown_text(view["status"]), *(gr.skip(),) * len(results),
                    gr.Timer(active=False) if finished else gr.skip())
        return (job_id, markdown_text(view["status"]), pd.DataFrame(view["table"], columns=dm.AIC_HEADERS),
                gr.update(choices=view["models"], value=view["model"]),
                pd.DataFrame(view["figures"], columns=dm.FIGURE_HEADERS), markdown_text(view["about"]),
                gr.Timer(active=False))

    timer.tick(guarded_viewer(poll), [job, shown], [shown, status, *results, timer], show_progress="hidden")

    @curator_action(role=Role.viewer)
    def show(job_id, name):
        if not job_id or not name:
            return gr.skip(), gr.skip()
        view = dm.model_view(cat, DensityModelFiguresRequest(job_id=int(job_id), model=name))
        return pd.DataFrame(view["figures"], columns=dm.FIGURE_HEADERS), markdown_text(view["about"])

    chosen.input(show, inputs=[job, chosen], outputs=[figures, about], api_name="density_model_figures")

    def latest(current):
        job_id = current or dm.latest_density_models_job(cat)
        return job_id if job_id else gr.skip()

    ctx.on_refresh(latest, inputs=[job], outputs=[job], on_tab_select=False)
