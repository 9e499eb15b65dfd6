"""Pairwise scores between embeddings: the fixed "similarity" interface.

A similarity returns a query x gallery matrix where higher means more alike;
ranking and metrics read only that matrix.

- ``cosine``: rows are L2-normalised, score = <q, g> in [-1, 1].
- ``lorentz``: rows are points on the hyperboloid of curvature -1 (x0 is
  recomputed from the spatial part in float64 before scoring),
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


def _t64(x: np.ndarray):
    import torch

    return torch.as_tensor(np.asarray(x, dtype=np.float64))


def minkowski_inner(queries: np.ndarray, gallery: np.ndarray) -> np.ndarray:
    """<q, g>_L = -q0 g0 + sum_{i>=1} qi gi for every pair (Q x G)."""
    from core.lorentz import minkowski_inner_pairwise  # lazy: imports torch (start-up time)

    return minkowski_inner_pairwise(_t64(queries), _t64(gallery)).numpy()


def lorentz_distance(queries: np.ndarray, gallery: np.ndarray) -> np.ndarray:
    """d(q, g) = arccosh(max(-<q, g>_L, 1)) for every pair (Q x G), curvature -1 (geoopt's arcosh)."""
    from core.lorentz import pairwise_dist  # lazy: imports torch (start-up time)

    return pairwise_dist(_t64(queries), _t64(gallery)).numpy()


def lift_to_hyperboloid(spatial: np.ndarray) -> np.ndarray:
    """Point with spatial part v -> (sqrt(1 + |v|^2), v) on the unit hyperboloid (geoopt ``projx``)."""
    from core.lorentz import lift  # lazy: imports torch (start-up time)

    return lift(_t64(spatial)).numpy()


def _relift(x: np.ndarray) -> np.ndarray:
    """Hyperboloid rows with x0 recomputed from the spatial part in float64.

    Points stored in float32 far from the origin (x0 = cosh r) drift off the hyperboloid by
    ~1e-7 x0^2, enough to make d(x, x) = 0.02 instead of 0; re-lifting removes that drift."""
    x = np.asarray(x, dtype=np.float64)
    return lift_to_hyperboloid(x[..., 1:])


def pairwise_scores(queries: np.ndarray, gallery: np.ndarray, *, metric: str = "cosine") -> np.ndarray:
    """Query x gallery score matrix, higher = more similar (cosine, or exp(-d) for Lorentz)."""
    if metric == "cosine":
        return np.asarray(queries, dtype=np.float32) @ np.asarray(gallery, dtype=np.float32).T
    if metric == "lorentz":
        return np.exp(-lorentz_distance(_relift(queries), _relift(gallery))).astype(np.float32)
    raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")


def paired_scores(a: np.ndarray, b: np.ndarray, *, metric: str = "cosine") -> np.ndarray:
    """Score of row i of ``a`` with row i of ``b`` (length N), same convention as pairwise_scores."""
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    if metric == "cosine":
        return np.sum(a64 * b64, axis=-1).astype(np.float32)
    if metric == "lorentz":
        from geoopt.manifolds.lorentz import math as lmath

        inner = -lmath.inner(_t64(_relift(a64)), _t64(_relift(b64)))
        return np.exp(-lmath.arcosh(inner.clamp_min(1.0)).numpy()).astype(np.float32)
    raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
