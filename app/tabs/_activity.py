"""The Population tab's activity panel (built by :mod:`app.tabs.population` under its form): each group's curve over
the day (one detection per event) and the overlap of two species (or sexes) with its 95% interval. A refusal (too
few detections for the curve asked) stays on the panel's status line, and the curves drawn before stay on screen,
named, instead of a message that vanishes over an emptied chart."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from app.ui_base import UIContext, curator_action, guarded_viewer, markdown_text, refreshed_choices
from db.models import Role
from jobs.actions import activity as act
from jobs.actions import population as ps
from jobs.requests.density import ActivityRequest

ACTIVITY_HELP = """\
**Activity over the day**: when the species is photographed, one time per event (a burst of photos counts once),
as a smoothed curve (a von Mises kernel, the bandwidth the R package overlap chooses). Choose a second species to
compare them, or split one species by individual or sex; the overlap (0: never active at the same hours, 1: the
same pattern) is given three ways with a 95% interval from a smoothed bootstrap (a few seconds).
"""
SPLITS = [("the species as a whole", ""), ("each individual", "individual"), ("each sex", "sex")]


def refused_outputs(reason: str, drawn: str | None) -> tuple:
    """The panel after a refusal: the status line says why; the basis, curves and overlaps drawn before stay."""
    return (markdown_text(act.refusal_text(reason, drawn=drawn)), gr.skip(), gr.skip(), gr.skip(), gr.skip())


def build_activity(ctx: UIContext, species: gr.Dropdown) -> None:
    """The activity panel: the Population form's species, a second one to compare, or a split."""
    cat = ctx.catalogue
    gr.Markdown(ACTIVITY_HELP, elem_classes=["help-text"])
    with gr.Row(equal_height=True):
        other = gr.Dropdown([], value=None, label="Compare with species", allow_custom_value=True,
                            elem_id="act-species-b", scale=2, info="empty: the species above alone")
        split = gr.Dropdown(SPLITS, value="", label="One curve for", elem_id="act-by", scale=1)
        compute = gr.Button("Show activity", variant="primary", elem_id="act-compute", scale=0, min_width=160)
    status = gr.Markdown(elem_id="act-status", elem_classes=["status-line"])
    drawn = gr.State(None)  # what the curves shown are of, in words (None: nothing drawn)
    basis = gr.Markdown(elem_id="act-basis", elem_classes=["status-line"])
    plot = gr.Plot(label="Activity over the day", elem_id="act-plot")
    overlaps = gr.Dataframe(headers=act.OVERLAP_HEADERS, value=[], interactive=False, wrap=True,
                            label="Overlap of activity (95% intervals: smoothed bootstrap)", elem_id="act-overlaps")

    def refresh_species(current):
        return refreshed_choices(ps.species_choices(cat), current)

    ctx.on_refresh(refresh_species, inputs=[other], outputs=[other])

    @curator_action(role=Role.viewer)
    def show(sp, sp_b, by, shown):
        names = tuple(n for n in (sp, sp_b) if n)
        try:
            summary = act.activity_summary(cat, ActivityRequest(species=names, by=by or None))
        except ps.SpeciesNotChosen as exc:
            return refused_outputs(f"individuals of {len(exc.names)} species are catalogued: choose one in the "
                                   "Species list above, then press Show activity again", shown)
        except act.ActivityRefused as exc:
            return refused_outputs(str(exc), shown)
        return ("", act.curves_of(summary), markdown_text(act.basis_text(summary)), act.activity_figure(summary),
                pd.DataFrame(act.overlap_rows(summary), columns=act.OVERLAP_HEADERS))

    compute.click(show, inputs=[species, other, split, drawn], outputs=[status, drawn, basis, plot, overlaps],
                  api_name="activity")

    def changed(shown):
        """A changed choice: the curves shown stay, named as those of the earlier choice until drawn again."""
        return markdown_text(act.changed_choice_text(shown))

    for field in (species, other, split):
        field.input(guarded_viewer(changed), inputs=[drawn], outputs=[status], api_visibility="private", queue=False)
