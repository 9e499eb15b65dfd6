"""Spot evidence in the catalogue: keypoints per photo (cached content-addressed per photo, mask and matcher
config), fused pipelines as stored models, their evaluation on a benchmark, and pair / candidate scoring for
match review, comparison and export.

A *pipeline* is a ``models`` row with ``head = "pipeline"``: ``backbone`` is the global model that makes the
shortlist, and ``config`` holds the matcher's config, the :class:`~core.identify.spots.pipeline.PipelineSettings`, the
global model's config and the fitted calibration of every scorer with what it rests on. Its name works
wherever a model name does (eval, compare, promote, match review, Kaggle export).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import select

from core.identify.calibration import ENOUGH_DECISIONS, Calibrator, Discrimination, discrimination
from core.identify.features import ExtractionCancelled
from core.identify.evaluation import flank_counts, flank_gallery
from core.metrics import all_vs_all_valid, retrieval_metrics
from core.similarity import paired_scores, pairwise_scores
from core.identify.spots import (
    MIN_KEYPOINTS,
    LocalFeatures,
    LocalMatcher,
    create_matcher,
    features_cache_path,
    load_features,
    save_features,
)
from core.identify.spots.classical import SIFT_CONTRAST
from core.identify.spots.fusion import GLOBAL, calibrator_to_dict, fit_scorer_calibrations
from core.identify.spots.fusion_choice import MIN_SAME_PAIRS, choose_fusion
from core.identify.spots.lnbnn import build_descriptor_index, lnbnn_scores
from core.identify.spots.pipeline import VERIFICATION, PipelineSettings, cross_flank, spot_scores_all_vs_all, verify_one
from core.identify.spots.requests import KeypointsRequest, SpotEvaluationRequest
from core.identify.spots.stored import (
    COMPONENTS,
    PIPELINE_HEAD,
    StoredPipeline,
    calibration_basis,
    calibration_sample,
    component_metrics,
    decided_pair_inliers,
    file_features,
    fuse_pairs,
    fuse_scores,
    fusion_metrics,
    own_candidates_first,
    pipeline_config,
    pipeline_name,
    rerank_shortlist,
    same_pairs_per_scorer,
    spot_summary,
    uses_lnbnn,
    with_refitted_calibration,
)
from db.identify.benchmarks import load_benchmark, load_benchmark_fit_ids
from db.catalogue import CatalogueError
from db.embeddings import (
    all_image_ids,
    embed_images,
    get_backbone,
    load_mask,
    load_photo,
    masked_content_key,
    sources_for,
)
from db.identify.evaluation import store_evaluation
from db.models import DecisionKind, Image, MatchDecision, Model, ModelStatus
from db.identify.photos import image_rows
from db.session import Catalogue

__all__ = ["CALIBRATION_PHOTOS", "COMPONENTS", "PIPELINE_HEAD", "StoredPipeline", "calibration_image_ids",
           "decided_pairs", "evaluate_pipeline", "evaluate_request", "evaluate_stored_pipeline", "extract_keypoints", "features_for",
           "folder_features", "fuse_pairs", "get_matcher", "is_pipeline", "load_pipeline", "matcher_for",
           "pipeline_discrimination", "pipeline_name", "pipeline_similarity", "rerank_with_pipeline", "spot_summary",
           "verify_candidates", "with_decision_calibration"]  # the pure part (StoredPipeline, fuse_pairs...) lives in core.identify.spots.stored

#: Photos of the benchmark's train split (whole identities, seeded) on which the scorers are first calibrated;
#: the sample grows until every scorer has ENOUGH_SAME_PAIRS same-animal pairs, or the train split runs out.
CALIBRATION_PHOTOS = 400
ENOUGH_SAME_PAIRS = 500
EXTRACT_THREADS = 2
_MATCHERS: dict[tuple[str, str], LocalMatcher] = {}
_LOCK = threading.Lock()

Progress = Callable[[int, int], None]


# ------------------------------------------------------------------------------------------ features


def get_matcher(name: str, **opts: Any) -> LocalMatcher:
    """A local matcher by registry name, built once per process (learned ones raise when weights are absent)."""
    key = (name, json.dumps(opts, sort_keys=True, default=str))
    with _LOCK:
        if key not in _MATCHERS:
            _MATCHERS[key] = create_matcher(name, **opts)
        return _MATCHERS[key]


def features_for(cat: Catalogue, image_ids: Sequence[int], *, matcher: LocalMatcher, progress: Progress | None = None,
                 should_cancel: Callable[[], bool] | None = None, threads: int = EXTRACT_THREADS
                 ) -> list[LocalFeatures]:
    """Keypoints of each photo (in order) on its mask (the whole photo when it has none), from the cache or
    extracted (then cached). A photo's mask change gives a new cache key, so features never go stale."""
    srcs = sources_for(cat, image_ids)
    root = cat.cache_dir / "spots"
    fp = matcher.config.fingerprint()
    out: list[LocalFeatures | None] = [None] * len(srcs)
    missing: list[int] = []
    for i, src in enumerate(srcs):
        f = load_features(features_cache_path(root, fp, masked_content_key(src)))
        if f is None:
            missing.append(i)
        else:
            out[i] = f
    if missing:
        cfg_path = root / fp / "config.json"
        if not cfg_path.exists():
            cfg_path.parent.mkdir(parents=True, exist_ok=True)
            cfg_path.write_text(json.dumps(matcher.config.to_dict(), indent=2, sort_keys=True))

    def extract(i: int) -> LocalFeatures:
        src = srcs[i]
        rgb = load_photo(cat, src)
        mask = load_mask(cat, src, shape=rgb.shape[:2])
        if mask is not None and not mask.any():
            mask = None  # an empty mask says nothing about where the animal is: use the whole photo
        f = matcher.extract(rgb, mask)
        save_features(features_cache_path(root, fp, masked_content_key(src)), f)
        return f

    done = len(srcs) - len(missing)
    if progress is not None:
        progress(done, len(srcs))
    with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="rosette-spots") as pool:
        for start in range(0, len(missing), 16):
            if should_cancel is not None and should_cancel():
                raise ExtractionCancelled(done, len(srcs))
            chunk = missing[start:start + 16]
            for i, f in zip(chunk, pool.map(extract, chunk)):
                out[i] = f
            done += len(chunk)
            if progress is not None:
                progress(done, len(srcs))
    return [f for f in out if f is not None]


