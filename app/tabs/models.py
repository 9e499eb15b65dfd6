"""Models tab: a leaderboard per benchmark and variant (provenance on hover), compare two models with paired
statistics, promote one to active for a species or archive it, see its calibration, and retrain from the
decisions made since the active model."""

from __future__ import annotations

import gradio as gr

from app.ui_base import UIContext, curator_action, guarded_viewer
from db.models import Role
from jobs.actions import models as mv
from jobs.actions import promote as pm
from jobs.actions.common import curator_name
from jobs.actions.species import species_names

TITLE = "Models"
ORDER = 55

CSS = """
table { width: 100%; border-collapse: collapse; font-size: var(--text-sm); }
th, td { padding: 5px 8px; border-bottom: 1px solid var(--border-color-primary); text-align: left; }
th { color: var(--body-text-color-subdued); font-weight: 600; }
td.prov { text-decoration: underline dotted; cursor: help; font-weight: 600; }
.tier { padding: 1px 6px; border-radius: 6px; }
.note, .empty { color: var(--body-text-color-subdued); font-size: var(--text-xs); padding: 6px 0; }
"""
SORT_LABELS = {"map_macro": "mAP macro", "map_micro": "mAP micro", "cmc1_macro": "CMC@1", "cmc5_macro": "CMC@5",
               "map_same_flank": "same-flank mAP", "map_cross_flank": "cross-flank mAP",
               "cross_within": "cross/within flank", "bg_fg": "BG/FG", "mirror_sim": "mirror similarity",
               "selectivity": "selectivity (coat vs context)",
               "train_seconds": "training time", "name": "name"}
VARIANTS = ["full_rgb", "foreground_only", "background_only", "silhouette", "mirror"]


def build(ctx: UIContext) -> None:
    cat = ctx.catalogue
    with gr.Row(equal_height=True):
        bench = gr.Dropdown([], label="Benchmark", elem_id="models-benchmark", scale=2)
        variant = gr.Dropdown(VARIANTS, value="full_rgb", label="Variant", elem_id="models-variant", scale=1)
        sort = gr.Dropdown([(SORT_LABELS[k], k) for k in mv.SORT_KEYS], value="map_macro", label="Sort by",
                           elem_id="models-sort", scale=1)
        archived = gr.Checkbox(label="Show archived", value=False, elem_id="models-archived", scale=0)
    table = gr.HTML(mv.leaderboard_html([]), elem_id="models-leaderboard", css_template=CSS)
    with gr.Row(equal_height=True):
        pick = gr.Dropdown([], label="Model", elem_id="models-pick", scale=2)
        species = gr.Dropdown([], label="Species", elem_id="models-species", scale=1)
        promote_button = gr.Button("Promote to active", variant="primary", elem_id="models-promote", scale=0,
                                   min_width=170)
        archive_button = gr.Button("Archive", elem_id="models-archive", scale=0, min_width=110)
    status = gr.Markdown(elem_id="models-status", elem_classes=["status-line"])
    with gr.Accordion("Compare two models", open=True, elem_id="models-compare-box"):
        with gr.Row(equal_height=True):
            model_a = gr.Dropdown([], label="Model A", elem_id="models-a")
            model_b = gr.Dropdown([], label="Model B", elem_id="models-b")
            compare_button = gr.Button("Compare", elem_id="models-compare", scale=0, min_width=120)
        verdict = gr.Markdown(elem_id="models-verdict")
        diff_plot = gr.Plot(label="Per-query differences", elem_id="models-diff-plot")
    with gr.Accordion("Confidence calibration", open=False, elem_id="models-calibration-box"):
        calib_button = gr.Button("Show the calibration of the chosen model", elem_id="models-calibrate", size="sm")
        calib_text = gr.Markdown(elem_id="models-calibration")
        calib_plot = gr.Plot(label="Reliability", elem_id="models-calibration-plot")
    with gr.Accordion("Retrain from new decisions", open=True, elem_id="models-retrain-box"):
        retrain_text = gr.Markdown(elem_id="models-retrain-status")
        retrain_button = gr.Button("Retrain, evaluate, diagnose and compare with the active model",
                                   elem_id="models-retrain", size="sm")

    def board(b, v, s, show_archived):
        if not b:
            return mv.leaderboard_html([])
        return mv.leaderboard_html(mv.leaderboard_rows(cat, benchmark=b, variant=v or "full_rgb",
                                                       sort=s or "map_macro", include_archived=bool(show_archived)))

    def refresh(b, v, s, show_archived, current, sp):
        benches = mv.benchmark_names(cat)
        b = b if b in benches else (benches[-1] if benches else None)
        names = mv.model_names(cat)
        species_list = species_names(cat)
        sp = sp if sp in species_list else (species_list[0] if species_list else None)
        pick_value = current if current in names else None
        return (gr.update(choices=benches, value=b), board(b, v, s, show_archived),
                gr.update(choices=names, value=pick_value), gr.update(choices=names), gr.update(choices=names),
                gr.update(choices=species_list, value=sp), mv.retrain_status(cat, sp))

    outs = [bench, table, pick, model_a, model_b, species, retrain_text]
    ctx.on_refresh(refresh, inputs=[bench, variant, sort, archived, pick, species], outputs=outs)
    gr.on([bench.input, variant.input, sort.input, archived.input], guarded_viewer(board),
          inputs=[bench, variant, sort, archived], outputs=[table], api_visibility="private")

    @curator_action(role=Role.admin)
    def do_promote(name, sp, user):
        return pm.promote(cat, pm.PromoteRequest(model=name or "", species=sp or None,
                                                 user=curator_name(user)))["message"]

    @curator_action(role=Role.admin)
    def do_archive(name, user):
        return pm.archive(cat, pm.ArchiveRequest(model=name or "", user=curator_name(user)))

    @curator_action(role=Role.viewer)
    def do_compare(a, b, benchmark, progress=gr.Progress()):
        request = mv.CompareRequest(a=a, b=b, benchmark=benchmark or "")
        progress(0.1, desc="Embedding the benchmark's test photos with both models")
        result = mv.compare(cat, request)
        return mv.compare_markdown(result), mv.difference_figure(result)

    @curator_action(role=Role.viewer)
    def do_calibrate(name, sp):
        return mv.calibration_view(cat, name, sp)

    @curator_action(role=Role.admin)
    def do_retrain(sp, user):
        outcome = mv.retrain(cat, mv.RetrainRequest(user=curator_name(user), species=sp))
        return outcome.message, mv.retrain_status(cat, sp)

    ctx.changed(promote_button.click(do_promote, inputs=[pick, species, ctx.user], outputs=[status],
                                     api_name="promote_model"))
    ctx.changed(archive_button.click(do_archive, inputs=[pick, ctx.user], outputs=[status], api_name="archive_model"))
    compare_button.click(do_compare, inputs=[model_a, model_b, bench], outputs=[verdict, diff_plot],
                         api_name="compare_models")
    calib_button.click(do_calibrate, inputs=[pick, species], outputs=[calib_text, calib_plot],
                       api_visibility="private")
    ctx.changed(retrain_button.click(do_retrain, inputs=[species, ctx.user], outputs=[status, retrain_text],
                                     api_name="retrain_from_decisions"))
