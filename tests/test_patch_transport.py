"""The idsim head's patch transport (core.identify.patch_transport, core.identify.losses' idsim loss, the patch_ot re-ranking) on
hand-worked cases and identities, in geoopt's spirit: several seeds and dtypes, finite gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core.identify.evaluation import RERANK_METHODS, evaluate_embeddings
from core.identify.heads import create_head, head_spec
from core.identify.losses import create_loss
from core.identify.patch_transport import pairwise_patch_similarity, patch_ot_scores, patch_similarity
from core.identify.rerank import all_vs_all_rerank


def unit(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return F.normalize(torch.randn(*shape, generator=g, dtype=dtype), dim=-1)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_patch_set_is_most_similar_to_itself(seed, dtype):
    """-S(A, A) = 0 is the maximum: every other set scores below it (Sinkhorn divergence is positive)."""
    a = unit(1, 16, 8, seed=seed, dtype=dtype)
    others = unit(6, 16, 8, seed=seed + 100, dtype=dtype)
    self_sim = patch_similarity(a, a)
    assert self_sim.dtype == dtype and abs(float(self_sim)) < 1e-6
    sims = patch_similarity(a.expand(6, -1, -1), others)
    assert bool((sims < self_sim - 1e-4).all()), sims
    # a set closer to A (A plus a little noise) scores higher than a far one
    near = F.normalize(a + 0.05 * unit(1, 16, 8, seed=seed + 7, dtype=dtype), dim=-1)
    assert float(patch_similarity(a, near)) > float(sims.max())


@pytest.mark.parametrize("seed", [0, 3])
def test_patch_similarity_ignores_the_order_of_the_patches(seed):
    a, b = unit(1, 20, 8, seed=seed), unit(1, 20, 8, seed=seed + 1)
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(seed))
    base = float(patch_similarity(a, b))
    assert float(patch_similarity(a[:, perm], b)) == pytest.approx(base, abs=1e-5)
    assert float(patch_similarity(a, b[:, perm])) == pytest.approx(base, abs=1e-5)
    assert float(patch_similarity(b, a)) == pytest.approx(base, abs=1e-5)  # symmetric


def test_pairwise_matrix_is_symmetric_with_a_zero_diagonal_and_matches_pairs():
    p = unit(5, 9, 6, seed=4)
    m = pairwise_patch_similarity(p)
    assert torch.allclose(m, m.T) and torch.all(m.diagonal() == 0)
    assert float(m[1, 3]) == pytest.approx(float(patch_similarity(p[1:2], p[3:4])), abs=1e-6)
    assert bool((m + torch.eye(5) * -1 < 0).all())  # off-diagonal strictly below the self-similarity


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="K x T x P"):
        patch_similarity(unit(2, 4, 3, seed=0), unit(3, 4, 3, seed=0))


@pytest.mark.parametrize("seed", [0, 1])
def test_idsim_loss_terms_gradients_and_weight(seed):
    """SupCon + lambda * patch InfoNCE: finite gradients through both heads; lambda 0 is SupCon alone; a batch
    whose patch sets agree with the labels has a lower patch term than one where they contradict them."""
    torch.manual_seed(seed)
    head = create_head("idsim", in_dim=32, out_dim=16, patch_dim=8, hidden=32, seed=seed)
    tokens = torch.randn(8, 10, 32, requires_grad=True)
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    emb, patches = head.forward_with_patches(tokens)
    assert emb.shape == (8, 16) and patches.shape == (8, 10, 8)
    assert torch.allclose(patches.norm(dim=-1), torch.ones(8, 10), atol=1e-5)
    loss_fn = create_loss("idsim", patch_weight=0.5)
    loss = loss_fn(emb, labels, patches=patches)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(tokens.grad).all() and tokens.grad.abs().sum() > 0
    assert all(torch.isfinite(p.grad).all() for p in head.parameters() if p.grad is not None)
    terms = loss_fn.terms(emb.detach(), labels, patches=patches.detach())
    assert float(loss.detach()) == pytest.approx(float(terms["global"] + 0.5 * terms["patch"]), rel=1e-5)
    plain = create_loss("idsim", patch_weight=0.0)(emb.detach(), labels, patches=patches.detach())
    assert float(plain) == pytest.approx(float(create_loss("supcon")(emb.detach(), labels)), rel=1e-6)
    # patch sets that agree with the identities: two copies of 4 sets; contradicting: shuffled labels
    sets = unit(4, 10, 8, seed=seed + 50)
    agree = sets[labels]
    good = float(loss_fn.terms(emb.detach(), labels, patches=agree)["patch"])
    bad = float(loss_fn.terms(emb.detach(), torch.tensor([0, 1, 2, 3, 0, 1, 2, 3]), patches=agree)["patch"])
    assert good < bad


def test_idsim_loss_needs_patches_and_the_head_needs_tokens():
    with pytest.raises(ValueError, match="patch embeddings"):
        create_loss("idsim")(unit(4, 8, seed=0), torch.tensor([0, 0, 1, 1]))
    head = create_head("idsim", in_dim=8, out_dim=4, patch_dim=4, hidden=8)
    with pytest.raises(ValueError, match="patch tokens"):
        head.patches(torch.randn(3, 8))
    assert head_spec("idsim").input_kind == "tokens" and head_spec("idsim").default_loss == "idsim"


def test_idsim_head_starts_as_the_frozen_geometry():
    """The residual MLPs start at zero: the global embedding is the orthogonal projection of the mean token."""
    head = create_head("idsim", in_dim=12, out_dim=12, patch_dim=4, hidden=16, seed=3)
    x = torch.randn(5, 7, 12)
    pooled = x.mean(1)
    emb = head(x)
    gram_in = F.normalize(pooled, dim=-1) @ F.normalize(pooled, dim=-1).T
    assert torch.allclose(emb @ emb.T, gram_in, atol=1e-5)


# --------------------------------------------------------------------------- the patch_ot re-ranking

def test_patch_ot_is_a_registered_rerank_and_refuses_without_patches():
    assert "patch_ot" in RERANK_METHODS
    with pytest.raises(ValueError, match="idsim"):
        all_vs_all_rerank(np.eye(3), method="patch_ot")


def test_patch_ot_reorders_only_the_shortlist_by_patch_similarity():
    """Hand-worked: 4 photos, query 0. Global scores rank 1 > 2 > 3; photo 3 shares photo 0's patch set, so with
    shortlist 2 and weight 1 the order within {1, 2} follows the patches and 3 stays below; with shortlist 3
    photo 3 rises to the top."""
    rng = np.random.default_rng(0)
    sets = F.normalize(torch.from_numpy(rng.normal(size=(4, 6, 4))).float(), dim=-1).numpy()
    patches = sets.copy()
    patches[3] = sets[0]
    patches[2] = sets[0] + 0.02 * rng.normal(size=(6, 4)).astype(np.float32)
    sim = np.array([[1.0, 0.9, 0.8, 0.7],
                    [0.9, 1.0, 0.5, 0.4],
                    [0.8, 0.5, 1.0, 0.3],
                    [0.7, 0.4, 0.3, 1.0]])
    valid = ~np.eye(4, dtype=bool)
    two = patch_ot_scores(sim, valid, patches=patches, shortlist=2, weight=1.0)
    row = two[0, 1:]
    assert row[1] > row[0] > row[2]  # 2 (near-identical patches) above 1; 3 outside the shortlist stays last
    three = patch_ot_scores(sim, valid, patches=patches, shortlist=3, weight=1.0)
    assert int(np.argmax(np.where(valid[0], three[0], -np.inf))) == 3
    # weight 0 changes nothing
    assert np.allclose(patch_ot_scores(sim, valid, patches=patches, shortlist=3, weight=0.0), sim)


def test_patch_ot_with_perfect_patches_gives_perfect_retrieval():
    """Identity: when every identity's photos share one patch set, patch_ot (weight 0.5, shortlist 20 covering
    every photo) lifts a global ranking that mixes the identities up to mAP 1."""
    rng = np.random.default_rng(1)
    labels = [str(i // 3) for i in range(12)]
    centres = rng.normal(size=(4, 8))
    emb = centres[[i // 3 for i in range(12)]] + 0.9 * rng.normal(size=(12, 8))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    base = F.normalize(torch.from_numpy(rng.normal(size=(4, 6, 5))).float(), dim=-1).numpy()
    patches = base[[i // 3 for i in range(12)]]
    plain = evaluate_embeddings(emb, labels, [None] * 12)
    ot = evaluate_embeddings(emb, labels, [None] * 12, rerank="patch_ot", patches=patches)
    assert plain["map_macro"] < 0.95 and ot["map_macro"] == pytest.approx(1.0)
