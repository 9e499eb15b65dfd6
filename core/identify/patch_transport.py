"""Patch transport (ID-Sim's local term): how alike two photos' sets of patch embeddings are, as the negative
entropic optimal-transport (Sinkhorn) divergence between them, computed with GeomLoss.

For two patch sets A = {a_1..a_n}, B = {b_1..b_m} (unit vectors, uniform weights) and the cost
c(a, b) = |a - b|^2 / 2, GeomLoss's ``SamplesLoss("sinkhorn", p=2, blur=0.05, debias=True)`` gives the Sinkhorn
divergence S(A, B) = OT_eps(A, B) - (OT_eps(A, A) + OT_eps(B, B)) / 2 (eps = blur^p). It is symmetric, zero for
identical sets and positive otherwise, and it ignores the order of the patches. The patch similarity is
``-S(A, B)``: its maximum, 0, is a set with itself.

Used by the idsim head's loss (:class:`core.identify.losses.PatchTransportLoss`: SupCon on the global embedding + lambda * an InfoNCE
over the negative Sinkhorn divergences between the batch's patch sets) and by the ``patch_ot`` re-ranking (the
global cosine fused with the patch similarity on each query's global shortlist).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

SINKHORN_BLUR = 0.05
SINKHORN_SCALING = 0.5
SINKHORN_DIAMETER = 2.0  # unit vectors: a fixed annealing schedule, so a pair scores the same in any batch
PAIR_CHUNK = 4096  # pairs per GeomLoss call (memory: chunk x T x T costs)


def sinkhorn_loss() -> nn.Module:
    """GeomLoss's debiased Sinkhorn divergence between batches of point clouds (B x N x D, B x M x D) -> (B,)."""
    from geomloss import SamplesLoss  # lazy: geomloss loads its backends at import

    return SamplesLoss("sinkhorn", p=2, blur=SINKHORN_BLUR, scaling=SINKHORN_SCALING, debias=True,
                       diameter=SINKHORN_DIAMETER, backend="tensorized")


def patch_similarity(a: torch.Tensor, b: torch.Tensor, *, loss: nn.Module | None = None) -> torch.Tensor:
    """-S(A_k, B_k) for each pair k of patch sets (K x T x P, K x T' x P) -> (K,); differentiable."""
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[2]:
        raise ValueError(f"patch sets must be K x T x P with the same K and P, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    loss = loss or sinkhorn_loss()
    out = [loss(a[s:s + PAIR_CHUNK].contiguous(), b[s:s + PAIR_CHUNK].contiguous())
           for s in range(0, a.shape[0], PAIR_CHUNK)]
    return -torch.cat(out) if out else a.new_zeros(0)


def pairwise_patch_similarity(patches: torch.Tensor) -> torch.Tensor:
    """N x N matrix of -S(P_i, P_j) over one batch of patch sets (N x T x P): each unordered pair computed once,
    the diagonal 0 (a set with itself)."""
    n = patches.shape[0]
    i, j = torch.triu_indices(n, n, offset=1, device=patches.device)
    sims = patch_similarity(patches[i], patches[j])
    out = patches.new_zeros((n, n))
    out = out.index_put((i, j), sims).index_put((j, i), sims)
    return out


def patch_ot_scores(similarity: np.ndarray, valid: np.ndarray, *, patches: np.ndarray, shortlist: int = 20,
                    weight: float = 0.5) -> np.ndarray:
    """Re-score each row's ``shortlist`` best valid columns (all-vs-all, query i = gallery i) with
    ``(1 - weight) * cosine + weight * (1 + patch similarity)`` and keep them above the rest of the row, which
    keeps its global order; pairs outside the shortlist are unchanged."""
    sim = np.asarray(similarity, dtype=np.float64)
    n = sim.shape[0]
    if patches.shape[0] != n:
        raise ValueError(f"patch_ot needs one patch set per photo: {patches.shape[0]} for {n} photos")
    k = min(int(shortlist), max(n - 1, 0))
    out = sim.copy()
    if k == 0 or weight == 0:
        return out.astype(np.float32)
    masked = np.where(valid, sim, -np.inf)
    top = np.argsort(-masked, axis=1, kind="stable")[:, :k]
    rows = np.repeat(np.arange(n), k)
    cols = top.reshape(-1)
    usable = np.isfinite(masked[rows, cols])
    rows, cols = rows[usable], cols[usable]
    pt = torch.from_numpy(np.ascontiguousarray(patches, dtype=np.float32))
    with torch.no_grad():
        ps = patch_similarity(pt[torch.from_numpy(rows)], pt[torch.from_numpy(cols)]).double().numpy()
    fused = (1 - weight) * sim[rows, cols] + weight * (1 + ps)
    out[rows, cols] = fused
    short = np.zeros_like(valid, dtype=bool)
    short[rows, cols] = True
    for i in range(n):  # the shortlist stays on top of the row
        if short[i].any():
            rest = sim[i][~short[i]]
            floor = float(rest.max()) if rest.size else 0.0
            lift = floor - float(out[i][short[i]].min()) + 1e-3
            if lift > 0:
                out[i][short[i]] += lift
    return out.astype(np.float32)
