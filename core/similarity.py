"""Pairwise scores between embeddings: the fixed "similarity" interface.

A similarity returns a query x gallery matrix where higher means more alike;
ranking and metrics read only that matrix.

- ``cosine``: rows are L2-normalised, score = <q, g> in [-1, 1].
- ``lorentz``: rows are points on the hyperboloid of curvature -1,
  x0 = sqrt(1 + |x_1..n|^2); Minkowski product <x, y>_L = -x0 y0 + sum_i xi yi;
  geodesic distance d(x, y) = arccosh(-<x, y>_L); score = exp(-d) in (0, 1].
"""

from __future__ import annotations

import numpy as np

METRICS = ("cosine", "lorentz")


def l2_normalize(x: np.ndarray, *, eps: float = 1e-12) -> np.ndarray:
    """x / max(|x|_2, eps), row-wise, as float32."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norms, eps)


def minkowski_inner(queries: np.ndarray, gallery: np.ndarray) -> np.ndarray:
    """<q, g>_L = -q0 g0 + sum_{i>=1} qi gi for every pair (Q x G)."""
    q = np.asarray(queries, dtype=np.float64)
    g = np.asarray(gallery, dtype=np.float64)
    return q[:, 1:] @ g[:, 1:].T - np.outer(q[:, 0], g[:, 0])


def lorentz_distance(queries: np.ndarray, gallery: np.ndarray) -> np.ndarray:
    """d(q, g) = arccosh(max(-<q, g>_L, 1)) for every pair (Q x G), curvature -1."""
    return np.arccosh(np.maximum(-minkowski_inner(queries, gallery), 1.0))


def lift_to_hyperboloid(spatial: np.ndarray) -> np.ndarray:
    """Point with spatial part v -> (sqrt(1 + |v|^2), v) on the unit hyperboloid."""
    v = np.asarray(spatial, dtype=np.float64)
    x0 = np.sqrt(1.0 + np.sum(v * v, axis=-1, keepdims=True))
    return np.concatenate([x0, v], axis=-1)


def pairwise_scores(queries: np.ndarray, gallery: np.ndarray, *, metric: str = "cosine") -> np.ndarray:
    """Query x gallery score matrix, higher = more similar (cosine, or exp(-d) for Lorentz)."""
    if metric == "cosine":
        return np.asarray(queries, dtype=np.float32) @ np.asarray(gallery, dtype=np.float32).T
    if metric == "lorentz":
        return np.exp(-lorentz_distance(queries, gallery)).astype(np.float32)
    raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")


def paired_scores(a: np.ndarray, b: np.ndarray, *, metric: str = "cosine") -> np.ndarray:
    """Score of row i of ``a`` with row i of ``b`` (length N), same convention as pairwise_scores."""
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    if metric == "cosine":
        return np.sum(a64 * b64, axis=-1).astype(np.float32)
    if metric == "lorentz":
        inner = np.sum(a64[:, 1:] * b64[:, 1:], axis=-1) - a64[:, 0] * b64[:, 0]
        return np.exp(-np.arccosh(np.maximum(-inner, 1.0))).astype(np.float32)
    raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
