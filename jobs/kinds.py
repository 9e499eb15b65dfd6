"""Built-in job kinds. Each handler is thin: it calls one db/ or core/ function
with ``ctx`` progress / cancellation wired in, and returns a JSON result."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from core.backbones import DEFAULT_BACKBONE
from db.session import Catalogue
from jobs.context import JobContext
from jobs.registry import HEAVY, register_job_kind


@register_job_kind("train", queue=HEAVY)
def train_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Train a model, then evaluate it on the benchmark and (unless ``diagnose`` is false) run the diagnostics.

    params: backbone, source (benchmark | catalogue), benchmark, name, device, diagnose, masker, inpainter,
    and the :class:`core.training.TrainConfig` fields. A retried job resumes from its last checkpoint.
    """
    from core.training import TrainConfig
    from db.training import TrainingHooks, train_model

    config = TrainConfig.from_params(params)
    hooks = TrainingHooks(folder=ctx.dir, progress=lambda f, m: (ctx.progress(0.9 * f, m), ctx.check_cancelled()),
                          log=ctx.log, metric=ctx.metric, should_stop=ctx.cancelled, job_id=ctx.job_id,
                          extra={"name": params.get("name")})
    trained = train_model(cat, backbone=params.get("backbone", DEFAULT_BACKBONE), config=config,
                          source=params.get("source", "benchmark"), benchmark=params.get("benchmark"),
                          name=params.get("name"), device=params.get("device", "auto"), hooks=hooks,
                          species_id=params.get("species"))
    result: dict[str, Any] = {**trained}
    if params.get("benchmark"):
        from db.evaluation import run_evaluation

        ctx.progress(0.9, f"evaluating {trained['model']} on {params['benchmark']}")
        ev = run_evaluation(cat, backbone=trained["model"], benchmark=params["benchmark"],
                            progress=ctx.callback(start=0.9, end=0.95, label="embedding test photos"),
                            should_cancel=ctx.cancelled)
        result["evaluation"] = {k: ev[k] for k in ("map_macro", "map_micro", "cmc_macro", "cmc_micro", "n_queries",
                                                   "evaluation_id", "metric") if k in ev}
        if "with_same_sighting" in ev:
            result["evaluation"]["map_macro_with_same_sighting"] = ev["with_same_sighting"]["map_macro"]
        ctx.log(f"evaluation on {params['benchmark']}: mAP macro {ev['map_macro']:.4f}")
        if params.get("diagnose", True):
            from db.diagnostics import run_diagnose

            dg = run_diagnose(cat, backbone=trained["model"], benchmark=params["benchmark"],
                              masker=params.get("masker"), inpainter=params.get("inpainter"),
                              user=params.get("user", "curator"), should_cancel=ctx.cancelled,
                              progress=lambda f, m: ctx.progress(0.95 + 0.05 * f, f"diagnostics: {m}"))
            result["diagnostics"] = {k: dg.get(k) for k in ("evaluation_id", "bg_fg", "bg_fg_band", "mirror_tier",
                                                             "mirror_sim_mean", "cross_within_ratio") if k in dg}
            ctx.log(f"diagnostics: BG/FG {dg.get('bg_fg')}, mirror tier {dg.get('mirror_tier')}")
    if params.get("compare_with") and params.get("benchmark"):
        from db.compare import compare

        ctx.progress(0.99, f"comparing with {params['compare_with']}")
        cmp = compare(cat, trained["model"], params["compare_with"], benchmark=params["benchmark"])
        result["comparison"] = {k: v for k, v in cmp.items() if k != "ap_differences"}
        ctx.log(cmp["verdict"])
    ev = result.get("evaluation", {})
    result["summary"] = (f"trained {trained['model']} in {trained['wall_seconds']:.0f} s"
                         + (f"; validation mAP {trained['best_val_map_macro']:.3f} (frozen "
                            f"{trained['frozen_val_map_macro']:.3f})" if trained.get("best_val_map_macro") is not None
                            and trained.get("frozen_val_map_macro") is not None else "")
                         + (f"; test mAP macro {ev['map_macro']:.3f}" if ev else "")
                         + (f". {result['comparison']['verdict']}" if result.get("comparison") else ""))
    return result


