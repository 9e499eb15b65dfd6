"""Match review's flank links: the left- and right-flank identities the two-flank partial-identity density fit
(docs/density.md, "One-flank photos") found probably one animal, for a curator to confirm or reject.

Kept off the review's path: nothing here is an output of a Match review decision. The list is read when the
accordion opens and when the tab comes into sight after a catalogue change (``ctx.on_refresh``). Each suggestion
says what its probability rests on (where and when the flanks were photographed, never their coats), and a fit that
did not converge shows its one sentence and no pair."""

from __future__ import annotations

import gradio as gr

from app.ui_base import UIContext, curator_action, guarded_viewer, markdown_text
from jobs.actions import flank_links as fl
from jobs.actions.errors import CatalogueError
from jobs.requests.flank_links import FlankLinkPicturesRequest, FlankLinkRequest, FlankLinkSuggestionsRequest

HELP = ("A left-flank photo can be matched only to left flanks, so the same animal may be two individuals here: one "
        "seen on its left only, one on its right only. The two-flank density fit (Population tab) says which "
        "pairs were probably one animal, from where and when each was photographed. Look at the two photos: "
        "**Same animal** merges the right-flank individual into the left-flank one (undo it with the Catalogue "
        "tab's Undo); **Not the same** is remembered, and the next fit never links them.")


def _split(key: str | None) -> tuple[str | None, str | None]:
    if not key or "|" not in key:
        return None, None
    left, right = key.split("|", 1)
    return left, right


def suggestion_view(cat) -> tuple[list[tuple[str, str]], str, int | None]:
    """(choices as (sentence, "left|right"), the summary line, the fit's job id); a refusal is the summary alone."""
    try:
        got = fl.link_suggestions(cat, FlankLinkSuggestionsRequest())
    except CatalogueError as exc:
        text = str(exc)
        return [], markdown_text(text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")), None
    choices = [(x.words, x.key) for x in got.suggestions]
    return choices, markdown_text(got.message), got.job_id


def build_flank_links(ctx: UIContext) -> None:
    """The links panel of the Match review tab (built inside it, below the review area)."""
    cat = ctx.catalogue
    job_state = gr.State(None)  # the fit whose suggestions are listed: recorded with an answer
    with gr.Accordion("Flank links the density fit suggests", open=False, elem_id="match-links") as box:
        gr.Markdown(HELP, elem_id="match-links-help")
        summary = gr.Markdown("", elem_id="match-links-summary")
        pick = gr.Radio([], value=None, label="Suggested pairs (most probable first)", elem_id="match-links-pick")
        photos = gr.Gallery(label="Left-flank photo · right-flank photo", columns=2, height=260, object_fit="contain",
                            allow_preview=True, elem_id="match-links-photos")
        with gr.Row(equal_height=True):
            same = gr.Button("Same animal: link them", elem_id="match-link-same", size="sm")
            different = gr.Button("Not the same", elem_id="match-link-not", size="sm")
        status = gr.Markdown("", elem_id="match-links-status", elem_classes=["status-line"])

    def refresh(current):
        choices, text, job = suggestion_view(cat)
        if current is None:  # nothing was picked when the page asked: a pick made since (and its photos) stands
            return gr.update(choices=choices), text, job, gr.skip()
        keep = current if current in [k for _, k in choices] else None
        return gr.update(choices=choices, value=keep), text, job, (gr.skip() if keep else [])

    box.expand(guarded_viewer(refresh), inputs=[pick], outputs=[pick, summary, job_state, photos],
               show_progress="hidden", api_visibility="private")
    ctx.on_refresh(refresh, inputs=[pick], outputs=[pick, summary, job_state, photos], on_tab_select=False)

    @guarded_viewer
    def show_pair(key):
        left, right = _split(key)
        if left is None:
            return []
        return fl.pair_pictures(cat, FlankLinkPicturesRequest(left, right))

    pick.input(show_pair, inputs=[pick], outputs=[photos], show_progress="hidden", api_visibility="private")

    def answer(key, job, user, *, linked: bool):
        left, right = _split(key)
        if left is None:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip(), "Choose a suggested pair first."
        request = FlankLinkRequest(left, right, user=user, job_id=job)
        try:
            done = (fl.confirm_link if linked else fl.reject_link)(cat, request)
        except CatalogueError as exc:  # another curator answered it, or the pair changed: said where it is read
            message = markdown_text(str(exc))
        else:
            message = markdown_text(done.message)
        choices, text, job = suggestion_view(cat)
        return gr.update(choices=choices, value=None), text, job, [], message

    @curator_action
    def on_same(key, job, user):
        return answer(key, job, user, linked=True)

    @curator_action
    def on_not(key, job, user):
        return answer(key, job, user, linked=False)

    outputs = [pick, summary, job_state, photos, status]
    # a link merges two individuals: every tab shows it; a rejection changes nothing another tab shows
    ctx.changed(same.click(on_same, inputs=[pick, job_state, ctx.user], outputs=outputs, api_visibility="private"))
    different.click(on_not, inputs=[pick, job_state, ctx.user], outputs=outputs, api_visibility="private")
