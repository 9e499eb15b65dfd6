"""The YOLOv5 network MegaDetector v5 is (YOLOv5x6: P3-P6 heads, 1280 px), built from its model config in plain
torch, and a loader for YOLOv5 training checkpoints (how ``md_v5a.0.0.pt`` / ``md_v5b.0.0.pt`` are stored).

The packages that ship it cannot be installed offline or clash with Rosette's; the modules below mirror YOLOv5's
with the same state-dict names, so weights load with ``strict=True``. :func:`load_checkpoint` unpickles through an
allow-list, so nothing from the file is executed and a file that is not this architecture is refused by name.
Which packages and why, and how the loader works: docs/detectors.md.

Imported only when a detector runs (it imports torch)."""

from __future__ import annotations

import _compat_pickle
import math
import pickle
import re
import types
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import torch
from torch import nn

#: YOLOv5 sets every BatchNorm2d to this eps (``initialize_weights``); it is not in the state dict.
BN_EPS = 1e-3
BN_MOMENTUM = 0.03

#: MegaDetector v5's network: YOLOv5x6 (``models/hub/yolov5x6.yaml``, YOLOv5 v6.x) with 3 classes (animal, person,
#: vehicle). A checkpoint carries its own copy of this config; this one builds the network from scratch (tests,
#: or a smaller width / depth multiple of the same layout).
MDV5_CONFIG: dict[str, Any] = {
    "nc": 3,
    "depth_multiple": 1.33,
    "width_multiple": 1.25,
    "anchors": [
        [19, 27, 44, 40, 38, 94],  # P3/8
        [96, 68, 86, 152, 180, 137],  # P4/16
        [140, 301, 303, 264, 238, 542],  # P5/32
        [436, 615, 739, 380, 925, 792],  # P6/64
    ],
    "backbone": [
        [-1, 1, "Conv", [64, 6, 2, 2]],  # 0-P1/2
        [-1, 1, "Conv", [128, 3, 2]],  # 1-P2/4
        [-1, 3, "C3", [128]],
        [-1, 1, "Conv", [256, 3, 2]],  # 3-P3/8
        [-1, 6, "C3", [256]],
        [-1, 1, "Conv", [512, 3, 2]],  # 5-P4/16
        [-1, 9, "C3", [512]],
        [-1, 1, "Conv", [768, 3, 2]],  # 7-P5/32
        [-1, 3, "C3", [768]],
        [-1, 1, "Conv", [1024, 3, 2]],  # 9-P6/64
        [-1, 3, "C3", [1024]],
        [-1, 1, "SPPF", [1024, 5]],  # 11
    ],
    "head": [
        [-1, 1, "Conv", [768, 1, 1]],
        [-1, 1, "nn.Upsample", [None, 2, "nearest"]],
        [[-1, 8], 1, "Concat", [1]],  # cat backbone P5
        [-1, 3, "C3", [768, False]],  # 15
        [-1, 1, "Conv", [512, 1, 1]],
        [-1, 1, "nn.Upsample", [None, 2, "nearest"]],
        [[-1, 6], 1, "Concat", [1]],  # cat backbone P4
        [-1, 3, "C3", [512, False]],  # 19
        [-1, 1, "Conv", [256, 1, 1]],
        [-1, 1, "nn.Upsample", [None, 2, "nearest"]],
        [[-1, 4], 1, "Concat", [1]],  # cat backbone P3
        [-1, 3, "C3", [256, False]],  # 23 (P3/8-small)
        [-1, 1, "Conv", [256, 3, 2]],
        [[-1, 20], 1, "Concat", [1]],  # cat head P4
        [-1, 3, "C3", [512, False]],  # 26 (P4/16-medium)
        [-1, 1, "Conv", [512, 3, 2]],
        [[-1, 16], 1, "Concat", [1]],  # cat head P5
        [-1, 3, "C3", [768, False]],  # 29 (P5/32-large)
        [-1, 1, "Conv", [768, 3, 2]],
        [[-1, 12], 1, "Concat", [1]],  # cat head P6
        [-1, 3, "C3", [1024, False]],  # 32 (P6/64-xlarge)
        [[23, 26, 29, 32], 1, "Detect", ["nc", "anchors"]],  # Detect(P3, P4, P5, P6)
    ],
}


