"""Built-in job kinds. Each handler is thin: it rebuilds the job's request (``XRequest.from_dict(params)``: unknown
keys and wrong types are refused before any work starts), calls one db/ or core/ function with ``ctx`` progress /
cancellation wired in, and returns a JSON result."""

from __future__ import annotations

import shutil
from typing import Any

from sqlalchemy import select

from core.field.identities import ImputationCancelled
from core.identify.backbones import DEFAULT_BACKBONE
from core.identify.features import ExtractionCancelled
from core.identify.spots.requests import KeypointsRequest, SpotEvaluationRequest
from db.catalogue import CatalogueError
from db.field.camtrapdp_export import export_package
from db.identify.compare import compare
from db.field.density_identities import density_on_basis
from db.field.density_models import catalogue_models
from db.field.identities import uncertain_answer
from db.inspect.diagnostics import run_diagnose
from db.inspect.embedding_map import compute_map
from db.embeddings import all_image_ids, count_animals, embed_images, get_backbone
from db.identify.evaluation import run_evaluation
from db.identify.export import export_kaggle
from db.inspect.masks import mask_images
from db.models import Benchmark, Model
from db.inspect.sensitivity import run_sensitivity
from db.session import Catalogue
from db.species import active_model_name
from db.identify.spots import evaluate_request as evaluate_spots
from db.identify.spots import extract_keypoints
from db.identify.vector_index import build_vector_index
from jobs.actions.partial_id import partial_id_density
from jobs.answer_words import flank_answer_words, jobs_list_line, models_answer_words
from jobs.context import JobCancelled, JobContext
from jobs.registry import HEAVY, register_job_kind
from jobs.requests.benchmarks import EvaluateRequest
from jobs.requests.camtrapdp import ExportCamtrapDPRequest
from jobs.requests.density import DensityModelsRequest, DensityRequest
from jobs.requests.diagnostics import DiagnoseRequest, SensitivityRequest
from jobs.requests.export import KaggleExportRequest
from jobs.requests.identities import MAX_TOP, PopulationIdentitiesRequest
from jobs.requests.map import EmbedRequest, MapRequest
from jobs.requests.masks import MaskPhotosRequest
from jobs.requests.match import IndexBuildRequest
from jobs.requests.partial_id import PartialIdRequest
from jobs.requests.training import TrainRequest, setting_names


