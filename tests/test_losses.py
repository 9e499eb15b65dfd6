"""Losses, heads and hyperboloid maths: hand-worked values, identities over seeds and dtypes, finite gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from core import lorentz
from core.identify.heads import create_head, head_spec, list_heads
from core.identify.losses import (
    LorentzLoss,
    NearIDLoss,
    anti_symmetry_term,
    create_loss,
    list_losses,
    solidity_variance,
    supcon_from_logits,
)
from core.registry import UnknownComponentError

SEEDS = (0, 1, 2)
DTYPES = (torch.float32, torch.float64)


def test_registries_list_and_refuse_unknown_names():
    assert list_heads() == ["arcface", "idsim", "lorentz", "nearid", "supcon", "triplet"]
    assert list_losses() == ["arcface", "idsim", "lorentz", "nearid", "supcon", "triplet"]
    with pytest.raises(UnknownComponentError, match="unknown head 'cosface'"):
        create_head("cosface", in_dim=8)
    with pytest.raises(UnknownComponentError, match="unknown loss"):
        create_loss("contrastive-ish")
    assert head_spec("lorentz").metric == "lorentz" and head_spec("nearid").input_kind == "tokens"


def test_supcon_hand_worked():
    """e1 = e2 = (1,0), e3 = e4 = (0,1), tau 0.1: every anchor's positive scores 1, its two negatives 0,
    so L = -log(e^10 / (e^10 + 2)) = log(1 + 2 e^-10)."""
    e = torch.tensor([[1.0, 0], [1, 0], [0, 1], [0, 1]], dtype=torch.float64)
    labels = torch.tensor([0, 0, 1, 1])
    expected = math.log(1 + 2 * math.exp(-10))
    assert float(create_loss("supcon")(e, labels)) == pytest.approx(expected, rel=1e-6)
    # the same value from our own logit form (used by the Lorentz loss)
    assert float(supcon_from_logits(e @ e.T / 0.1, labels)) == pytest.approx(expected, rel=1e-6)


def test_supcon_is_lower_when_positives_are_closer():
    labels = torch.tensor([0, 0, 1, 1])
    good = torch.tensor([[1.0, 0], [0.99, 0.14], [0, 1], [0.14, 0.99]])
    bad = torch.tensor([[1.0, 0], [0, 1], [0.99, 0.14], [0.14, 0.99]])
    loss = create_loss("supcon")
    assert float(loss(good, labels)) < float(loss(bad, labels))


def test_triplet_hand_worked():
    """a=(1,0), p=(0,1), n=(-1,0): triplet (a,p,n): sqrt2 - 2 + 0.4 < 0 -> 0; (p,a,n): sqrt2 - sqrt2 + 0.4 = 0.4;
    pml averages the non-zero triplets -> 0.4."""
    e = torch.tensor([[1.0, 0], [0, 1], [-1, 0]])
    assert float(create_loss("triplet")(e, torch.tensor([0, 0, 1]))) == pytest.approx(0.4, abs=1e-5)


def test_subcenter_arcface_matches_its_formula():
    """logit_c = 51.5 cos(theta_c + 0.5 [c = y]), theta_c the angle to the nearest of class c's 3 sub-centres;
    loss = cross-entropy."""
    torch.manual_seed(0)
    loss = create_loss("arcface", num_classes=4, embedding_size=8)
    e = torch.nn.functional.normalize(torch.randn(6, 8), dim=1)
    y = torch.tensor([0, 1, 2, 3, 0, 1])
    w = torch.nn.functional.normalize(loss.inner.W.detach(), dim=0)  # D x (C*k)
    cos = (e @ w).view(6, 4, 3).max(dim=2).values  # nearest sub-centre per class
    theta = torch.acos(cos.clamp(-1, 1))
    logits = 51.5 * torch.where(torch.nn.functional.one_hot(y, 4).bool(), torch.cos(theta + 0.5), cos)
    expected = torch.nn.functional.cross_entropy(logits, y)
    assert float(loss(e, y)) == pytest.approx(float(expected), rel=1e-4)


def test_anti_symmetry_term_hand_worked():
    """cos((1,0), (0.8,0.6)) = 0.8 -> max(0, 0.8 - 0.3) = 0.5; lambda 0.5 adds 0.25 to the base loss."""
    e = torch.tensor([[1.0, 0], [1, 0], [0, 1], [0, 1]])
    mirror = torch.tensor([[0.8, 0.6], [0.8, 0.6], [0.6, 0.8], [-1, 0]])  # last: cos -0.6 -> 0
    labels = torch.tensor([0, 0, 1, 1])
    assert float(anti_symmetry_term(e, mirror, tau=0.3)) == pytest.approx((0.5 + 0.5 + 0.5 + 0) / 4)
    for name in ("supcon", "triplet"):
        base = float(create_loss(name)(e, labels))
        with_term = float(create_loss(name, anti_symmetry=0.5)(e, labels, mirror_embeddings=mirror))
        assert with_term == pytest.approx(base + 0.5 * 0.375, abs=1e-6)
    with pytest.raises(ValueError, match="mirrored photos"):
        create_loss("supcon", anti_symmetry=0.5)(e, labels)


def test_solidity_variance_hand_worked():
    s = torch.tensor([1.0, 0.0, 0.5])
    expected = [0.0625, 0.81, 0.0625 + (0.81 - 0.0625) * 0.5 ** 1.5]
    assert solidity_variance(s).tolist() == pytest.approx(expected)


def _hyperboloid_point(r: float, angle: float, dim: int = 3) -> torch.Tensor:
    """The point at distance r from the origin in direction (cos a, sin a, 0...)."""
    v = torch.zeros(dim, dtype=torch.float64)
    v[0], v[1] = math.cos(angle) * r, math.sin(angle) * r
    return lorentz.expmap0(v[None], max_norm=50.0)[0]


def test_lorentz_loss_terms_hand_worked():
    """Two photos per identity on the hyperboloid; every term recomputed from its formula."""
    z = torch.stack([_hyperboloid_point(1.0, 0.0), _hyperboloid_point(1.0, 0.1),
                     _hyperboloid_point(1.0, 2.0), _hyperboloid_point(1.0, 2.1)])
    labels = torch.tensor([0, 0, 1, 1])
    s = torch.tensor([1.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    loss = LorentzLoss()
    t = loss.terms(z, labels, solidity=s, mirror_embeddings=z.clone())
    # distances by arccosh(-<x,y>_L) written out
    x = z.numpy()
    inner = x[:, 1:] @ x[:, 1:].T - np.outer(x[:, 0], x[:, 0])
    d = np.arccosh(np.maximum(-inner, 1.0))
    var = np.array([0.0625, 0.0625, 0.81, 0.0625])
    tau = 0.1 * (var[:, None] + var[None, :]) / (2 * 0.0625)
    logits = -d / tau
    per = []
    for i in range(4):
        others = [j for j in range(4) if j != i]
        lse = np.log(np.sum(np.exp(logits[i, others])))
        p = [j for j in others if labels[j] == labels[i]][0]
        per.append(-(logits[i, p] - lse))
    assert float(t["psupcon"]) == pytest.approx(float(np.mean(per)), rel=1e-6)
    target = 0.2 + 1.8 * s.numpy()
    assert float(t["radius"]) == pytest.approx(float(np.mean((1.0 - target) ** 2)), rel=1e-6)  # kappa/2 = 1
    assert float(t["mirror_hinge"]) == pytest.approx(0.5, abs=1e-6)  # mirror identical: max(0, 0.5 - 0)
    total = float(loss(z, labels, solidity=s, mirror_embeddings=z.clone()))
    assert total == pytest.approx(float(t["psupcon"] + 0.15 * t["radius"] + 0.1 * t["mirror_hinge"]), rel=1e-6)


def test_lorentz_uncertain_masks_soften_the_pull():
    """Poorly masked photos (low solidity) get a larger variance, so a pair's temperature rises and the loss
    pulls and pushes them less: a smaller gradient for the same (bad) configuration."""
    labels = torch.tensor([0, 0, 1, 1])

    def grad_norm(solidity: float) -> float:
        v = torch.tensor([[1.0, 0, 0], [-1, 0, 0], [0.9, 0.3, 0], [-0.9, 0.3, 0]], dtype=torch.float64,
                         requires_grad=True)  # positives far apart, negatives close: a bad configuration
        z = lorentz.expmap0(v)
        t = LorentzLoss().terms(z, labels, solidity=torch.full((4,), solidity, dtype=torch.float64))
        t["psupcon"].backward()
        return float(v.grad.norm())

    assert grad_norm(0.2) < 0.5 * grad_norm(1.0)


def test_nearid_two_tier_hand_worked():
    """Anchors a1 = a2 = (1,0) (identity 0), negative b = (0,1) (identity 1), T = 0.07.
    Each anchor's distractor d = (0.6,0.8): s(a,d) = 0.6.
    anchor a1: tier 1 = -log(e^{1/T} / (e^{1/T} + e^{0.6/T})); tier 2 = softplus(0/T - 0.6/T).
    anchor b has no positive and is skipped."""
    T = 0.07
    e = torch.tensor([[1.0, 0], [1, 0], [0, 1]], dtype=torch.float64)
    d = torch.tensor([[0.6, 0.8], [0.6, 0.8], [1, 0]], dtype=torch.float64)
    labels = torch.tensor([0, 0, 1])
    tier1 = -math.log(math.exp(1 / T) / (math.exp(1 / T) + math.exp(0.6 / T)))
    tier2 = math.log1p(math.exp(0 / T - 0.6 / T))
    got = float(NearIDLoss()(e, labels, distractors=d))
    assert got == pytest.approx(tier1 + 0.5 * tier2, rel=1e-6)
    with pytest.raises(ValueError, match="distractors"):
        NearIDLoss()(e, labels)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", ["supcon", "triplet", "arcface", "lorentz", "nearid"])
def test_every_head_and_loss_gives_finite_gradients(name, seed, dtype):
    torch.manual_seed(seed)
    head = create_head(name, in_dim=32, seed=seed).to(dtype)
    spec = head_spec(name)
    x = torch.rand(8, 5, 32, dtype=dtype) if spec.input_kind == "tokens" else torch.randn(8, 32, dtype=dtype)
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    emb = head(x)
    loss = create_loss(name, num_classes=4, embedding_size=emb.shape[1]).to(dtype)
    extras = {}
    if name == "lorentz":
        extras = {"solidity": torch.rand(8, dtype=dtype), "mirror_embeddings": head(x.flip(1))}
    if name == "nearid":
        extras = {"distractors": head(torch.rand(8, 5, 32, dtype=dtype))}
    value = loss(emb, labels, **extras)
    value.backward()
    assert torch.isfinite(value)
    grads = [p.grad for p in head.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert any(float(g.abs().sum()) > 0 for g in grads)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_hyperboloid_identities(seed, dtype):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(6, 4, generator=g, dtype=dtype)
    x = lorentz.expmap0(v)
    # on the hyperboloid: -x0^2 + |x|^2 = -1
    assert torch.allclose(-x[:, 0] ** 2 + (x[:, 1:] ** 2).sum(1), -torch.ones(6, dtype=dtype), atol=1e-4)
    # exp then log gives back the tangent vector
    back = lorentz.manifold().logmap0(x)
    assert torch.allclose(back[:, 1:], v, atol=1e-3 if dtype == torch.float32 else 1e-9)
    # radius = |v|, pairwise distance = geoopt's, d(x, x) = 0, symmetric
    assert torch.allclose(lorentz.radius(x), v.norm(dim=1), atol=1e-3 if dtype == torch.float32 else 1e-9)
    d = lorentz.pairwise_dist(x, x)
    ref = torch.stack([lorentz.manifold().dist(x[i:i + 1], x) for i in range(6)])
    assert torch.allclose(d, ref, atol=1e-3 if dtype == torch.float32 else 1e-7)
    assert torch.allclose(d.diagonal(), torch.zeros(6, dtype=dtype), atol=2e-3 if dtype == torch.float32 else 1e-6)
    assert torch.allclose(d, d.T)
    # lift = projx: the same point as expmap0 for the same spatial coordinates
    assert torch.allclose(lorentz.lift(x[:, 1:]), x, atol=1e-3 if dtype == torch.float32 else 1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_lorentz_scores_are_monotone_in_distance(seed):
    from core.similarity import pairwise_scores

    rng = np.random.default_rng(seed)
    radii = np.sort(rng.uniform(0, 3, 10))
    pts = torch.stack([_hyperboloid_point(float(r), 0.3) for r in radii]).numpy()
    origin = lorentz.lift(torch.zeros(1, 3, dtype=torch.float64)).numpy()
    s = pairwise_scores(origin, pts, metric="lorentz")[0]
    assert np.all(np.diff(s) <= 1e-7) and s[0] <= 1.0 and s[-1] > 0
    assert s == pytest.approx(np.exp(-radii), rel=1e-5)


def test_lorentz_head_outputs_points_on_the_hyperboloid_and_nearid_attends():
    torch.manual_seed(0)
    z = create_head("lorentz", in_dim=16)(torch.rand(4, 9, 16))
    assert z.shape == (4, 257)
    assert torch.allclose(-z[:, 0] ** 2 + (z[:, 1:] ** 2).sum(1), -torch.ones(4), atol=1e-2)
    head = create_head("nearid", in_dim=16, out_dim=8)
    tokens = torch.rand(2, 9, 16)
    e = head(tokens)
    assert e.shape == (2, 8) and torch.allclose(e.norm(dim=1), torch.ones(2), atol=1e-5)
    # attention pooling depends on token content, not only on their mean
    shuffled = tokens.clone()
    delta = torch.randn(2, 16) * 3.0
    shuffled[:, 0] += delta  # the token mean is unchanged
    shuffled[:, 1] -= delta
    assert not torch.allclose(head(shuffled), e, atol=1e-4)