class CheckpointError(ValueError):
    """A weights file that is not a YOLOv5 detector Rosette can rebuild; the message names the file and why."""


# --------------------------------------------------------------------------- modules (YOLOv5's names and layout)


def _autopad(k: int | Sequence[int], p: int | Sequence[int] | None = None, d: int = 1) -> Any:
    if d > 1:
        k = d * (k - 1) + 1 if isinstance(k, int) else [d * (x - 1) + 1 for x in k]
    if p is None:
        p = k // 2 if isinstance(k, int) else [x // 2 for x in k]
    return p


def _activation(spec: str | None) -> nn.Module:
    """YOLOv5's ``activation:`` config key (SiLU when absent), from a short allow-list instead of ``eval``."""
    if not spec:
        return nn.SiLU()
    m = re.fullmatch(r"\s*(?:nn\.)?(\w+)\((.*)\)\s*", str(spec))
    if m is None:
        raise CheckpointError(f"unsupported activation {spec!r} in the model config")
    name, arg = m.group(1), m.group(2).strip()
    if name == "SiLU":
        return nn.SiLU()
    if name == "ReLU":
        return nn.ReLU()
    if name == "Hardswish":
        return nn.Hardswish()
    if name == "LeakyReLU":
        return nn.LeakyReLU(float(arg) if arg else 0.01)
    raise CheckpointError(f"unsupported activation {spec!r} in the model config")