@register_job_kind("train", queue=HEAVY)
def train_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Train a model, then evaluate it on the benchmark -- on each, when several were trained on together (the
    first is the main one: ``evaluation``; every one in ``evaluations``) -- run the diagnostics on the first
    (unless ``diagnose`` is false) and compare it with ``compare_with`` there: params are a stored
    :class:`jobs.requests.training.TrainRequest`. A retried job resumes from its last checkpoint."""
    from db.identify.training import TrainingHooks, train_model  # lazy: db.identify.training imports torch

    request = TrainRequest.from_dict(params)
    hooks = TrainingHooks(folder=ctx.dir, progress=lambda f, m: (ctx.progress(0.9 * f, m), ctx.check_cancelled()),
                          log=ctx.log, metric=ctx.metric, should_stop=ctx.cancelled, job_id=ctx.job_id,
                          extra={"name": request.name})
    if request.reason:
        ctx.log(f"queued to {request.reason}")
    trained = train_model(cat, backbone=request.backbone, config=request.train_config(), source=request.source,
                          benchmark=request.benchmark, name=request.name, device=request.device, hooks=hooks,
                          species_id=request.species)
    result: dict[str, Any] = {**trained}
    benches = request.benchmarks
    main = benches[0] if benches else None
    if benches:
        evaluations: dict[str, dict[str, Any]] = {}
        span = 0.05 / len(benches)
        for i, bench in enumerate(benches):
            start = 0.9 + i * span
            ctx.progress(start, f"evaluating {trained['model']} on {bench}")
            ev = run_evaluation(cat, backbone=trained["model"], benchmark=bench,
                                progress=ctx.callback(start=start, end=start + span,
                                                      label=f"embedding {bench}'s test photos"),
                                should_cancel=ctx.cancelled)
            row = {k: ev[k] for k in ("map_macro", "map_micro", "cmc_macro", "cmc_micro", "n_queries",
                                      "evaluation_id", "metric") if k in ev}
            if "with_same_sighting" in ev:
                row["map_macro_with_same_sighting"] = ev["with_same_sighting"]["map_macro"]
            evaluations[bench] = row
            ctx.log(f"evaluation on {bench}: mAP macro {ev['map_macro']:.4f}")
        result["evaluation"] = evaluations[main]
        result["evaluations"] = evaluations
        if request.diagnose:
            dg = run_diagnose(cat, backbone=trained["model"], benchmark=main, masker=request.masker,
                              inpainter=request.inpainter, user=request.user, should_cancel=ctx.cancelled,
                              progress=lambda f, m: ctx.progress(0.95 + 0.05 * f, f"diagnostics: {m}"))
            result["diagnostics"] = {k: dg.get(k) for k in ("evaluation_id", "bg_fg", "bg_fg_band", "mirror_tier",
                                                             "mirror_sim_mean", "cross_within_ratio") if k in dg}
            ctx.log(f"diagnostics: BG/FG {dg.get('bg_fg')}, mirror tier {dg.get('mirror_tier')}")
    if request.compare_with and main:
        ctx.progress(0.99, f"comparing with {request.compare_with}")
        cmp = compare(cat, trained["model"], request.compare_with, benchmark=main)
        result["comparison"] = {k: v for k, v in cmp.items() if k != "ap_differences"}
        ctx.log(cmp["verdict"])
    ev = result.get("evaluation", {})
    others = [f"{b} {result['evaluations'][b]['map_macro']:.3f}" for b in benches[1:]]
    result["summary"] = (f"trained {trained['model']} in {trained['wall_seconds']:.0f} s"
                         + (f"; validation mAP {trained['best_val_map_macro']:.3f} (frozen "
                            f"{trained['frozen_val_map_macro']:.3f})" if trained.get("best_val_map_macro") is not None
                            and trained.get("frozen_val_map_macro") is not None else "")
                         + (f"; test mAP macro {ev['map_macro']:.3f}" if ev else "")
                         + (f" on {main} ({', '.join(others)})" if others else "")
                         + (f". {result['comparison']['verdict']}" if result.get("comparison") else ""))
    return result


def retrain_params(cat: Catalogue, *, species_id: int = 1, user: str = "curator", force: bool = False
                   ) -> dict[str, Any]:
    """The training job that learns from the decisions made since the active model, as the ``train`` job's params
    (a stored :class:`jobs.requests.training.TrainRequest`): the catalogue's confirmed individuals of the species,
    the active model's own recipe (SupCon head only when it was never trained) with identity-aware batches whose
    first hard negatives are the curators' "not the same" decisions, evaluated on the species' newest benchmark
    with a train split and compared with the active model.

    With no identity confirmed since the active model was trained there is nothing new to learn: refused
    (unless ``force``), rather than queueing a full training run."""
    from db.identify.training import decisions_since_active  # lazy: db.identify.training imports torch
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
    settings = {"head": "supcon", **{k: v for k, v in recipe.items() if k in setting_names() and v is not None},
                "sampler": "identity-aware"}  # the curators' "not the same" decisions are the hard negatives
    return TrainRequest(backbone=backbone, source="catalogue", species=species_id, benchmark=bench,
                        compare_with=active, user=user, reason="retrain from new decisions",
                        config=settings).to_dict()


@register_job_kind("evaluate", queue=HEAVY)
def evaluate_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Benchmark evaluation: params are a stored :class:`jobs.requests.benchmarks.EvaluateRequest` (benchmark,
    backbone, variant, rerank, user), rebuilt here (unknown keys and wrong types refused before any work)."""
    request = EvaluateRequest.from_dict(params)
    res = run_evaluation(cat, backbone=request.backbone, benchmark=request.benchmark, variant=request.variant,
                         rerank=request.rerank, progress=ctx.callback(end=0.95, label="embedding"),
                         should_cancel=ctx.cancelled, flank=request.flank)
    ctx.check_cancelled()
    keep = ("map_macro", "map_micro", "cmc_macro", "cmc_micro", "n_queries", "model", "variant", "benchmark",
            "rerank", "flank", "evaluation_id")
    return {**{k: res[k] for k in keep if k in res},
            "summary": f"{res['model']} on {res['benchmark']}: mAP macro {res['map_macro']:.3f}"}


