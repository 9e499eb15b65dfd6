"""Diagnostics tab: which evidence a model uses, for one photo and for a model on a benchmark, and how selectively
a model's similarity reacts to a different animal rather than to a change of context (selective sensitivity)."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from app.ui_base import UIContext, curator_action, guarded_viewer, refreshed_choices
from core.inspect.inpainting import default_inpainter_name
from db.models import Role
from jobs.actions import diagnostic_words as dw
from jobs.actions import diagnostics as ds
from jobs.actions import photo_diagnosis as photo
from jobs.requests.benchmarks import CreateBenchmarkRequest
from jobs.requests.diagnostics import DiagnoseRequest, SensitivityRequest

TITLE = "Diagnostics"
ORDER = 60

INTRO = """\
A good match score can come from the wrong evidence: the **background** of the photo (same place, same
bushes) instead of the animal's coat, or a pattern the model sees the same way **mirrored**, so that it cannot
tell a left flank from a right one. This screen shows how much a model leans on each. Hover over a number to
see which model, weights, image variant, masker and inpainter produced it.
"""

SENSITIVITY_INTRO = """\
A good matcher is **selective**: its likeness score for a photo should hardly move when only the *context*
changes (a new background, other lighting, another viewpoint) and should fall clearly when the *animal* changes
(another individual's coat on the same body). Each test photo is changed in these four ways at five strengths;
the curves show how far the score to the original photo falls. Every test photo needs a mask.
"""
SENSITIVITY_POLL_S = 2.0


def _inpainter_choices() -> list[tuple[str, str]]:
    return [(dw.describe_inpainter(name), name) for name in dw.inpainter_names()]


def build(ctx: UIContext) -> None:
    cat = ctx.catalogue
    backbones = ds.backbone_names(cat)
    inpainters = _inpainter_choices()
    default_inp = default_inpainter_name()
    gr.Markdown(INTRO, elem_classes=["help-text"], elem_id="diag-intro")

    with gr.Tabs(elem_id="diag-sections"):
        # ------------------------------------------------------------------ one photo
        with gr.Tab("One photo", id="diag-photo", elem_id="diag-photo-section"):
            with gr.Row(equal_height=True):
                photo_pick = gr.Dropdown(label="Photo (only photos with a mask)", choices=[], value=None,
                                         filterable=True, elem_id="diag-photo-pick", scale=3)
                photo_backbone = gr.Dropdown(label="Model", choices=backbones, value=backbones[0],
                                             elem_id="diag-photo-backbone", scale=1,
                                             info="backbone registry name")
                photo_inpainter = gr.Dropdown(label="Background filled by", choices=inpainters, value=default_inp,
                                              elem_id="diag-photo-inpainter", scale=2,
                                              info="inpainter for the painted-out background")
            with gr.Row(equal_height=True):
                photo_button = gr.Button("Diagnose this photo", variant="primary", elem_id="diag-photo-run", scale=3)
                photo_spots = gr.Checkbox(label=f"Also check spot evidence (top {photo.SPOT_CHECK_CANDIDATES} "
                                                f"candidates, {photo.SPOT_CHECK_MATCHER} keypoints)", value=True,
                                          elem_id="diag-photo-spots-check", scale=2,
                                          info="Does the best match share coat spots with the photo, or only "
                                               "background and pose? A few seconds.")
            variants = gr.Gallery(label="The photo in six versions; the number is how strongly each version alone "
                                        "still points to this animal (likeness to its own individual)",
                                  columns=3, rows=2, height=820, object_fit="contain", allow_preview=True,
                                  interactive=False, elem_id="diag-variants", buttons=[])
            with gr.Row(equal_height=False):
                with gr.Column(scale=3):
                    numbers = gr.Markdown("Pick a photo and press “Diagnose this photo”.", elem_id="diag-photo-numbers")
                    spot_numbers = gr.Markdown("", elem_id="diag-photo-spots")
                with gr.Column(scale=1, min_width=220):
                    neighbour = gr.Image(label="Closest other individual to the mirrored photo", interactive=False,
                                         height=240, elem_id="diag-nn", buttons=[])

        # ------------------------------------------------------------------ model on a benchmark
        with gr.Tab("A model on a benchmark", id="diag-benchmark", elem_id="diag-benchmark-section"):
            with gr.Row(equal_height=True):
                run_backbone = gr.Dropdown(label="Model", choices=backbones, value=backbones[0],
                                           elem_id="diag-run-backbone")
                run_benchmark = gr.Dropdown(label="Benchmark", choices=[], value=None, elem_id="diag-run-benchmark",
                                            info="a frozen set of labelled photos; its test photos are used")
                run_masker = gr.Dropdown(label="Masker for photos without a mask", choices=dw.masker_names(),
                                         value=dw.masker_in_use()[0], elem_id="diag-run-masker")
                run_inpainter = gr.Dropdown(label="Background filled by", choices=inpainters, value=default_inp,
                                            elem_id="diag-run-inpainter")
                run_seeds = gr.Textbox(label="Seeds", value="0", max_lines=1, elem_id="diag-run-seeds",
                                       info="e.g. 0, 1, 2: one painted-out background per seed, results averaged")
            with gr.Row(equal_height=True):
                run_button = gr.Button("Run diagnostics in the background", variant="primary",
                                       elem_id="diag-run-job", scale=0, min_width=280)
                run_status = gr.Markdown(elem_id="diag-run-status", elem_classes=["status-line"])
            with gr.Accordion("Freeze a new benchmark from the catalogue", open=False,
                              elem_id="diag-freeze-box"):
                with gr.Row(equal_height=True):
                    freeze_name = gr.Textbox(label="Benchmark name", max_lines=1, elem_id="diag-freeze-name")
                    freeze_split = gr.Radio(["identity", "sighting"], value="identity", label="Test photos are",
                                            info="identity: animals never seen in training (hardest); "
                                                 "sighting: other encounters of known animals",
                                            elem_id="diag-freeze-split")
                    freeze_button = gr.Button("Freeze benchmark", elem_id="diag-freeze")
            with gr.Row(equal_height=True):
                stored = gr.Dropdown(label="Stored diagnostics", choices=[], value=None, elem_id="diag-stored",
                                     scale=4, info="newest first")
                reload_button = gr.Button("Refresh", elem_id="diag-reload", scale=0, min_width=120)
            summary = gr.Markdown("No diagnostics stored yet: run them above.", elem_id="diag-summary")
            with gr.Row(equal_height=False):
                context_plot = gr.Plot(label="Background vs coat", elem_id="diag-context-plot")
                mirror_plot = gr.Plot(label="Mirror check", elem_id="diag-mirror-plot")
            flank_table = gr.Dataframe(headers=ds.FLANK_HEADERS, value=[], interactive=False, wrap=True,
                                       label="Recognising an animal from the same side and from its other side",
                                       elem_id="diag-flank-table")
            gr.Markdown(ds.FLANK_HELP, elem_classes=["help-text"])

        # ------------------------------------------------------------------ selective sensitivity
        with gr.Tab("Selective sensitivity", id="diag-sensitivity", elem_id="diag-sensitivity-section"):
            gr.Markdown(SENSITIVITY_INTRO, elem_classes=["help-text"])
            with gr.Row(equal_height=True):
                sens_backbone = gr.Dropdown(label="Model", choices=backbones, value=backbones[0],
                                            elem_id="diag-sens-backbone")
                sens_benchmark = gr.Dropdown(label="Benchmark", choices=[], value=None, elem_id="diag-sens-benchmark",
                                             info="its test photos are changed and compared with themselves")
                sens_seed = gr.Number(0, precision=0, minimum=0, label="Seed", elem_id="diag-sens-seed",
                                      info="which way each photo's light and viewpoint change; the intervals")
                sens_mask = gr.Checkbox(label="Mask the photos without a mask first", value=False,
                                        elem_id="diag-sens-mask-missing",
                                        info=f"with {dw.masker_in_use()[1]}; stored in the catalogue")
            with gr.Row(equal_height=True):
                sens_button = gr.Button("Measure selective sensitivity in the background", variant="primary",
                                        elem_id="diag-sens-run", scale=0, min_width=320)
                sens_status = gr.Markdown(elem_id="diag-sens-status", elem_classes=["status-line"])
            with gr.Row(equal_height=True):
                sens_stored = gr.Dropdown(label="Stored sensitivity runs", choices=[], value=None,
                                          elem_id="diag-sens-stored", scale=4, info="newest first")
                sens_reload = gr.Button("Refresh", elem_id="diag-sens-reload", scale=0, min_width=120)
            sens_summary = gr.Markdown("No sensitivity run stored yet: measure one above.", elem_id="diag-sens-summary")
            sens_plot = gr.Plot(label="Similarity to the original photo as each change grows", elem_id="diag-sens-plot")
            sens_table = gr.Dataframe(headers=ds.SENSITIVITY_HEADERS, value=[], interactive=False, wrap=True,
                                      label="How fast the similarity falls for each kind of change",
                                      elem_id="diag-sens-table")
            gr.Markdown(ds.SENSITIVITY_HELP, elem_classes=["help-text"])
            sens_job = gr.State(None)
            sens_timer = ctx.tab_timer(SENSITIVITY_POLL_S)

    # ---------------------------------------------------------------------- handlers

    def refresh(current_photo, current_bench, current_stored):
        photos = photo.masked_image_choices(cat)
        benches = ds.benchmark_names(cat)
        runs = ds.diagnosis_choices(cat)
        bench_value = current_bench if current_bench in benches else (benches[0] if benches else None)
        stored_value = current_stored if any(c[1] == current_stored for c in runs) else (runs[0][1] if runs else None)
        return (refreshed_choices(photos, current_photo), gr.update(choices=benches, value=bench_value),
                gr.update(choices=runs, value=stored_value))

    refresh_outputs = [photo_pick, run_benchmark, stored]
    ctx.on_refresh(refresh, inputs=refresh_outputs, outputs=refresh_outputs)
    # trained models appear in both model pickers once their training job registered them
    ctx.on_refresh(lambda: (gr.update(choices=ds.backbone_names(cat)),) * 2, outputs=[photo_backbone, run_backbone])
    reload_button.click(guarded_viewer(refresh), inputs=refresh_outputs, outputs=refresh_outputs,
                        api_visibility="private")

    @curator_action(role=Role.viewer)
    def diagnose_photo(image_id, backbone, inpainter, check_spots=False, progress=gr.Progress()):
        if image_id is None:
            raise ValueError("Pick a photo first (only photos with a mask are listed; make masks in the Mask tab).")

        def step(frac: float, msg: str) -> None:
            progress(frac, desc=msg)

        d = photo.diagnose_image(cat, int(image_id), backbone=backbone, inpainter=inpainter, progress=step)
        pictures = [(v.picture, v.caption) for v in d.variants]
        spots = ""
        if check_spots:
            progress(0.95, desc="Checking spot evidence")
            try:
                spots = photo.spot_check_markdown(photo.spot_evidence_check(cat, int(image_id), model=backbone))
            except (ValueError, FileNotFoundError) as exc:  # the rest of the diagnosis still stands
                spots = f"*The spot evidence check could not run: {exc}*"
        return pictures, photo.image_diagnosis_markdown(d), gr.update(
            value=d.nn_thumb, label=f"Closest other individual to the mirrored photo: {d.nn_individual or '—'}"
            + (f" (photo #{d.nn_image_id})" if d.nn_image_id else "")), spots

    photo_button.click(diagnose_photo, inputs=[photo_pick, photo_backbone, photo_inpainter, photo_spots],
                       outputs=[variants, numbers, neighbour, spot_numbers], api_name="diagnose_photo",
                       concurrency_limit=1)

    @curator_action
    def launch(backbone, benchmark, masker, inpainter, seeds, user):
        request = DiagnoseRequest(benchmark=benchmark, backbone=backbone, masker=masker, inpainter=inpainter,
                                  seeds=ds.parse_seeds(seeds), user=user)
        _job, message = ds.submit_diagnose(cat, request)
        return message

    run_button.click(launch, inputs=[run_backbone, run_benchmark, run_masker, run_inpainter, run_seeds, ctx.user],
                     outputs=[run_status], api_name="run_diagnostics")

    @curator_action
    def freeze(name, split, user):
        return ds.create_catalogue_benchmark(cat, CreateBenchmarkRequest(name=name, split=split, user=user))

    ctx.changed(freeze_button.click(freeze, inputs=[freeze_name, freeze_split, ctx.user], outputs=[run_status],
                                    api_name="freeze_benchmark"))

    @curator_action(role=Role.viewer)
    def show(evaluation_id):
        v = ds.load_diagnosis(cat, evaluation_id) if evaluation_id is not None else None
        if v is None:
            return ("No diagnostics stored yet: run them above.", None, None,
                    pd.DataFrame([], columns=ds.FLANK_HEADERS))
        return (ds.diagnosis_summary_markdown(v), ds.context_figure(v), ds.mirror_histogram_figure(v),
                pd.DataFrame(ds.flank_rows(v), columns=ds.FLANK_HEADERS))

    stored.change(show, inputs=[stored], outputs=[summary, context_plot, mirror_plot, flank_table],
                  api_visibility="private", show_progress="hidden")


    # ---------------------------------------------------------------------- selective sensitivity

    def sens_refresh(current_bench, current_stored):
        benches = ds.benchmark_names(cat)
        runs = ds.sensitivity_choices(cat)
        bench_value = current_bench if current_bench in benches else (benches[0] if benches else None)
        stored_value = current_stored if any(c[1] == current_stored for c in runs) else (runs[0][1] if runs else None)
        return gr.update(choices=benches, value=bench_value), gr.update(choices=runs, value=stored_value)

    sens_refresh_io = [sens_benchmark, sens_stored]
    ctx.on_refresh(sens_refresh, inputs=sens_refresh_io, outputs=sens_refresh_io)
    ctx.on_refresh(lambda: gr.update(choices=ds.backbone_names(cat)), outputs=[sens_backbone])
    sens_reload.click(guarded_viewer(sens_refresh), inputs=sens_refresh_io, outputs=sens_refresh_io,
                      api_visibility="private")

    @curator_action
    def sens_launch(backbone, benchmark, seed, mask_missing, user):
        request = SensitivityRequest(benchmark=benchmark or "", backbone=backbone, seed=int(seed or 0),
                                     mask_missing=bool(mask_missing), user=user)
        job_id, message = ds.submit_sensitivity(cat, request)
        return job_id, message

    ctx.polls_after(sens_button.click(sens_launch, inputs=[sens_backbone, sens_benchmark, sens_seed, sens_mask,
                                                           ctx.user],
                                      outputs=[sens_job, sens_status], api_name="run_sensitivity"), sens_timer)

    def sens_poll(job_id):
        """The running sensitivity job's progress, then its result; the timer stops when nothing is left to poll."""
        if not job_id:
            return gr.skip(), gr.skip(), gr.skip(), gr.Timer(active=False)
        text, evaluation_id, over = ds.sensitivity_job_status(cat, job_id)
        stored_update = gr.skip()
        if evaluation_id is not None:
            stored_update = gr.update(choices=ds.sensitivity_choices(cat), value=evaluation_id)
        return text, stored_update, (None if over else job_id), (gr.Timer(active=False) if over else gr.skip())

    sens_timer.tick(guarded_viewer(sens_poll), inputs=[sens_job],
                    outputs=[sens_status, sens_stored, sens_job, sens_timer], show_progress="hidden",
                    api_visibility="private")

    @curator_action(role=Role.viewer)
    def sens_show(evaluation_id):
        v = ds.load_sensitivity(cat, evaluation_id) if evaluation_id is not None else None
        if v is None:
            return ("No sensitivity run stored yet: measure one above.", None,
                    pd.DataFrame([], columns=ds.SENSITIVITY_HEADERS))
        return (ds.sensitivity_summary_markdown(v), ds.sensitivity_plot(v),
                pd.DataFrame(ds.sensitivity_rows(v), columns=ds.SENSITIVITY_HEADERS))

    sens_stored.change(sens_show, inputs=[sens_stored], outputs=[sens_summary, sens_plot, sens_table],
                       api_visibility="private", show_progress="hidden")