# ------------------------------------------------------------------------------------------ pipelines


def load_pipeline(cat: Catalogue, name: str) -> StoredPipeline | None:
    """The pipeline stored under ``name``, or None when ``name`` is not a pipeline."""
    with cat.unit_of_work() as s:
        row = s.scalar(select(Model).where(Model.name == name, Model.head == PIPELINE_HEAD))
        if row is None:
            return None
        cfg = dict(row.config or {})
        status = row.status.value if hasattr(row.status, "value") else str(row.status)
    return StoredPipeline.from_config(name, cfg, status=status)


def is_pipeline(cat: Catalogue, name: str) -> bool:
    with cat.unit_of_work() as s:
        return s.scalar(select(Model.id).where(Model.name == name, Model.head == PIPELINE_HEAD)) is not None


def matcher_for(pipeline: StoredPipeline) -> LocalMatcher:
    """The pipeline's matcher, rebuilt from its stored config (refused if the code now builds another one)."""
    cfg = pipeline.matcher_config
    opts: dict[str, Any] = {}
    if pipeline.settings.matcher == "sift":  # its options as stored; absent ones are the plain matcher's
        extra = dict(cfg.get("extra") or {})
        opts = {"crop": bool(extra.get("crop", False)),
                "contrast_threshold": float(extra.get("contrast_threshold", SIFT_CONTRAST)),
                "mask_dilate": int(extra.get("mask_dilate", 0))}
    matcher = get_matcher(pipeline.settings.matcher, max_side=int(cfg["max_side"]),
                          max_keypoints=int(cfg["max_keypoints"]), ratio=float(cfg["ratio"]), **opts)
    if matcher.config.fingerprint() != cfg.get("fingerprint"):
        raise CatalogueError(f"pipeline {pipeline.name!r} was calibrated with matcher config {cfg.get('fingerprint')}, "
                             f"but this installation builds {matcher.config.fingerprint()} (another OpenCV or "
                             f"matcher version); build it again to recalibrate (rosette eval --backbone "
                             f"{pipeline.global_model} --verify {pipeline.settings.matcher} ...)")
    return matcher


def _register_pipeline(cat: Catalogue, name: str, *, global_model: str, global_config: dict[str, Any],
                       settings: PipelineSettings, matcher: LocalMatcher, calibrators: dict[str, Calibrator],
                       calibration_source: dict[str, Any], species_id: int | None,
                       fusion_choice: dict[str, Any] | None = None) -> None:
    config = pipeline_config(name, global_model=global_model, global_config=global_config, settings=settings,
                             matcher=matcher, calibrators=calibrators, calibration_source=calibration_source,
                             fusion_choice=fusion_choice)
    with cat.unit_of_work() as s:
        row = s.scalar(select(Model).where(Model.name == name))
        if row is not None and row.head != PIPELINE_HEAD:
            raise CatalogueError(f"{name!r} is already the name of a model that is not a pipeline")
        if row is None:
            row = Model(name=name, backbone=global_model, head=PIPELINE_HEAD, config=config,
                        checkpoint_hash=None, status=ModelStatus.candidate, species_id=species_id,
                        training_config={"pipeline": settings.to_dict()}, data_snapshot=calibration_source)
            s.add(row)
        else:
            row.config = config
            row.backbone = global_model
            row.data_snapshot = calibration_source
        s.commit()


MIN_HELD_OUT_PHOTOS = 100


def calibration_image_ids(cat: Catalogue, benchmark: str, *, limit: int = CALIBRATION_PHOTOS, seed: int = 0,
                          exclude: Sequence[int] = ()) -> list[int]:
    """A seeded sample of whole identities from the benchmark's train split, about ``limit`` photos, leaving
    out ``exclude`` (the photos a trained global model learned from: on them its scores are overconfident)."""
    data = load_benchmark(cat, benchmark, split="train")
    if not data.image_ids:
        raise CatalogueError(f"benchmark {benchmark!r} has no train split to calibrate the spot scorers on "
                             "(a test-only benchmark); choose a benchmark with a train split")
    return calibration_sample(data.image_ids, data.labels, limit=limit, seed=seed, exclude=exclude)