@register_job_kind("diagnose", queue=HEAVY)
def diagnose_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Diagnostics: params are a stored :class:`jobs.requests.diagnostics.DiagnoseRequest`."""
    request = DiagnoseRequest.from_dict(params)
    res = run_diagnose(cat, backbone=request.backbone or active_model_name(cat), benchmark=request.benchmark,
                       masker=request.masker, inpainter=request.inpainter, seeds=request.seeds, user=request.user,
                       progress=lambda f, m: ctx.progress(f, m), should_cancel=ctx.cancelled,
                       keep_masks=request.keep_masks)
    ctx.check_cancelled()
    return {"evaluation_id": res["evaluation_id"], "bg_fg": res["bg_fg"], "mirror_tier": res["mirror_tier"],
            "mask_run": res["mask_run"],
            "summary": f"{res['model']} on {res['benchmark']}: BG/FG {res['bg_fg']}, mirror tier {res['mirror_tier']}"
                       + (f"; {res['mask_run']['empty']} test photos got an empty mask (no animal found): mask them in "
                          "the Mask tab" if res["mask_run"].get("empty") else "")}


@register_job_kind("sensitivity", queue=HEAVY)
def sensitivity_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Selective sensitivity: params are a stored :class:`jobs.requests.diagnostics.SensitivityRequest`."""
    request = SensitivityRequest.from_dict(params)
    res = run_sensitivity(cat, backbone=request.backbone or active_model_name(cat), benchmark=request.benchmark,
                          seed=request.seed, inpainter=request.inpainter, identity_edit=request.identity_edit,
                          mask_missing=request.mask_missing, masker=request.masker, user=request.user,
                          progress=lambda f, m: ctx.progress(f, m), should_cancel=ctx.cancelled)
    ctx.check_cancelled()
    sel = res["selectivity"]
    return {"evaluation_id": res["evaluation_id"], "selectivity": sel, "slopes": res["slopes"],
            "cache": res["cache"], "verdict": res["verdict"],
            "summary": f"{res['model']} on {res['benchmark']}: selectivity "
                       f"{'unbounded' if sel is None else f'{sel:.2f}'} ({res['n_images']} photos)"}


@register_job_kind("mask")
def mask_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Batch masking: params are a stored :class:`jobs.requests.masks.MaskPhotosRequest`."""
    request = MaskPhotosRequest.from_dict(params)
    res = mask_images(cat, masker=request.masker, image_ids=request.image_ids, only_missing=request.only_missing,
                      user=request.user, progress=ctx.callback(label="masking"), should_cancel=ctx.cancelled)
    ctx.check_cancelled()
    return res


@register_job_kind("embed")
def embed_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Warm the feature cache for every catalogue photo (of one species when ``species`` is given), or for an
    import's new animals (``image_ids``): params are a stored :class:`jobs.requests.map.EmbedRequest`. Queued by a
    promotion or an import so match review never embeds while a curator waits."""
    request = EmbedRequest.from_dict(params)
    # an import's new animals only, when it named them (those deleted since left out); else every photo
    count = count_animals(cat, request.image_ids) if request.image_ids is not None else None
    ids = count.annotation_ids if count is not None else all_image_ids(cat, species_id=request.species)
    backbone = get_backbone(cat, request.backbone)
    dim = 0
    for start in range(0, len(ids), EMBED_CHUNK):  # a chunk at a time: a million photos' features never sit in memory
        part = ids[start:start + EMBED_CHUNK]
        emb = embed_images(cat, part, backbone=backbone, variant=request.variant, should_cancel=ctx.cancelled,
                           progress=ctx.callback(start=start / len(ids), end=(start + len(part)) / len(ids),
                                                 label="embedding"))
        dim = int(emb.shape[1]) if emb.ndim == 2 else dim
        del emb
    what = count.words if count is not None else f"{len(ids)} photos"
    return {"images": len(ids), "dim": dim, "summary": f"embedded {what} with {backbone.config.name}"}


