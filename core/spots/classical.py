"""Classical local matchers on OpenCV: ``sift`` (RootSIFT, the offline default) and ``orb`` (binary, fast).

Per photo: greyscale, longest side resized to ``max_side`` (INTER_AREA when shrinking, INTER_LINEAR when
enlarging: every photo is described at the same scale); keypoints detected only inside the mask (eroded a
little so the outline's own corners do not count) when there is one; the ``max_keypoints`` strongest kept.
SIFT descriptors become RootSIFT (sqrt of the L1-normalised descriptor, Arandjelovic & Zisserman 2012), so the
L2 distance between them is the Hellinger kernel distance of the SIFT histograms.

Matching: for each descriptor of A, its two nearest neighbours in B (L2, or Hamming for ORB) and Lowe's ratio
test d1 < ratio * d2; confidence = 1 - d1 / d2.
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from core.spots.base import Correspondences, LocalFeatures, MatcherConfig

MASK_ERODE_FRACTION = 0.01  # of the working image's longest side


def working_grey(rgb: np.ndarray, mask: np.ndarray | None, *, max_side: int) -> tuple[np.ndarray, np.ndarray | None,
                                                                                      float]:
    """(grey uint8 at the working scale, uint8 detection mask or None, scale = working / original)."""
    img = np.asarray(rgb)
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise ValueError(f"expected an HxWx3 uint8 RGB photo, got shape {img.shape} dtype {img.dtype}")
    h, w = img.shape[:2]
    scale = float(max_side) / float(max(h, w))
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    grey = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)
    if size != (w, h):
        grey = cv2.resize(grey, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    det_mask = None
    if mask is not None:
        m = np.asarray(mask).astype(bool)
        if m.shape != (h, w):
            raise ValueError(f"the mask is {m.shape}, the photo {(h, w)}")
        m8 = cv2.resize(m.astype(np.uint8) * 255, size, interpolation=cv2.INTER_NEAREST)
        r = max(1, round(MASK_ERODE_FRACTION * max(size)))
        det_mask = cv2.erode(m8, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1)))
    return grey, det_mask, scale


def _strongest(keypoints: list[Any], descriptors: np.ndarray | None, limit: int) -> tuple[list[Any], np.ndarray | None]:
    if descriptors is None or len(keypoints) <= limit:
        return keypoints, descriptors
    order = sorted(range(len(keypoints)), key=lambda i: (-keypoints[i].response, i))[:limit]
    return [keypoints[i] for i in order], descriptors[order]


class OpenCVMatcher:
    """SIFT (RootSIFT) or ORB keypoints + ratio-test matching."""

    def __init__(self, config: MatcherConfig) -> None:
        self.config = config

    def _detector(self) -> Any:
        if self.config.descriptor == "rootsift":
            return cv2.SIFT_create(nfeatures=self.config.max_keypoints)
        return cv2.ORB_create(nfeatures=self.config.max_keypoints, scaleFactor=1.2, nlevels=8, edgeThreshold=15,
                              patchSize=31, fastThreshold=10)

    def extract(self, rgb: np.ndarray, mask: np.ndarray | None = None) -> LocalFeatures:
        grey, det_mask, scale = working_grey(rgb, mask, max_side=self.config.max_side)
        kps, desc = self._detector().detectAndCompute(grey, det_mask)
        kps, desc = _strongest(list(kps), desc, self.config.max_keypoints)
        dim = self.config.descriptor_dim
        if desc is None or not kps:
            dtype = np.uint8 if self.config.binary else np.float32
            return LocalFeatures(np.zeros((0, 2)), np.zeros((0, dim), dtype), rgb.shape[:2], scale, mask is not None)
        if self.config.descriptor == "rootsift":
            d = desc.astype(np.float32)
            desc = np.sqrt(d / np.maximum(np.abs(d).sum(axis=1, keepdims=True), 1e-12)).astype(np.float32)
        pts = np.array([kp.pt for kp in kps], dtype=np.float32) / scale
        return LocalFeatures(pts, desc, rgb.shape[:2], scale, mask is not None)

    def match(self, a: LocalFeatures, b: LocalFeatures) -> Correspondences:
        return ratio_match(a, b, ratio=self.config.ratio, binary=self.config.binary)


def ratio_match(a: LocalFeatures, b: LocalFeatures, *, ratio: float, binary: bool = False) -> Correspondences:
    """Lowe's ratio test: keep A's descriptor i -> its nearest j in B when d1 < ratio * d2 (B needs >= 2)."""
    if a.n == 0 or b.n < 2:
        return Correspondences.empty()
    norm = cv2.NORM_HAMMING if binary else cv2.NORM_L2
    da = np.ascontiguousarray(a.descriptors, dtype=np.uint8 if binary else np.float32)
    db = np.ascontiguousarray(b.descriptors, dtype=np.uint8 if binary else np.float32)
    knn = cv2.BFMatcher(norm).knnMatch(da, db, k=2)
    ia, ib, conf = [], [], []
    for pair in knn:
        if len(pair) < 2:
            continue
        m, n = pair
        if m.distance < ratio * n.distance:
            ia.append(m.queryIdx)
            ib.append(m.trainIdx)
            conf.append(1.0 - m.distance / max(n.distance, 1e-9))
    if not ia:
        return Correspondences.empty()
    return Correspondences(a.keypoints[ia], b.keypoints[ib], np.clip(conf, 0.0, 1.0))


def create_sift(*, max_side: int = 512, max_keypoints: int = 1000, ratio: float = 0.8) -> OpenCVMatcher:
    """``sift``: RootSIFT at ``max_side`` px, at most ``max_keypoints`` per photo, Lowe ratio ``ratio``."""
    return OpenCVMatcher(MatcherConfig(name="sift", descriptor="rootsift", descriptor_dim=128, max_side=int(max_side),
                                       max_keypoints=int(max_keypoints), ratio=float(ratio),
                                       extra=(("opencv", cv2.__version__), ("mask_erode", MASK_ERODE_FRACTION))))


def create_orb(*, max_side: int = 512, max_keypoints: int = 1000, ratio: float = 0.8) -> OpenCVMatcher:
    """``orb``: 256-bit ORB at ``max_side`` px, Hamming ratio test."""
    return OpenCVMatcher(MatcherConfig(name="orb", descriptor="orb", descriptor_dim=32, max_side=int(max_side),
                                       max_keypoints=int(max_keypoints), ratio=float(ratio), binary=True,
                                       extra=(("opencv", cv2.__version__), ("mask_erode", MASK_ERODE_FRACTION))))