def _calibration_exclusion(cat: Catalogue, cal_bench: str, trained_on: list[int], test_ids: list[int], *,
                           everything: int) -> tuple[list[int], str]:
    """(the photos a pipeline's calibration leaves out, what it holds out from the global model's training).

    Never the evaluated benchmark's test photos (another benchmark's train split may hold them). For a trained
    global model: every photo of the animals it learned, when at least :data:`MIN_HELD_OUT_PHOTOS` others remain
    ("animals": the calibration hold-out, where its scores are as uncertain as on new animals; its validation
    photos of learned animals are not); else the photos it trained on ("photos"); else nothing more (""), and
    the calibration says so."""
    if not trained_on:
        return list(test_ids), ""
    bench = load_benchmark(cat, cal_bench, split="all")
    trained = set(trained_on)
    learned = {lab for i, lab in zip(bench.image_ids, bench.labels) if i in trained}
    of_learned = [i for i, lab in zip(bench.image_ids, bench.labels) if lab in learned]
    for exclude, what in (([*of_learned, *trained_on, *test_ids], "animals"), ([*trained_on, *test_ids], "photos")):
        if len(calibration_image_ids(cat, cal_bench, limit=everything, exclude=exclude)) >= MIN_HELD_OUT_PHOTOS:
            return exclude, what
    return list(test_ids), ""


def _trained_on(cat: Catalogue, model_name: str) -> list[int]:
    """The photos a trained model learned from (its data snapshot, validation hold-out excluded); [] for a
    frozen backbone."""
    with cat.unit_of_work() as s:
        row = s.scalar(select(Model).where(Model.name == model_name))
        snap = dict(row.data_snapshot or {}) if row is not None and row.head not in (None, PIPELINE_HEAD) else {}
        cfg = dict(row.training_config or {}) if row is not None else {}
        species_id = row.species_id if row is not None else None
    ids = set(int(i) for i in snap.get("image_ids") or [])
    if not ids:
        return []
    held = cfg.get("validation_image_ids")
    if held is None:  # trained before the hold-out was recorded: rebuild it, if the snapshot is still exact
        held = _rebuilt_validation_ids(cat, snap, cfg, species_id)
    return sorted(ids - set(int(i) for i in held or []))


def _rebuilt_validation_ids(cat: Catalogue, snap: dict[str, Any], cfg: dict[str, Any],
                            species_id: int | None) -> list[int] | None:
    """The validation hold-out of a model trained before it was recorded: the same seeded split of the same
    training set, trusted only when the training set's hash equals the model's snapshot hash."""
    from core.identify.training import (
        validation_split,
    )  # core.identify.training and db.identify.training load torch: only for old models
    from db.identify.training import training_set  # lazy: imports torch (start-up time)

    tc = cfg.get("train_config") or {}
    try:
        tset = training_set(cat, source=snap.get("source") or "benchmark", benchmark=snap.get("benchmark"),
                            species_id=species_id)
    except CatalogueError:
        return None
    if tset.snapshot_hash() != snap.get("hash") or not tc:
        return None
    is_val = validation_split(tset.labels, tset.sightings, per_identity=int(tc.get("val_per_identity", 2)),
                              min_photos=int(tc.get("val_min_photos", 4)), seed=int(tc.get("seed", 0)))
    return [int(i) for i, v in zip(tset.image_ids, is_val) if v]


@dataclass
class SetScores:
    """Everything scored on one all-vs-all photo set."""

    image_ids: list[int]
    labels: list[str]
    valid: np.ndarray
    spots: Any
    summary: dict[str, Any]


def _score_set(cat: Catalogue, image_ids: list[int], labels: list[str], sightings: list[str | None],
               flanks: list[str], *, backbone: Any, matcher: LocalMatcher, settings: PipelineSettings,
               progress: Callable[[str, int, int], None] | None, should_cancel: Callable[[], bool] | None) -> SetScores:
    step = (lambda what: (lambda d, t: progress(what, d, t))) if progress else (lambda what: None)
    emb = embed_images(cat, image_ids, backbone=backbone, progress=step("embedding"), should_cancel=should_cancel)
    sim = pairwise_scores(emb, emb, metric=backbone.config.metric)
    has = any(s for s in sightings)
    valid = all_vs_all_valid(len(image_ids), sightings=sightings if has else None)
    feats = features_for(cat, image_ids, matcher=matcher, progress=step("keypoints"), should_cancel=should_cancel)
    spots = spot_scores_all_vs_all(feats, sim, valid, flanks, matcher=matcher, settings=settings, progress=progress,
                                   should_cancel=should_cancel)
    return SetScores(image_ids, labels, valid, spots, spot_summary(feats, min_keypoints=settings.min_keypoints))


def _set_of(cat: Catalogue, image_ids: list[int], benchmark: str) -> tuple[list[str], list[str | None], list[str]]:
    data = load_benchmark(cat, benchmark, split="all")
    pos = {i: n for n, i in enumerate(data.image_ids)}
    return ([data.labels[pos[i]] for i in image_ids], [data.sightings[pos[i]] for i in image_ids],
            [data.flanks[pos[i]] for i in image_ids])


def _check_calibration_benchmark(cat: Catalogue, benchmark: str, calibrate_on: str | None, *, name: str) -> str:
    """The benchmark whose train split calibrates the pipeline ``name`` being built (``calibrate_on``, else
    ``benchmark``), refused when it has none, with what to do instead."""
    if calibrate_on and calibrate_on != benchmark:
        if not load_benchmark(cat, calibrate_on, split="train").image_ids:
            raise CatalogueError(f"benchmark {calibrate_on!r}, given to calibrate on, has no train split either "
                                 "(a test-only benchmark): choose one with a train split (rosette benchmark list)")
        return calibrate_on
    if not load_benchmark(cat, benchmark, split="train").image_ids:
        stored = (f"; or evaluate the stored pipeline {name} by its name, which keeps the calibration it was built "
                  "with" if is_pipeline(cat, name) else "")
        raise CatalogueError(f"benchmark {benchmark!r} has no train split to calibrate the spot scorers on (a "
                             "test-only benchmark): calibrate on another benchmark's train split with --calibrate-on "
                             f"BENCHMARK (one of the same species with a train split){stored}")
    return benchmark


