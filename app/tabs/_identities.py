"""The Population tab's identification-uncertainty section (built by :mod:`app.tabs.population` under its form):
the basis of the estimates (as decided, confirmed only, with identification uncertainty), where the identities come
from, each estimate as decided beside the chosen basis, and the annotations to review first, each row opening its
photo in Match review (:func:`app.tabs.match.photo_link`). The imputation runs as a background job with its progress
here and a cancel that keeps nothing."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import gradio as gr
import pandas as pd

from app.tabs.match import photo_link
from app.ui_base import UIContext, curator_action, guarded_viewer, markdown_text
from db.models import Role
from jobs.actions import identities as ident
from jobs.actions import population as ps
from jobs.requests.identities import PopulationIdentitiesRequest

HELP = """\
**Whose identities.** Each detection's individual comes from a *curator* (a match decision or a label a person
gave), a *machine* (a machine classification), or nobody yet (*unreviewed*). **As decided** counts every assigned
annotation as assigned; **confirmed** only the curators'; **with identification uncertainty** gives every other
detection an individual at random from the species' calibrated model, many times over (one of the catalogue's
animals, or a new one), and combines the draws into one interval holding both errors. Review the annotations listed
under it first: they narrow that interval most. A click on a row opens its photo in **Match review**, ready to
decide, with the queue in the order *Most informative for the population estimate first*.
"""
REVIEW_ROWS = 20
BASES = [("as decided", "decided"), ("confirmed only", "confirmed"), ("with identification uncertainty",
                                                                        "uncertain")]

STALE_CHECK_S = 5.0  # how often the results shown are checked against decisions made since (by anyone)


def unique_headers(headers: Sequence[str]) -> list[str]:
    """The headers with each repeated one named after the estimate it is of, the column before it ("95% interval"
    after "As decided: N" becomes "95% interval (as decided)"): a table's columns must differ to be told apart (and
    Gradio warns of a table whose columns do not)."""
    seen = Counter(headers)
    out = []
    for i, header in enumerate(headers):
        if seen[header] > 1 and i > 0:
            whose = re.sub(r":\s*N$", "", headers[i - 1]).strip()
            header = f"{header} ({whose[:1].lower() + whose[1:]})"
        out.append(header)
    return out


SIDE_BY_SIDE = unique_headers(ident.SIDE_BY_SIDE_HEADERS)


def _side_by_side(summary) -> pd.DataFrame:
    headers = ident.basis_headers(summary["identities"], ident.SIDE_BY_SIDE_HEADERS,
                                  confirmed_header=ident.CONFIRMED_HEADER)
    return pd.DataFrame(ident.side_by_side_rows(summary), columns=unique_headers(headers))


def _review_first(summary) -> pd.DataFrame:
    rows = ident.priority_rows({"priority": summary.get("review_first", [])[:REVIEW_ROWS]})
    return pd.DataFrame(rows, columns=ident.PRIORITY_HEADERS)


def linked_annotation(first_cell: object) -> int | None:
    """The annotation a click on a row of the review list opens: the first of its event, read from the row's
    first cell ("#12, #13", as :func:`jobs.actions.identities.priority_rows` writes it), so a row is found the same
    however the table is sorted on screen; None for anything else."""
    found = re.match(r"\s*#(\d+)\b", str(first_cell or ""))
    return int(found.group(1)) if found else None


def build_identities(ctx: UIContext, species: gr.Dropdown, days: gr.Number, first: gr.Textbox, last: gr.Textbox,
                     basis: gr.Radio, timer: gr.Timer) -> None:
    """The section, reading the study from the Population form's fields and the tab's one choice of identities
    (``basis``, which the density section reads too)."""
    cat = ctx.catalogue
    gr.Markdown(HELP, elem_classes=["help-text"])
    with gr.Row(equal_height=True):
        draws = gr.Number(value=200, minimum=1, maximum=10_000, precision=0, label="Draws", elem_id="pop-draws",
                          scale=1)
        seed = gr.Number(value=0, minimum=0, precision=0, label="Seed", elem_id="pop-seed", scale=1)
        compute = gr.Button("Estimate on this basis", variant="primary", elem_id="pop-identities-compute", scale=0,
                            min_width=200)
        cancel = gr.Button("Cancel", elem_id="pop-identities-cancel", scale=0, min_width=100)
    job = gr.State(None)
    shown = gr.State(None)  # the job whose answer is on screen: polled no further
    asked = gr.State(None)  # the decided summary the job's answer is shown beside
    status = gr.Markdown(elem_id="pop-identities-status", elem_classes=["status-line"])
    provenance = gr.Markdown(elem_id="pop-provenance", elem_classes=["status-line"])
    computed_on = gr.State(None)  # the catalogue's identities the answer shown was computed on
    stale = gr.Markdown(elem_id="pop-identities-stale", elem_classes=["status-line"])
    side = gr.Dataframe(headers=SIDE_BY_SIDE, value=[], interactive=False, wrap=True,
                        label="Each estimate as decided and on the chosen basis (95% intervals)",
                        elem_id="pop-side-by-side")
    link = photo_link(ctx)
    review = gr.Dataframe(headers=ident.PRIORITY_HEADERS, value=[], interactive=False, wrap=True,
                          label=("Review these first, most informative for the estimate first: click a row to "
                                 "decide its photo in Match review" if link is not None else
                                 "Review these first (in Match review): most informative for the estimate first"),
                          elem_id="pop-review-first", elem_classes=["rz-linked"] if link is not None else None)

    def empty(words: str = "") -> tuple:
        return (None, None, None, words, "", pd.DataFrame([], columns=SIDE_BY_SIDE),
                pd.DataFrame([], columns=ident.PRIORITY_HEADERS), None, "")

    outputs = [job, shown, asked, status, provenance, side, review, computed_on, stale]

    @curator_action(role=Role.viewer)
    def start(sp, n_days, d_from, d_to, chosen, n_draws, n_seed):
        request = PopulationIdentitiesRequest(species=sp or None,
                                              occasion_days=n_days if n_days is not None else 1.0,
                                              date_from=d_from or None, date_to=d_to or None, identities=chosen,
                                              draws=n_draws if n_draws is not None else 200,
                                              seed=n_seed if n_seed is not None else 0)
        state = ps.catalogue_state(cat)  # before computing: a change made meanwhile shows as one it predates
        decided = ident.population_on_basis(cat, PopulationIdentitiesRequest(**{**request.to_dict(),
                                                                                 "identities": "decided"}))
        if request.identities != "uncertain":
            summary = ident.population_on_basis(cat, request)
            return (None, None, None, "", markdown_text(ident.provenance_text(summary)), _side_by_side(summary),
                    _review_first(summary), state, "")
        job_id = ident.queue_uncertain(cat, request)
        return (job_id, None, decided, markdown_text(f"Imputation queued as job #{job_id}; its progress shows here "
                                                     "and in the Jobs tab."),
                markdown_text(ident.provenance_text(decided)), pd.DataFrame([], columns=SIDE_BY_SIDE),
                pd.DataFrame([], columns=ident.PRIORITY_HEADERS), state, "")

    ctx.polls_after(compute.click(start, inputs=[species, days, first, last, basis, draws, seed], outputs=outputs,
                                  api_name="population_identities"), timer)

    @curator_action(role=Role.viewer)
    def stop(job_id, user):
        if not job_id:
            return gr.skip(), "No imputation is running."
        return gr.skip(), markdown_text(ident.cancel_uncertain(cat, int(job_id), user=user))

    cancel.click(stop, inputs=[job, ctx.user], outputs=[job, status], api_name="population_identities_cancel")

    for field in (species, days, first, last, basis, draws, seed):  # a changed form: the answer shown is put away
        field.input(guarded_viewer(empty), outputs=outputs, api_visibility="private", queue=False)

    def poll(job_id, shown_id, decided):
        """The imputation's progress, then its answer; the timer stops when nothing is left to poll."""
        if not job_id or job_id == shown_id or decided is None:
            return (gr.skip(),) * 4 + (gr.Timer(active=False),)
        answer, words = ident.uncertain_status(cat, job_id)
        if answer is None:
            finished = " failed" in words or " cancelled" in words
            return (job_id if finished else gr.skip(), markdown_text(words), gr.skip(), gr.skip(),
                    gr.Timer(active=False) if finished else gr.skip())
        summary = ident.with_answer(decided, answer)
        done = f"Imputation job #{job_id} done: {answer['draws']} draws."
        return job_id, markdown_text(" ".join([done, *answer["notes"][-1:]])), _side_by_side(summary), \
            _review_first(summary), gr.Timer(active=False)

    timer.tick(guarded_viewer(poll), [job, shown, asked], [shown, status, side, review, timer],
               show_progress="hidden")

    def mark_stale(state):
        """The answer shown, marked once a decision (here or by anyone) makes it out of date."""
        return ps.stale_text(cat, state, again="Estimate on this basis")

    ctx.tab_timer(STALE_CHECK_S).tick(guarded_viewer(mark_stale), [computed_on], [stale], show_progress="hidden")
    if link is None:  # Match review did not build: the list stays a list
        return

    @curator_action(role=Role.viewer)
    def follow(evt: gr.SelectData):
        chosen = linked_annotation((evt.row_value or [None])[0])
        if chosen is None:
            return gr.skip(), gr.skip()
        return chosen, link.switch()

    link.open_after(review.select(follow, outputs=[link.request, link.tabs], api_visibility="private",
                                  show_progress="hidden"), progress_on=review)