class Conv(nn.Module):
    """Conv2d (no bias) + BatchNorm2d + activation; after :meth:`YOLOv5.fuse` the BN is folded into the conv."""

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, p: int | None = None, g: int = 1, d: int = 1,
                 act: bool | nn.Module = True, *, default_act: str | None = None) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, _autopad(k, p, d), groups=g, dilation=d, bias=False)
        self.bn: nn.Module = nn.BatchNorm2d(c2, eps=BN_EPS, momentum=BN_MOMENTUM)
        if act is True:
            self.act: nn.Module = _activation(default_act)
        else:
            self.act = act if isinstance(act, nn.Module) else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c1: int, c2: int, shortcut: bool = True, g: int = 1, e: float = 0.5, *,
                 default_act: str | None = None) -> None:
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1, 1, default_act=default_act)
        self.cv2 = Conv(c_, c2, 3, 1, g=g, default_act=default_act)
        self.add = bool(shortcut) and c1 == c2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    """CSP bottleneck with 3 convolutions."""

    def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = True, g: int = 1, e: float = 0.5, *,
                 default_act: str | None = None) -> None:
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, 1, 1, default_act=default_act)
        self.cv2 = Conv(c1, c_, 1, 1, default_act=default_act)
        self.cv3 = Conv(2 * c_, c2, 1, default_act=default_act)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut, g, e=1.0, default_act=default_act) for _ in range(n)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: one 5x5 max-pool applied three times (= SPP with 5, 9, 13)."""

    def __init__(self, c1: int, c2: int, k: int = 5, *, default_act: str | None = None) -> None:
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1, 1, default_act=default_act)
        self.cv2 = Conv(c_ * 4, c2, 1, 1, default_act=default_act)
        self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class SPP(nn.Module):
    def __init__(self, c1: int, c2: int, k: Sequence[int] = (5, 9, 13), *, default_act: str | None = None) -> None:
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1, 1, default_act=default_act)
        self.cv2 = Conv(c_ * (len(k) + 1), c2, 1, 1, default_act=default_act)
        self.m = nn.ModuleList([nn.MaxPool2d(kernel_size=x, stride=1, padding=x // 2) for x in k])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        return self.cv2(torch.cat([x] + [m(x) for m in self.m], 1))


class Focus(nn.Module):
    """Space-to-depth then Conv (the first layer of YOLOv5 before v6.0)."""

    def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, p: int | None = None, g: int = 1,
                 act: bool | nn.Module = True, *, default_act: str | None = None) -> None:
        super().__init__()
        self.conv = Conv(c1 * 4, c2, k, s, p, g, act=act, default_act=default_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat((x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]), 1))


class Concat(nn.Module):
    def __init__(self, dimension: int = 1) -> None:
        super().__init__()
        self.d = int(dimension)

    def forward(self, x: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(x, self.d)


class Detect(nn.Module):
    """YOLOv5's anchor-based head (inference only): per level a 1x1 conv to ``na * (5 + nc)`` channels, decoded to
    (cx, cy, w, h) in input pixels, objectness and per-class scores, all after a sigmoid.

    ``anchors`` (a buffer, in the state dict) is in grid units of each level, as YOLOv5 stores it (autoanchor may
    have changed it during training, so the checkpoint's value is the one that counts); ``stride`` (pixels per
    cell of each level) is not in the state dict and comes from the config.
    """

    def __init__(self, nc: int, anchors: Sequence[Sequence[float]], ch: Sequence[int],
                 strides: Sequence[float]) -> None:
        super().__init__()
        self.nc = int(nc)
        self.no = self.nc + 5
        self.nl = len(anchors)
        self.na = len(anchors[0]) // 2
        stride = torch.tensor([float(s) for s in strides])
        self.register_buffer("stride", stride, persistent=False)
        a = torch.tensor(anchors, dtype=torch.float32).view(self.nl, -1, 2) / stride.view(-1, 1, 1)
        self.register_buffer("anchors", a)
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in ch)
        self._grids: dict[tuple[int, int, int, torch.device, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}

    def _grid(self, nx: int, ny: int, i: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        key = (i, ny, nx, like.device, like.dtype)
        if key not in self._grids:
            y = torch.arange(ny, device=like.device, dtype=like.dtype)
            x = torch.arange(nx, device=like.device, dtype=like.dtype)
            yv, xv = torch.meshgrid(y, x, indexing="ij")
            shape = (1, self.na, ny, nx, 2)
            grid = torch.stack((xv, yv), 2).expand(shape) - 0.5  # y = 2x - 0.5 + cell
            anchor_grid = (self.anchors[i] * self.stride[i]).to(like.dtype).view(1, self.na, 1, 1, 2).expand(shape)
            self._grids[key] = (grid, anchor_grid)
        return self._grids[key]

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        z = []
        for i in range(self.nl):
            x = self.m[i](xs[i])
            bs, _, ny, nx = x.shape
            x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous().sigmoid()
            grid, anchor_grid = self._grid(nx, ny, i, x)
            xy = (x[..., 0:2] * 2 + grid) * self.stride[i]
            wh = (x[..., 2:4] * 2) ** 2 * anchor_grid
            z.append(torch.cat((xy, wh, x[..., 4:]), 4).view(bs, -1, self.no))
        return torch.cat(z, 1)  # (batch, anchors, 5 + nc): cx, cy, w, h, objectness, class scores


_MODULES = {"Conv": Conv, "Bottleneck": Bottleneck, "C3": C3, "SPPF": SPPF, "SPP": SPP, "Focus": Focus}


def _make_divisible(x: float, divisor: int = 8) -> int:
    return int(math.ceil(x / divisor) * divisor)


class YOLOv5(nn.Module):
    """A YOLOv5 detection network from its config dict (the ``models/*.yaml`` layout): ``model`` is the layer
    Sequential (state-dict keys ``model.<i>.…`` as in YOLOv5), each layer knows where its input comes from (``f``)."""

    def __init__(self, cfg: Mapping[str, Any], ch: int = 3) -> None:
        super().__init__()
        self.cfg = _plain_config(cfg)
        self.model, self.save = _build(self.cfg, ch)
        detect = self.model[-1]
        if not isinstance(detect, Detect):
            raise CheckpointError("the model config does not end in a Detect head")
        self.nc = detect.nc
        self.fused = False

    @property
    def stride(self) -> torch.Tensor:
        """Pixels per output cell of each head level (8, 16, 32, 64 for a P6 network)."""
        return self.model[-1].stride

    @property
    def max_stride(self) -> int:
        return int(self.stride.max())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs: list[torch.Tensor | None] = []
        for m in self.model:
            if m.f != -1:
                x = outputs[m.f] if isinstance(m.f, int) else [x if j == -1 else outputs[j] for j in m.f]
            x = m(x)
            outputs.append(x if m.i in self.save else None)
        return x

    def fuse(self) -> YOLOv5:
        """Fold every Conv's BatchNorm into its convolution (inference only; same outputs, fewer ops)."""
        from torch.nn.utils.fusion import fuse_conv_bn_eval

        if self.fused:
            return self
        self.eval()
        for m in self.modules():
            if isinstance(m, Conv) and isinstance(m.bn, nn.BatchNorm2d):
                m.conv = fuse_conv_bn_eval(m.conv, m.bn)
                m.bn = nn.Identity()
        self.fused = True
        return self


def _plain_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a YOLOv5 config holding only dicts, lists and scalars (a pickled one may carry stand-ins)."""

    def plain(v: Any) -> Any:
        if isinstance(v, Mapping):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        raise CheckpointError(f"the model config holds a {type(v).__name__}, not a plain value")

    try:
        out = plain(cfg)
    except RecursionError:
        raise CheckpointError("the model config is not a plain dict") from None
    for key in ("nc", "depth_multiple", "width_multiple", "anchors", "backbone", "head"):
        if key not in out:
            raise CheckpointError(f"the model config has no {key!r}")
    return out


def _build(cfg: dict[str, Any], ch_in: int) -> tuple[nn.Sequential, list[int]]:
    """YOLOv5's ``parse_model``: layers from [from, number, module, args] rows, widths and depths scaled by the
    multiples; also tracks each layer's stride (pixels per output cell) so the head knows its strides."""
    nc, gd, gw = int(cfg["nc"]), float(cfg["depth_multiple"]), float(cfg["width_multiple"])
    anchors = cfg["anchors"]
    act = cfg.get("activation")
    na = len(anchors[0]) // 2 if isinstance(anchors, list) else int(anchors)
    no = na * (nc + 5)
    names = {"nc": nc, "anchors": anchors, "None": None, "True": True, "False": False}

    layers: list[nn.Module] = []
    save: list[int] = []
    chs: list[int] = []
    strides: list[float] = []
    for i, row in enumerate(list(cfg["backbone"]) + list(cfg["head"])):
        f, n, mname, args = row
        args = [names.get(a, a) if isinstance(a, str) else a for a in args]
        kind = mname[3:] if isinstance(mname, str) and mname.startswith("nn.") else mname

        def src(j: int) -> tuple[int, float]:
            if not chs:  # the first layer reads the image
                return ch_in, 1.0
            return chs[j], strides[j]

        c1, s1 = src(f if isinstance(f, int) else f[0])
        n = max(round(n * gd), 1) if n > 1 else n
        if kind in _MODULES:
            c2 = args[0]
            if c2 != no:
                c2 = _make_divisible(c2 * gw, 8)
            args = [c1, c2, *args[1:]]
            if kind == "C3":
                args.insert(2, n)
                n = 1
            stride = s1
            if kind == "Conv":
                stride = s1 * (args[3] if len(args) > 3 else 1)
            elif kind == "Focus":
                stride = s1 * 2 * (args[3] if len(args) > 3 else 1)
            cls = _MODULES[kind]
            layer = nn.Sequential(*(cls(*args, default_act=act) for _ in range(n))) if n > 1 else \
                cls(*args, default_act=act)
        elif kind == "Upsample":
            size, scale, mode = (list(args) + [None, None, "nearest"])[:3]
            if size is not None or not scale:
                raise CheckpointError(f"layer {i}: only nn.Upsample(None, scale, mode) is supported, got {args}")
            c2, stride = c1, s1 / float(scale)
            layer = nn.Upsample(None, scale, mode)
        elif kind == "Concat":
            c2 = sum(src(j)[0] for j in f)
            stride = s1
            layer = Concat(*args[:1])
        elif kind == "Detect":
            det_nc, det_anchors = args[0], args[1]
            if isinstance(det_anchors, int):
                raise CheckpointError(f"layer {i}: Detect needs explicit anchors, got a count ({det_anchors})")
            ins = [src(j) for j in f]
            c2, stride = no, s1
            layer = Detect(det_nc, det_anchors, [c for c, _ in ins], [s for _, s in ins])
        else:
            raise CheckpointError(f"layer {i}: module {mname!r} is not part of the YOLOv5 detectors Rosette builds")
        layer.i, layer.f = i, f
        save.extend(x % i for x in ([f] if isinstance(f, int) else f) if x != -1)
        layers.append(layer)
        chs.append(int(c2))
        strides.append(float(stride))
    return nn.Sequential(*layers), sorted(set(save))


# --------------------------------------------------------------------------- safe checkpoint loading

#: Globals a YOLOv5 checkpoint is rebuilt with for real: tensor / parameter rebuilders and plain containers.
_ALLOWED_GLOBALS = {
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_tensor"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch._utils", "_rebuild_parameter_with_state"),
    ("torch._tensor", "_rebuild_from_type_v2"),
    ("torch", "Size"),
    ("torch", "device"),
    ("torch._tensor", "Tensor"),
    ("torch", "Tensor"),
    ("torch.nn.parameter", "Parameter"),
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "slice"),
    ("builtins", "complex"),
}


class _StandIn(nn.Module):
    """What an unknown pickled global becomes: constructing or calling it does nothing, and the state pickled
    with it is kept (as attributes when it is a dict), so a stand-in YOLOv5 layer still holds its submodules,
    parameters and buffers and ``state_dict()`` walks it like the original."""

    _pickled_name = "?"

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:  # pickle passes the original's arguments: ignored
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and (state[0] is None or isinstance(state[0], dict)):
            state = {**(state[0] or {}), **(state[1] or {})}  # (dict, slots)
        if isinstance(state, dict):
            nn.Module.__setstate__(self, dict(state))
        else:
            nn.Module.__init__(self)
            self.__dict__["_pickled_state"] = state

    def __repr__(self) -> str:
        return f"<stand-in for {self._pickled_name}>"


def _stand_in(module: str, name: str) -> type:
    return type(name if name.isidentifier() else "StandIn", (_StandIn,), {"_pickled_name": f"{module}.{name}"})


def _resolve_global(module: str, name: str, stand_ins: dict[str, type]) -> Any:
    if (module, name) in _ALLOWED_GLOBALS:
        obj = __import__(module, fromlist=[name])
        return getattr(obj, name)
    if module.startswith("torch.nn.modules.") and "." not in name:
        try:
            obj = getattr(__import__(module, fromlist=[name]), name, None)
        except ImportError:
            obj = None
        if isinstance(obj, type) and issubclass(obj, nn.Module):
            return obj
    if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
        return getattr(torch, name)
    key = f"{module}.{name}"
    if key not in stand_ins:
        stand_ins[key] = _stand_in(module, name)
    return stand_ins[key]


def _pickle_module(stand_ins: dict[str, type]) -> types.ModuleType:
    """A ``pickle``-like module for ``torch.load(pickle_module=...)`` whose Unpickler resolves globals through the
    allow-list above (torch resolves storage types itself before asking it)."""

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            # torch pickles with protocol 2, which writes Python 2 names (``__builtin__.set``); pickle's own
            # find_class maps them back, so this one must too
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            elif module in _compat_pickle.IMPORT_MAPPING:
                module = _compat_pickle.IMPORT_MAPPING[module]
            return _resolve_global(module, name, stand_ins)

    mod = types.ModuleType("rosette_yolov5_unpickle")
    mod.Unpickler = Unpickler  # type: ignore[attr-defined]
    mod.load = pickle.load  # type: ignore[attr-defined]  (torch only uses Unpickler for zip checkpoints)
    mod.__dict__["loads"] = pickle.loads
    return mod


def _state_tensors(obj: nn.Module) -> OrderedDict[str, torch.Tensor]:
    try:
        return obj.state_dict()
    except Exception as exc:  # noqa: BLE001  (a stand-in tree missing nn.Module internals)
        raise CheckpointError(f"its model could not be read ({type(exc).__name__}: {exc})") from None


def load_checkpoint(path: str | Path, *, map_location: str | torch.device = "cpu") -> tuple[YOLOv5, dict[str, Any]]:
    """Rebuild the YOLOv5 network stored in a training checkpoint ``path`` (``{'model': <pickled model>, ...}``,
    the EMA model when present) and return (network in eval mode, float32, BN not yet fused; info dict with the
    ``names`` list, ``nc``, config and which pickled globals were replaced by stand-ins)."""
    path = Path(path)
    stand_ins: dict[str, type] = {}
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=False, pickle_module=_pickle_module(stand_ins))
    except Exception as exc:  # noqa: BLE001  (corrupt file, not a torch zip, unsupported pickle)
        raise CheckpointError(f"{path.name}: not a readable PyTorch checkpoint ({type(exc).__name__}: {exc})") from None
    source = None
    if isinstance(ckpt, Mapping):
        source = ckpt.get("ema") if isinstance(ckpt.get("ema"), nn.Module) else ckpt.get("model")
    elif isinstance(ckpt, nn.Module):
        source = ckpt
    if not isinstance(source, nn.Module):
        raise CheckpointError(f"{path.name}: no pickled model under 'model' (is this a YOLOv5 checkpoint?)")
    cfg = getattr(source, "yaml", None)
    if not isinstance(cfg, Mapping):
        raise CheckpointError(f"{path.name}: the pickled model carries no YOLOv5 config ('yaml' attribute)")
    try:
        net = YOLOv5(cfg)
    except CheckpointError as exc:
        raise CheckpointError(f"{path.name}: {exc}") from None
    except Exception as exc:  # noqa: BLE001  (a config this builder does not understand)
        raise CheckpointError(f"{path.name}: its model config could not be built "
                              f"({type(exc).__name__}: {exc})") from None
    state = _state_tensors(source)
    state = OrderedDict((k, v) for k, v in state.items() if not k.endswith(".anchor_grid"))  # YOLOv5 < 6 kept it
    if not any(k.endswith(".bn.running_mean") for k in state):  # saved after fusing: convs carry the BN
        net.fuse()
    try:
        net.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()}, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise CheckpointError(f"{path.name}: its weights do not fit the network its config describes "
                              f"({' '.join(first[:3])[:400]})") from None
    # BN eps / momentum are attributes, not state: take the checkpoint's own where it has them
    source_bns = {n: m for n, m in source.named_modules() if n.endswith(".bn")}
    for n, m in net.named_modules():
        if isinstance(m, nn.BatchNorm2d) and n in source_bns:
            eps = getattr(source_bns[n], "eps", None)
            if isinstance(eps, float) and 0 < eps < 1:
                m.eps = eps
    names = getattr(source, "names", None)
    if isinstance(names, Mapping):
        names = [names[k] for k in sorted(names)]
    info = {
        "nc": net.nc,
        "names": [str(x) for x in names] if isinstance(names, (list, tuple)) else None,
        "config": net.cfg,
        "stand_ins": sorted(stand_ins),
    }
    return net.float().eval(), info