def retrain_params(cat: Catalogue, *, species_id: int = 1, user: str = "curator", force: bool = False
                   ) -> dict[str, Any]:
    """The training job that learns from the decisions made since the active model: the catalogue's confirmed
    individuals of the species, the active model's own recipe (SupCon head only when it was never trained),
    evaluated on the species' newest benchmark with a train split and compared with the active model.

    With no identity confirmed since the active model was trained there is nothing new to learn: refused
    (unless ``force``), rather than queueing a full training run."""
    from sqlalchemy import select

    from core.training import TrainConfig  # lazy, as the other ML imports here: it imports torch
    from db.catalogue import CatalogueError
    from db.models import Benchmark, Model
    from db.species import active_model_name
    from db.training import decisions_since_active

    if not force:
        new = decisions_since_active(cat, species_id)
        if new["confirmed"] == 0:
            raise CatalogueError(f"0 confirmed identities since {new['active_model']} was trained: retraining would "
                                 "learn nothing new. Confirm matches in Match review first (or retrain anyway from "
                                 "the shell with `rosette retrain --force`).")

    active = active_model_name(cat, species_id)
    with cat.unit_of_work() as s:
        row = s.scalar(select(Model).where(Model.name == active))
        recipe = dict(((row.training_config or {}).get("train_config") or {}) if row else {})
        backbone = row.backbone if row is not None and row.head else DEFAULT_BACKBONE
        bench = s.scalar(select(Benchmark.name).where(
            (Benchmark.species_id == species_id) | Benchmark.species_id.is_(None),
            Benchmark.split_kind.in_(["identity", "sighting"])).order_by(Benchmark.id.desc()))
    params = {f.name: recipe[f.name] for f in fields(TrainConfig) if recipe.get(f.name) is not None}
    params.setdefault("head", "supcon")
    params.update({"backbone": backbone, "source": "catalogue", "species": species_id, "benchmark": bench,
                   "compare_with": active, "user": user, "reason": "retrain from new decisions"})
    return params


def _cancel_check(ctx: JobContext):
    return ctx.cancelled


@register_job_kind("evaluate", queue=HEAVY)
def evaluate_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Benchmark evaluation: params backbone, benchmark, variant, rerank."""
    from db.evaluation import run_evaluation

    res = run_evaluation(cat, backbone=params.get("backbone", DEFAULT_BACKBONE), benchmark=params["benchmark"],
                         variant=params.get("variant", "full_rgb"), rerank=params.get("rerank", "none"),
                         progress=ctx.callback(end=0.95, label="embedding"), should_cancel=ctx.cancelled)
    ctx.check_cancelled()
    keep = ("map_macro", "map_micro", "cmc_macro", "cmc_micro", "n_queries", "model", "variant", "benchmark",
            "rerank", "evaluation_id")
    return {**{k: res[k] for k in keep if k in res},
            "summary": f"{res['model']} on {res['benchmark']}: mAP macro {res['map_macro']:.3f}"}


@register_job_kind("diagnose", queue=HEAVY)
def diagnose_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Diagnostics: params backbone, benchmark, masker, inpainter, seeds."""
    from db.diagnostics import run_diagnose

    res = run_diagnose(cat, backbone=params.get("backbone", DEFAULT_BACKBONE), benchmark=params["benchmark"],
                       masker=params.get("masker"), inpainter=params.get("inpainter"),
                       seeds=tuple(params.get("seeds", (0,))), user=params.get("user", "curator"),
                       progress=lambda f, m: ctx.progress(f, m), should_cancel=ctx.cancelled,
                       keep_masks=bool(params.get("keep_masks", False)))
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
    """Warm the feature cache for every catalogue photo (of one species when ``species`` is given): params
    backbone, variant, species. Queued by a promotion so match review never embeds while a curator waits."""
    from db.embeddings import all_image_ids, embed_images, get_backbone

    ids = all_image_ids(cat, species_id=params.get("species"))
    backbone = get_backbone(cat, params.get("backbone", DEFAULT_BACKBONE))
    emb = embed_images(cat, ids, backbone=backbone, variant=params.get("variant", "full_rgb"),
                       progress=ctx.callback(label="embedding"), should_cancel=ctx.cancelled)
    return {"images": len(ids), "dim": int(emb.shape[1]) if emb.ndim == 2 else 0,
            "summary": f"embedded {len(ids)} photos with {backbone.config.name}"}


