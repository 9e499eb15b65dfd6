"""Pairwise geometric verification: which tentative correspondences one plausible transform explains.

OpenCV's USAC with MAGSAC++ scoring (``cv2.UsacParams``: uniform sampler, sigma-consensus local optimisation,
a fixed random state, so the result is repeatable) fits a homography (default) or an affine transform
(``model="affine"``, for small or distant animals) between the two photos' points at their working scale.
The pair's spot evidence is the inlier count; the inlier correspondences are kept for display.

Mirror-awareness: a transform that reverses orientation (its Jacobian determinant is negative at the inliers'
centroid) maps the pattern onto its mirror image. The same flank never looks like that, so such a fit is
rejected (``status="reflected"``, no inliers). Cross-flank pairs are not verified at all (the left and right
coat patterns of one animal differ): callers pass ``cross_flank=True`` and get ``status="cross_flank"``.
Transforms that shrink or grow the animal's area by more than ``max_area_change`` are rejected as degenerate
(``status="degenerate"``, e.g. all inliers on one line).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from core.identify.spots.base import MIN_KEYPOINTS, Correspondences, LocalFeatures

VERIFY_MODELS = ("homography", "affine")
#: Statuses of pairs spot evidence cannot judge (the global model alone speaks for them).
NO_EVIDENCE = ("no_keypoints", "cross_flank")
#: What each status means to a curator (shown in match review and the CLI).
STATUS_WORDS = {
    "verified": "spots verified",
    "no_keypoints": "no spot evidence (too few keypoints on the photo: tiny, blurred or blank)",
    "too_few_matches": "too few matching spots to verify",
    "no_consistent_geometry": "no consistent spot geometry",
    "reflected": "spots match only as a mirror image (rejected)",
    "degenerate": "implausible geometry (rejected)",
    "cross_flank": "opposite flanks: spots are not comparable",
}


class SpotStatus:
    """What a ``status`` (a :data:`STATUS_WORDS` key) means: in words, and whether spots could judge the pair."""

    status: str

    @property
    def words(self) -> str:
        return STATUS_WORDS.get(self.status, self.status)

    @property
    def has_evidence(self) -> bool:
        """Whether the pair could be judged on spots at all (cross-flank and keypoint-less photos cannot)."""
        return self.status not in NO_EVIDENCE


@dataclass
class Verification(SpotStatus):
    """The outcome for one pair: ``n_inliers`` (the score), the inlier points (original pixels of each photo),
    the fitted 3x3 transform (working scale, A -> B) and a ``status`` (see :data:`STATUS_WORDS`)."""

    n_inliers: int
    inliers_a: np.ndarray
    inliers_b: np.ndarray
    n_tentative: int
    status: str
    model: str
    transform: np.ndarray | None = None


def _empty(status: str, model: str, n_tentative: int = 0) -> Verification:
    z = np.zeros((0, 2), np.float32)
    return Verification(0, z, z, n_tentative, status, model)


def _usac_params(threshold: float, *, seed: int, max_iters: int, confidence: float) -> cv2.UsacParams:
    p = cv2.UsacParams()
    p.confidence = float(confidence)
    p.isParallel = False
    p.loIterations = 10
    p.loMethod = cv2.LOCAL_OPTIM_SIGMA
    p.loSampleSize = 14
    p.maxIterations = int(max_iters)
    p.neighborsSearch = cv2.NEIGH_GRID
    p.randomGeneratorState = int(seed)
    p.sampler = cv2.SAMPLING_UNIFORM
    p.score = cv2.SCORE_METHOD_MAGSAC
    p.threshold = float(threshold)
    return p


def jacobian_det(transform: np.ndarray, point: np.ndarray) -> float:
    """det of the Jacobian of the projective map x -> H x at ``point`` = det(H) / w^3, w = h31 x + h32 y + h33."""
    h = np.asarray(transform, dtype=np.float64)
    w = h[2, 0] * point[0] + h[2, 1] * point[1] + h[2, 2]
    if abs(w) < 1e-12:
        return 0.0
    return float(np.linalg.det(h) / w ** 3)


def verify_pair(a: LocalFeatures, b: LocalFeatures, corr: Correspondences, *, model: str = "homography",
                threshold: float = 5.0, cross_flank: bool = False, min_keypoints: int = MIN_KEYPOINTS,
                max_area_change: float = 25.0, seed: int = 0, max_iters: int = 1000,
                confidence: float = 0.999) -> Verification:
    """Verify ``corr`` (from ``matcher.match(a, b)``); ``threshold`` is the reprojection error in working-scale
    pixels (the matcher's ``max_side`` frame)."""
    if model not in VERIFY_MODELS:
        raise ValueError(f"unknown verification model {model!r}; expected one of {VERIFY_MODELS}")
    if cross_flank:
        return _empty("cross_flank", model, len(corr))
    if not (a.enough(min_keypoints) and b.enough(min_keypoints)):
        return _empty("no_keypoints", model, len(corr))
    need = 4 if model == "homography" else 3
    if len(corr) < max(need, 5):
        return _empty("too_few_matches", model, len(corr))
    src = np.ascontiguousarray(corr.points_a * np.float32(a.scale)).reshape(-1, 1, 2)
    dst = np.ascontiguousarray(corr.points_b * np.float32(b.scale)).reshape(-1, 1, 2)
    params = _usac_params(threshold, seed=seed, max_iters=max_iters, confidence=confidence)
    try:
        if model == "homography":
            h, inl = cv2.findHomography(src, dst, params)
        else:
            m, inl = cv2.estimateAffine2D(src, dst, params)
            h = None if m is None else np.vstack([m, [0.0, 0.0, 1.0]])
    except cv2.error:
        return _empty("no_consistent_geometry", model, len(corr))
    if h is None or inl is None:
        return _empty("no_consistent_geometry", model, len(corr))
    keep = inl.reshape(-1).astype(bool)
    if int(keep.sum()) < need:
        return _empty("no_consistent_geometry", model, len(corr))
    centre = src.reshape(-1, 2)[keep].mean(axis=0)
    det = jacobian_det(h, centre)
    if det <= 0:
        return _empty("reflected", model, len(corr))
    if not (1.0 / max_area_change <= det <= max_area_change):
        return _empty("degenerate", model, len(corr))
    return Verification(int(keep.sum()), corr.points_a[keep], corr.points_b[keep], len(corr), "verified", model,
                        transform=h)
