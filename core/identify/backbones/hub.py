"""Hub backbones: MegaDescriptor, MiewID, DINOv2 and any timm-format ``hf-hub:<owner>/<repo>``.

Weights are read only from this machine: ``weights_path=``, then ``$ROSETTE_WEIGHTS_DIR/<owner>/<repo>/``, then
the Hugging Face cache (a file lookup, no network). Nothing is downloaded here, whatever ``HF_HUB_OFFLINE`` says;
missing files raise :class:`~core.identify.backbones.WeightsNotFoundError` naming the repo, the files and where
to put them. The architecture is built by timm with random weights and the checkpoint loaded with
``strict=True`` (only known classifier heads are dropped, and named in the config).

The lookup order, each entry's architecture and preprocessing, and DINOv2's and MiewID's details:
docs/backbones.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.identify.backbones.config import BackboneConfig, WeightsNotFoundError
from core.identify.backbones.torch_base import TorchBackbone, fold_batchnorm_
from core.identify.backbones.weights import find_local_config, find_local_file, sha256_file, weights_help
from core.registry import UnknownComponentError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin")


@dataclass(frozen=True)
class HubSpec:
    """One hub entry: where its weights live and how its inputs are prepared."""

    repo_id: str
    kind: str  # "timm" (a timm architecture, weights in timm layout) or "miewid"
    architecture: str
    input_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str
    pooling: str
    files: tuple[str, ...] = WEIGHT_FILES


HUB_MODELS: dict[str, HubSpec] = {
    "megadescriptor-t-224": HubSpec("BVRA/MegaDescriptor-T-224", "timm", "swin_tiny_patch4_window7_224", 224,
                                    (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), "bilinear", "avg"),
    "megadescriptor-l-384": HubSpec("BVRA/MegaDescriptor-L-384", "timm", "swin_large_patch4_window12_384", 384,
                                    (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), "bilinear", "avg"),
    "miewid-msv3": HubSpec("conservationxlabs/miewid-msv3", "miewid", "efficientnetv2_rw_m", 440,
                           IMAGENET_MEAN, IMAGENET_STD, "bilinear", "gem(p=3,learned)+bn1d"),
    "dinov2-vits14": HubSpec("timm/vit_small_patch14_dinov2.lvd142m", "timm", "vit_small_patch14_dinov2.lvd142m",
                             224, IMAGENET_MEAN, IMAGENET_STD, "bicubic", "token"),
    "dinov2-vitb14": HubSpec("timm/vit_base_patch14_dinov2.lvd142m", "timm", "vit_base_patch14_dinov2.lvd142m",
                             224, IMAGENET_MEAN, IMAGENET_STD, "bicubic", "token"),
    "dinov2-vitl14": HubSpec("timm/vit_large_patch14_dinov2.lvd142m", "timm", "vit_large_patch14_dinov2.lvd142m",
                             224, IMAGENET_MEAN, IMAGENET_STD, "bicubic", "token"),
}


def _missing_weights(name: str, spec: HubSpec) -> WeightsNotFoundError:
    msg = weights_help(name, repo_id=spec.repo_id, files=[f for f in spec.files if f != "open_clip_pytorch_model.bin"],
                       env_dirs=[])
    return WeightsNotFoundError(msg)


def load_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    """A weight file (.safetensors or torch pickle, weights only) -> flat state dict."""
    from timm.models import load_state_dict

    state = load_state_dict(str(path), weights_only=True)
    if not isinstance(state, dict) or not state:
        raise ValueError(f"{path} holds no state dict")
    return dict(state)


def _strip_prefix(state: dict[str, torch.Tensor], prefixes: Sequence[str]) -> dict[str, torch.Tensor]:
    for prefix in prefixes:
        if state and all(k.startswith(prefix) for k in state):
            state = {k[len(prefix):]: v for k, v in state.items()}
    return state


# --------------------------------------------------------------------------- MiewID

class GeM(nn.Module):
    """Generalised mean pooling: (mean over H,W of clamp(x, eps)^p)^(1/p), p learned (init 3)."""

    def __init__(self, p: float = 3.0, eps: float = 1e-6) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.ones(1) * p)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x.clamp(min=self.eps).pow(self.p), (x.size(-2), x.size(-1))).pow(1.0 / self.p)


class MiewIdNet(nn.Module):
    """MiewID embedding network: timm backbone features -> GeM -> BatchNorm1d (2152-d for EfficientNetV2-M)."""

    def __init__(self, architecture: str = "efficientnetv2_rw_m") -> None:
        import timm

        super().__init__()
        self.backbone = timm.create_model(architecture, pretrained=False, num_classes=0, global_pool="")
        self.pooling = GeM()
        self.bn = nn.BatchNorm1d(self.backbone.num_features)
        self.num_features = self.backbone.num_features

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone.forward_features(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.backbone.forward_features(x)
        return self.bn(self.pooling(feats).flatten(1))


#: tensors of MiewID checkpoints that belong to the training head, not to the embedding
_MIEWID_HEAD_PREFIXES = ("final.", "fc.", "head.", "arcface.", "loss_module.", "backbone.classifier.", "dropout.")


def _load_miewid_state(model: MiewIdNet, state: dict[str, torch.Tensor]) -> list[str]:
    state = _strip_prefix(state, ("module.", "model.", "miewid."))
    dropped = sorted(k for k in state if k.startswith(_MIEWID_HEAD_PREFIXES))
    state = {k: v for k, v in state.items() if k not in set(dropped)}
    model.load_state_dict(state, strict=True)
    return dropped


# --------------------------------------------------------------------------- builders

def build_hub_model(name: str, *, image_size: int | None = None, seed: int = 0,
                    state_dict: dict[str, torch.Tensor] | None = None) -> tuple[nn.Module, list[str]]:
    """The raw ``nn.Module`` of a hub entry (random weights drawn with ``seed`` unless ``state_dict`` is
    given, which is then loaded strictly). Returns (model, dropped head tensor names)."""
    import timm

    spec = _spec(name)
    size = int(image_size or spec.input_size)
    dropped: list[str] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if spec.kind == "miewid":
            model: nn.Module = MiewIdNet(spec.architecture)
            if state_dict is not None:
                dropped = _load_miewid_state(model, state_dict)
        else:
            kwargs: dict[str, Any] = {"num_classes": 0}
            if size != _native_size(spec):
                kwargs["img_size"] = size
            if state_dict is None:
                model = timm.create_model(spec.architecture, pretrained=False, **kwargs)
            else:
                state = _strip_prefix(dict(state_dict), ("module.",))
                head = [k for k in state if k.startswith(("head.fc.", "fc.", "classifier."))]
                dropped = sorted(head)
                state = {k: v for k, v in state.items() if k not in set(head)}
                # timm applies the architecture's checkpoint filter (old Swin layouts, ViT pos-embed
                # resampling for another image size) and loads strictly (num_classes matches: 0)
                model = timm.create_model(spec.architecture, pretrained=True, **kwargs,
                                          pretrained_cfg_overlay={"state_dict": state, "num_classes": 0,
                                                                  "file": None, "url": None, "hf_hub_id": None,
                                                                  "source": ""})
    return model.eval(), dropped


def _native_size(spec: HubSpec) -> int:
    """Input size the timm architecture is defined at (img_size is only passed when it differs)."""
    if spec.kind != "timm":
        return spec.input_size
    import timm

    cfg = timm.models.get_pretrained_cfg(spec.architecture)
    return int(cfg.input_size[-1]) if cfg is not None else spec.input_size


def _spec(name: str) -> HubSpec:
    try:
        return HUB_MODELS[name]
    except KeyError:
        raise UnknownComponentError(f"unknown hub backbone {name!r}; available: {', '.join(sorted(HUB_MODELS))}")


def create_hub_backbone(name: str, *, pretrained: bool = True, device: str | None = None,
                        weights_path: str | None = None, image_size: int | None = None, batch_size: int = 16,
                        seed: int = 0, resize: str = "stretch", mean: Sequence[float] | None = None,
                        std: Sequence[float] | None = None) -> TorchBackbone:
    """Build a named hub entry (see the module table). ``pretrained=False`` gives seeded random weights
    (tests); ``image_size`` overrides the input size (part of the config, so of the fingerprint)."""
    spec = _spec(name)
    size = int(image_size or spec.input_size)
    extra: dict[str, Any] = {"repo_id": spec.repo_id}
    if pretrained:
        path = find_local_file(spec.repo_id, spec.files, weights_path=weights_path)
        if path is None:
            raise _missing_weights(name, spec)
        state = load_checkpoint(path)
        try:
            model, dropped = build_hub_model(name, image_size=size, state_dict=state)
        except RuntimeError as exc:
            raise RuntimeError(f"{name}: the weights in {path} do not fit {spec.architecture}: {exc}") from exc
        if dropped:
            extra["dropped_head_tensors"] = dropped[:20]
        weight_source = f"hf-hub:{spec.repo_id} ({path.name}, local)"
        sha = sha256_file(path)
    else:
        model, _ = build_hub_model(name, image_size=size, seed=seed)
        weight_source, sha = "random-init", None
        extra["seed"] = seed
    if spec.kind == "miewid":
        fold_batchnorm_(model.backbone)
    import timm

    extra["timm_version"] = timm.__version__
    config = BackboneConfig(
        name=name, architecture=spec.architecture, input_size=(size, size),
        mean=tuple(mean) if mean is not None else spec.mean, std=tuple(std) if std is not None else spec.std,
        interpolation=spec.interpolation, pooling=spec.pooling, embed_dim=int(model.num_features),
        weight_source=weight_source, weights_sha256=sha, supports_tokens=True, resize=resize, extra=extra,
    )
    return TorchBackbone(model, config, device=device, batch_size=batch_size)


def create_hf_hub_backbone(repo_id: str, *, pretrained: bool = True, device: str | None = None,
                           weights_path: str | None = None, image_size: int | None = None,
                           batch_size: int = 16, resize: str = "stretch", seed: int = 0) -> TorchBackbone:
    """``hf-hub:<owner>/<repo>``: a timm-format repo (``config.json`` + weights) read from local files.

    Known repos (MegaDescriptor, MiewID, DINOv2) are routed to their named entry, keeping the
    registry name ``hf-hub:<repo>``. Otherwise the local ``config.json`` gives the architecture
    and preprocessing (needed even for ``pretrained=False``).
    """
    import timm

    for entry, spec in HUB_MODELS.items():
        if spec.repo_id.lower() == repo_id.lower():
            b = create_hub_backbone(entry, pretrained=pretrained, device=device, weights_path=weights_path,
                                    image_size=image_size, batch_size=batch_size, resize=resize, seed=seed)
            b.config = b.config.with_updates(name=f"hf-hub:{repo_id}")
            return b
    cfg = find_local_config(repo_id, weights_path=weights_path)
    if cfg is None or "architecture" not in cfg:
        raise WeightsNotFoundError(weights_help(f"hf-hub:{repo_id}", repo_id=repo_id,
                                                files=["config.json", "model.safetensors"], env_dirs=[]))
    pcfg = dict(cfg.get("pretrained_cfg") or {})
    architecture = cfg["architecture"]
    num_classes = int(cfg.get("num_classes", pcfg.get("num_classes", 0)) or 0)
    size = int(image_size or (pcfg.get("input_size") or [3, 224, 224])[-1])
    kwargs: dict[str, Any] = dict(cfg.get("model_args") or {})
    if image_size is not None:
        kwargs["img_size"] = size
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if pretrained:
            path = find_local_file(repo_id, WEIGHT_FILES, weights_path=weights_path)
            if path is None:
                raise WeightsNotFoundError(weights_help(f"hf-hub:{repo_id}", repo_id=repo_id,
                                                        files=["config.json", "model.safetensors"], env_dirs=[]))
            state = load_checkpoint(path)
            model = timm.create_model(architecture, pretrained=True, num_classes=num_classes, **kwargs,
                                      pretrained_cfg_overlay={"state_dict": state, "num_classes": num_classes,
                                                              "file": None, "url": None, "hf_hub_id": None,
                                                              "source": ""})
            weight_source, sha = f"hf-hub:{repo_id} ({path.name}, local)", sha256_file(path)
        else:
            model = timm.create_model(architecture, pretrained=False, num_classes=num_classes, **kwargs)
            weight_source, sha = "random-init", None
    model.reset_classifier(0)
    fold_batchnorm_(model.eval())
    config = BackboneConfig(
        name=f"hf-hub:{repo_id}", architecture=architecture, input_size=(size, size),
        mean=tuple(pcfg.get("mean", IMAGENET_MEAN)), std=tuple(pcfg.get("std", IMAGENET_STD)),
        interpolation=pcfg.get("interpolation", "bicubic") if pcfg.get("interpolation") in
        ("bilinear", "bicubic", "nearest", "lanczos") else "bicubic",
        pooling=str(cfg.get("global_pool", "avg") or "avg"), embed_dim=int(model.num_features),
        weight_source=weight_source, weights_sha256=sha, supports_tokens=True, resize=resize,
        extra={"repo_id": repo_id, "timm_version": timm.__version__},
    )
    return TorchBackbone(model, config, device=device, batch_size=batch_size)
