"""Population tab: how many animals of a species use the study area, from the catalogue's identified detections at
its camera stations: the estimates M0, Mt and Mh-Chao with their 95% intervals and what each assumes, the discovery
curve and capture frequencies, each individual's capture history, and the files for secr, camtrapR and MARK; below
them the density by spatial capture-recapture and the activity over the day (:mod:`app.tabs._density`)."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from app.tabs._activity import build_activity
from app.tabs._density import build_density
from app.tabs._flanks import build_flanks
from app.tabs._identities import BASES, STALE_CHECK_S, build_identities
from app.ui_base import UIContext, curator_action, guarded_viewer, markdown_text, refreshed_choices
from db.models import Role
from jobs.actions import population as ps
from jobs.requests.population import CapthistExportRequest, PopulationRequest

TITLE = "Population"
ORDER = 57

HELP = """\
**Population size** from the identified animals seen at the camera stations. The study is cut into *occasions*
of the chosen length, counted in days from the first camera's start (local time); an animal counts once per
occasion however often it was photographed, and days a camera was not running carry no effort. Only photos with
a camera deployment and a time, and animals assigned to an individual, are used; the line under the button says
what was left out and why. The download holds the capture histories for secr (captures, traps in UTM metres with
each station's active days per occasion), camtrapR (record table) and MARK (.inp), with a README.
"""
OCCASION_HEADERS = ["Occasion", "Begins", "Ends", "Camera-days", "Individuals seen"]


def choose_species_text(names) -> str:
    """What to do when individuals of several species are catalogued and the Species box is empty."""
    return (f"Individuals of {len(names)} species are catalogued ({markdown_text(', '.join(names))}): choose one in "
            "the **Species** list above, then press **Estimate** (or write the files) again.")


def build(ctx: UIContext) -> None:
    cat = ctx.catalogue
    gr.Markdown(HELP, elem_classes=["help-text"])
    with gr.Row(equal_height=True):
        species = gr.Dropdown([], value=None, label="Species", allow_custom_value=True, elem_id="pop-species",
                              scale=2, info="empty: the one species with individuals")
        days = gr.Number(value=1, minimum=0.01, label="Occasion length (days)", elem_id="pop-days", scale=1)
        first = gr.Textbox(label="From (YYYY-MM-DD)", placeholder="first camera's start", max_lines=1,
                           elem_id="pop-from", scale=1)
        last = gr.Textbox(label="To (YYYY-MM-DD, included)", placeholder="last camera's end", max_lines=1,
                          elem_id="pop-to", scale=1)
        compute = gr.Button("Estimate", variant="primary", elem_id="pop-compute", scale=0, min_width=120)
    basis = gr.Markdown(elem_id="pop-basis", elem_classes=["status-line"])
    computed_on = gr.State(None)  # the catalogue's identities the results shown were computed on
    stale = gr.Markdown(elem_id="pop-stale", elem_classes=["status-line"])
    estimates = gr.Dataframe(headers=ps.ESTIMATE_HEADERS, value=[], interactive=False, wrap=True,
                             label="Estimates (95% intervals)", elem_id="pop-estimates",
                             column_widths=["90px", "100px", "140px", "600px"])
    with gr.Row():
        discovery = gr.Plot(label="Discovery curve", elem_id="pop-discovery")
        frequencies = gr.Plot(label="Capture frequencies", elem_id="pop-frequencies")
    histories = gr.Dataframe(value=[], interactive=False, label="Capture histories (1: seen on that occasion)",
                             elem_id="pop-histories", max_height=360)
    occasions = gr.Dataframe(headers=OCCASION_HEADERS, value=[], interactive=False,
                             label="Occasions and effort (camera-days of active deployments)",
                             elem_id="pop-occasions", max_height=300)
    with gr.Row(equal_height=True):
        download = gr.Button("Write capture-history files (secr, camtrapR, MARK)", elem_id="pop-download",
                             scale=0, min_width=300)
        files = gr.File(label="Capture histories (zip)", interactive=False, elem_id="pop-files")
    download_status = gr.Markdown(elem_id="pop-download-status", elem_classes=["status-line"])

    def refresh_species(current):
        names = ps.species_choices(cat)
        return refreshed_choices(names, current)

    ctx.on_refresh(refresh_species, inputs=[species], outputs=[species])

    def no_results(words: str = "") -> tuple:
        """Empty results, so none is shown beside a form it does not answer."""
        return (words, pd.DataFrame([], columns=ps.ESTIMATE_HEADERS), None, None, pd.DataFrame([]),
                pd.DataFrame([], columns=OCCASION_HEADERS), None, "", None, "")

    results = [basis, estimates, discovery, frequencies, histories, occasions, files, download_status, computed_on,
               stale]
    clear_results = guarded_viewer(no_results)
    for field in (species, days, first, last):  # a changed form: the results shown no longer answer it
        field.input(clear_results, outputs=results, api_visibility="private", queue=False)

    def request_of(sp, n_days, d_from, d_to) -> PopulationRequest:
        return PopulationRequest(species=sp or None, occasion_days=n_days if n_days is not None else 1.0,
                                 date_from=d_from or None, date_to=d_to or None)

    @curator_action(role=Role.viewer)
    def estimate(sp, n_days, d_from, d_to):
        state = ps.catalogue_state(cat)  # before computing: a change made meanwhile shows as one it predates
        try:
            summary = ps.population_summary(cat, request_of(sp, n_days, d_from, d_to))
        except ps.SpeciesNotChosen as exc:
            return no_results(choose_species_text(exc.names))
        headers, rows = ps.history_rows(summary)
        table = [[o["occasion"], o["begins"][:16].replace("T", " "), o["ends"][:16].replace("T", " "),
                  o["effort_days"], o["individuals"]] for o in summary["occasion_table"]]
        return (markdown_text(ps.basis_text(summary)),
                pd.DataFrame(ps.estimate_rows(summary), columns=ps.ESTIMATE_HEADERS),
                ps.discovery_figure(summary), ps.frequency_figure(summary),
                pd.DataFrame(rows, columns=headers), pd.DataFrame(table, columns=OCCASION_HEADERS), None, "", state,
                "")

    compute.click(estimate, inputs=[species, days, first, last], outputs=results, api_name="population")

    def mark_stale(state):
        """The results shown, marked once a decision (here or by anyone) makes them out of date."""
        return ps.stale_text(cat, state, again="Estimate")

    stale_check = guarded_viewer(mark_stale)
    ctx.on_refresh(stale_check, inputs=[computed_on], outputs=[stale])
    ctx.tab_timer(STALE_CHECK_S).tick(stale_check, [computed_on], [stale], show_progress="hidden")

    @curator_action(role=Role.viewer)
    def write_files(sp, n_days, d_from, d_to):
        asked = request_of(sp, n_days, d_from, d_to)
        try:
            done = ps.export_capthist(cat, CapthistExportRequest(**asked.to_dict(), as_zip=True))
        except ps.SpeciesNotChosen as exc:
            return None, choose_species_text(exc.names)
        return done.zip_path, markdown_text(done.message)

    download.click(write_files, inputs=[species, days, first, last], outputs=[files, download_status],
                   api_name="population_files")

    # one choice of identities for both sections below: two radios for it let a click land on the one not shown
    identities = gr.Radio(BASES, value="decided", label="Identities the two sections below rest on",
                          info="as decided: every assigned animal as assigned; confirmed only: a curator's; with "
                               "identification uncertainty: draws from the match probabilities",
                          elem_id="pop-identities")
    with gr.Accordion("Whose identities: as decided, confirmed, with identification uncertainty", open=False,
                      elem_id="pop-identities-panel"):
        build_identities(ctx, species, days, first, last, identities, ctx.tab_timer(2.0))
    with gr.Accordion("Density (spatial capture-recapture)", open=False, elem_id="dens-panel"):
        build_density(ctx, species, days, first, last, identities, ctx.tab_timer(2.0))
    build_flanks(ctx, species, days, first, last, ctx.tab_timer(2.0))
    with gr.Accordion("Activity over the day", open=False, elem_id="act-panel"):
        build_activity(ctx, species)