def evaluate_pipeline(cat: Catalogue, *, global_model: str, benchmark: str, settings: PipelineSettings,
                      store: bool = True, progress: Callable[[str, int, int], None] | None = None,
                      should_cancel: Callable[[], bool] | None = None, calibrate_on: str | None = None,
                      flank: str = "any") -> dict[str, Any]:
    """Build ``global_model`` + spot evidence and evaluate it on ``benchmark``'s test split (all-vs-all,
    same-sighting photos excluded): calibrate every scorer on a sample of the train split of ``calibrate_on``
    (default: ``benchmark`` itself; never a photo of the test split) scored the same way, fuse over the global
    top-K, and report the pipeline's metrics with every component beside it (global alone, + verification,
    + LNBNN, LNBNN alone, all fused). Registers the pipeline as a candidate model and stores the evaluation.
    Only building calibrates: :func:`evaluate_stored_pipeline` uses a pipeline's stored calibration."""
    t0 = time.perf_counter()
    cal_bench = _check_calibration_benchmark(cat, benchmark, calibrate_on, name=pipeline_name(global_model, settings))
    matcher = get_matcher(settings.matcher)
    backbone = get_backbone(cat, global_model, fit_image_ids=load_benchmark_fit_ids(cat, benchmark))
    test = load_benchmark(cat, benchmark, split="test")
    if not test.image_ids:
        raise CatalogueError(f"benchmark {benchmark!r} has an empty test split")
    trained_on = _trained_on(cat, backbone.config.name)
    everything = 10 ** 9
    exclude, held_out = _calibration_exclusion(cat, cal_bench, trained_on, test.image_ids, everything=everything)
    n_available = len(calibration_image_ids(cat, cal_bench, limit=everything, exclude=exclude))
    if not n_available:
        raise CatalogueError(f"benchmark {cal_bench!r}'s train split has no individual with two photos outside "
                             f"{benchmark!r}'s test split to calibrate the spot scorers on")
    # the calibration set is scored with every scorer, so the components can all be reported
    full = settings.with_every_scorer()
    tagged = (lambda part: (lambda what, d, t: progress(f"{part}: {what}", d, t))) if progress else (lambda part: None)
    source = f"benchmark {cal_bench} train photos, top-{settings.shortlist} pairs"
    limit = CALIBRATION_PHOTOS
    cal_ids: list[int] = []
    while True:  # grow the sample until every scorer has enough same-animal pairs, or the train split runs out
        before = len(cal_ids)
        cal_ids = calibration_image_ids(cat, cal_bench, limit=limit, exclude=exclude)
        cal_labels, cal_sightings, cal_flanks = _set_of(cat, cal_ids, cal_bench)
        cal = _score_set(cat, cal_ids, cal_labels, cal_sightings, cal_flanks, backbone=backbone, matcher=matcher,
                         settings=full, progress=tagged(f"calibration photos ({len(cal_ids)})"),
                         should_cancel=should_cancel)
        same_cal = np.asarray(cal_labels)[:, None] == np.asarray(cal_labels)[None, :]
        n_same = same_pairs_per_scorer(cal.spots, cal.valid, same_cal)
        fewest = min(n_same[s] for s in settings.scorers)
        if fewest >= ENOUGH_SAME_PAIRS or len(cal_ids) >= n_available or len(cal_ids) <= before:
            break
        limit = min(n_available, int(np.ceil(len(cal_ids) * 1.15 * ENOUGH_SAME_PAIRS / max(fewest, 1))))
    grown = {"same_pairs": {s: int(n_same[s]) for s in settings.scorers}, "photos": len(cal_ids),
             "photos_available": n_available, "goal": ENOUGH_SAME_PAIRS,
             "stopped": "enough" if fewest >= ENOUGH_SAME_PAIRS else "train split ran out"}
    grown["words"] = (f"every scorer has at least {ENOUGH_SAME_PAIRS} same-animal pairs"
                      if grown["stopped"] == "enough"
                      else f"the train split ran out ({len(cal_ids)} photos, every one usable) before every scorer "
                           f"had {ENOUGH_SAME_PAIRS} same-animal pairs: "
                           + ", ".join(f"{s} {n_same[s]}" for s in settings.scorers))
    short_of = [s for s in settings.scorers if n_same[s] < MIN_SAME_PAIRS]
    if short_of:
        raise CatalogueError(
            f"the calibration photos give too few same-animal pairs to calibrate on: "
            + ", ".join(f"{s} {n_same[s]}" for s in short_of) + f" (at least {MIN_SAME_PAIRS} each); nothing was "
            f"stored. Add photos of individuals photographed several times to benchmark {cal_bench!r}'s train split "
            "(with masks and keypoints for the spot scorers), or calibrate on a larger benchmark with --calibrate-on")
    t_cal = time.perf_counter()
    calibrators = fit_scorer_calibrations(cal.spots.raw, same_cal, cal.spots.shortlist & cal.valid,
                                          {k: v for k, v in cal.spots.applies.items() if k != GLOBAL}, source=source)
    tst = _score_set(cat, test.image_ids, test.labels, test.sightings, test.flanks, backbone=backbone, matcher=matcher,
                     settings=full, progress=tagged("test photos"), should_cancel=should_cancel)
    t_test = time.perf_counter()
    scored = flank_gallery(tst.valid, test.flanks, flank)  # the gallery each query is scored against
    components = component_metrics(tst.spots, scored, test.labels, calibrators, shortlist=settings.shortlist,
                                   own_candidates=settings.own_candidates)
    scorers = settings.scorers
    if not all(s in calibrators for s in scorers):
        missing = [s for s in scorers if s not in calibrators]
        raise CatalogueError(f"could not calibrate {', '.join(missing)}: the calibration photos gave too few same / "
                             "not-same pairs with spot evidence (too few keypoints, or no masks on opposite flanks?)")
    try:
        choice = choose_fusion(cal.spots.raw, cal.spots.applies, cal.valid, cal.spots.shortlist, cal_labels, scorers,
                               calibrators=calibrators)
    except ValueError as exc:
        raise CatalogueError(f"could not choose how to fuse the scorers: {exc}; nothing was stored") from exc
    test_figures = fusion_metrics(tst.spots, scored, test.labels, calibrators, choice.fitted,
                                  shortlist=settings.shortlist, own_candidates=settings.own_candidates)
    # the shortlist is taken inside the flank's gallery too, as a curator reviewing that flank sees it (and as
    # the components beside it are fused)
    fused = fuse_scores(tst.spots, scored, calibrators, scorers, shortlist=settings.shortlist, fusion=choice.fusion,
                        own_candidates=settings.own_candidates)
    main = {**retrieval_metrics(fused, test.labels, test.labels, valid=scored).to_dict(),
            **flank_counts(test.flanks, flank)}
    name = pipeline_name(backbone.config.name, settings)
    where = {"animals": "photos of its train split's animals the global model was never trained on",
             "photos": "photos of its train split the global model was not trained on (too few of animals it never "
                       "learned)",
             "": "train split" + (" (including photos the global model was trained on: too few held out)"
                                  if trained_on else "")}[held_out]
    cal_source = {"what": f"benchmark {cal_bench} {where}, {len(cal_ids)} photos of "
                          f"{len(set(cal_labels))} individuals, top-{settings.shortlist} pairs",
                  "held_out_from_global_training": bool(held_out), "held_out": held_out or "none",
                  "benchmark": cal_bench, "split": "train", "image_ids": cal_ids, "n_photos": len(cal_ids),
                  "n_individuals": len(set(cal_labels)), "scorers": list(scorers),
                  "n_pairs": {k: c.n_outcomes for k, c in calibrators.items()},
                  "n_positive": {k: c.n_positive for k, c in calibrators.items()}, "sample": grown,
                  "fitted_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                  "built_on": benchmark, "global_fit_benchmark": benchmark}
    species_id = None
    with cat.unit_of_work() as s:
        sp = s.scalars(select(Image.species_id).where(Image.id.in_(test.image_ids[:50]))).all()
        species_id = sp[0] if sp and len(set(sp)) == 1 else None
    _register_pipeline(cat, name, global_model=backbone.config.name, global_config=backbone.config.to_dict(),
                       settings=settings, matcher=matcher, calibrators={k: calibrators[k] for k in scorers},
                       calibration_source=cal_source, species_id=species_id, fusion_choice=choice.to_dict())
    pipeline = load_pipeline(cat, name)
    assert pipeline is not None
    result: dict[str, Any] = {
        **main, "model": name, "global_model": backbone.config.name, "variant": "full_rgb", "benchmark": benchmark,
        "rerank": "none", "metric": "probability", "same_sighting_excluded": any(s for s in test.sightings),
        "pipeline": settings.to_dict(), "scorers": list(scorers), "components": components,
        "spots": {"test": tst.summary, "calibration": cal.summary,
                  "verified_pairs": int(np.isfinite(tst.spots.raw[VERIFICATION]).sum() // 2)},
        "calibration": {k: {"n_pairs": c.n_outcomes, "n_same": c.n_positive} for k, c in calibrators.items()},
        "calibration_sample": grown,
        "fusion": {**choice.to_dict(), "test": test_figures},
        "calibrated_on": calibration_basis(pipeline, fitted_now=True),
        "seconds": {"calibration": round(t_cal - t0, 1), "test": round(t_test - t_cal, 1),
                    "total": round(time.perf_counter() - t0, 1)},
        "provenance": pipeline.provenance(),
        "model_config": {"pipeline": name, "global_config": backbone.config.to_dict(),
                         "matcher": matcher.config.to_dict(), "settings": settings.to_dict(),
                         "calibration": {k: calibrator_to_dict(c) for k, c in pipeline.calibrators.items()}},
    }
    return _stored_result(cat, result, test.image_ids, store=store)


def evaluate_stored_pipeline(cat: Catalogue, pipeline: StoredPipeline, *, benchmark: str, store: bool = True,
                             progress: Callable[[str, int, int], None] | None = None,
                             should_cancel: Callable[[], bool] | None = None, flank: str = "any") -> dict[str, Any]:
    """Evaluate a stored pipeline on ``benchmark``'s test split (any benchmark, a test-only one included) with
    its stored calibration, unchanged: nothing is refitted and the pipeline's row is not touched. The photos are
    scored exactly as when it was built (its global model, fitted where it was fitted, and its matcher config);
    the result says what the calibration rests on (``calibrated_on``) and stores the evaluation."""
    t0 = time.perf_counter()
    src = pipeline.calibration_source
    matcher = matcher_for(pipeline)
    fit_bench = src.get("global_fit_benchmark") or src.get("benchmark")
    try:
        fit_ids = load_benchmark_fit_ids(cat, fit_bench) if fit_bench else None
    except CatalogueError:  # the benchmark it was built on is gone: the catalogue's own fit
        fit_ids = None
    backbone = get_backbone(cat, pipeline.global_model, fit_image_ids=fit_ids)
    test = load_benchmark(cat, benchmark, split="test")
    if not test.image_ids:
        raise CatalogueError(f"benchmark {benchmark!r} has an empty test split")
    settings = pipeline.settings
    scorers = [s for s in settings.scorers if s in pipeline.calibrators]
    if len(scorers) != len(settings.scorers):
        missing = [s for s in settings.scorers if s not in pipeline.calibrators]
        raise CatalogueError(f"pipeline {pipeline.name!r} stores no calibration for {', '.join(missing)}; "
                             "build it again")
    full = settings.with_every_scorer()  # as when built
    tagged = (lambda part: (lambda what, d, t: progress(f"{part}: {what}", d, t))) if progress else (lambda part: None)
    tst = _score_set(cat, test.image_ids, test.labels, test.sightings, test.flanks, backbone=backbone, matcher=matcher,
                     settings=full, progress=tagged("test photos"), should_cancel=should_cancel)
    t_test = time.perf_counter()
    cals = pipeline.calibrators
    scored = flank_gallery(tst.valid, test.flanks, flank)  # the gallery each query is scored against
    components = component_metrics(tst.spots, scored, test.labels, cals, shortlist=settings.shortlist,
                                   own_candidates=settings.own_candidates)
    fusion = pipeline.fusion
    # as when built
    fused = fuse_scores(tst.spots, scored, cals, scorers, shortlist=settings.shortlist, fusion=fusion,
                        own_candidates=settings.own_candidates)
    stored_choice = pipeline.fusion_choice
    main = {**retrieval_metrics(fused, test.labels, test.labels, valid=scored).to_dict(),
            **flank_counts(test.flanks, flank)}
    result: dict[str, Any] = {
        **main, "model": pipeline.name, "global_model": pipeline.global_model, "variant": "full_rgb",
        "benchmark": benchmark, "rerank": "none", "metric": "probability",
        "same_sighting_excluded": any(s for s in test.sightings),
        "pipeline": settings.to_dict(), "scorers": list(scorers), "components": components,
        "spots": {"test": tst.summary, "verified_pairs": int(np.isfinite(tst.spots.raw[VERIFICATION]).sum() // 2)},
        "calibration": {k: {"n_pairs": c.n_outcomes, "n_same": c.n_positive} for k, c in cals.items()},
        "calibrated_on": calibration_basis(pipeline, fitted_now=False),
        "fusion": {**stored_choice, "kept": fusion.name, "fusion": fusion.to_dict(),
                   "why": stored_choice.get("why") or "built before fusions were chosen: the mean of its scorers",
                   "test": fusion_metrics(tst.spots, scored, test.labels, cals, {fusion.name: fusion},
                                          shortlist=settings.shortlist, own_candidates=settings.own_candidates)},
        "seconds": {"calibration": 0.0, "test": round(t_test - t0, 1), "total": round(time.perf_counter() - t0, 1)},
        "provenance": pipeline.provenance(),
        "model_config": {"pipeline": pipeline.name, "global_config": backbone.config.to_dict(),
                         "matcher": matcher.config.to_dict(), "settings": settings.to_dict(),
                         "calibration": {k: calibrator_to_dict(c) for k, c in cals.items()}},
    }
    return _stored_result(cat, result, test.image_ids, store=store)


def _stored_result(cat: Catalogue, result: dict[str, Any], test_ids: list[int], *, store: bool) -> dict[str, Any]:
    """The result with the test photos' mask sources, stored as an evaluation when ``store``."""
    with cat.unit_of_work() as s:
        sources = s.scalars(select(Image.mask_source).where(Image.id.in_(test_ids))).all()
    counts = {str(k or "none"): sources.count(k) for k in sorted(set(sources), key=lambda v: str(v or ""))}
    result["masks"] = counts
    masker = next(iter(counts)) if len(counts) == 1 else ", ".join(f"{k} {v}" for k, v in counts.items())
    if store:
        result["evaluation_id"] = store_evaluation(cat, result, kind="retrieval", masker=masker[:40])
    return result


def pipeline_similarity(cat: Catalogue, pipeline: StoredPipeline, image_ids: list[int], sightings: list[str | None],
                        flanks: list[str], *, progress: Callable[[str, int, int], None] | None = None,
                        should_cancel: Callable[[], bool] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(fused all-vs-all score matrix, valid mask) of a stored pipeline on one photo set, with its stored
    calibration (same-sighting photos excluded, as in evaluation)."""
    backbone = get_backbone(cat, pipeline.global_model)
    matcher = matcher_for(pipeline)
    scored = _score_set(cat, image_ids, [""] * len(image_ids), sightings, flanks, backbone=backbone, matcher=matcher,
                        settings=pipeline.settings, progress=progress, should_cancel=should_cancel)
    scorers = [s for s in pipeline.settings.scorers if s in pipeline.calibrators]
    fused = fuse_scores(scored.spots, scored.valid, pipeline.calibrators, scorers,
                        shortlist=pipeline.settings.shortlist, fusion=pipeline.fusion,
                        own_candidates=pipeline.settings.own_candidates)
    return fused, scored.valid


def verify_candidates(cat: Catalogue, query_id: int, candidate_ids: Sequence[int], *, matcher: LocalMatcher,
                      settings: PipelineSettings, query: LocalFeatures | None = None
                      ) -> tuple[list[LocalFeatures], list[Any]]:
    """(keypoints of the query then each candidate, one Verification per candidate): each candidate matched and
    verified against the query, opposite flanks (left vs right) not compared (match review, the single-photo
    check, the matched-spots view of a pair); ``query``: the query's keypoints when the caller has them."""
    ids = [int(query_id), *(int(c) for c in candidate_ids)]
    rows = image_rows(cat, ids)
    missing = [i for i in ids if i not in rows]
    if missing:
        raise CatalogueError(f"There is no photo #{missing[0]} in the catalogue.")
    flanks = [getattr(rows[i][3], "value", rows[i][3]) for i in ids]
    cross = cross_flank(flanks[:1], flanks[1:])[0]
    feats = ([query, *features_for(cat, ids[1:], matcher=matcher)] if query is not None
             else features_for(cat, ids, matcher=matcher))
    return feats, [verify_one(matcher, feats[0], f, settings, cross=bool(c)) for f, c in zip(feats[1:], cross)]


_GALLERY_INDEX: dict[tuple[str, tuple[int, ...]], Any] = {}


def _gallery_descriptor_index(cat: Catalogue, matcher: LocalMatcher, gallery: list[int], members: list[int]) -> Any:
    """LNBNN's descriptor index over the gallery positions ``members`` (the photos not of the query's opposite
    flank), rebuilt when the gallery changes (the latest few kept per process)."""
    key = (matcher.config.fingerprint(), tuple(gallery), tuple(members))
    if key not in _GALLERY_INDEX:
        feats = features_for(cat, gallery, matcher=matcher)
        if len(_GALLERY_INDEX) >= 3:
            _GALLERY_INDEX.clear()
        _GALLERY_INDEX[key] = build_descriptor_index(feats, members=members, reuse_training=True)
    return _GALLERY_INDEX[key]


def rerank_with_pipeline(cat: Catalogue, pipeline: StoredPipeline, query_id: int, gallery: list[int],
                         ranked: list[tuple[float, int, Any]], rows: dict[int, tuple]
                         ) -> tuple[list[tuple[float, int, dict[str, Any]]], str | None]:
    """Re-rank one query's global ranking (score, gallery position, _) by the pipeline: its top-K shortlist, joined
    by LNBNN's own top candidates over the gallery, gets the fused calibrated probability (global + the spot
    scorers that apply), the rest keep the global order below it (:func:`core.identify.spots.stored.rerank_shortlist`). Returns the new ranking with per-candidate spot facts,
    and a note about the query's evidence."""
    matcher = matcher_for(pipeline)
    fq = features_for(cat, [query_id], matcher=matcher)[0]
    votes = None
    if uses_lnbnn(pipeline, fq):
        flank = lambda i: getattr(rows[i][3], "value", rows[i][3])  # noqa: E731
        g_cross = cross_flank([flank(query_id)], [flank(i) for i in gallery])[0]
        index = _gallery_descriptor_index(cat, matcher, gallery, [j for j in range(len(gallery)) if not g_cross[j]])
        votes = lnbnn_scores(index, fq, k=pipeline.settings.lnbnn_k,
                             exclude=[j for j, i in enumerate(gallery) if i == query_id])
    ranked, k = own_candidates_first(ranked, votes, shortlist=pipeline.settings.shortlist,
                                     own=pipeline.settings.lnbnn_shortlist)
    _, checks = verify_candidates(cat, query_id, [gallery[j] for _, j, _ in ranked[:k]], matcher=matcher,
                                  settings=pipeline.settings, query=fq)
    return rerank_shortlist(pipeline, ranked, fq, checks, votes, shortlist=k)


def folder_features(cat: Catalogue, paths: Sequence[Path], keys: Sequence[str], *, matcher: LocalMatcher,
                    progress: Progress | None = None) -> list[LocalFeatures]:
    """Keypoints of image files outside the catalogue (a Kaggle test folder): the RGBA alpha is the mask (the
    whole photo when there is none), cached per (file content, matcher config) like catalogue photos."""
    return file_features(paths, keys, matcher=matcher, cache_dir=cat.cache_dir / "spots", progress=progress)


# ------------------------------------------------------------------------------ the actions (typed requests)


def evaluate_request(cat: Catalogue, request: SpotEvaluationRequest, *,
                   progress: Callable[[str, int, int], None] | None = None,
                   should_cancel: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Build, calibrate and register the fused pipeline and evaluate it (calibrated on ``request.calibrate_on``'s
    train split when given, else the benchmark's own); a stored pipeline's own name evaluates it with its stored
    settings and calibration, unchanged (only building calibrates)."""
    stored = load_pipeline(cat, request.model)
    if stored is not None:
        if request.calibrate_on:
            raise CatalogueError(f"{request.model!r} is a stored pipeline: it keeps the calibration it was built with "
                                 f"({calibration_basis(stored)['words']}); to calibrate on {request.calibrate_on!r}, "
                                 f"build it again from its global model (--backbone {stored.global_model} --verify "
                                 f"{stored.settings.matcher} ... --calibrate-on {request.calibrate_on})")
        return evaluate_stored_pipeline(cat, stored, benchmark=request.benchmark, progress=progress,
                                        should_cancel=should_cancel, flank=request.flank)
    return evaluate_pipeline(cat, global_model=request.model, benchmark=request.benchmark,
                             settings=request.settings(), progress=progress, should_cancel=should_cancel,
                             calibrate_on=request.calibrate_on, flank=request.flank)


def extract_keypoints(cat: Catalogue, request: KeypointsRequest, *, progress: Callable[[int, int], None] | None = None,
                      should_cancel: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Extract and cache keypoints now (the job's body)."""
    ids = list(request.image_ids) if request.image_ids is not None else all_image_ids(cat, species_id=request.species)
    matcher = get_matcher(request.matcher)
    feats = features_for(cat, ids, matcher=matcher, progress=progress, should_cancel=should_cancel)
    summary = spot_summary(feats, min_keypoints=MIN_KEYPOINTS)
    return {**summary, "matcher": request.matcher, "matcher_config": matcher.config.fingerprint(),
            "summary": (f"{request.matcher} keypoints for {len(ids)} photos: {summary['keypoints_mean']:.0f} per photo "
                        f"on average, {summary['no_spot_evidence']} without spot evidence, "
                        f"{100 * summary['masked_share']:.0f}% on a mask")}


_DECISION_CALIBRATION: dict[tuple, StoredPipeline] = {}


def decided_pairs(cat: Catalogue, *, species_id: int | None = None) -> list[tuple[int, int, int]]:
    """(query image, candidate image, 1 same / 0 not) of every standing same / not-same decision with a
    candidate photo (of one species when given): the curators' ground truth, whatever model showed the pair."""
    with cat.unit_of_work() as s:
        q = (select(MatchDecision.query_image_id, MatchDecision.candidate_image_id, MatchDecision.decision)
             .join(Image, Image.id == MatchDecision.query_image_id)
             .where(MatchDecision.undone_at.is_(None), MatchDecision.candidate_image_id.is_not(None),
                    MatchDecision.decision.in_([DecisionKind.same, DecisionKind.not_same]))
             .order_by(MatchDecision.id))
        if species_id is not None:
            q = q.where(Image.species_id == species_id)
        rows = s.execute(q).all()
    latest: dict[tuple[int, int], int] = {}
    for qid, cid, dec in rows:  # a pair decided twice counts once, as last decided
        if qid != cid:
            latest[(int(qid), int(cid))] = 1 if dec == DecisionKind.same else 0
    return [(a, b, y) for (a, b), y in latest.items()]


def with_decision_calibration(cat: Catalogue, pipeline: StoredPipeline, *, species_id: int | None = None
                              ) -> StoredPipeline:
    """The pipeline with its global and inlier calibrations refitted on the curators' decided pairs once there
    are at least ``core.identify.calibration.ENOUGH_DECISIONS`` of them with both outcomes (LNBNN, which scores a photo
    against a whole gallery, keeps the benchmark calibration); otherwise the pipeline as stored
    (:func:`core.identify.spots.stored.with_refitted_calibration`)."""
    pairs = decided_pairs(cat, species_id=species_id)
    same = [y for _, _, y in pairs]
    if len(pairs) < ENOUGH_DECISIONS or len(set(same)) < 2:
        return pipeline
    key = (str(cat.data_dir), pipeline.name, species_id, tuple(pairs))
    if key in _DECISION_CALIBRATION:
        return _DECISION_CALIBRATION[key]
    ids, a_idx, b_idx, g = _decided_pair_scores(cat, pipeline, pairs)
    inliers = None
    if VERIFICATION in pipeline.settings.scorers:
        matcher = matcher_for(pipeline)
        feats = features_for(cat, ids, matcher=matcher)
        rows = image_rows(cat, ids)
        flank = [getattr(rows[i][3], "value", rows[i][3]) for i in ids]
        inliers = decided_pair_inliers(matcher, feats, flank, a_idx, b_idx, pipeline.settings)
    fitted = with_refitted_calibration(pipeline, g, same, inliers=inliers)
    _DECISION_CALIBRATION.clear()
    _DECISION_CALIBRATION[key] = fitted
    return fitted


def _decided_pair_scores(cat: Catalogue, pipeline: StoredPipeline, pairs: list[tuple[int, int, int]]
                         ) -> tuple[list[int], list[int], list[int], np.ndarray]:
    """The decided pairs' annotations (sorted), each pair's two rows among them, and its global score."""
    ids = sorted({i for a, b, _ in pairs for i in (a, b)})
    pos = {i: n for n, i in enumerate(ids)}
    backbone = get_backbone(cat, pipeline.global_model)
    emb = embed_images(cat, ids, backbone=backbone)
    a_idx = [pos[a] for a, _, _ in pairs]
    b_idx = [pos[b] for _, b, _ in pairs]
    return ids, a_idx, b_idx, paired_scores(emb[a_idx], emb[b_idx], metric=backbone.config.metric).astype(np.float64)


_DISCRIMINATION: dict[tuple, Discrimination | None] = {}


def pipeline_discrimination(cat: Catalogue, pipeline: StoredPipeline, *, species_id: int | None = None
                            ) -> Discrimination | None:
    """The held-out discrimination (:func:`core.identify.calibration.discrimination`) of the pipeline's fused
    probability on the curators' decided pairs, once there are :data:`ENOUGH_DECISIONS` of them with both outcomes
    (the number from which they also recalibrate it); None below that, where its probabilities rest on the
    benchmark calibration it was built and evaluated with. The pairs are scored with the calibration as stored, so
    no pair's outcome helped fit the probability it is judged by (:func:`fuse_pairs`: global score and inliers)."""
    pairs = decided_pairs(cat, species_id=species_id)
    same = [y for _, _, y in pairs]
    if len(pairs) < ENOUGH_DECISIONS or len(set(same)) < 2:
        return None
    key = (str(cat.data_dir), pipeline.name, species_id, tuple(pairs))
    if key not in _DISCRIMINATION:
        ids, a_idx, b_idx, g = _decided_pair_scores(cat, pipeline, pairs)
        matcher = matcher_for(pipeline)
        fused, _ = fuse_pairs(pipeline, list(zip(a_idx, b_idx)), g, features_for(cat, ids, matcher=matcher),
                              matcher=matcher)
        _DISCRIMINATION.clear()
        _DISCRIMINATION[key] = discrimination(np.asarray(fused, np.float64), same)
    return _DISCRIMINATION[key]
