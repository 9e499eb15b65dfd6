"""Benchmarks tab: freeze the catalogue into a benchmark, evaluate models on it in the
background, and compare the stored evaluations (table and chart, provenance of every number on hover)."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from app.ui_base import UIContext, curator_action, guarded_viewer
from core.identify.backbones import describe_backbones
from jobs.actions import benchmarks as bs
from jobs.actions import match as ms
from jobs.actions import spots as sp
from jobs.actions.common import curator_name

TITLE = "Benchmarks"
ORDER = 40

HELP = """\
A **benchmark** freezes the photos that belong to an individual, with their names, flanks and sightings, and
splits them once (seeded) into a part models may learn from and a **test** part. An **evaluation** asks a model to
find, for every test photo, the other photos of the same animal; *match quality* is the mean average precision
(mAP), averaged per individual so that animals with many photos do not dominate. Photos from the query's own
sighting are left out of the headline number (same place, same moment); the figure with them is shown too:
a large gap means the model leans on the background.
"""

SPOTS_HELP = """\
The model above picks its top **K** candidates; keypoints on the animal (its mask, else the whole photo) are
then matched and checked for one consistent geometry, and the number of matched spots becomes a probability of
"same animal" (calibrated on the benchmark's training photos). The result is stored as a *pipeline* you can
compare, promote and review with. Opposite flanks are never compared by spots.
"""


def _describe(name: str | None) -> str:
    if not name:
        return ""
    try:
        text = describe_backbones().get(name)
    except ImportError:
        text = None
    return f"*{name}*: {text}" if text else ""


def build(ctx: UIContext) -> None:
    cat = ctx.catalogue
    gr.Markdown(HELP, elem_classes=["help-text"])
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=320):
            with gr.Group(elem_id="bench-create-box"):
                gr.Markdown("#### New benchmark from the catalogue")
                name = gr.Textbox(label="Name", placeholder="e.g. pantanal-2025-identity", max_lines=1,
                                  elem_id="bench-name")
                split = gr.Radio(bs.SPLIT_CHOICES, value="identity", label="Test on", elem_id="bench-split")
                with gr.Row():
                    fraction = gr.Slider(0.1, 0.9, value=0.3, step=0.05, label="Test share", elem_id="bench-fraction")
                    seed = gr.Number(0, precision=0, label="Seed", elem_id="bench-seed", minimum=0)
                create_button = gr.Button("Create benchmark", variant="primary", elem_id="bench-create")
        with gr.Column(scale=1, min_width=320):
            with gr.Group(elem_id="bench-eval-box"):
                gr.Markdown("#### Evaluate a model (runs in the background)")
                bench_pick = gr.Dropdown([], value=None, label="Benchmark", elem_id="bench-pick")
                backbone = gr.Dropdown(ms.matcher_choices(), value=ms.DEFAULT_MODEL, label="Model (backbone)",
                                       allow_custom_value=True, elem_id="bench-backbone",
                                       info="Any listed name, or timm:<architecture> / hf-hub:<repo> with local weights.")
                backbone_help = gr.Markdown(_describe(ms.DEFAULT_MODEL), elem_classes=["help-text"])
                variant = gr.Dropdown(bs.EVALUATION_VARIANTS, value="full_rgb", label="What the model sees",
                                      elem_id="bench-variant",
                                      info="Variants other than the whole photo need masks (Ingest or `rosette mask`).")
                rerank = gr.Dropdown(bs.RERANK_CHOICES, value="none", label="Re-ranking", elem_id="bench-rerank")
                flank = gr.Dropdown(bs.FLANK_CHOICES, value="any", label="Candidates shown", elem_id="bench-flank",
                                    info="Same flank: what curators review. Other flank: left against right. "
                                         "Photos without a left/right flank are left out of both.")
                eval_button = gr.Button("Start evaluation", variant="primary", elem_id="bench-evaluate")
            with gr.Accordion("Re-rank with spot evidence (matched keypoints on the coat)", open=False,
                              elem_id="bench-spots-box"):
                gr.Markdown(SPOTS_HELP, elem_classes=["help-text"])
                spot_matcher = gr.Dropdown(sp.available_matchers(), value="sift", label="Spot matcher",
                                           elem_id="bench-spot-matcher",
                                           info="Not available here (weights not on this machine): "
                                                + (", ".join(n for n, a, _ in sp.matcher_rows() if a != "yes")
                                                   or "none"))
                with gr.Row():
                    spot_lnbnn = gr.Checkbox(value=True, label="Also vote over the whole gallery (LNBNN)",
                                             elem_id="bench-spot-lnbnn")
                    spot_shortlist = gr.Number(50, precision=0, minimum=1, label="Candidates re-ranked (K)",
                                               elem_id="bench-spot-k")
                    spot_own = gr.Number(sp.DEFAULT_LNBNN_SHORTLIST, precision=0, minimum=0,
                                         label="LNBNN's own top candidates joined (0: none)", elem_id="bench-spot-own")
                with gr.Row():
                    spot_button = gr.Button("Start evaluation with spot evidence", elem_id="bench-spot-evaluate")
                    keypoints_button = gr.Button("Extract keypoints for all photos", elem_id="bench-keypoints")
    status = gr.Markdown(elem_id="bench-status", elem_classes=["status-line"])
    benchmarks = gr.Dataframe(headers=bs.BENCHMARK_HEADERS, value=[], interactive=False, label="Benchmarks",
                              elem_id="bench-table", max_height=260)
    with gr.Row(equal_height=True):
        show_bench = gr.Dropdown([("All benchmarks", "")], value="", label="Show evaluations on",
                                 elem_id="bench-filter", scale=2)
        refresh_button = gr.Button("Refresh", elem_id="bench-refresh", scale=0, min_width=120)
    chart = gr.Plot(label="Match quality", elem_id="bench-chart")
    evaluations = gr.Dataframe(headers=bs.EVALUATION_HEADERS, value=[], interactive=False, wrap=True,
                               label="Stored evaluations (newest first; the last column says exactly which model, "
                                     "weights, variant, masker and inpainter produced each number)",
                               elem_id="bench-evaluations", max_height=420,
                               column_widths=["50px", "150px", "130px", "140px", "120px", "90px", "70px", "110px",
                                              "90px", "90px", "70px", "120px", "80px", "520px"])

    def render(shown_bench, picked):
        names = bs.benchmark_names(cat)
        rows = bs.evaluation_rows(cat, benchmark=shown_bench or None)
        table = pd.DataFrame([r.cells() for r in rows], columns=bs.EVALUATION_HEADERS)
        return (pd.DataFrame(bs.benchmark_rows(cat), columns=bs.BENCHMARK_HEADERS),
                gr.update(choices=names, value=picked if picked in names else (names[0] if names else None)),
                gr.update(choices=[("All benchmarks", "")] + [(n, n) for n in names],
                          value=shown_bench if shown_bench in names else ""),
                bs.evaluation_chart(rows), table)

    outputs = [benchmarks, bench_pick, show_bench, chart, evaluations]
    ctx.on_refresh(render, inputs=[show_bench, bench_pick], outputs=outputs)
    gr.on([refresh_button.click, show_bench.input], guarded_viewer(render), inputs=[show_bench, bench_pick],
          outputs=outputs, api_visibility="private")
    backbone.change(guarded_viewer(_describe), inputs=[backbone], outputs=[backbone_help], show_progress="hidden",
                    api_visibility="private")

    @curator_action
    def do_create(bench_name, split_kind, test_fraction, bench_seed, user):
        request = bs.CreateBenchmarkRequest(name=bench_name, user=curator_name(user), split=split_kind,
                                            test_fraction=test_fraction, seed=int(bench_seed or 0))
        return bs.create_benchmark(cat, request).message

    @curator_action
    def do_evaluate(bench_name, backbone_name, variant_name, rerank_name, flank_name, user):
        request = bs.EvaluateRequest(benchmark=bench_name or "", backbone=backbone_name or "", variant=variant_name,
                                     rerank=rerank_name, flank=flank_name or "any", user=curator_name(user))
        _job_id, message = bs.launch_evaluation(cat, request)
        return message

    @curator_action
    def do_spot_evaluate(bench_name, model_name, matcher, lnbnn, shortlist, own, user):
        if not bench_name:
            raise ValueError("Choose a benchmark to evaluate on (create one first if there is none).")
        request = sp.SpotEvaluationRequest(benchmark=bench_name, model=model_name or ms.DEFAULT_MODEL,
                                           matcher=matcher or "sift", shortlist=int(shortlist or 50),
                                           lnbnn=bool(lnbnn), user=user,
                                           lnbnn_shortlist=sp.DEFAULT_LNBNN_SHORTLIST if own is None else int(own))
        return sp.launch_spot_evaluation(cat, request)[1]

    @curator_action
    def do_keypoints(matcher, user):
        return sp.launch_keypoints(cat, sp.KeypointsRequest(matcher=matcher or "sift", user=user))[1]

    ctx.changed(spot_button.click(do_spot_evaluate, inputs=[bench_pick, backbone, spot_matcher, spot_lnbnn,
                                                           spot_shortlist, spot_own, ctx.user],
                                  outputs=[status], api_name="start_spot_evaluation"))
    keypoints_button.click(do_keypoints, inputs=[spot_matcher, ctx.user], outputs=[status],
                           api_name="extract_keypoints")
    created = create_button.click(do_create, inputs=[name, split, fraction, seed, ctx.user],
                                  outputs=[status], api_name="create_benchmark")
    created.success(guarded_viewer(lambda shown, new: render(shown, (new or "").strip())),
                    inputs=[show_bench, name], outputs=outputs,
                    show_progress="hidden", api_visibility="private")
    ctx.changed(eval_button.click(do_evaluate, inputs=[bench_pick, backbone, variant, rerank, flank, ctx.user],
                                  outputs=[status], api_name="start_evaluation"))
