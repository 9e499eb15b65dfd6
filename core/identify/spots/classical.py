"""Classical local matchers on OpenCV: ``sift`` (RootSIFT, the offline default) and ``orb`` (binary, fast).

Per photo: greyscale, longest side resized to ``max_side`` (INTER_AREA when shrinking, INTER_LINEAR when
enlarging: every photo is described at the same scale); keypoints detected only inside the mask (eroded a
little so the outline's own corners do not count) when there is one; the ``max_keypoints`` strongest kept.
Options (each part of the config, so of the cache key): ``crop`` describes the mask's bounding box instead of
the whole photo, its longest side at ``max_side`` (a small animal gets the pixels the background had);
``contrast_threshold`` is SIFT's (OpenCV's default 0.04; lower finds fainter spots); ``mask_dilate`` grows the
mask by that many working pixels instead of eroding it (GrabCut's outline cuts the edge of the coat).
SIFT descriptors become RootSIFT (sqrt of the L1-normalised descriptor, Arandjelovic & Zisserman 2012), so the
L2 distance between them is the Hellinger kernel distance of the SIFT histograms.

Matching: for each descriptor of A, its two nearest neighbours in B (L2, or Hamming for ORB) and Lowe's ratio
test d1 < ratio * d2; confidence = 1 - d1 / d2.
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from core.identify.spots.base import Correspondences, LocalFeatures, MatcherConfig

MASK_ERODE_FRACTION = 0.01  # of the working image's longest side
CROP_MARGIN = 0.02  # of the mask's bounding box, on each side, when describing the crop
SIFT_CONTRAST = 0.04  # OpenCV's default contrast threshold


def mask_crop(mask: np.ndarray, *, margin: float = CROP_MARGIN) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) of the mask's bounding box grown by ``margin`` of its size on each side,
    within the photo; the whole photo for an empty mask."""
    m = np.asarray(mask, bool)
    h, w = m.shape
    rows, cols = np.flatnonzero(m.any(axis=1)), np.flatnonzero(m.any(axis=0))
    if rows.size == 0:
        return 0, h, 0, w
    t, b, le, r = int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1
    dy, dx = round(margin * (b - t)), round(margin * (r - le))
    return max(0, t - dy), min(h, b + dy), max(0, le - dx), min(w, r + dx)


def working_grey(rgb: np.ndarray, mask: np.ndarray | None, *, max_side: int) -> tuple[np.ndarray, np.ndarray | None,
                                                                                      float]:
    """(grey uint8 at the working scale, uint8 detection mask or None, scale = working / original)."""
    grey, det_mask, scale, _ = working_view(rgb, mask, max_side=max_side)
    return grey, det_mask, scale