@register_job_kind("export")
def export_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Kaggle submission: params test_csv, images_dir, model, out, variant, staged_images (remove images_dir
    afterwards: it holds images unpacked from an upload)."""
    from db.export import export_kaggle

    try:
        return export_kaggle(cat, test_csv=params["test_csv"], images_dir=params["images_dir"],
                             model=params.get("model", DEFAULT_BACKBONE), out=params["out"],
                             variant=params.get("variant", "full_rgb"), progress=ctx.callback(label="embedding"),
                             should_cancel=ctx.cancelled)
    finally:
        if params.get("staged_images"):  # images unpacked from an upload: not kept once the job is over
            import shutil

            shutil.rmtree(params["images_dir"], ignore_errors=True)


@register_job_kind("map")  # short (features are cached, UMAP takes seconds): never waits behind a training run
def map_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Embedding map (UMAP; Poincare disk for Lorentz models) of a species' photos: params model, species."""
    from db.embedding_map import compute_map

    return compute_map(cat, params["model"], species_id=params.get("species"),
                       progress=ctx.callback(end=0.8, label="embedding"), should_cancel=ctx.cancelled)


@register_job_kind("keypoints")
def keypoints_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Spot keypoints for a species' photos (or the given photos), cached per photo, mask and matcher config:
    params are a ``core.spots.requests.KeypointsRequest`` (plus ``user``)."""
    from core.spots.requests import KeypointsRequest
    from db.spots import extract_keypoints

    request = KeypointsRequest.from_dict({k: v for k, v in params.items() if k != "user"})
    return extract_keypoints(cat, request, progress=ctx.callback(label="keypoints"), should_cancel=ctx.cancelled)


@register_job_kind("evaluate_spots", queue=HEAVY)
def evaluate_spots_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """A fused pipeline's evaluation (global shortlist + calibrated spot evidence): params are a
    ``core.spots.requests.SpotEvaluationRequest`` (plus ``user``)."""
    from core.spots.requests import SpotEvaluationRequest
    from db.spots import evaluate_request as evaluate_spots

    request = SpotEvaluationRequest.from_dict({k: v for k, v in params.items() if k != "user"})
    stages = {"calibration photos": (0.0, 0.5), "test photos": (0.5, 1.0)}

    def progress(what: str, done: int, total: int) -> None:
        lo, hi = next((v for k, v in stages.items() if what.startswith(k)), (0.0, 1.0))
        ctx.progress(lo + (hi - lo) * done / max(total, 1) * 0.99, what)
        ctx.check_cancelled()

    res = evaluate_spots(cat, request, progress=progress, should_cancel=ctx.cancelled)
    keep = ("map_macro", "map_micro", "cmc_macro", "cmc_micro", "n_queries", "model", "global_model", "benchmark",
            "evaluation_id", "components", "seconds")
    base = res["components"]["global"]
    return {**{k: res[k] for k in keep if k in res},
            "summary": (f"{res['model']} on {res['benchmark']}: mAP macro {res['map_macro']:.3f} "
                        f"(global alone {base['map_macro']:.3f}), CMC@1 {res['cmc_macro']['1']:.3f} "
                        f"(global alone {base['cmc_macro']['1']:.3f})")}
