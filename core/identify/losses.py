"""Metric-learning losses as ``nn.Module``s with ``forward(embeddings, labels, **extra)``.

Registry (the name is what the database stores): ``supcon``, ``triplet``, ``arcface`` (sub-center), ``lorentz``,
``nearid``, ``idsim``, plus an anti-symmetry term for the first three. Built on pytorch-metric-learning (pml) and
geoopt wherever they have the piece.

Each loss's formula and constants: docs/training.md (docs/DESIGN.md section 4)."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core import lorentz
from core.identify.patch_transport import pairwise_patch_similarity
from core.registry import Registry

LOSSES: Registry[nn.Module] = Registry("loss")

SUPCON_TEMPERATURE = 0.1
TRIPLET_MARGIN = 0.4
ARCFACE_SUBCENTERS = 3
ARCFACE_MARGIN_RAD = 0.5
ARCFACE_SCALE = 51.5
ANTI_SYMMETRY_TAU = 0.3
PATCH_TEMPERATURE = 0.1


def anti_symmetry_term(embeddings: torch.Tensor, mirror_embeddings: torch.Tensor, *, tau: float) -> torch.Tensor:
    """mean_i max(0, cos(f(I_i), f(flip I_i)) - tau)."""
    cos = F.cosine_similarity(embeddings, mirror_embeddings, dim=-1)
    return F.relu(cos - tau).mean()


class _PmlLoss(nn.Module):
    """A pml loss with the optional anti-symmetry term."""

    def __init__(self, inner: nn.Module, *, anti_symmetry: float = 0.0, anti_symmetry_tau: float = ANTI_SYMMETRY_TAU):
        super().__init__()
        self.inner = inner
        self.anti_symmetry = float(anti_symmetry)
        self.anti_symmetry_tau = float(anti_symmetry_tau)

    @property
    def needs_mirror(self) -> bool:
        return self.anti_symmetry > 0

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor, *,
                mirror_embeddings: torch.Tensor | None = None, **unused: Any) -> torch.Tensor:
        loss = self.inner(embeddings, labels)
        if self.anti_symmetry > 0:
            if mirror_embeddings is None:
                raise ValueError("the anti-symmetry term needs the embeddings of the mirrored photos")
            loss = loss + self.anti_symmetry * anti_symmetry_term(embeddings, mirror_embeddings,
                                                                  tau=self.anti_symmetry_tau)
        return loss


@LOSSES.register("supcon", description="supervised contrastive (pml SupConLoss, temperature 0.1) -- the default")
def _supcon(*, temperature: float = SUPCON_TEMPERATURE, anti_symmetry: float = 0.0,
            anti_symmetry_tau: float = ANTI_SYMMETRY_TAU, **unused: Any) -> nn.Module:
    from pytorch_metric_learning import losses

    return _PmlLoss(losses.SupConLoss(temperature=temperature), anti_symmetry=anti_symmetry,
                    anti_symmetry_tau=anti_symmetry_tau)


@LOSSES.register("triplet", description="triplet margin loss (pml, margin 0.4, all batch triplets)")
def _triplet(*, margin: float = TRIPLET_MARGIN, anti_symmetry: float = 0.0,
             anti_symmetry_tau: float = ANTI_SYMMETRY_TAU, **unused: Any) -> nn.Module:
    from pytorch_metric_learning import losses

    return _PmlLoss(losses.TripletMarginLoss(margin=margin), anti_symmetry=anti_symmetry,
                    anti_symmetry_tau=anti_symmetry_tau)


@LOSSES.register("arcface", description="sub-center ArcFace (pml, k=3, margin 0.5 rad, scale 51.5)")
def _arcface(*, num_classes: int, embedding_size: int, margin_rad: float = ARCFACE_MARGIN_RAD,
             scale: float = ARCFACE_SCALE, sub_centers: int = ARCFACE_SUBCENTERS, anti_symmetry: float = 0.0,
             anti_symmetry_tau: float = ANTI_SYMMETRY_TAU, **unused: Any) -> nn.Module:
    from pytorch_metric_learning import losses

    inner = losses.SubCenterArcFaceLoss(num_classes=int(num_classes), embedding_size=int(embedding_size),
                                        margin=math.degrees(margin_rad), scale=scale, sub_centers=sub_centers)
    return _PmlLoss(inner, anti_symmetry=anti_symmetry, anti_symmetry_tau=anti_symmetry_tau)


# options the trainer passes to every loss that the Lorentz and NearID losses do not take
# (the Lorentz loss has its own mirror hinge instead of the anti-symmetry term)
_NOT_FOR_OWN_LOSSES = ("num_classes", "embedding_size", "anti_symmetry", "anti_symmetry_tau", "patch_weight")


def solidity_variance(solidity: torch.Tensor, *, smin: float = 0.25, smax: float = 0.9) -> torch.Tensor:
    """sigma^2(s) = smin^2 + (smax^2 - smin^2)(1 - s)^1.5, s clipped to [0, 1]."""
    s = solidity.clamp(0.0, 1.0)
    return smin ** 2 + (smax ** 2 - smin ** 2) * (1.0 - s) ** 1.5


def supcon_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """SupCon over an N x N logit matrix: mean over anchors with a positive of
    -1/|P(i)| sum_p log softmax_{a != i}(l_i)_p."""
    n = logits.shape[0]
    eye = torch.eye(n, dtype=torch.bool, device=logits.device)
    logits = logits.masked_fill(eye, float("-inf"))
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    pos = (labels[:, None] == labels[None, :]) & ~eye
    n_pos = pos.sum(1)
    has = n_pos > 0
    if not bool(has.any()):
        return logits.new_zeros(()) + 0.0 * logits.masked_fill(eye, 0).sum()
    per_anchor = -(log_prob.masked_fill(~pos, 0.0).sum(1)[has] / n_pos[has])
    return per_anchor.mean()


class LorentzLoss(nn.Module):
    """Probabilistic SupCon on the hyperboloid + radius prior + mirror-negative hinge (formulas: docs/training.md)."""

    needs_mirror = True

    def __init__(self, *, temperature: float = SUPCON_TEMPERATURE, smin: float = 0.25, smax: float = 0.9,
                 radius_weight: float = 0.15, kappa: float = 2.0, hinge_weight: float = 0.1,
                 hinge_margin: float = 0.5) -> None:
        super().__init__()
        self.temperature, self.smin, self.smax = float(temperature), float(smin), float(smax)
        self.radius_weight, self.kappa = float(radius_weight), float(kappa)
        self.hinge_weight, self.hinge_margin = float(hinge_weight), float(hinge_margin)

    def terms(self, embeddings: torch.Tensor, labels: torch.Tensor, *, solidity: torch.Tensor | None = None,
              mirror_embeddings: torch.Tensor | None = None) -> dict[str, torch.Tensor]:

        if solidity is None:
            solidity = torch.ones(embeddings.shape[0], dtype=embeddings.dtype, device=embeddings.device)
        solidity = solidity.to(embeddings.dtype)
        var = solidity_variance(solidity, smin=self.smin, smax=self.smax)
        tau_ij = self.temperature * (var[:, None] + var[None, :]) / (2 * self.smin ** 2)
        dist = lorentz.pairwise_dist(embeddings, embeddings)
        out = {"psupcon": supcon_from_logits(-dist / tau_ij, labels)}
        target = 0.2 + 1.8 * solidity.clamp(0.0, 1.0)
        out["radius"] = (0.5 * self.kappa * (lorentz.radius(embeddings) - target) ** 2).mean()
        if mirror_embeddings is not None and self.hinge_weight > 0:
            out["mirror_hinge"] = F.relu(self.hinge_margin - lorentz.paired_dist(embeddings, mirror_embeddings)).mean()
        else:
            out["mirror_hinge"] = embeddings.new_zeros(())
        return out

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor, *, solidity: torch.Tensor | None = None,
                mirror_embeddings: torch.Tensor | None = None, **unused: Any) -> torch.Tensor:
        t = self.terms(embeddings, labels, solidity=solidity, mirror_embeddings=mirror_embeddings)
        return t["psupcon"] + self.radius_weight * t["radius"] + self.hinge_weight * t["mirror_hinge"]


@LOSSES.register("lorentz", description="probabilistic SupCon on the hyperboloid + radius prior + mirror hinge")
def _lorentz(**opts: Any) -> nn.Module:
    for key in _NOT_FOR_OWN_LOSSES:
        opts.pop(key, None)
    return LorentzLoss(**opts)


class NearIDLoss(nn.Module):
    """Two-tier NearID loss (formula: docs/training.md); ``distractors`` is N x K x D (K per anchor) or N x D."""

    needs_distractors = True

    def __init__(self, *, temperature: float = 0.07, tier2_weight: float = 0.5) -> None:
        super().__init__()
        self.temperature = float(temperature)
        self.tier2_weight = float(tier2_weight)

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor, *, distractors: torch.Tensor | None = None,
                **unused: Any) -> torch.Tensor:
        if distractors is None:
            raise ValueError("the NearID loss needs near-identity distractors for each anchor")
        if distractors.ndim == 2:
            distractors = distractors[:, None, :]
        e = F.normalize(embeddings, dim=-1)
        d = F.normalize(distractors, dim=-1)
        t = self.temperature
        n = e.shape[0]
        sim = e @ e.T / t  # N x N
        sim_d = torch.einsum("nd,nkd->nk", e, d) / t  # N x K
        eye = torch.eye(n, dtype=torch.bool, device=e.device)
        pos = (labels[:, None] == labels[None, :]) & ~eye
        neg = labels[:, None] != labels[None, :]
        has = pos.any(1)
        if not bool(has.any()):
            return 0.0 * (sim.sum() + sim_d.sum())
        # tier 1: each positive against (batch positives + the anchor's distractors)
        pos_logits = sim.masked_fill(~pos, float("-inf"))
        denom = torch.logsumexp(torch.cat([pos_logits, sim_d], dim=1), dim=1, keepdim=True)
        tier1 = -((pos_logits - denom).masked_fill(~pos, 0.0).sum(1)[has] / pos.sum(1)[has])
        # tier 2: batch negatives below the distractor
        neg_lse = torch.logsumexp(sim.masked_fill(~neg, float("-inf")), dim=1, keepdim=True)
        has_neg = neg.any(1)
        tier2 = F.softplus(neg_lse - sim_d).mean(1)
        tier2 = torch.where(has_neg, tier2, torch.zeros_like(tier2))
        return tier1.mean() + self.tier2_weight * tier2[has].mean()


@LOSSES.register("nearid", description="NearID two-tier loss (temperature 0.07) with near-identity distractors")
def _nearid(**opts: Any) -> nn.Module:
    for key in _NOT_FOR_OWN_LOSSES:
        opts.pop(key, None)
    return NearIDLoss(**opts)


class PatchTransportLoss(nn.Module):
    """ID-Sim's training objective: SupCon (pml, tau 0.1) on the global embedding + lambda * InfoNCE over the
    patch similarities: l_ij = -S(P_i, P_j) / tau_p (tau_p = 0.1), SupCon's multi-positive softmax over
    each anchor's row (the anchor itself left out)."""

    needs_patches = True

    def __init__(self, *, patch_weight: float = 1.0, temperature: float = SUPCON_TEMPERATURE,
                 patch_temperature: float = PATCH_TEMPERATURE, **global_options: Any) -> None:
        super().__init__()
        if patch_weight < 0:
            raise ValueError("the patch weight must not be negative")
        self.patch_weight = float(patch_weight)
        self.patch_temperature = float(patch_temperature)
        self.global_loss = _supcon(temperature=temperature, **global_options)

    @property
    def needs_mirror(self) -> bool:
        return bool(getattr(self.global_loss, "needs_mirror", False))

    def terms(self, embeddings: torch.Tensor, labels: torch.Tensor, *, patches: torch.Tensor | None = None,
              **extra: Any) -> dict[str, torch.Tensor]:
        """The two terms: ``global`` and ``patch`` (before weighting)."""
        out = {"global": self.global_loss(embeddings, labels, **extra)}
        if self.patch_weight > 0:
            if patches is None:
                raise ValueError("the idsim loss needs the batch's patch embeddings (patches=N x T x P)")
            out["patch"] = supcon_from_logits(pairwise_patch_similarity(patches) / self.patch_temperature, labels)
        return out

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor, *, patches: torch.Tensor | None = None,
                **extra: Any) -> torch.Tensor:
        t = self.terms(embeddings, labels, patches=patches, **extra)
        return t["global"] + self.patch_weight * t["patch"] if "patch" in t else t["global"]


@LOSSES.register("idsim", description="ID-Sim: SupCon on the global embedding + lambda * InfoNCE over negative "
                                      "Sinkhorn divergences between patch sets (GeomLoss)")
def _idsim(*, patch_weight: float = 1.0, num_classes: int | None = None, embedding_size: int | None = None,
           **opts: Any) -> nn.Module:
    return PatchTransportLoss(patch_weight=patch_weight, **opts)


def list_losses() -> list[str]:
    return LOSSES.names()


def create_loss(name: str, **options: Any) -> nn.Module:
    """The loss registered as ``name`` (``arcface`` needs ``num_classes`` and ``embedding_size``)."""
    return LOSSES.create(name, **options)
