"""LoRA adapters on a frozen backbone, with peft (``rosette train --adapter lora --rank R --alpha A``).

Which layers: every plain ``nn.Conv2d`` with ``groups == 1`` (the 1x1 expansions / projections and the head
convolution of a CNN) and every ``nn.Linear`` (a ViT's qkv, attention projection and MLP layers) of the backbone.
Depthwise convolutions and timm's dynamically padded ``Conv2dSame`` stay frozen without adapters (a low-rank
update of a depthwise kernel is not a matrix; a LoRA branch cannot reproduce a dynamic padding). Each adapted
layer W gets W + (alpha / r) B A with A (r x in) random, B (out x r) zero, so training starts from the frozen
backbone exactly; dropout 0.05 on the adapter's input.

A rank larger than a layer's width (min(in x kernel area, out)) is refused with the layer named: such an update
has more parameters than the layer can use. The adapter state (:func:`adapter_state`) is only the LoRA matrices;
a checkpoint keeps it with its :class:`LoraSpec` and the base backbone's fingerprint, and
:func:`load_adapters` rebuilds the same layers on a freshly built base and merges them into its weights.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class LoraSpec:
    """What the adapters are: rank, alpha, dropout and the adapted layers' names."""

    rank: int
    alpha: float
    dropout: float
    targets: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["targets"] = list(self.targets)
        return {"kind": "lora", **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoraSpec:
        if d.get("kind") != "lora":
            raise ValueError(f"unknown adapter kind {d.get('kind')!r}; expected lora")
        return cls(rank=int(d["rank"]), alpha=float(d["alpha"]), dropout=float(d["dropout"]),
                   targets=tuple(d["targets"]))


_SKIP_NAMES = ("classifier", "head.fc", "fc.")


def layer_width(module: nn.Module) -> int:
    """The largest rank a LoRA update of the layer can use: min(inputs x kernel area, outputs)."""
    if isinstance(module, nn.Linear):
        return min(module.in_features, module.out_features)
    if isinstance(module, nn.Conv2d):
        kh, kw = module.kernel_size
        return min(module.in_channels * kh * kw, module.out_channels)
    raise TypeError(f"{type(module).__name__} takes no LoRA adapter")


def lora_targets(model: nn.Module) -> list[str]:
    """Names of the layers that get adapters (module docstring), in model order."""
    names = []
    for name, module in model.named_modules():
        if not name or any(name.startswith(s) or f".{s}" in f".{name}" for s in _SKIP_NAMES):
            continue
        if type(module) is nn.Linear or (type(module) is nn.Conv2d and module.groups == 1):
            names.append(name)
    if not names:
        raise ValueError(f"{type(model).__name__} has no convolution or linear layer to put LoRA adapters on")
    return names


def adapted_widths(model: nn.Module, targets: list[str] | tuple[str, ...] | None = None) -> list[tuple[str, int]]:
    """(name, :func:`layer_width`) of every adapted layer (``targets``, default :func:`lora_targets`), in model
    order: all a rank check needs, so a request can be checked before any training."""
    modules = dict(model.named_modules())
    return [(n, layer_width(modules[n])) for n in (lora_targets(model) if targets is None else targets)]


def rank_refusal(widths: list[tuple[str, int]] | tuple[tuple[str, int], ...], rank: int) -> str | None:
    """Why ``rank`` is refused for layers of these (name, width) -- larger than the narrowest, named -- or None."""
    too_narrow = [(n, w) for n, w in widths if w < rank]
    if not too_narrow:
        return None
    name, width = min(too_narrow, key=lambda t: t[1])
    return (f"LoRA rank {rank} is larger than layer {name!r}'s width {width} "
            f"({len(too_narrow)} layer(s) are narrower than the rank); use --rank {width} or less")


def check_rank(model: nn.Module, targets: list[str] | tuple[str, ...], rank: int) -> None:
    """Refuse a rank larger than the narrowest adapted layer, naming it."""
    why = rank_refusal(adapted_widths(model, targets), rank)
    if why:
        raise ValueError(why)


def add_lora(model: nn.Module, *, rank: int, alpha: float, dropout: float) -> LoraSpec:
    """Freeze ``model`` and put LoRA adapters on its layers (in place); returns what was added."""
    from peft import LoraConfig, inject_adapter_in_model  # lazy: peft imports transformers

    targets = lora_targets(model)
    check_rank(model, targets, rank)
    model.requires_grad_(False)
    inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets,
                                       bias="none"), model)
    return LoraSpec(rank=rank, alpha=float(alpha), dropout=float(dropout), targets=tuple(targets))


def adapter_parameters(model: nn.Module) -> list[nn.Parameter]:
    return [p for n, p in model.named_parameters() if "lora_" in n]


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Only the LoRA matrices (what a LoRA checkpoint stores), on the CPU."""
    from peft import get_peft_model_state_dict  # lazy: peft imports transformers

    return {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(model).items()}


def load_adapters(model: nn.Module, spec: LoraSpec, state: dict[str, torch.Tensor], *, merge: bool = True) -> None:
    """Rebuild ``spec``'s adapters on a fresh base ``model``, load their weights strictly, and (``merge``) fold
    them into the base weights so inference costs what the base costs."""
    from peft import LoraConfig, inject_adapter_in_model, set_peft_model_state_dict  # lazy: peft

    missing = [t for t in spec.targets if t not in dict(model.named_modules())]
    if missing:
        raise ValueError(f"the base backbone has no layer(s) {', '.join(missing[:3])}: the adapters were trained "
                         "on a different architecture")
    inject_adapter_in_model(LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                                       target_modules=list(spec.targets), bias="none"), model)
    result = set_peft_model_state_dict(model, state)
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise ValueError(f"the adapter weights do not fit the adapters: unexpected {unexpected[:3]}")
    loaded = {k for k in state}
    expected = {k for k in adapter_state(model)}
    if loaded != expected:
        raise ValueError(f"the adapter weights do not fit the adapters: missing {sorted(expected - loaded)[:3]}")
    if merge:
        from peft.tuners.tuners_utils import BaseTunerLayer  # lazy: peft

        for module in model.modules():
            if isinstance(module, BaseTunerLayer):
                module.merge()
    model.requires_grad_(False).eval()
