"""The spot-evidence pipeline over arrays: which pairs to verify, their inlier counts, LNBNN votes, and the
calibrated fused score matrix (pure functions; the catalogue side lives in ``db.identify.spots``).

A *pipeline* is a global model (the shortlist) + a local matcher + the scorers used + K + the calibration.
:class:`PipelineSettings` holds everything but the calibration (fitted on data) and the global model's own
config, and is stored with the pipeline's model row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np

from core.identify.features import ExtractionCancelled
from core.identify.spots.base import MIN_KEYPOINTS, Correspondences, LocalFeatures, LocalMatcher
from core.identify.spots.fusion import DEFAULT_SHORTLIST, GLOBAL, joint_shortlist
from core.identify.spots.lnbnn import DEFAULT_K, lnbnn_all_vs_all
from core.identify.spots.verify import VERIFY_MODELS, Verification, verify_pair

VERIFICATION = "inliers"
LNBNN = "lnbnn"
SCORERS = (GLOBAL, VERIFICATION, LNBNN)
LATERAL = ("left", "right")
#: LNBNN's own top candidates over the whole gallery that join the global shortlist (see README, "Spot evidence")
DEFAULT_LNBNN_SHORTLIST = 10


@dataclass(frozen=True)
class PipelineSettings:
    """The stored recipe of a fused pipeline (besides the global model and the fitted calibration)."""

    matcher: str = "sift"
    shortlist: int = DEFAULT_SHORTLIST
    verification: bool = True
    lnbnn: bool = False
    lnbnn_k: int = DEFAULT_K
    verify_model: str = "homography"
    verify_threshold: float = 5.0
    min_keypoints: int = MIN_KEYPOINTS
    #: with LNBNN: its own top candidates over the whole gallery that join the global top-``shortlist``
    lnbnn_shortlist: int = DEFAULT_LNBNN_SHORTLIST

    def __post_init__(self) -> None:
        if self.shortlist < 1:
            raise ValueError(f"the shortlist must hold at least 1 candidate, got {self.shortlist}")
        if not (self.verification or self.lnbnn):
            raise ValueError("a pipeline needs spot verification, LNBNN, or both")
        if self.verify_model not in VERIFY_MODELS:
            raise ValueError(f"unknown verification model {self.verify_model!r}; expected one of {VERIFY_MODELS}")
        if self.lnbnn_k < 1:
            raise ValueError(f"LNBNN needs k >= 1, got {self.lnbnn_k}")
        if self.verify_threshold <= 0:
            raise ValueError("the verification threshold must be positive (pixels)")
        if isinstance(self.lnbnn_shortlist, bool) or not isinstance(self.lnbnn_shortlist, int) \
                or self.lnbnn_shortlist < 0:
            raise ValueError(f"LNBNN's own candidates must be a whole number >= 0, got {self.lnbnn_shortlist!r}")

    @property
    def own_candidates(self) -> dict[str, int]:
        """How many of each scorer's own top candidates join the shortlist (LNBNN's, when it is fused)."""
        return {LNBNN: self.lnbnn_shortlist} if self.lnbnn and self.lnbnn_shortlist else {}

    def with_every_scorer(self) -> PipelineSettings:
        """These settings with verification and LNBNN both scored, so every component can be reported beside the
        pipeline; LNBNN's own candidates join the shortlist only as this pipeline joins them."""
        return replace(self, verification=True, lnbnn=True, lnbnn_shortlist=self.lnbnn_shortlist if self.lnbnn else 0)

    @property
    def scorers(self) -> tuple[str, ...]:
        return (GLOBAL,) + ((VERIFICATION,) if self.verification else ()) + ((LNBNN,) if self.lnbnn else ())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PipelineSettings:
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown pipeline settings: {', '.join(sorted(unknown))}")
        # a pipeline stored before LNBNN's own candidates joined the shortlist was calibrated without them
        return cls(**{"lnbnn_shortlist": 0, **dict(data)})


def cross_flank(flanks_a: Sequence[str | None], flanks_b: Sequence[str | None] | None = None) -> np.ndarray:
    """bool[i, j]: photo i and photo j show opposite flanks (left vs right, both labelled)."""
    a = np.asarray([f if f in LATERAL else "" for f in flanks_a], dtype=object)
    b = a if flanks_b is None else np.asarray([f if f in LATERAL else "" for f in flanks_b], dtype=object)
    known = (a != "")[:, None] & (b != "")[None, :]
    return known & (a[:, None] != b[None, :])


def local_applies(features: Sequence[LocalFeatures], cross: np.ndarray, *, min_keypoints: int = MIN_KEYPOINTS,
                  gallery: Sequence[LocalFeatures] | None = None) -> np.ndarray:
    """bool[i, j]: spot evidence can judge the pair (not opposite flanks; both photos have keypoints)."""
    ok_a = np.array([f.enough(min_keypoints) for f in features], dtype=bool)
    ok_b = ok_a if gallery is None else np.array([f.enough(min_keypoints) for f in gallery], dtype=bool)
    return ok_a[:, None] & ok_b[None, :] & ~np.asarray(cross, bool)