#: Photos whose features an embed job holds at once (the cache is written per photo as it goes).
EMBED_CHUNK = 20_000


@register_job_kind("export")
def export_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Kaggle submission: params are a :class:`jobs.requests.export.KaggleExportRequest` (``staged_images``: remove
    images_dir afterwards, it holds images unpacked from an upload)."""
    req = KaggleExportRequest.from_dict(params)
    try:
        return export_kaggle(cat, test_csv=req.test_csv, images_dir=req.images_dir, model=req.model or DEFAULT_BACKBONE,
                             out=req.out, variant=req.variant, progress=ctx.callback(label="embedding"),
                             should_cancel=ctx.cancelled)
    finally:
        if req.staged_images:  # images unpacked from an upload: not kept once the job is over
            shutil.rmtree(req.images_dir, ignore_errors=True)


@register_job_kind("camtrap_dp_export")
def camtrap_dp_export_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """The catalogue as a Camtrap DP package (the Export tab): params are a stored
    :class:`jobs.requests.camtrapdp.ExportCamtrapDPRequest`; progress follows the photo files written (people
    blurred or kept as asked) and the check against the standard."""
    request = ExportCamtrapDPRequest.from_dict(params)
    ctx.log(f"people: {request.people}")
    done, zip_path = export_package(cat, out=request.out, zip=request.zip, user=request.user, title=request.title,
                                    sampling_design=request.sampling_design, include_media=request.include_media,
                                    people=request.people, progress=ctx.callback(label="writing the photos"),
                                    should_cancel=ctx.cancelled)
    ctx.log(done.summary)
    return {**done.to_dict(), "zip": zip_path}


@register_job_kind("density")  # seconds to a few minutes, numpy only: never waits behind a training run
def density_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """A density fit by spatial capture-recapture on a basis of identities (the Population tab): params are a
    stored :class:`jobs.requests.density.DensityRequest`; the same answer as ``rosette density`` on that request.
    Progress follows the fit's steps (on ``uncertain``: the photos scored, the fit as decided, the draws); a cancel
    stops before the next photo batch or draw and keeps nothing."""
    request = DensityRequest.from_dict(params)
    try:  # the stop is asked once per photo batch or per draw (a whole SCR fit): one query each is cheap
        return density_on_basis(cat, **request.fit_options(), progress=ctx.progress, should_stop=ctx.cancelled)
    except (ImputationCancelled, ExtractionCancelled):
        raise JobCancelled() from None


@register_job_kind("density_models",  # seconds a model, numpy only: never waits behind a training run
                   summary=lambda answer: jobs_list_line(models_answer_words(answer)))
def density_models_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Density models beyond the null on the catalogue's study, one or a set ranked by AICc (the Population tab):
    params are a stored :class:`jobs.requests.density.DensityModelsRequest`; the same answer as ``rosette density
    --model`` or ``--compare`` on that request, with a progress line per model. A model the sessions cannot carry
    is a succeeded job whose answer says why (``refused``)."""
    request = DensityModelsRequest.from_dict(params)
    return catalogue_models(cat, **request.fit_options(), progress=ctx.progress)


