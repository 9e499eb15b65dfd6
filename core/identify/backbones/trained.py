"""A trained model used like any backbone: base backbone (its last blocks possibly fine-tuned) + head.

Checkpoint format (``torch.save`` of a dict, ``format = "rosette-trained-1"``):
``backbone`` (registry name), ``backbone_config`` (the base config dict),
``head`` / ``head_options`` / ``input_kind`` / ``metric``, ``blocks``,
``head_state``, ``backbone_state`` (only when blocks were fine-tuned), ``adapter`` / ``adapter_state`` (LoRA: only
the adapter matrices, the base named by ``base_fingerprint``),
``train_config`` and ``snapshot_hash``. :func:`load_trained_backbone` rebuilds
the base with the same preprocessing, loads the states strictly and returns a
:class:`TrainedBackbone` whose ``config`` carries the model name, the checkpoint's
SHA-256 (so the feature cache never mixes two trainings) and ``metric``
(``lorentz`` heads score exp(-d)).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from core.identify.adapters import LoraSpec, load_adapters
from core.identify.backbones import create_backbone
from core.identify.backbones.config import BackboneConfig
from core.identify.backbones.torch_base import embed_in_batches
from core.identify.heads import create_head
from core.identify.training import features_for

CHECKPOINT_FORMAT = "rosette-trained-1"


class TrainedBackbone:
    """``embed(images) -> N x D``: base preprocessing, base model, then the trained head."""

    def __init__(self, base: Any, head: nn.Module, *, config: BackboneConfig, input_kind: str) -> None:
        self.base = base
        self.head = head.eval().requires_grad_(False).to(base.device)
        self.config = config
        self.metric = config.metric
        self.input_kind = input_kind
        self.device = base.device
        self.batch_size = base.batch_size

    def __repr__(self) -> str:
        return f"TrainedBackbone({self.config.name!r}, device={self.device.type})"

    @property
    def model(self) -> nn.Module:
        return self.base.model

    def preprocess(self, images: Sequence[np.ndarray]) -> torch.Tensor:
        return self.base.preprocess(images)

    def prepare(self, images: Sequence[np.ndarray]) -> torch.Tensor:
        return self.base.prepare(images)

    def embed_prepared(self, batch: torch.Tensor) -> np.ndarray:

        out = np.empty((batch.shape[0], self.config.embed_dim), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, batch.shape[0], self.batch_size):
                feats = features_for(self.base.model, batch[start:start + self.batch_size], kind=self.input_kind)
                emb = self.head(feats).float()
                out[start:start + emb.shape[0]] = emb.cpu().numpy()
        return out

    @property
    def has_patches(self) -> bool:
        """Whether the head gives patch embeddings (idsim), which the ``patch_ot`` re-ranking compares."""
        return hasattr(self.head, "patches")

    def embed_patches(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """N x T x P unit patch embeddings of the idsim head (float16 to keep a benchmark's sets small)."""
        if not self.has_patches:
            raise ValueError(f"model {self.config.name!r} has no patch head; patch_ot re-ranking needs a model "
                             "trained with --head idsim")
        out = []
        with torch.inference_mode():
            for start in range(0, len(images), self.batch_size):
                x = self.base.preprocess(list(images[start:start + self.batch_size]))
                tokens = features_for(self.base.model, x, kind="tokens")
                out.append(self.head.patches(tokens).to("cpu", torch.float16).numpy())
        return np.concatenate(out) if out else np.zeros((0, 0, 0), dtype=np.float16)

    def embed(self, images: Sequence[np.ndarray]) -> np.ndarray:

        return embed_in_batches(self, images)


def trained_config(name: str, *, base_config: BackboneConfig, head: str, embed_dim: int, metric: str,
                   checkpoint_sha256: str, blocks: int, loss: str, checkpoint_name: str,
                   adapter: dict[str, Any] | None = None) -> BackboneConfig:
    """The config of a trained model: the base's preprocessing, the trained weights' identity."""
    return base_config.with_updates(
        name=name, architecture=f"{base_config.architecture}+{head}", embed_dim=int(embed_dim),
        weight_source=f"trained:{checkpoint_name} (base {base_config.name} {base_config.fingerprint()})",
        weights_sha256=checkpoint_sha256, metric=metric, pooling=f"{head} head",
        extra={**base_config.extra_dict(), "base_fingerprint": base_config.fingerprint(), "head": head, "loss": loss,
               "blocks": int(blocks),
               **({"adapter": f"lora r{adapter['rank']} alpha {adapter['alpha']:g} on {len(adapter['targets'])} "
                              "layers"} if adapter else {})})


def load_trained_backbone(path: str | Path, *, name: str, checkpoint_sha256: str,
                          device: str | None = None) -> TrainedBackbone:
    """Rebuild a trained model from its checkpoint (clear errors for a missing or foreign file)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"the checkpoint of model {name!r} is missing: {path}")
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a Rosette trained-model checkpoint")
    base_cfg = BackboneConfig.from_dict(ckpt["backbone_config"])
    opts: dict[str, Any] = {}
    if base_cfg.resize != "stretch":
        opts["resize"] = base_cfg.resize
    base = create_backbone(ckpt["backbone"], device=device, **opts)
    if base.config.fingerprint() != base_cfg.fingerprint():
        raise ValueError(f"model {name!r} was trained on {ckpt['backbone']} {base_cfg.fingerprint()} but this "
                         f"machine builds {base.config.fingerprint()} (different weights or preprocessing)")
    if ckpt.get("backbone_state") is not None:
        base.model.load_state_dict(ckpt["backbone_state"], strict=True)
        base.model.requires_grad_(False).eval()
    adapter = LoraSpec.from_dict(ckpt["adapter"]) if ckpt.get("adapter") else None
    if adapter is not None:
        if ckpt.get("base_fingerprint") != base.config.fingerprint():
            raise ValueError(f"model {name!r}'s adapters were trained on base {ckpt.get('base_fingerprint')} but "
                             f"this machine builds {base.config.fingerprint()}")
        load_adapters(base.model, adapter, ckpt["adapter_state"])
    head = create_head(ckpt["head"], in_dim=int(ckpt["in_dim"]), **ckpt.get("head_options", {}))
    head.load_state_dict(ckpt["head_state"], strict=True)
    cfg = trained_config(name, base_config=base_cfg, head=ckpt["head"], embed_dim=int(ckpt["embed_dim"]),
                         metric=ckpt["metric"], checkpoint_sha256=checkpoint_sha256, blocks=int(ckpt["blocks"]),
                         loss=ckpt.get("loss", ""), checkpoint_name=path.name,
                         adapter=adapter.to_dict() if adapter is not None else None)
    return TrainedBackbone(base, head, config=cfg, input_kind=ckpt["input_kind"])