def verify_one(matcher: LocalMatcher, a: LocalFeatures, b: LocalFeatures, settings: PipelineSettings, *,
               cross: bool = False) -> Verification:
    """Match and verify one pair under ``settings`` (cross-flank and keypoint-less pairs are not matched)."""
    if cross or not (a.enough(settings.min_keypoints) and b.enough(settings.min_keypoints)):
        return verify_pair(a, b, _no_corr(), model=settings.verify_model, threshold=settings.verify_threshold,
                           cross_flank=cross, min_keypoints=settings.min_keypoints)
    corr = matcher.match(a, b)
    return verify_pair(a, b, corr, model=settings.verify_model, threshold=settings.verify_threshold,
                       min_keypoints=settings.min_keypoints)


def _no_corr() -> Any:

    return Correspondences.empty()


def verified_inliers(features: Sequence[LocalFeatures], pairs: np.ndarray, applies: np.ndarray, *,
                     matcher: LocalMatcher, settings: PipelineSettings,
                     progress: Callable[[int, int], None] | None = None,
                     should_cancel: Callable[[], bool] | None = None) -> np.ndarray:
    """N x N inlier counts for the ``pairs`` (bool) where spots apply; NaN elsewhere. Each unordered pair is
    verified once (A's descriptors against B's) and the count used both ways."""
    n = len(features)
    pairs = np.asarray(pairs, bool) & np.asarray(applies, bool)
    todo = sorted({(min(i, j), max(i, j)) for i, j in zip(*np.nonzero(pairs)) if i != j})
    out = np.full((n, n), np.nan)
    for t, (i, j) in enumerate(todo):
        if should_cancel is not None and should_cancel() and t % 50 == 0:

            raise ExtractionCancelled(t, len(todo))
        v = verify_one(matcher, features[i], features[j], settings)
        out[i, j] = out[j, i] = float(v.n_inliers)
        if progress is not None and (t % 200 == 0 or t + 1 == len(todo)):
            progress(t + 1, len(todo))
    return np.where(pairs, out, np.nan)


def own_candidate_scores(raw: Mapping[str, np.ndarray], applies: Mapping[str, np.ndarray],
                         own: Mapping[str, int]) -> dict[str, tuple[np.ndarray, int]]:
    """For :func:`core.identify.spots.fusion.joint_shortlist`: each scorer's scores where it applies (NaN
    elsewhere) with how many of its own top candidates join (:attr:`PipelineSettings.own_candidates`)."""
    return {name: (np.where(applies[name], raw[name], np.nan), n) for name, n in own.items()
            if name in raw and n > 0}


@dataclass
class SpotScores:
    """Raw scores of every scorer on one all-vs-all set and where each applies."""

    raw: dict[str, np.ndarray]
    applies: dict[str, np.ndarray]
    shortlist: np.ndarray

    def restricted(self, scorers: Sequence[str]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        return ({k: v for k, v in self.raw.items() if k in scorers},
                {k: v for k, v in self.applies.items() if k in scorers})


def spot_scores_all_vs_all(features: Sequence[LocalFeatures], global_sim: np.ndarray, valid: np.ndarray,
                           flanks: Sequence[str | None], *, matcher: LocalMatcher, settings: PipelineSettings,
                           progress: Callable[[str, int, int], None] | None = None,
                           should_cancel: Callable[[], bool] | None = None) -> SpotScores:
    """Every scorer of ``settings`` on one set (all-vs-all under ``valid``): the global scores, LNBNN over the
    whole set, inlier counts on the shortlist (the global top-K joined by LNBNN's own top candidates)."""
    g = np.asarray(global_sim, dtype=np.float64)
    applies_local = local_applies(features, cross_flank(flanks), min_keypoints=settings.min_keypoints)
    raw = {GLOBAL: g}
    applies = {GLOBAL: np.ones_like(applies_local)}
    step = (lambda what: (lambda d, t: progress(what, d, t))) if progress is not None else (lambda what: None)
    if settings.lnbnn:
        raw[LNBNN] = lnbnn_all_vs_all(features, valid=valid & applies_local, k=settings.lnbnn_k, sides=flanks,
                                      progress=step("LNBNN voting"), should_cancel=should_cancel)
        applies[LNBNN] = applies_local
    short = joint_shortlist(g, valid, settings.shortlist,
                            own_candidates=own_candidate_scores(raw, applies, settings.own_candidates))
    if settings.verification:
        raw[VERIFICATION] = verified_inliers(features, short, applies_local, matcher=matcher, settings=settings,
                                             progress=step("verifying spots"), should_cancel=should_cancel)
        applies[VERIFICATION] = applies_local & short
    return SpotScores(raw=raw, applies=applies, shortlist=short)
