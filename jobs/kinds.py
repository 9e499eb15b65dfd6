"""Built-in job kinds. Each handler is thin: it calls one db/ or core/ function
with ``ctx`` progress / cancellation wired in, and returns a JSON result."""

from __future__ import annotations

import time
from typing import Any

from db.session import Catalogue
from jobs.queue import JobContext, register_job_kind


@register_job_kind("sleep")
def sleep_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """A diagnostic job: sleeps ``steps`` x ``seconds``, reporting progress; fails on request."""
    steps = int(params.get("steps", 5))
    for i in range(steps):
        ctx.check_cancelled()
        time.sleep(float(params.get("seconds", 0.1)))
        ctx.progress((i + 1) / steps, f"step {i + 1}/{steps}")
    if params.get("fail"):
        raise RuntimeError(str(params["fail"]))
    return {"summary": f"slept {steps} steps", "steps": steps}


def _cancel_check(ctx: JobContext):
    return ctx.cancelled


@register_job_kind("evaluate")
def evaluate_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Benchmark evaluation: params backbone, benchmark, variant, rerank."""
    from db.evaluation import run_evaluation

    res = run_evaluation(cat, backbone=params.get("backbone", "efficientnet_lite0"), benchmark=params["benchmark"],
                         variant=params.get("variant", "full_rgb"), rerank=params.get("rerank", "none"),
                         progress=ctx.callback(end=0.95, label="embedding"), should_cancel=ctx.cancelled)
    ctx.check_cancelled()
    keep = ("map_macro", "map_micro", "cmc_macro", "cmc_micro", "n_queries", "model", "variant", "benchmark",
            "rerank", "evaluation_id")
    return {**{k: res[k] for k in keep if k in res},
            "summary": f"{res['model']} on {res['benchmark']}: mAP macro {res['map_macro']:.3f}"}


@register_job_kind("diagnose")
def diagnose_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Diagnostics: params backbone, benchmark, masker, inpainter, seeds."""
    from db.diagnostics import run_diagnose

    res = run_diagnose(cat, backbone=params.get("backbone", "efficientnet_lite0"), benchmark=params["benchmark"],
                       masker=params.get("masker"), inpainter=params.get("inpainter"),
                       seeds=tuple(params.get("seeds", (0,))), user=params.get("user", "curator"),
                       progress=lambda f, m: ctx.progress(f, m), should_cancel=ctx.cancelled)
    ctx.check_cancelled()
    return {"evaluation_id": res["evaluation_id"], "bg_fg": res["bg_fg"], "mirror_tier": res["mirror_tier"],
            "summary": f"{res['model']} on {res['benchmark']}: BG/FG {res['bg_fg']}, mirror tier {res['mirror_tier']}"}


@register_job_kind("mask")
def mask_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Batch masking: params masker, only_missing, image_ids."""
    from db.masks import mask_images

    res = mask_images(cat, masker=params.get("masker"), image_ids=params.get("image_ids"),
                      only_missing=params.get("only_missing", True), user=params.get("user", "curator"),
                      progress=ctx.callback(label="masking"), should_cancel=ctx.cancelled)
    ctx.check_cancelled()
    return res


@register_job_kind("embed")
def embed_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Warm the feature cache for every catalogue photo: params backbone, variant."""
    from db.embeddings import all_image_ids, embed_images, get_backbone

    ids = all_image_ids(cat)
    backbone = get_backbone(cat, params.get("backbone", "efficientnet_lite0"))
    emb = embed_images(cat, ids, backbone=backbone, variant=params.get("variant", "full_rgb"),
                       progress=ctx.callback(label="embedding"), should_cancel=ctx.cancelled)
    return {"images": len(ids), "dim": int(emb.shape[1]) if emb.ndim == 2 else 0,
            "summary": f"embedded {len(ids)} photos with {backbone.config.name}"}


@register_job_kind("export")
def export_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Kaggle submission: params test_csv, images_dir, model, out, variant."""
    from db.export import export_kaggle

    return export_kaggle(cat, test_csv=params["test_csv"], images_dir=params["images_dir"],
                         model=params.get("model", "efficientnet_lite0"), out=params["out"],
                         variant=params.get("variant", "full_rgb"), progress=ctx.callback(label="embedding"),
                         should_cancel=ctx.cancelled)
