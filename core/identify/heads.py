"""Trainable heads on a (frozen or partly fine-tuned) backbone, as a registry.

A head maps backbone output to the embedding that retrieval reads. Each registered head declares what it eats
(``input_kind``: ``"pooled"`` N x C vectors, or ``"tokens"`` N x T x C patch tokens), the metric its output is
compared with, and its default loss (names stored in the ``models`` table): ``supcon``, ``triplet``, ``arcface``,
``lorentz``, ``nearid``, ``idsim``. The Euclidean heads' projection starts as a scaled random orthogonal map, so
epoch 0 equals the frozen features up to a rotation.

Each head's input, output, metric and loss, and GeM pooling: docs/training.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.lorentz import expmap0
from core.registry import Registry


@dataclass(frozen=True)
class HeadSpec:
    name: str
    input_kind: str  # pooled | tokens
    metric: str  # cosine | lorentz
    default_loss: str
    description: str


HEAD_SPECS: dict[str, HeadSpec] = {}
HEADS: Registry[nn.Module] = Registry("head")


def _register(spec: HeadSpec):
    HEAD_SPECS[spec.name] = spec
    return HEADS.register(spec.name, description=spec.description)


class ProjectionHead(nn.Module):
    """x (N x C pooled) -> normalize(W x + b), W: out_dim x C (orthogonal init)."""

    input_kind = "pooled"
    metric = "cosine"

    def __init__(self, in_dim: int, *, out_dim: int = 512, seed: int = 0) -> None:
        super().__init__()
        self.in_dim, self.out_dim = int(in_dim), int(out_dim)
        self.proj = nn.Linear(self.in_dim, self.out_dim)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            nn.init.orthogonal_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim == 3:  # tokens given: average-pool them
            x = x.mean(1)
        return F.normalize(self.proj(x), dim=-1, eps=1e-12)


class GeM(nn.Module):
    """Generalised mean pooling over tokens: (mean_t clamp(x, eps)^p)^(1/p), p learned."""

    def __init__(self, *, p: float = 3.0, eps: float = 1e-6) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.tensor(float(p)))
        self.eps = eps

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        p = self.p.clamp(1.0, 8.0)
        return tokens.clamp_min(self.eps).pow(p).mean(1).pow(1.0 / p)


class LorentzHead(nn.Module):
    """tokens -> GeM -> Linear(C, 1024) -> GELU -> Linear(1024, 256) -> expmap0 -> 257-d hyperboloid point."""

    input_kind = "tokens"
    metric = "lorentz"

    def __init__(self, in_dim: int, *, out_dim: int = 256, hidden: int = 1024, seed: int = 0) -> None:
        super().__init__()
        self.in_dim, self.out_dim = int(in_dim), int(out_dim) + 1
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.pool = GeM()
            self.mlp = nn.Sequential(nn.Linear(self.in_dim, hidden), nn.GELU(), nn.Linear(hidden, int(out_dim)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:

        pooled = self.pool(x) if x.ndim == 3 else x
        return expmap0(self.mlp(pooled))


class AttentionPoolHead(nn.Module):
    """NearID head: a learned query attends over the patch tokens (multi-head attention), then a projection.

    e = normalize(W . MHA(q, LN(tokens), LN(tokens)) + mean-token skip)
    """

    input_kind = "tokens"
    metric = "cosine"

    def __init__(self, in_dim: int, *, out_dim: int = 512, num_heads: int = 8, seed: int = 0) -> None:
        super().__init__()
        self.in_dim, self.out_dim = int(in_dim), int(out_dim)
        heads = num_heads if self.in_dim % num_heads == 0 else 1
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.norm = nn.LayerNorm(self.in_dim)
            self.query = nn.Parameter(torch.randn(1, 1, self.in_dim) * 0.02)
            self.attn = nn.MultiheadAttention(self.in_dim, heads, batch_first=True)
            self.proj = nn.Linear(self.in_dim, self.out_dim)
            nn.init.orthogonal_(self.proj.weight)
            nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim == 2:
            x = x[:, None, :]
        kv = self.norm(x)
        pooled, _ = self.attn(self.query.expand(x.shape[0], -1, -1), kv, kv, need_weights=False)
        return F.normalize(self.proj(pooled[:, 0] + x.mean(1)), dim=-1, eps=1e-12)


class ResidualProjection(nn.Module):
    """x -> normalize(W x + MLP(x)): W an orthogonal linear map (the frozen geometry at epoch 0), MLP two layers
    (Linear -> GELU -> Linear) whose last layer starts at zero. Works on N x C and N x T x C alike."""

    def __init__(self, in_dim: int, out_dim: int, *, hidden: int = 1024) -> None:
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim)
        self.mlp = nn.Sequential(nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, out_dim))
        nn.init.orthogonal_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)
        nn.init.zeros_(self.mlp[2].weight)
        nn.init.zeros_(self.mlp[2].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.linear(x) + self.mlp(x), dim=-1, eps=1e-12)


class IdSimHead(nn.Module):
    """ID-Sim: two projection heads on the patch tokens. ``forward`` -> the global embedding (mean-pooled tokens
    through a residual two-layer projection, L2-normalised), what retrieval reads; ``patches`` -> each token
    through its own residual two-layer projection (``patch_dim``, L2-normalised): the patch set the
    patch-transport term and the ``patch_ot`` re-ranking compare."""

    input_kind = "tokens"
    metric = "cosine"

    def __init__(self, in_dim: int, *, out_dim: int = 512, patch_dim: int = 128, hidden: int = 512,
                 seed: int = 0) -> None:
        super().__init__()
        self.in_dim, self.out_dim, self.patch_dim = int(in_dim), int(out_dim), int(patch_dim)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.global_proj = ResidualProjection(self.in_dim, self.out_dim, hidden=hidden)
            self.patch_proj = ResidualProjection(self.in_dim, self.patch_dim, hidden=hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.global_proj(x.mean(1) if x.ndim == 3 else x)

    def patches(self, x: torch.Tensor) -> torch.Tensor:
        """N x T x C tokens -> N x T x patch_dim unit patch embeddings."""
        if x.ndim != 3:
            raise ValueError("the patch head needs patch tokens (N x T x C), not pooled features")
        return self.patch_proj(x)

    def forward_with_patches(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward(x), self.patches(x)


@_register(HeadSpec("supcon", "pooled", "cosine", "supcon", "linear projection trained with SupCon (default)"))
def _supcon_head(in_dim: int, **opts: Any) -> nn.Module:
    return ProjectionHead(in_dim, **opts)


@_register(HeadSpec("triplet", "pooled", "cosine", "triplet", "linear projection trained with a triplet loss"))
def _triplet_head(in_dim: int, **opts: Any) -> nn.Module:
    return ProjectionHead(in_dim, **opts)


@_register(HeadSpec("arcface", "pooled", "cosine", "arcface", "linear projection trained with sub-center ArcFace"))
def _arcface_head(in_dim: int, **opts: Any) -> nn.Module:
    return ProjectionHead(in_dim, **opts)


@_register(HeadSpec("lorentz", "tokens", "lorentz", "lorentz",
                    "hyperbolic head: GeM + MLP onto the Lorentz hyperboloid (geoopt), scores exp(-d)"))
def _lorentz_head(in_dim: int, **opts: Any) -> nn.Module:
    return LorentzHead(in_dim, **opts)


@_register(HeadSpec("nearid", "tokens", "cosine", "nearid",
                    "NearID: attention pooling over patch tokens, trained against near-identity distractors"))
def _nearid_head(in_dim: int, **opts: Any) -> nn.Module:
    return AttentionPoolHead(in_dim, **opts)


@_register(HeadSpec("idsim", "tokens", "cosine", "idsim",
                    "ID-Sim: global + patch projection heads; SupCon + Sinkhorn patch transport (GeomLoss)"))
def _idsim_head(in_dim: int, **opts: Any) -> nn.Module:
    return IdSimHead(in_dim, **opts)


def list_heads() -> list[str]:
    return HEADS.names()


def head_spec(name: str) -> HeadSpec:
    HEADS.resolve(name)  # raises the registry's clear error on unknown names
    return HEAD_SPECS[name]


def create_head(name: str, *, in_dim: int, **options: Any) -> nn.Module:
    """The head registered as ``name`` for ``in_dim``-d backbone features."""
    return HEADS.create(name, in_dim=in_dim, **options)
