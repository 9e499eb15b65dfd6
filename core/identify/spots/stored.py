"""A fused pipeline as the catalogue stores it, and the work done with one that needs no catalogue.

A *pipeline* is a global model's top-K shortlist re-scored with spot evidence: :class:`StoredPipeline` holds its
:class:`~core.identify.spots.pipeline.PipelineSettings`, the matcher's config and the fitted calibration of every scorer
with what it rests on (stored in a ``models`` row's ``config``: :func:`pipeline_config` /
:meth:`StoredPipeline.from_config`). Here: the pipeline's name, the calibration sample of a benchmark's train
split, the metrics of each component on a scored set, the fused scores of given pairs (Kaggle export), the
re-ranking of one query's shortlist (match review), and the calibration refitted on the curators' decided pairs.
The catalogue side (storing, loading, embedding photos, extracting keypoints) lives in ``db.identify.spots``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from core.identify.calibration import Calibrator, fit_calibrator
from core.io.images import decode_image
from core.metrics import retrieval_metrics
from core.identify.spots import features_cache_path, load_features, save_features
from core.identify.spots.base import LocalFeatures, LocalMatcher
from core.identify.spots.fusion import (
    GLOBAL,
    calibrator_from_dict,
    calibrator_to_dict,
    fused_similarity,
    shortlist_ranks,
    voted_top_k,
)
from core.identify.spots.fusion_choice import MEAN, Fusion
from core.identify.spots.pipeline import (
    LNBNN,
    VERIFICATION,
    PipelineSettings,
    SpotScores,
    cross_flank,
    own_candidate_scores,
    verify_one,
)
from core.identify.spots.verify import STATUS_WORDS, Verification

PIPELINE_HEAD = "pipeline"
COMPONENTS = {  # what the evaluation reports besides the pipeline itself: name -> scorers fused
    "global": (GLOBAL,),
    "global+verification": (GLOBAL, VERIFICATION),
    "global+lnbnn": (GLOBAL, LNBNN),
    "fused": (GLOBAL, VERIFICATION, LNBNN),
}

Progress = Callable[[int, int], None]


@dataclass
class StoredPipeline:
    """A fused pipeline as stored in its model row."""

    name: str
    global_model: str
    settings: PipelineSettings
    matcher_config: dict[str, Any]
    calibrators: dict[str, Calibrator]
    calibration_source: dict[str, Any] = field(default_factory=dict)
    status: str = "candidate"
    #: how the calibrated scorers are combined, chosen by cross-validation when built, with its figures
    #: (``fusion_choice``: :meth:`core.identify.spots.fusion_choice.FusionChoice.to_dict`); a pipeline built before
    #: fusions were chosen has none and uses the mean of its scorers' probabilities
    fusion_choice: dict[str, Any] = field(default_factory=dict)

    @property
    def fusion(self) -> Fusion:
        if self.fusion_choice.get("fusion"):
            return Fusion.from_dict(self.fusion_choice["fusion"])
        return Fusion(MEAN, tuple(s for s in self.settings.scorers if s in self.calibrators) or (GLOBAL,))

    def provenance(self) -> str:
        cal = ", ".join(f"{k}: {c.n_outcomes} pairs" for k, c in self.calibrators.items())
        own = (f" joined by LNBNN's own top {self.settings.lnbnn_shortlist}" if self.settings.own_candidates else "")
        return (f"{self.name} = {self.global_model} top-{self.settings.shortlist} shortlist{own} + "
                f"{self.settings.matcher} "
                f"spots ({', '.join(self.settings.scorers)}), matcher config {self.matcher_config.get('fingerprint')}, "
                f"isotonic calibration ({cal}) on {self.calibration_source.get('what', 'benchmark pairs')}, "
                f"fused by {self.fusion.name}")

    @classmethod
    def from_config(cls, name: str, cfg: dict[str, Any], *, status: str) -> StoredPipeline:
        """The pipeline a model row's ``config`` (see :func:`pipeline_config`) describes."""
        return cls(name=name, global_model=str(cfg["global_model"]),
                   settings=PipelineSettings.from_dict(cfg["pipeline"]), matcher_config=cfg["matcher"],
                   calibrators={k: calibrator_from_dict(v) for k, v in (cfg.get("calibration") or {}).items()},
                   calibration_source=cfg.get("calibration_source") or {}, status=status,
                   fusion_choice=dict(cfg.get("fusion") or {}))