def working_view(rgb: np.ndarray, mask: np.ndarray | None, *, max_side: int, crop: bool = False,
                 mask_dilate: int = 0) -> tuple[np.ndarray, np.ndarray | None, float, tuple[int, int]]:
    """(grey uint8 at the working scale, uint8 detection mask or None, scale = working / original, (x, y) of
    the working image's origin in the photo: (0, 0) unless ``crop``ped to the mask's bounding box)."""
    img = np.asarray(rgb)
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise ValueError(f"expected an HxWx3 uint8 RGB photo, got shape {img.shape} dtype {img.dtype}")
    m = None
    if mask is not None:
        m = np.asarray(mask).astype(bool)
        if m.shape != img.shape[:2]:
            raise ValueError(f"the mask is {m.shape}, the photo {img.shape[:2]}")
    origin = (0, 0)
    if crop and m is not None and m.any():
        t, b, le, r = mask_crop(m)
        img, m, origin = img[t:b, le:r], m[t:b, le:r], (le, t)
    h, w = img.shape[:2]
    scale = float(max_side) / float(max(h, w))
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    grey = cv2.cvtColor(np.ascontiguousarray(img), cv2.COLOR_RGB2GRAY)
    if size != (w, h):
        grey = cv2.resize(grey, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    det_mask = None
    if m is not None:
        m8 = cv2.resize(m.astype(np.uint8) * 255, size, interpolation=cv2.INTER_NEAREST)
        if mask_dilate > 0:
            k = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * mask_dilate + 1, 2 * mask_dilate + 1))
            det_mask = cv2.dilate(m8, k)
        else:
            r = max(1, round(MASK_ERODE_FRACTION * max(size)))
            det_mask = cv2.erode(m8, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1)))
    return grey, det_mask, scale, origin


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
            return cv2.SIFT_create(nfeatures=self.config.max_keypoints,
                                   contrastThreshold=float(self._option("contrast_threshold", SIFT_CONTRAST)))
        return cv2.ORB_create(nfeatures=self.config.max_keypoints, scaleFactor=1.2, nlevels=8, edgeThreshold=15,
                              patchSize=31, fastThreshold=10)

    def _option(self, name: str, default: Any) -> Any:
        return dict(self.config.extra).get(name, default)

    def extract(self, rgb: np.ndarray, mask: np.ndarray | None = None) -> LocalFeatures:
        grey, det_mask, scale, origin = working_view(rgb, mask, max_side=self.config.max_side,
                                                     crop=bool(self._option("crop", False)),
                                                     mask_dilate=int(self._option("mask_dilate", 0)))
        kps, desc = self._detector().detectAndCompute(grey, det_mask)
        kps, desc = _strongest(list(kps), desc, self.config.max_keypoints)
        dim = self.config.descriptor_dim
        if desc is None or not kps:
            dtype = np.uint8 if self.config.binary else np.float32
            return LocalFeatures(np.zeros((0, 2)), np.zeros((0, dim), dtype), rgb.shape[:2], scale, mask is not None)
        if self.config.descriptor == "rootsift":
            d = desc.astype(np.float32)
            desc = np.sqrt(d / np.maximum(np.abs(d).sum(axis=1, keepdims=True), 1e-12)).astype(np.float32)
        pts = np.array([kp.pt for kp in kps], dtype=np.float32) / scale + np.asarray(origin, np.float32)
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


def create_sift(*, max_side: int = 512, max_keypoints: int = 1000, ratio: float = 0.8, crop: bool = False,
                contrast_threshold: float = SIFT_CONTRAST, mask_dilate: int = 0) -> OpenCVMatcher:
    """``sift``: RootSIFT at ``max_side`` px, at most ``max_keypoints`` per photo, Lowe ratio ``ratio``; on the
    mask's bounding box with ``crop``, SIFT's ``contrast_threshold``, the mask grown by ``mask_dilate`` working
    pixels (0: eroded a little). Options left at their defaults stay out of the config, so its fingerprint (and
    the keypoint cache) is the one the plain matcher always had."""
    if not 0.0 < contrast_threshold < 1.0:
        raise ValueError(f"SIFT's contrast threshold must be in (0, 1), got {contrast_threshold}")
    if mask_dilate < 0:
        raise ValueError(f"the mask can only be grown by 0 or more pixels, got {mask_dilate}")
    extra: list[tuple[str, Any]] = [("opencv", cv2.__version__), ("mask_erode", MASK_ERODE_FRACTION)]
    if crop:
        extra += [("crop", True), ("crop_margin", CROP_MARGIN)]
    if contrast_threshold != SIFT_CONTRAST:
        extra.append(("contrast_threshold", float(contrast_threshold)))
    if mask_dilate:
        extra.append(("mask_dilate", int(mask_dilate)))
    return OpenCVMatcher(MatcherConfig(name="sift", descriptor="rootsift", descriptor_dim=128, max_side=int(max_side),
                                       max_keypoints=int(max_keypoints), ratio=float(ratio), extra=tuple(extra)))


def create_orb(*, max_side: int = 512, max_keypoints: int = 1000, ratio: float = 0.8) -> OpenCVMatcher:
    """``orb``: 256-bit ORB at ``max_side`` px, Hamming ratio test."""
    return OpenCVMatcher(MatcherConfig(name="orb", descriptor="orb", descriptor_dim=32, max_side=int(max_side),
                                       max_keypoints=int(max_keypoints), ratio=float(ratio), binary=True,
                                       extra=(("opencv", cv2.__version__), ("mask_erode", MASK_ERODE_FRACTION))))