@register_job_kind("flank_density",  # minutes of numpy MCMC: never waits behind a training run
                   summary=lambda answer: jobs_list_line(flank_answer_words(answer)))
def flank_density_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """The two-flank partial-identity density on the catalogue's study (the Population tab): params are a stored
    :class:`jobs.requests.partial_id.PartialIdRequest` without files; the answer of ``rosette density --flanks`` on
    that request, link probabilities included. Progress follows the chains; a cancel stops at the next progress
    line (every 1,000 iterations of a chain) and keeps nothing."""
    request = PartialIdRequest.from_dict(params)
    if request.from_files:
        raise ValueError("the background job fits the catalogue's study; fit text files with rosette density --flanks")

    def progress(fraction: float, message: str) -> None:
        ctx.progress(fraction, message)
        ctx.check_cancelled()

    return partial_id_density(request, cat=cat, progress=progress)


@register_job_kind("population_uncertain")  # one embedding pass (cached) and numpy draws: never waits for training
def population_uncertain_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """The population estimates with identification uncertainty and the reviews that would narrow them most (the
    Population tab): params are a stored :class:`jobs.requests.identities.PopulationIdentitiesRequest`; progress
    follows the photos embedded, then the draws; a cancel stops between draws and keeps nothing."""
    request = PopulationIdentitiesRequest.from_dict(params)
    asked = {"n": 0}

    def should_stop() -> bool:  # the flag is a query: read it every tenth call
        asked["n"] += 1
        return asked["n"] % 10 == 1 and ctx.cancelled()

    def progress(done: int, total: int) -> None:
        ctx.progress(done / max(total, 1), "embedding the photos" if 2 * done < total else "imputing the identities")

    try:
        return uncertain_answer(cat, species=request.species, occasion_days=request.occasion_days,
                                date_from=request.first_day, date_to=request.last_day, draws=request.draws,
                                seed=request.seed, top=MAX_TOP, progress=progress, should_stop=should_stop)
    except (ImputationCancelled, ExtractionCancelled):
        raise JobCancelled() from None


@register_job_kind("map")  # short (features are cached, UMAP takes seconds): never waits behind a training run
def map_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Embedding map (UMAP; Poincare disk for Lorentz models) of a species' photos: params are a stored
    :class:`jobs.requests.map.MapRequest`."""
    request = MapRequest.from_dict(params)
    return compute_map(cat, request.model, species_id=request.species,
                       progress=ctx.callback(end=0.8, label="embedding"), should_cancel=ctx.cancelled)


@register_job_kind("keypoints")
def keypoints_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Spot keypoints for a species' photos (or the given photos), cached per photo, mask and matcher config:
    params are a stored :class:`core.identify.spots.requests.KeypointsRequest`."""
    request = KeypointsRequest.from_dict(params)
    return extract_keypoints(cat, request, progress=ctx.callback(label="keypoints"), should_cancel=ctx.cancelled)


@register_job_kind("evaluate_spots", queue=HEAVY)
def evaluate_spots_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """A fused pipeline's evaluation (global shortlist + calibrated spot evidence): params are a stored
    :class:`core.identify.spots.requests.SpotEvaluationRequest`."""
    request = SpotEvaluationRequest.from_dict(params)
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


@register_job_kind("build_index", queue=HEAVY)
def build_index_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """The on-disk IVF-PQ index of a species' gallery (``db.identify.vector_index``): params are a stored
    :class:`jobs.requests.match.IndexBuildRequest`. Queued by match review once a gallery passes the threshold."""
    request = IndexBuildRequest.from_dict(params)
    if request.reason:
        ctx.log(f"queued for {request.reason}")
    return build_vector_index(cat, species_id=request.species,
                              model_name=request.model or active_model_name(cat, request.species),
                              progress=ctx.callback(label="indexing"), should_cancel=ctx.cancelled)
