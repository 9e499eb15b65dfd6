"""What every backbone shares: its config (preprocessing, like timm's pretrained cfg), the Backbone protocol and the errors. The backbone modules import this, not the package, whose registry imports them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

from core.annotations import CROP_MARGIN

DEFAULT_BACKBONE = "efficientnet_lite0"
#: Fields added after fingerprints were first stored, with the value every older config had: a config at that
#: value hashes as it did before the field existed; any other value is part of its fingerprint.
FINGERPRINT_SINCE_DEFAULTS = {"crop_margin": CROP_MARGIN}
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
    # an annotation's crop: its box grown by this share of the box on every side (core.annotations)
    crop_margin: float = CROP_MARGIN

    def __post_init__(self) -> None:
        object.__setattr__(self, "crop_margin", float(self.crop_margin))
        if not 0.0 <= self.crop_margin < 1.0:
            raise ValueError(f"crop_margin must be in [0, 1), got {self.crop_margin}")
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
        for name, default in FINGERPRINT_SINCE_DEFAULTS.items():  # at its default, as every config made before
            if payload[name] == default:  # the field existed: those fingerprints (caches, checkpoints) stay valid
                del payload[name]
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
