"""Draw matched spots: the two photos side by side at one height, a line joining each inlier correspondence."""

from __future__ import annotations

import colorsys

import cv2
import numpy as np

DRAW_HEIGHT = 360
MAX_LINES = 150


def _colour(i: int, n: int) -> tuple[int, int, int]:
    r, g, b = colorsys.hsv_to_rgb((i * 0.61803398875) % 1.0, 0.85, 1.0)
    return int(255 * r), int(255 * g), int(255 * b)


def draw_correspondences(rgb_a: np.ndarray, rgb_b: np.ndarray, points_a: np.ndarray, points_b: np.ndarray, *,
                         height: int = DRAW_HEIGHT, max_lines: int = MAX_LINES, gap: int = 8) -> np.ndarray:
    """HxWx3 uint8 picture: A on the left, B on the right (both scaled to ``height``), up to ``max_lines``
    correspondences (evenly chosen) drawn as coloured lines with a dot at each end."""
    a, b = np.asarray(rgb_a), np.asarray(rgb_b)
    sa, sb = height / a.shape[0], height / b.shape[0]
    ra = cv2.resize(a, (max(1, round(a.shape[1] * sa)), height), interpolation=cv2.INTER_AREA)
    rb = cv2.resize(b, (max(1, round(b.shape[1] * sb)), height), interpolation=cv2.INTER_AREA)
    canvas = np.full((height, ra.shape[1] + gap + rb.shape[1], 3), 255, np.uint8)
    canvas[:, :ra.shape[1]] = ra
    offset = ra.shape[1] + gap
    canvas[:, offset:] = rb
    pa = np.asarray(points_a, np.float64).reshape(-1, 2)
    pb = np.asarray(points_b, np.float64).reshape(-1, 2)
    n = len(pa)
    chosen = np.linspace(0, n - 1, min(n, max_lines)).round().astype(int) if n else np.zeros(0, int)
    thickness = max(1, round(height / 300))
    for k, i in enumerate(chosen):
        p = (int(round(pa[i, 0] * sa)), int(round(pa[i, 1] * sa)))
        q = (int(round(pb[i, 0] * sb)) + offset, int(round(pb[i, 1] * sb)))
        c = _colour(k, len(chosen))
        cv2.line(canvas, p, q, c, thickness, cv2.LINE_AA)
        cv2.circle(canvas, p, 2 + thickness, c, -1, cv2.LINE_AA)
        cv2.circle(canvas, q, 2 + thickness, c, -1, cv2.LINE_AA)
    return canvas
