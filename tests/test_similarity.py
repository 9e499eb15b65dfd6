"""Identities of the score functions, over seeds and dtypes (geoopt-style)."""

from __future__ import annotations

import numpy as np
import pytest

from core.similarity import (
    l2_normalize,
    lift_to_hyperboloid,
    lorentz_distance,
    minkowski_inner,
    paired_scores,
    pairwise_scores,
)

SEEDS = [0, 1, 2]
DTYPES = [np.float32, np.float64]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_lifted_points_lie_on_the_hyperboloid_and_distance_is_a_metric(seed, dtype):
    rng = np.random.default_rng(seed)
    x = lift_to_hyperboloid(rng.normal(size=(6, 5)).astype(dtype))
    # -<x, x>_L = 1 and x0 > 0
    np.testing.assert_allclose(-np.diag(minkowski_inner(x, x)), 1.0, rtol=1e-9)
    assert np.all(x[:, 0] > 0)
    d = lorentz_distance(x, x)
    np.testing.assert_allclose(np.diag(d), 0.0, atol=1e-6)  # d(x, x) = 0
    np.testing.assert_allclose(d, d.T, atol=1e-12)  # symmetry
    assert np.all(d[~np.eye(6, dtype=bool)] > 0)
    # triangle inequality d(a, c) <= d(a, b) + d(b, c) for every triple
    assert np.all(d[:, None, :] <= d[:, :, None] + d[None, :, :] + 1e-9)


def test_lorentz_distance_matches_the_closed_form_along_a_geodesic():
    """Points (cosh t, sinh t, 0) lie on one geodesic through the origin: d = |t1 - t2|."""
    t = np.array([0.0, 0.3, 1.0, 2.5])
    pts = np.stack([np.cosh(t), np.sinh(t), np.zeros_like(t)], axis=1)
    np.testing.assert_allclose(lorentz_distance(pts, pts), np.abs(t[:, None] - t[None, :]), atol=1e-7)
    np.testing.assert_allclose(pairwise_scores(pts, pts, metric="lorentz"),
                               np.exp(-np.abs(t[:, None] - t[None, :])), rtol=1e-6)


@pytest.mark.parametrize("seed", SEEDS)
def test_scores_are_monotone_in_distance_and_bounded(seed):
    rng = np.random.default_rng(seed)
    x = lift_to_hyperboloid(rng.normal(size=(20, 4)))
    s = pairwise_scores(x[:1], x, metric="lorentz")[0]
    d = lorentz_distance(x[:1], x)[0]
    assert np.all((s > 0) & (s <= 1.0))
    order = np.argsort(d)
    assert np.all(np.diff(s[order]) <= 1e-7)  # farther = lower score


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cosine_scores_and_paired_scores_agree(seed, dtype):
    rng = np.random.default_rng(seed)
    a = l2_normalize(rng.normal(size=(7, 16)).astype(dtype))
    b = l2_normalize(rng.normal(size=(7, 16)).astype(dtype))
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)
    full = pairwise_scores(a, b)
    np.testing.assert_allclose(paired_scores(a, b), np.diag(full), atol=1e-6)
    np.testing.assert_allclose(np.diag(pairwise_scores(a, a)), 1.0, atol=1e-6)
    assert np.all(np.abs(full) <= 1.0 + 1e-6)
    xa, xb = lift_to_hyperboloid(a), lift_to_hyperboloid(b)
    np.testing.assert_allclose(paired_scores(xa, xb, metric="lorentz"),
                               np.diag(pairwise_scores(xa, xb, metric="lorentz")), rtol=1e-5)


def test_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="unknown metric"):
        pairwise_scores(np.ones((1, 2)), np.ones((1, 2)), metric="euclid")
    with pytest.raises(ValueError, match="unknown metric"):
        paired_scores(np.ones((1, 2)), np.ones((1, 2)), metric="euclid")
