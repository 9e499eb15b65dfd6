"""``timm:<architecture>`` backbones (the shared torch wrapper is :mod:`core.identify.backbones.torch_base`).

``timm:<architecture>`` builds any timm model with its own pretrained cfg
(input size, mean/std, interpolation). With ``pretrained=True`` the weights must
already be on this machine -- the Hugging Face cache (``timm/<arch>.<tag>``), the
torch hub cache, ``ROSETTE_WEIGHTS_DIR`` or an explicit ``weights_path`` -- and
nothing is downloaded; otherwise :class:`~core.identify.backbones.WeightsNotFoundError`
says how to provide them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core.identify.backbones.config import BackboneConfig, WeightsNotFoundError
from core.identify.backbones.torch_base import PIL_FILTERS, TorchBackbone, fold_batchnorm_
from core.identify.backbones.weights import find_local_file, sha256_file, weights_help
from core.registry import UnknownComponentError


def _timm_pretrained_cfg(architecture: str) -> dict[str, Any]:
    import timm

    model_name, tag = (architecture.split(".", 1) + [""])[:2]
    if not timm.is_model(model_name):

        close = timm.list_models(f"*{model_name[:6]}*")[:8]
        hint = f" (similar: {', '.join(close)})" if close else ""
        raise UnknownComponentError(f"unknown timm architecture {model_name!r}{hint}")
    cfg = timm.models.get_pretrained_cfg(architecture) or timm.models.get_pretrained_cfg(model_name)
    if cfg is None:
        return {"architecture": model_name}
    return cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)


def find_timm_weights(architecture: str, pretrained_cfg: dict[str, Any], *,
                      weights_path: str | os.PathLike[str] | None = None) -> Path | None:
    """Where the pretrained weights of a timm architecture already are on this machine, or None.

    Looks at ``weights_path``, then ``$ROSETTE_WEIGHTS_DIR/<hf repo>/`` and
    ``$ROSETTE_WEIGHTS_DIR/<architecture>/``, the Hugging Face cache of the cfg's
    ``hf_hub_id`` and the torch hub checkpoint cache of its ``url``. Never downloads.
    """

    hub_id = pretrained_cfg.get("hf_hub_id")
    names = ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin")
    if pretrained_cfg.get("hf_hub_filename"):
        names = (pretrained_cfg["hf_hub_filename"], *names)
    candidates = [architecture, architecture.split(".")[0]]
    found = find_local_file(hub_id, names, weights_path=weights_path, extra_dirs=candidates)
    if found is not None:
        return found
    url = pretrained_cfg.get("url")
    if url:
        hub_dir = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url.split("?")[0])
        if hub_dir.is_file():
            return hub_dir
    return None


def create_timm_backbone(architecture: str, *, pretrained: bool = True, device: str | None = None,
                         weights_path: str | None = None, image_size: int | tuple[int, int] | None = None,
                         resize: str = "stretch", batch_size: int = 32, fuse_bn: bool = True,
                         registry_name: str | None = None, **model_kwargs: Any) -> TorchBackbone:
    """``timm:<architecture>`` (optionally ``<architecture>.<pretrained tag>``) as a frozen, pooled backbone.

    ``image_size`` overrides the cfg input size (models that accept it get
    ``img_size`` at creation). Extra keyword arguments go to ``timm.create_model``.
    """
    import timm

    cfg = _timm_pretrained_cfg(architecture)
    model_name = architecture.split(".", 1)[0]
    num_classes = int(cfg.get("num_classes") or 0)
    kwargs = dict(model_kwargs)
    if image_size is not None:
        size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        if _accepts_img_size(model_name):
            kwargs.setdefault("img_size", size if size[0] != size[1] else size[0])
    else:
        size = tuple(cfg.get("input_size", (3, 224, 224))[-2:])
    if pretrained:
        path = find_timm_weights(architecture, cfg, weights_path=weights_path)
        if path is None:
            raise _missing(architecture, cfg)
        model = timm.create_model(architecture, pretrained=True, num_classes=num_classes,
                                  pretrained_cfg_overlay={"file": str(path), "hf_hub_id": None, "url": None,
                                                          "source": ""}, **kwargs)
        weight_source = f"file:{path}" if weights_path else f"local-cache:{cfg.get('hf_hub_id') or cfg.get('url')}"
        sha = sha256_file(path)
    else:
        model = timm.create_model(architecture, pretrained=False, num_classes=num_classes or 0, **kwargs)
        weight_source, sha = "random-init", None
    if hasattr(model, "reset_classifier"):
        model.reset_classifier(0)
    if fuse_bn:
        fold_batchnorm_(model.eval())
    pooling = _pooling_name(model)
    config = BackboneConfig(
        name=registry_name or f"timm:{architecture}",
        architecture=architecture,
        input_size=size,
        mean=tuple(cfg.get("mean", (0.485, 0.456, 0.406))),
        std=tuple(cfg.get("std", (0.229, 0.224, 0.225))),
        interpolation=_interp(cfg.get("interpolation", "bicubic")),
        pooling=pooling,
        embed_dim=int(model.num_features),
        weight_source=weight_source,
        weights_sha256=sha,
        supports_tokens=hasattr(model, "forward_features"),
        resize=resize,
        extra={"timm_version": timm.__version__, **{k: v for k, v in kwargs.items() if _jsonable(v)}},
    )
    return TorchBackbone(model, config, device=device, batch_size=batch_size)


def _missing(architecture: str, cfg: dict[str, Any]) -> Exception:

    hub_id = cfg.get("hf_hub_id")
    msg = weights_help(f"timm:{architecture}", repo_id=hub_id, files=["model.safetensors"],
                       env_dirs=[architecture.split(".")[0]])
    if cfg.get("url"):
        msg += f"\n  - or place {os.path.basename(cfg['url'])} in {Path(torch.hub.get_dir()) / 'checkpoints'}/"
    if not hub_id and not cfg.get("url"):
        msg = f"timm has no pretrained weights for {architecture!r}; use pretrained=False or weights_path=..."
    return WeightsNotFoundError(msg)


def _accepts_img_size(model_name: str) -> bool:
    return any(k in model_name for k in ("vit", "swin", "deit", "beit", "eva", "dino", "pit", "cait", "xcit"))


def _pooling_name(model: nn.Module) -> str:
    gp = getattr(model, "global_pool", None)
    if isinstance(gp, str):
        return gp or "none"
    pool_type = getattr(gp, "pool_type", None)
    if pool_type is not None:
        return str(pool_type) or "none"
    head = getattr(model, "head", None)
    gp = getattr(head, "global_pool", None)
    pool_type = getattr(gp, "pool_type", None)
    if pool_type is not None:
        return str(pool_type) or "none"
    return "avg"


def _interp(name: str) -> str:
    return name if name in PIL_FILTERS else "bicubic"


def _jsonable(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool)) or (
        isinstance(v, (list, tuple)) and all(isinstance(x, (str, int, float, bool)) for x in v))
