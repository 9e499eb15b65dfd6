"""Mask tab: outline the animal on a photo (clicks / box -> SAM 2 or GrabCut), accept or redo, set the flank."""

from __future__ import annotations

import gradio as gr

from app.ui_base import ASSETS_DIR, UIContext, curator_action, guarded_viewer, refreshed_choices, repeated_pick
from db.models import Role
from jobs.actions import annotations as an
from jobs.actions import flanks as fs
from jobs.actions import frames as fr
from jobs.actions import masks as mk
from jobs.actions.common import curator_name
from jobs.actions.diagnostic_words import masker_in_use
from jobs.requests.annotations import (
    AddBoxRequest,
    DeleteBoxRequest,
    ListAnnotationsRequest,
    MoveBoxRequest,
    UndoBoxRequest,
)

KEYS_JS = (ASSETS_DIR / "keys.js").read_text(encoding="utf-8") if (ASSETS_DIR / "keys.js").exists() else None

BOX_HEADERS = ["id", "source", "x", "y", "w", "h", "confidence", "individual"]

TITLE = "Mask"
ORDER = 30

HELP = """\
Pick a photo, then **click on the animal** (and, if needed, on background the mask wrongly took) and press
**Make mask**. You can also draw a box: choose *box corner* and click two opposite corners around the animal.
The mask is only saved when you press **Accept**; **Redo** forgets the clicks and starts again.
"""


