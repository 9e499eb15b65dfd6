"""Torch backbones: the shared inference wrapper every torch backbone (EfficientNet, timm, hub, trained) uses.

:class:`TorchBackbone` wraps any ``nn.Module`` whose ``forward(x)`` returns pooled N x D features and owns the
preprocessing its :class:`~core.identify.backbones.BackboneConfig` declares (resize, normalise, L2-normalised
output). It uses the GPU when there is one; on CPU, convolutional nets run channels-last and EfficientNets with
BatchNorm folded (same outputs up to rounding, ~1.5x faster). ``runtime`` (``auto``, ``torch``, ``onnx`` or
``$ROSETTE_RUNTIME``) may run the forward pass through ONNX Runtime, falling back to torch with a logged reason
(:attr:`TorchBackbone.runtime_reason`); the feature fingerprint does not depend on it.

The preprocessing steps, the BatchNorm folding formula and when ``auto`` picks ONNX: docs/backbones.md."""

from __future__ import annotations

import copy
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_weights

from core.identify.backbones.config import BackboneConfig
from core.identify.onnx_runtime import OnnxForward, build_onnx_forward, requested_runtime

log = logging.getLogger(__name__)

PIL_FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
    "box": Image.Resampling.BOX,
    "area": Image.Resampling.BOX,
}


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` -> CUDA when available, else CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def as_rgb_uint8(image: np.ndarray) -> np.ndarray:
    """Check/convert one image to HxWx3 uint8 (greyscale is repeated, a 4th alpha channel dropped)."""
    a = np.asarray(image)
    if a.dtype != np.uint8:
        raise TypeError(f"images must be uint8 RGB arrays, got dtype {a.dtype}")
    if a.ndim == 2:
        a = np.repeat(a[:, :, None], 3, axis=2)
    elif a.ndim == 3 and a.shape[2] == 4:
        a = a[:, :, :3]
    elif a.ndim == 3 and a.shape[2] == 1:
        a = np.repeat(a, 3, axis=2)
    if a.ndim != 3 or a.shape[2] != 3 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"images must be HxWx3 uint8 RGB arrays, got shape {np.asarray(image).shape}")
    return a


def resize_for_config(image: np.ndarray, config: BackboneConfig) -> np.ndarray:
    """One HxWx3 uint8 photo -> input_size (H, W) uint8, following ``config.resize`` / ``interpolation``."""
    a = as_rgb_uint8(image)
    out_h, out_w = config.input_size
    h, w = a.shape[:2]
    resample = PIL_FILTERS[config.interpolation]
    if config.resize == "stretch":
        if (h, w) == (out_h, out_w):
            return np.ascontiguousarray(a)
        return np.asarray(Image.fromarray(a).resize((out_w, out_h), resample))
    scale = min(out_w / w, out_h / h)
    new_w, new_h = max(1, round(w * scale)), max(1, round(h * scale))
    fill = tuple(int(round(m * 255)) for m in config.mean)
    canvas = Image.new("RGB", (out_w, out_h), fill)
    img = Image.fromarray(a)
    if (new_h, new_w) != (h, w):
        img = img.resize((new_w, new_h), resample)
    canvas.paste(img, ((out_w - new_w) // 2, (out_h - new_h) // 2))
    return np.asarray(canvas)


TokenFn = Callable[[nn.Module, torch.Tensor], torch.Tensor]


class TorchBackbone:
    """Frozen torch model + its preprocessing; docs/backbones.md gives the exact steps."""

    metric = "cosine"

    def __init__(self, model: nn.Module, config: BackboneConfig, *, device: str | torch.device | None = None,
                 batch_size: int = 32, channels_last: bool | None = None, token_fn: TokenFn | None = None,
                 runtime: str = "auto", onnx_default: bool = False,
                 onnx_cache_dir: str | os.PathLike[str] | None = None) -> None:
        self.config = config
        requested_runtime(runtime)  # validates the option early
        self.runtime_option = runtime
        self.onnx_default = bool(onnx_default)
        self.onnx_cache_dir = Path(onnx_cache_dir) if onnx_cache_dir is not None else None
        self.runtime_reason = ""
        self._onnx: OnnxForward | None = None
        self._onnx_failed: str | None = None
        self._onnx_reason = ""
        self._runtime_lock = threading.Lock()
        self.device = resolve_device(device)
        self.batch_size = int(batch_size)
        is_conv = any(isinstance(m, nn.Conv2d) for m in model.modules()) and not _is_transformer(model)
        self.channels_last = bool(is_conv if channels_last is None else channels_last)
        model = model.eval().requires_grad_(False).to(self.device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model
        self._token_fn = token_fn
        mean = torch.tensor(config.mean, dtype=torch.float32).view(1, 3, 1, 1)
        std = torch.tensor(config.std, dtype=torch.float32).view(1, 3, 1, 1)
        # x = (p / 255 - mean) / std = p * scale + shift
        self._scale = (1.0 / (255.0 * std)).to(self.device)
        self._shift = (-mean / std).to(self.device)
        self._scale_np = (1.0 / (255.0 * std)).numpy().astype(np.float32)
        self._shift_np = (-mean / std).numpy().astype(np.float32)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config.name!r}, device={self.device.type})"

    def preprocess(self, images: Sequence[np.ndarray]) -> torch.Tensor:
        """Photos -> N x 3 x H x W float32 tensor on the backbone's device (resized and normalised)."""
        h, w = self.config.input_size
        batch = np.empty((len(images), h, w, 3), dtype=np.uint8)
        for i, img in enumerate(images):
            batch[i] = resize_for_config(img, self.config)
        if self._onnx_active():  # ONNX Runtime reads NCHW numpy; numpy leaves torch's threads to the forward pass
            arr = np.empty((len(images), 3, h, w), dtype=np.float32)
            np.multiply(batch.transpose(0, 3, 1, 2), self._scale_np, out=arr)
            arr += self._shift_np
            return torch.from_numpy(arr)
        x = torch.from_numpy(batch).to(self.device).permute(0, 3, 1, 2).float()
        x = x * self._scale + self._shift
        if self.channels_last:
            return x.contiguous(memory_format=torch.channels_last)
        return x.contiguous()

    def forward_embed(self, batch: torch.Tensor, *, normalize: bool = True) -> torch.Tensor:
        """Preprocessed batch -> N x D pooled features (L2-normalised unless ``normalize=False``)."""
        feats = self.model(batch)
        if feats.ndim != 2:
            feats = feats.flatten(1)
        feats = feats.float()
        return torch.nn.functional.normalize(feats, dim=1, eps=1e-12) if normalize else feats

    def forward_tokens(self, batch: torch.Tensor) -> torch.Tensor:
        """Preprocessed batch -> N x T x C patch tokens / feature-map cells (no pooling, no CLS token)."""
        if not self.config.supports_tokens:
            raise NotImplementedError(f"backbone {self.config.name!r} does not expose tokens")
        fn = self._token_fn or default_tokens
        return fn(self.model, batch)

    def prepare(self, images: Sequence[np.ndarray]) -> torch.Tensor:
        """CPU half of :meth:`embed` (resize + normalise), safe to run in a loader thread while the
        previous batch is in :meth:`embed_prepared`."""
        with torch.inference_mode():
            return self.preprocess(list(images))

    def use_runtime(self, runtime: str | None = None, *, cache_dir: str | os.PathLike[str] | None = None) -> str:
        """Choose (``runtime`` not None: sticky for this backbone) and prepare the forward runtime; returns the one
        that will run: ``"onnx"`` or ``"torch"``. ``cache_dir`` (a feature cache folder) is where the ONNX
        export is kept, keyed by the config fingerprint (exported once; without one it is exported in memory)."""
        if runtime is not None:
            requested_runtime(runtime)
            self.runtime_option = runtime
        if cache_dir is not None and self.onnx_cache_dir is None:
            self.onnx_cache_dir = Path(cache_dir)
        return self._resolve_runtime()

    @property
    def runtime(self) -> str:
        """The runtime the next forward pass uses (``"onnx"`` or ``"torch"``), exporting on first use."""
        return self._resolve_runtime()

    def _wants_onnx(self) -> bool:
        wanted = requested_runtime(self.runtime_option)
        if wanted == "auto":
            return self.onnx_default and self.device.type == "cpu"
        return wanted == "onnx"

    def _onnx_active(self) -> bool:
        return self._onnx is not None and self._wants_onnx()

    def _resolve_runtime(self) -> str:
        if not self._wants_onnx():
            self.runtime_reason = f"torch ({requested_runtime(self.runtime_option)} runtime requested)"
            return "torch"
        if self._onnx is not None:
            self.runtime_reason = self._onnx_reason
            return "onnx"
        with self._runtime_lock:
            if self._onnx is None and self._onnx_failed is None:
                model = self.model if self.device.type == "cpu" else None
                if model is None:
                    model = copy.deepcopy(self.model).to("cpu")
                forward, reason = build_onnx_forward(model, input_size=self.config.input_size,
                                                     fingerprint=self.config.fingerprint(),
                                                     cache_dir=self.onnx_cache_dir)
                if forward is None:
                    self._onnx_failed = reason
                    log.warning("%s: ONNX Runtime not used, falling back to torch: %s", self.config.name, reason)
                else:
                    self._onnx_reason = (f"onnxruntime CPU, {forward.threads} threads (max |diff| vs torch "
                                         f"{forward.max_diff:.1e})")
                    self._onnx = forward
            if self._onnx is None:
                self.runtime_reason = f"torch (ONNX fallback: {self._onnx_failed})"
                return "torch"
        self.runtime_reason = self._onnx_reason
        return "onnx"

    def embed_prepared(self, batch: torch.Tensor) -> np.ndarray:
        """Model half of :meth:`embed`: a :meth:`prepare` d batch -> N x D float32, rows L2-normalised."""
        out = np.empty((batch.shape[0], self.config.embed_dim), dtype=np.float32)
        onnx = self._onnx if self._resolve_runtime() == "onnx" else None
        if onnx is not None:
            x = batch.detach().to("cpu").contiguous().numpy()
            try:
                for start in range(0, x.shape[0], self.batch_size):
                    feats = onnx(x[start:start + self.batch_size])
                    if feats.shape[1] != self.config.embed_dim:
                        raise RuntimeError(f"model gave {feats.shape[1]}-d features, config says "
                                           f"{self.config.embed_dim}")
                    out[start:start + feats.shape[0]] = feats
                return out
            except Exception as exc:  # noqa: BLE001 - a runtime failure mid-run: finish the job with torch
                with self._runtime_lock:
                    self._onnx, self._onnx_failed = None, f"ONNX Runtime failed: {type(exc).__name__}: {exc}"
                log.warning("%s: %s; falling back to torch", self.config.name, self._onnx_failed)
                self.runtime_reason = f"torch (ONNX fallback: {self._onnx_failed})"
        batch = batch.to(self.device)
        if self.channels_last and not batch.is_contiguous(memory_format=torch.channels_last):
            batch = batch.contiguous(memory_format=torch.channels_last)
        with torch.inference_mode():
            for start in range(0, batch.shape[0], self.batch_size):
                feats = self.forward_embed(batch[start:start + self.batch_size])
                if feats.shape[1] != self.config.embed_dim:
                    raise RuntimeError(f"{self.config.name}: model gave {feats.shape[1]}-d features, "
                                       f"config says {self.config.embed_dim}")
                out[start:start + feats.shape[0]] = feats.cpu().numpy()
        return out

    def embed(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """HxWx3 uint8 RGB photos of any size -> N x D float32, rows L2-normalised, deterministic."""
        return embed_in_batches(self, images)


def embed_in_batches(backbone: Any, images: Sequence[np.ndarray]) -> np.ndarray:
    """``backbone.embed_prepared(backbone.prepare(chunk))`` over ``batch_size`` chunks -> N x D float32."""
    images = list(images)
    out = np.empty((len(images), backbone.config.embed_dim), dtype=np.float32)
    for start in range(0, len(images), backbone.batch_size):
        chunk = images[start:start + backbone.batch_size]
        out[start:start + len(chunk)] = backbone.embed_prepared(backbone.prepare(chunk))
    return out


def _is_transformer(model: nn.Module) -> bool:
    return hasattr(model, "cls_token") or hasattr(model, "pos_embed") or getattr(model, "output_fmt", "") == "NHWC"


def default_tokens(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """timm ``forward_features`` -> N x T x C: NCHW maps and NHWC maps are flattened over H*W;
    ViT sequences drop their prefix (CLS / register) tokens."""
    feats = model.forward_features(batch)
    if feats.ndim == 4:
        if getattr(model, "output_fmt", "NCHW") == "NHWC":
            return feats.flatten(1, 2)
        return feats.flatten(2).transpose(1, 2)
    if feats.ndim == 3:
        n_prefix = int(getattr(model, "num_prefix_tokens", 0))
        return feats[:, n_prefix:, :]
    raise RuntimeError(f"unexpected forward_features shape {tuple(feats.shape)}")


# --------------------------------------------------------------------------- BatchNorm folding

#: module class name -> (conv attribute, following BatchNorm attribute) pairs, in forward order
_FOLD_PAIRS = {
    "EfficientNet": (("conv_stem", "bn1"), ("conv_head", "bn2")),
    "EfficientNetFeatures": (("conv_stem", "bn1"),),
    "DepthwiseSeparableConv": (("conv_dw", "bn1"), ("conv_pw", "bn2")),
    "InvertedResidual": (("conv_pw", "bn1"), ("conv_dw", "bn2"), ("conv_pwl", "bn3")),
    "EdgeResidual": (("conv_exp", "bn1"), ("conv_pwl", "bn2")),
    "ConvBnAct": (("conv", "bn1"),),
}


class _DropAct(nn.Module):
    """What is left of a timm ``BatchNormAct2d`` once its affine part moved into the conv."""

    def __init__(self, drop: nn.Module, act: nn.Module) -> None:
        super().__init__()
        self.drop = drop
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.drop(x))


@torch.no_grad()
def fold_batchnorm_(model: nn.Module) -> int:
    """Fold eval-mode BatchNorm into the preceding conv for timm EfficientNet-family blocks, in place.

    w' = w * g, b' = (b - running_mean) * g + beta with g = gamma / sqrt(running_var + eps)
    (``torch.nn.utils.fusion.fuse_conv_bn_weights``).
    Returns the number of folded pairs. Only for inference (the model must not be trained afterwards).
    """
    folded = 0
    for module in list(model.modules()):
        for conv_name, bn_name in _FOLD_PAIRS.get(type(module).__name__, ()):
            conv = getattr(module, conv_name, None)
            bn = getattr(module, bn_name, None)
            if not isinstance(conv, nn.Conv2d) or not isinstance(bn, nn.BatchNorm2d):
                continue
            if bn.running_mean is None or bn.running_var is None or conv.out_channels != bn.num_features:
                continue
            weight, bias = fuse_conv_bn_weights(conv.weight, conv.bias, bn.running_mean, bn.running_var, bn.eps,
                                                bn.weight, bn.bias)
            conv.weight = nn.Parameter(weight.detach(), requires_grad=False)
            conv.bias = nn.Parameter(bias.detach(), requires_grad=False)
            if hasattr(bn, "act") and hasattr(bn, "drop"):
                setattr(module, bn_name, _DropAct(bn.drop, bn.act))
            else:
                setattr(module, bn_name, nn.Identity())
            folded += 1
    return folded


# --------------------------------------------------------------------------- weights on disk