def pipeline_config(name: str, *, global_model: str, global_config: dict[str, Any], settings: PipelineSettings,
                    matcher: LocalMatcher, calibrators: dict[str, Calibrator],
                    calibration_source: dict[str, Any], fusion_choice: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """The ``config`` a pipeline's model row holds (``fusion_choice``: the fusion kept, its weights and the
    cross-validated figures of every candidate)."""
    return {"name": name, "kind": "pipeline", "global_model": global_model, "global_config": global_config,
            "pipeline": settings.to_dict(), "matcher": matcher.config.to_dict(),
            "calibration": {k: calibrator_to_dict(c) for k, c in calibrators.items()},
            "calibration_source": calibration_source, "fusion": dict(fusion_choice or {}), "metric": "probability",
            "weight_source": f"{global_config.get('weight_source', '')} + {matcher.config.weight_source}"}


def calibration_basis(pipeline: StoredPipeline, *, fitted_now: bool = False) -> dict[str, Any]:
    """What a pipeline's calibration rests on, read from what the pipeline stored: the benchmark and split its
    calibration photos came from, how many photos and individuals, the pairs (and same-animal pairs) each scorer
    was fitted on, when, and by which scorers; ``words`` says it in one line. ``fitted_now``: fitted by this
    build (otherwise the stored calibration, used unchanged)."""
    src = pipeline.calibration_source
    scorers = [s for s in pipeline.settings.scorers if s in pipeline.calibrators]
    n_pairs = {k: int(c.n_outcomes) for k, c in pipeline.calibrators.items()}
    n_positive = {k: int(c.n_positive) for k, c in pipeline.calibrators.items()}
    photos = src.get("n_photos", len(src.get("image_ids") or []))
    basis = {"benchmark": src.get("benchmark"), "split": src.get("split", "train"), "photos": int(photos),
             "individuals": src.get("n_individuals"), "scorers": scorers, "n_pairs": n_pairs,
             "n_positive": n_positive, "fitted_at": src.get("fitted_at"), "built_on": src.get("built_on"),
             "held_out_from_global_training": bool(src.get("held_out_from_global_training", False)),
             "what": src.get("what", "benchmark pairs"), "fitted_now": fitted_now}
    pairs = ", ".join(f"{k} {n_pairs[k]} ({n_positive[k]} same)" for k in scorers)
    where = (f"benchmark {basis['benchmark']}'s {basis['split']} split" if basis["benchmark"]
             else str(basis["what"]))
    animals = f" of {basis['individuals']} individuals" if basis["individuals"] is not None else ""
    when = f", fitted {basis['fitted_at']}" if basis["fitted_at"] else ""
    built = (f" when the pipeline was built on {basis['built_on']}"
             if basis["built_on"] and basis["built_on"] != basis["benchmark"] else "")
    how = "fitted now (building the pipeline)" if fitted_now else "the pipeline's stored calibration, not refitted"
    basis["words"] = (f"calibrated on {where}: {basis['photos']} photos{animals}; pairs per scorer {pairs}"
                      f"{when}{built}; {how}")
    return basis


def pipeline_name(global_model: str, settings: PipelineSettings) -> str:
    parts = [global_model, settings.matcher]
    if settings.lnbnn:
        parts.append("lnbnn")
    name = "+".join(parts)
    if not settings.verification:
        name += "-noverify"
    if settings.shortlist != PipelineSettings().shortlist:
        name += f"-k{settings.shortlist}"
    if settings.lnbnn and settings.lnbnn_shortlist != PipelineSettings().lnbnn_shortlist:
        name += f"-own{settings.lnbnn_shortlist}"
    return name


def spot_summary(features: Sequence[LocalFeatures], *, min_keypoints: int) -> dict[str, Any]:
    n = np.array([f.n for f in features], dtype=np.float64)
    return {"photos": len(features), "keypoints_mean": float(n.mean()) if n.size else 0.0,
            "keypoints_median": float(np.median(n)) if n.size else 0.0,
            "masked_share": float(np.mean([f.masked for f in features])) if features else 0.0,
            "no_spot_evidence": int(sum(not f.enough(min_keypoints) for f in features))}


def calibration_sample(image_ids: Sequence[int], labels: Sequence[str], *, limit: int, seed: int = 0,
                       exclude: Sequence[int] = ()) -> list[int]:
    """A seeded sample of whole identities, about ``limit`` photos (in the given order), leaving out ``exclude``;
    an identity with one photo left gives no same pair and is never chosen."""
    skip = {int(i) for i in exclude}
    by_id: dict[str, list[int]] = {}
    for i, lab in zip(image_ids, labels):
        if i not in skip:
            by_id.setdefault(lab, []).append(i)
    by_id = {k: v for k, v in by_id.items() if len(v) >= 2}  # an animal with one photo gives no same pair
    order = np.random.default_rng(seed).permutation(sorted(by_id))
    chosen: list[int] = []
    for lab in order:
        if len(chosen) >= limit:
            break
        chosen.extend(by_id[str(lab)])
    keep = set(chosen)
    return [i for i in image_ids if i in keep]


def fuse_scores(spots: SpotScores, valid: np.ndarray, calibrators: dict[str, Calibrator], scorers: Sequence[str], *,
                shortlist: int, fusion: Fusion | None = None, own_candidates: Mapping[str, int] | None = None
                ) -> np.ndarray:
    """The fused all-vs-all score matrix of ``scorers`` (each with its calibrator) on a scored set, combined by
    ``fusion`` (default: the mean of their probabilities), which then decides the scorers read; the shortlist is
    the global top-``shortlist`` joined by ``own_candidates`` of each of those scorers
    (:attr:`PipelineSettings.own_candidates`)."""
    if fusion is not None:
        scorers = fusion.needs
    raw, applies = spots.restricted(scorers)
    return fused_similarity(spots.raw[GLOBAL], valid, shortlist=shortlist, raw=raw,
                            calibrators={k: calibrators[k] for k in scorers}, applies=applies, fusion=fusion,
                            own_candidates=own_candidate_scores(spots.raw, spots.applies, own_candidates or {}))


def same_pairs_per_scorer(spots: SpotScores, valid: np.ndarray, same: np.ndarray) -> dict[str, int]:
    """Same-animal (query, candidate) pairs each scorer is calibrated on: shortlisted, valid, where it applies."""
    pairs = spots.shortlist & np.asarray(valid, bool) & np.asarray(same, bool)
    return {s: int((pairs & np.asarray(spots.applies[s], bool) & np.isfinite(spots.raw[s])).sum())
            for s in spots.raw}


def fusion_metrics(spots: SpotScores, valid: np.ndarray, labels: Sequence[str], calibrators: dict[str, Calibrator],
                   fusions: dict[str, Fusion], *, shortlist: int, own_candidates: Mapping[str, int] | None = None
                   ) -> dict[str, dict[str, float]]:
    """macro mAP and CMC@1 of each fitted fusion on a scored set (the test column beside the cross-validated
    one)."""
    out: dict[str, dict[str, float]] = {}
    for name, fusion in fusions.items():
        m = retrieval_metrics(fuse_scores(spots, valid, calibrators, fusion.needs, shortlist=shortlist, fusion=fusion,
                                          own_candidates=own_candidates),
                              labels, labels, valid=valid)
        out[name] = {"map_macro": float(m.map_macro), "cmc1_macro": float(m.cmc_macro[1])}
    return out


def component_metrics(spots: SpotScores, valid: np.ndarray, labels: Sequence[str],
                      calibrators: dict[str, Calibrator], *, shortlist: int,
                      own_candidates: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Retrieval metrics of every :data:`COMPONENTS` entry whose scorers are all calibrated, and of LNBNN alone."""
    g = spots.raw[GLOBAL]

    def metrics_of(sim: np.ndarray) -> dict[str, Any]:
        return retrieval_metrics(sim, labels, labels, valid=valid).to_dict()

    components: dict[str, Any] = {}
    for comp, scorers in COMPONENTS.items():
        if comp == "global":
            components[comp] = metrics_of(g)
            continue
        if not all(s in calibrators for s in scorers):
            continue
        # a component's shortlist is joined only by its own scorers' candidates
        own = {k: n for k, n in (own_candidates or {}).items() if k in scorers}
        components[comp] = metrics_of(fuse_scores(spots, valid, calibrators, scorers, shortlist=shortlist,
                                                  own_candidates=own))
    components["lnbnn_alone"] = metrics_of(np.where(valid, spots.raw[LNBNN] + 1e-9 * g, -np.inf))
    return components


def file_features(paths: Sequence[Path], keys: Sequence[str], *, matcher: LocalMatcher, cache_dir: Path,
                  progress: Progress | None = None) -> list[LocalFeatures]:
    """Keypoints of image files (a Kaggle test folder): the RGBA alpha is the mask (the whole photo when there is
    none), cached under ``cache_dir`` per (``key``: the file's content, matcher config)."""
    fp = matcher.config.fingerprint()
    out: list[LocalFeatures] = []
    for n, (path, key) in enumerate(zip(paths, keys)):
        cache = features_cache_path(cache_dir, fp, f"{key}-alpha")
        f = load_features(cache)
        if f is None:
            decoded = decode_image(path.read_bytes(), name=path.name)
            mask = decoded.alpha > 127 if decoded.alpha is not None else None
            f = matcher.extract(np.asarray(decoded.image), mask if mask is not None and mask.any() else None)
            save_features(cache, f)
        out.append(f)
        if progress is not None:
            progress(n + 1, len(paths))
    return out


def fuse_pairs(pipeline: StoredPipeline, pairs: Sequence[tuple[int, int]], global_scores: np.ndarray,
               features: Sequence[LocalFeatures], *, matcher: LocalMatcher,
               progress: Progress | None = None) -> tuple[np.ndarray, dict[str, int]]:
    """Fused probability of each (a, b) pair of positions into ``features`` given its global score: the mean
    of the calibrated global probability and, where both photos have keypoints, the calibrated inlier count.
    Every pair counts as shortlisted (a submission scores the pairs it is given); LNBNN, which needs a
    gallery, takes no part. Returns the scores and how many pairs had spot evidence."""
    cals = pipeline.calibrators
    probs = {GLOBAL: cals[GLOBAL].probability(np.asarray(global_scores, np.float64))}
    inliers = np.full(len(pairs), np.nan)
    if VERIFICATION in pipeline.settings.scorers and VERIFICATION in cals:
        done: dict[tuple[int, int], float] = {}
        for t, (a, b) in enumerate(pairs):
            key = (min(a, b), max(a, b))
            if key not in done:  # each unordered pair verified once
                v = verify_one(matcher, features[key[0]], features[key[1]], pipeline.settings)
                done[key] = float(v.n_inliers) if v.has_evidence else np.nan
            inliers[t] = done[key]
            if progress is not None and (t % 500 == 0 or t + 1 == len(pairs)):
                progress(t + 1, len(pairs))
        probs[VERIFICATION] = np.where(np.isfinite(inliers), cals[VERIFICATION].probability(np.nan_to_num(inliers)),
                                       np.nan)
    fusion = pipeline.fusion
    if fusion.uses_ranks:  # a list of pairs is no shortlist: there are no ranks to read
        fusion = Fusion(MEAN, tuple(probs))
    fused = fusion.combine(*_absent_not_applying(fusion, probs, {}))  # NaN (no spot evidence): the scorer is out
    with_evidence = int(np.isfinite(inliers).sum())
    return fused.astype(np.float32), {"pairs": len(pairs), "with_spot_evidence": with_evidence,
                                      "fusion": fusion.name}


def _absent_not_applying(fusion: Fusion, probs: dict[str, np.ndarray], applies: dict[str, np.ndarray]
                         ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The probabilities and where each applies, with every scorer the fusion reads but that was not scored here
    (LNBNN for a pair list, or for a query without keypoints) present as not applying to any pair."""
    shape = np.shape(probs[GLOBAL])
    probs, applies = dict(probs), dict(applies)
    for s in fusion.needs:
        if s not in probs:
            probs[s] = np.full(shape, np.nan)
            applies[s] = np.zeros(shape, bool)
        applies.setdefault(s, np.isfinite(np.asarray(probs[s], np.float64)))
    return probs, applies


def uses_lnbnn(pipeline: StoredPipeline, query: LocalFeatures) -> bool:
    """Whether LNBNN votes take part in re-ranking a query with these keypoints."""
    return (LNBNN in pipeline.settings.scorers and LNBNN in pipeline.calibrators
            and query.enough(pipeline.settings.min_keypoints))


def own_candidates_first(ranked: list[tuple[float, int, Any]], lnbnn_votes: np.ndarray | None, *, shortlist: int,
                         own: int) -> tuple[list[tuple[float, int, Any]], int]:
    """One query's global ranking (score, gallery position, _) with LNBNN's own top-``own`` candidates (positive
    votes over the whole gallery) moved up to join its top-``shortlist``, as :func:`core.identify.spots.fusion.
    joint_shortlist` joins them in evaluation; returns the ranking and the joint shortlist's length. Only
    candidates the global search returned can join (their global score is needed)."""
    head, rest = ranked[:shortlist], ranked[shortlist:]
    if lnbnn_votes is None or own < 1 or not rest:
        return ranked, len(head)
    votes = np.asarray(lnbnn_votes, np.float64)[None, :]
    chosen = set(np.flatnonzero(voted_top_k(votes, np.ones(votes.shape, bool), own)[0]).tolist())
    extra = [r for r in rest if r[1] in chosen]
    return head + extra + [r for r in rest if r[1] not in chosen], len(head) + len(extra)


def rerank_shortlist(pipeline: StoredPipeline, ranked: list[tuple[float, int, Any]], query: LocalFeatures,
                     checks: Sequence[Verification], lnbnn_votes: np.ndarray | None = None, *,
                     shortlist: int | None = None) -> tuple[list[tuple[float, int, dict[str, Any]]], str | None]:
    """Re-rank one query's global ranking (score, gallery position, _) by the pipeline: its first ``shortlist``
    (default the pipeline's K; longer when LNBNN's own candidates joined it, :func:`own_candidates_first`), whose
    spot verifications are ``checks``, in order, get the fused calibrated probability (global + the spot scorers
    that apply; LNBNN's ``lnbnn_votes`` per gallery position when :func:`uses_lnbnn`), the rest keep the global
    order below it. Returns the new ranking with per-candidate spot facts, and a note about the query's evidence."""
    k = pipeline.settings.shortlist if shortlist is None else shortlist
    short, rest = ranked[:k], ranked[k:]
    cals = pipeline.calibrators
    evidence = np.array([v.has_evidence for v in checks], dtype=bool)
    probs = {GLOBAL: cals[GLOBAL].probability([sc for sc, _, _ in short]) if short else np.zeros(0)}
    if VERIFICATION in pipeline.settings.scorers and VERIFICATION in cals:
        probs[VERIFICATION] = cals[VERIFICATION].probability([v.n_inliers for v in checks]) if checks else np.zeros(0)
    if lnbnn_votes is not None:
        probs[LNBNN] = cals[LNBNN].probability([lnbnn_votes[j] for _, j, _ in short]) if short else np.zeros(0)
    # the spot scorers apply where the pair could be judged on spots (the same rule as in evaluation)
    fusion = pipeline.fusion
    probs_all, applies = _absent_not_applying(fusion, probs, {name: evidence for name in probs if name != GLOBAL})
    ranks = None
    if fusion.uses_ranks and short:
        raw = {GLOBAL: np.array([sc for sc, _, _ in short], np.float64),
               VERIFICATION: np.array([v.n_inliers for v in checks], np.float64),
               LNBNN: (np.array([lnbnn_votes[j] for _, j, _ in short], np.float64) if lnbnn_votes is not None
                       else np.full(len(short), np.nan))}
        ranks = {s: shortlist_ranks(raw[s][None, :], np.ones((1, len(short)), bool),
                                    np.asarray(applies.get(s, np.ones(len(short), bool)))[None, :])[0]
                 for s in fusion.scorers}
    fused = fusion.combine(probs_all, applies, ranks) if short else np.zeros(0)
    out: list[tuple[float, int, dict[str, Any]]] = [
        (float(fused[t]), j, {"global_score": float(score), "inliers": int(v.n_inliers), "spot_status": v.status,
                              "spot_probability": float(probs[VERIFICATION][t])
                              if VERIFICATION in probs and v.has_evidence else None})
        for t, ((score, j, _), v) in enumerate(zip(short, checks))]
    out.sort(key=lambda r: (-r[0], -r[2]["global_score"], r[1]))
    for score, j, _ in rest:
        out.append((float(cals[GLOBAL].probability([score])[0]) - 1.0, j,
                    {"global_score": float(score), "inliers": None, "spot_status": "outside_shortlist"}))
    note = None
    if not query.enough(pipeline.settings.min_keypoints):
        note = (f"{STATUS_WORDS['no_keypoints']}: candidates are ranked by the global model alone")
    elif not query.masked:
        note = "this photo has no mask: its spots come from the whole photo, background included"
    return out, note


def decided_pair_inliers(matcher: LocalMatcher, features: Sequence[LocalFeatures], flanks: Sequence[str | None],
                         a_idx: Sequence[int], b_idx: Sequence[int], settings: PipelineSettings
                         ) -> tuple[list[float], list[bool]]:
    """(inlier count, has spot evidence) of each pair (a_idx[t], b_idx[t]) of positions into ``features``
    (opposite flanks are not compared)."""
    cross = cross_flank(flanks)
    inliers, use = [], []
    for a, b in zip(a_idx, b_idx):
        v = verify_one(matcher, features[a], features[b], settings, cross=bool(cross[a, b]))
        inliers.append(float(v.n_inliers))
        use.append(v.has_evidence)
    return inliers, use


def with_refitted_calibration(pipeline: StoredPipeline, global_scores: np.ndarray, same: Sequence[int], *,
                              inliers: tuple[list[float], list[bool]] | None = None) -> StoredPipeline:
    """The pipeline with its global calibration (and its inlier calibration, given each decided pair's
    ``inliers`` and whether it had spot evidence) refitted on the curators' decided pairs (``same``: 1 same, 0 not);
    an inlier calibration with too few pairs with spot evidence keeps the benchmark's."""
    calibrators = dict(pipeline.calibrators)
    y = np.asarray(same)
    source = f"{len(y)} curator decisions"
    calibrators[GLOBAL] = fit_calibrator(global_scores, y, sources={source: len(y)})
    if inliers is not None:
        use_arr = np.asarray(inliers[1], bool)
        try:
            calibrators[VERIFICATION] = fit_calibrator(np.asarray(inliers[0])[use_arr], y[use_arr],
                                                       sources={source: int(use_arr.sum())})
        except ValueError:
            pass  # too few decided pairs with spot evidence: keep the benchmark calibration
    return replace(pipeline, calibrators=calibrators,
                   calibration_source={**pipeline.calibration_source,
                                       "what": f"{source} (global, inliers); LNBNN: "
                                               f"{pipeline.calibration_source.get('what', 'benchmark pairs')}"})