def build(ctx: UIContext) -> None:
    cat = ctx.catalogue
    masker_name, masker_words = masker_in_use()
    draft = gr.State(mk.MaskDraft())

    gr.Markdown(HELP + f"\nMasks here are made by **{masker_words}**.", elem_classes=["help-text"],
                elem_id="mask-help")
    with gr.Row(equal_height=False):
        with gr.Column(scale=3, min_width=420):
            picker = gr.Dropdown(label="Photo", choices=[], value=None, filterable=True, elem_id="mask-pick",
                                 info="#id · file · which of its animals (when several) · individual · "
                                      "who made its mask")
            picture = gr.Image(label="Click on the animal", type="numpy", interactive=False, height=540,
                               elem_id="mask-picture", buttons=["fullscreen"], show_label=True)
        with gr.Column(scale=2, min_width=320):
            mode = gr.Radio(list(mk.CLICK_MODES), value="animal", label="A click on the photo marks",
                            elem_id="mask-click-mode",
                            info="animal = positive prompt point; background = negative point; "
                                 "two box corners = box prompt")
            with gr.Accordion("Box by numbers (pixels)", open=False, elem_id="mask-box-numbers"):
                with gr.Row():
                    x0 = gr.Number(label="left", precision=0, minimum=0, min_width=60)
                    y0 = gr.Number(label="top", precision=0, minimum=0, min_width=60)
                    x1 = gr.Number(label="right", precision=0, minimum=0, min_width=60)
                    y1 = gr.Number(label="bottom", precision=0, minimum=0, min_width=60)
                box_button = gr.Button("Use this box", size="sm", elem_id="mask-set-box")
            make_button = gr.Button(f"Make mask ({'SAM 2' if masker_name == 'sam2' else 'GrabCut'})",
                                    variant="primary", elem_id="mask-run")
            with gr.Row():
                accept_button = gr.Button("Accept", variant="primary", elem_id="mask-accept")
                redo_button = gr.Button("Redo", elem_id="mask-redo")
            report = gr.Markdown("Pick a photo to mask.", elem_id="mask-report")
            flank = gr.Radio(["left", "right", "front", "other"], value=None, label="Which side of the animal is shown?",
                             elem_id="mask-flank",
                             info="The coat pattern differs between left and right flank; this label is saved at once.")
            flank_hint = gr.Markdown(elem_id="mask-flank-suggestion")
            # the shortcut keys (F accepts the suggestion) are installed by whichever tab loads first
            gr.HTML("", elem_id="mask-keys", js_on_load=KEYS_JS, padding=False)
            accept_flank = gr.Button("Accept suggested flank (F)", elem_id="mask-accept-flank", size="sm",
                                     visible=False)
            status = gr.Markdown(elem_id="mask-status", elem_classes=["status-line"])
    with gr.Accordion("Boxes", open=False, elem_id="mask-boxes"):
        gr.Markdown("Each animal in a photo is one box (x, y of its top-left corner, width, height, as shares of "
                    "the photo: 0 to 1). Draw a box for an animal the detector missed, move a box that is off, "
                    "delete one that is not an animal; **Undo box change** takes back the latest change.",
                    elem_classes=["help-text"])
        box_photo = gr.State(None)  # the photo whose boxes are shown
        with gr.Row(equal_height=False):
            with gr.Column(scale=3, min_width=420):
                box_frame = gr.Image(label="The photo with its boxes", type="numpy", interactive=False, height=420,
                                     elem_id="box-frame", buttons=["fullscreen"])
            with gr.Column(scale=2, min_width=320):
                box_table = gr.Dataframe(headers=BOX_HEADERS, value=[], interactive=False, wrap=True,
                                         elem_id="box-table")
                box_annotation = gr.Dropdown(label="Annotation", choices=[], value=None, elem_id="box-annotation",
                                             info="The box that Move and Delete act on.")
                with gr.Row():
                    bx = gr.Number(label="x", minimum=0, maximum=1, step=0.01, elem_id="box-x", min_width=60)
                    by = gr.Number(label="y", minimum=0, maximum=1, step=0.01, elem_id="box-y", min_width=60)
                    bw = gr.Number(label="w", minimum=0, maximum=1, step=0.01, elem_id="box-w", min_width=60)
                    bh = gr.Number(label="h", minimum=0, maximum=1, step=0.01, elem_id="box-h", min_width=60)
                with gr.Row():
                    add_box = gr.Button("Add box", elem_id="box-add", size="sm")
                    move_box = gr.Button("Move box", elem_id="box-move", size="sm")
                    delete_box = gr.Button("Delete box", elem_id="box-delete", size="sm")
                    undo_box = gr.Button("Undo box change", elem_id="box-undo", size="sm")
                box_status = gr.Markdown(elem_id="box-status", elem_classes=["status-line"])
    with gr.Row(equal_height=True):
        all_button = gr.Button("Mask all photos without a mask", elem_id="mask-all", scale=0, min_width=260)
        all_status = gr.Markdown(elem_id="mask-all-status", elem_classes=["status-line"],
                                 value=f"Runs in the background with {masker_words}; progress in the Jobs tab.")

    def view(d: mk.MaskDraft):
        return d, mk.draft_picture(cat, d), mk.mask_report(d)

    def refresh(current):
        choices = mk.mask_image_choices(cat)
        return refreshed_choices(choices, current)

    ctx.on_refresh(refresh, inputs=[picker], outputs=[picker])

    @curator_action(role=Role.viewer)
    def pick(image_id):
        if image_id is not None and repeated_pick(("mask-photo", image_id)):
            # the second event of one pick: the curator may already be clicking on the photo
            return (gr.skip(),) * (len(shown) + 2)
        if image_id is None:
            d = mk.MaskDraft()
            return (*view(d), gr.update(value=None), "")
        d = mk.open_for_masking(cat, image_id)
        return (*view(d), gr.update(value=d.flank if d.flank in ("left", "right", "front", "other") else None), "")

    @curator_action
    def click(d: mk.MaskDraft, how: str, evt: gr.SelectData):
        if evt.index is None:
            return view(d)
        x, y = evt.index[0], evt.index[1]
        return view(mk.add_click(d, x, y, mode=how))

    @curator_action
    def typed_box(d, a, b, c, e):
        return view(mk.set_box(d, a, b, c, e))

    @curator_action
    def make(d, progress=gr.Progress()):
        progress(0.1, desc=f"Making the mask with {masker_words}")
        return view(mk.run_masker(cat, d))

    @curator_action
    def accept(d, user):
        message = mk.accept_mask(cat, mk.AcceptMaskRequest(draft=d, user=user))
        return (*view(d), message)

    @curator_action
    def redo(d):
        return (*view(mk.clear_prompts(d)), "Prompts cleared; click on the animal again.")

    @curator_action
    def choose_flank(d, side, user):
        if side is None or d.image_id is None:
            return ""
        d.flank = side
        return mk.save_flank(cat, mk.PhotoFlankRequest(image_id=d.image_id, flank=side, user=user))

    @curator_action
    def mask_all(user):
        _job, message = mk.submit_mask_all(cat, mk.MaskPhotosRequest(only_missing=True, user=user))
        return message

    @curator_action(role=Role.viewer)
    def suggest(d):
        text, show = fs.flank_suggestion(cat, d.image_id if d else None)
        return text, gr.update(visible=show)

    @curator_action
    def take_suggestion(d, user):
        message = fs.accept_suggestion(cat, fs.AcceptFlankRequest(d.image_id if d else None, user=curator_name(user)))
        d.flank = mk.open_for_masking(cat, d.image_id).flank
        return message, gr.update(value=d.flank), "", gr.update(visible=False)

    # ------------------------------------------------------------------ boxes of the selected photo

    def boxes_of(photo_id, selected=None):
        """The Boxes panel for a photo: frame, table, annotation choices, the chosen box's numbers."""
        if photo_id is None:
            return None, None, [], gr.update(choices=[], value=None), None, None, None, None
        rows = an.annotations(cat, ListAnnotationsRequest(image_id=photo_id))
        if selected not in [r.id for r in rows]:
            selected = rows[0].id if rows else None
        chosen = next((r for r in rows if r.id == selected), None)
        table = [[r.id, r.source, *(round(v, 3) for v in r.bbox),
                  "" if r.confidence is None else round(r.confidence, 2), r.individual or ""] for r in rows]
        choices = [(f"#{r.id} · {r.individual or 'no individual yet'} · {r.source}", r.id) for r in rows]
        numbers = [round(v, 4) for v in chosen.bbox] if chosen else [None] * 4
        return (photo_id, fr.photo_frame(cat, photo_id, highlight=selected), table,
                gr.update(choices=choices, value=selected), *numbers)

    @curator_action(role=Role.viewer)
    def show_boxes(d):
        if d is None or d.image_id is None:
            return boxes_of(None)
        return boxes_of(fr.photo_of(cat, d.image_id), d.image_id)

    @curator_action(role=Role.viewer)
    def pick_box(photo_id, annotation_id):
        return boxes_of(photo_id, annotation_id)

    def _box(x, y, w, h):
        if any(v is None for v in (x, y, w, h)):
            raise ValueError("Fill in x, y, w and h (shares of the photo, 0 to 1) first.")
        return (x, y, w, h)

    def _photo(photo_id):
        if photo_id is None:
            raise ValueError("Pick a photo first.")
        return photo_id

    def _annotation(annotation_id):
        if annotation_id is None:
            raise ValueError("Pick the annotation (box) first.")
        return annotation_id

    @curator_action
    def on_add_box(photo_id, x, y, w, h, user):
        new = an.add_box(cat, AddBoxRequest(image_id=_photo(photo_id), box=_box(x, y, w, h), user=user))
        return (*boxes_of(photo_id, new), f"Added box #{new}.")

    @curator_action
    def on_move_box(photo_id, annotation_id, x, y, w, h, user):
        an.move_box(cat, MoveBoxRequest(annotation_id=_annotation(annotation_id), box=_box(x, y, w, h), user=user))
        return (*boxes_of(photo_id, annotation_id), f"Moved box #{annotation_id} (its mask, if any, was cleared).")

    @curator_action
    def on_delete_box(photo_id, annotation_id, user):
        an.delete_box(cat, DeleteBoxRequest(annotation_id=_annotation(annotation_id), user=user))
        return (*boxes_of(photo_id), f"Deleted box #{annotation_id}.")

    @curator_action
    def on_undo_box(photo_id, annotation_id, user):
        message = an.undo_box(cat, UndoBoxRequest(image_id=_photo(photo_id), user=user))
        return (*boxes_of(photo_id, annotation_id), message[:1].upper() + message[1:] + ".")

    box_panel = [box_photo, box_frame, box_table, box_annotation, bx, by, bw, bh]
    box_annotation.input(pick_box, inputs=[box_photo, box_annotation], outputs=box_panel, api_visibility="private")
    ctx.changed(add_box.click(on_add_box, inputs=[box_photo, bx, by, bw, bh, ctx.user],
                              outputs=[*box_panel, box_status], api_name="add_box", trigger_mode="once"))
    ctx.changed(move_box.click(on_move_box, inputs=[box_photo, box_annotation, bx, by, bw, bh, ctx.user],
                               outputs=[*box_panel, box_status], api_name="move_box", trigger_mode="once"))
    ctx.changed(delete_box.click(on_delete_box, inputs=[box_photo, box_annotation, ctx.user],
                                 outputs=[*box_panel, box_status], api_name="delete_box", trigger_mode="once"))
    ctx.changed(undo_box.click(on_undo_box, inputs=[box_photo, box_annotation, ctx.user],
                               outputs=[*box_panel, box_status], api_name="undo_box", trigger_mode="once"))

    shown = [draft, picture, report]
    picker.input(guarded_viewer(pick), inputs=[picker], outputs=[*shown, flank, status], api_visibility="private").then(
        suggest, inputs=[draft], outputs=[flank_hint, accept_flank], api_visibility="private").then(
        show_boxes, inputs=[draft], outputs=box_panel, api_visibility="private")
    ctx.changed(accept_flank.click(take_suggestion, inputs=[draft, ctx.user],
                                   outputs=[status, flank, flank_hint, accept_flank], api_name="accept_flank"))
    # every click counts, in order: queued one at a time (the draft is read from the session when each runs)
    picture.select(click, inputs=[draft, mode], outputs=shown, api_visibility="private", trigger_mode="multiple",
                   concurrency_limit=1, concurrency_id="mask-click", show_progress="hidden")
    box_button.click(typed_box, inputs=[draft, x0, y0, x1, y1], outputs=shown, api_visibility="private")
    make_button.click(make, inputs=[draft], outputs=shown, api_name="make_mask", concurrency_limit=1)
    ctx.changed(accept_button.click(accept, inputs=[draft, ctx.user], outputs=[*shown, status],
                                    api_name="accept_mask"))
    redo_button.click(redo, inputs=[draft], outputs=[*shown, status], api_visibility="private")
    ctx.changed(flank.input(choose_flank, inputs=[draft, flank, ctx.user], outputs=[status], api_name="set_flank")
                .then(guarded_viewer(lambda: ("", gr.update(visible=False))), outputs=[flank_hint, accept_flank],
                      api_visibility="private"))
    all_button.click(mask_all, inputs=[ctx.user], outputs=[all_status], api_name="mask_all_photos")
