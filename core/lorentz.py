"""Hyperboloid (Lorentz model, curvature -1) maths on top of geoopt.

geoopt's :class:`geoopt.manifolds.Lorentz` (k = 1) holds the points
x = (x0, x1..xn) with -x0^2 + |x_1..n|^2 = -1, x0 > 0. Its ``projx`` is the lift
v -> (sqrt(1 + |v|^2), v), ``expmap0`` maps a tangent vector at the origin
o = (1, 0..0) onto the manifold, ``dist`` is the geodesic distance
d(x, y) = arccosh(-<x, y>_L) with <x, y>_L = -x0 y0 + sum_i xi yi, and
``dist0(x)`` = d(o, x) = arccosh(x0) is the radius. This module only adds the
pairwise (query x gallery) form, which geoopt computes one pair at a time.
"""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=1)
def manifold():
    """The unit hyperboloid (geoopt ``Lorentz(k=1)``), shared."""
    import geoopt

    return geoopt.manifolds.Lorentz(k=1.0)


def minkowski_inner_pairwise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """<x_i, y_j>_L = -x_i0 y_j0 + sum_k x_ik y_jk for every pair (N x M), one matmul."""
    return x[:, 1:] @ y[:, 1:].T - torch.outer(x[:, 0], y[:, 0])


def pairwise_dist(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Geodesic distance d(x_i, y_j) = arccosh(max(-<x_i, y_j>_L, 1)) for every pair (N x M).

    Uses geoopt's numerically guarded ``arcosh``; equals ``manifold().dist`` pair by pair.
    """
    from geoopt.manifolds.lorentz import math as lmath

    inner = -minkowski_inner_pairwise(x, y)
    return lmath.arcosh(inner.clamp_min(1.0))


def lift(v: torch.Tensor) -> torch.Tensor:
    """Spatial part v -> (sqrt(1 + |v|^2), v) on the hyperboloid (geoopt ``projx``)."""
    padded = torch.cat([torch.zeros_like(v[..., :1]), v], dim=-1)
    return manifold().projx(padded)


def expmap0(v: torch.Tensor, *, max_norm: float = 8.0) -> torch.Tensor:
    """Tangent vector (0, v) at the origin -> its point on the hyperboloid (geoopt ``expmap0``).

    |v| is clipped to ``max_norm`` (radius <= max_norm) so cosh/sinh stay finite in float32.
    """
    norm = v.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    v = v * (norm.clamp(max=max_norm) / norm)
    u = torch.cat([torch.zeros_like(v[..., :1]), v], dim=-1)
    return manifold().expmap0(u)


def minkowski_norm_sq(s: torch.Tensor) -> torch.Tensor:
    """-<s, s>_L = s0^2 - |s_1..n|^2 (geoopt's Lorentz ``inner``), positive for time-like vectors."""
    from geoopt.manifolds.lorentz import math as lmath

    return -lmath.inner(s, s)


def radius(x: torch.Tensor) -> torch.Tensor:
    """Distance from the origin d(o, x) = arccosh(x0) (geoopt ``dist0``)."""
    return manifold().dist0(x)


def paired_dist(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """d(x_i, y_i) row by row (geoopt ``dist``)."""
    return manifold().dist(x, y)
