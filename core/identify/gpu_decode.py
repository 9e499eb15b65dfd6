"""Decoding and resizing JPEGs on the backbone's device (nvJPEG on a GPU), with the CPU path as the fallback.

On a GPU the forward pass of the default backbone is some 80x faster than decoding and resizing photos with PIL on
the CPU, so :func:`core.identify.features.extract_features` hands batches of :class:`PhotoFile` loaders to
:func:`prepare_on_device`: the file bytes are read on the CPU, decoded in one batched
``torchvision.io.decode_jpeg(..., device=...)`` call, then resized and normalised on the device with the geometry
of :func:`core.identify.backbones.torch_base.resize_for_config` (same interpolation, PIL's antialiasing, rounding
to 8 bits after each pass as PIL does), so the features equal the CPU path's to within float tolerance.

Anything the device path is not sure to decode exactly like :func:`core.io.images.load_rgb` goes, per photo, to
the CPU path (the loader itself, then ``backbone.prepare``): non-JPEG files, greyscale or CMYK JPEGs, an EXIF
orientation to apply, a file without its end-of-image marker (truncated), a header over the pixel limit, or a
stream the decoder refuses. The CPU path then gives exactly today's result, errors included.

``device="cpu"`` runs the same code through torchvision's CPU decoder: that is how the tests check it."""

from __future__ import annotations

import functools
import importlib.util
import io
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from core.io.images import MAX_PIXELS, load_rgb

if TYPE_CHECKING:  # torch is imported lazily below: importing this module (for PhotoFile) stays cheap
    import torch

__all__ = ["PhotoFile", "device_decode_default", "device_decode_supported", "prepare_on_device"]

#: Interpolations whose PIL filter torch reproduces with ``antialias=True`` (PIL's convolution, a=-0.5 for bicubic).
_TORCH_MODES = {"bilinear": "bilinear", "bicubic": "bicubic"}
_EXIF_ORIENTATION = 0x0112
_JPEG_START, _JPEG_END = b"\xff\xd8", b"\xff\xd9"


class PhotoFile:
    """A loader for :func:`~core.identify.features.extract_features` that names its photo file.

    Calling it is the CPU path, ``load_rgb(path)``; because the file is known, extract_features may instead decode
    and resize it on the backbone's device (a plain ``lambda: load_rgb(path)`` hides the file, so it cannot)."""

    __slots__ = ("path",)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __call__(self) -> np.ndarray:
        return load_rgb(self.path)

    def __repr__(self) -> str:
        return f"PhotoFile({str(self.path)!r})"


@functools.lru_cache(maxsize=1)
def _torchvision_present() -> bool:
    """Whether torchvision is installed (the lent GPU machine may have torch alone), without importing it."""
    return importlib.util.find_spec("torchvision") is not None


def _preprocessor(backbone: Any) -> Any | None:
    """The :class:`TorchBackbone` whose own ``preprocess`` prepares ``backbone``'s batches, else None (a subclass
    with another preprocessing, a non-torch backbone, a resize mode or filter torch does not reproduce)."""
    module = sys.modules.get("core.identify.backbones.torch_base")
    # torch_base never imported: not a TorchBackbone (and torch need not be loaded); no torchvision: no decoder
    if module is None or not _torchvision_present():
        return None
    torch_backbone = module.TorchBackbone
    if not isinstance(backbone, torch_backbone):
        return None
    kind = type(backbone)
    if kind.preprocess is not torch_backbone.preprocess or kind.prepare is not torch_backbone.prepare:
        return None
    config = backbone.config
    if config.resize not in ("stretch", "letterbox") or config.interpolation not in _TORCH_MODES:
        return None
    return backbone


def device_decode_supported(backbone: Any) -> bool:
    """Whether :func:`prepare_on_device` can stand in for ``backbone.prepare`` (a torch backbone resizing with
    stretch/letterbox and a bilinear or bicubic filter, and torchvision installed)."""
    return _preprocessor(backbone) is not None


def device_decode_default(backbone: Any) -> bool:
    """Whether extract_features decodes on the device by default: supported, and the backbone runs on CUDA."""
    device = getattr(backbone, "device", None)
    return getattr(device, "type", None) == "cuda" and device_decode_supported(backbone)


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(H, W) of a JPEG that torchvision decodes exactly as load_rgb would, else None (the CPU path decides).

    Only the header is parsed (PIL reads no pixels here), so the pixel limit is checked before any decoding."""
    if len(data) < 4 or data[:2] != _JPEG_START or data[-2:] != _JPEG_END:  # no end marker: maybe truncated
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
        # greyscale/CMYK/YCCK convert differently; MPO is a JPEG whose first picture both decoders read
        if img.format not in ("JPEG", "MPO") or img.mode != "RGB":
            return None
        w, h = img.size
        if w <= 0 or h <= 0 or w * h > MAX_PIXELS:
            return None
        if img.getexif().get(_EXIF_ORIENTATION, 1) not in (1, None):  # load_rgb turns it upright
            return None
    except Exception:  # noqa: BLE001 - anything odd about the header: the CPU path gives its own answer
        return None
    return h, w


def _read_jpeg(loader: Callable[[], np.ndarray]) -> tuple[bytes, tuple[int, int]] | None:
    if not isinstance(loader, PhotoFile):
        return None
    try:
        data = loader.path.read_bytes()
    except OSError:  # unreadable: the CPU path raises its own error for it
        return None
    size = _jpeg_size(data)
    return (data, size) if size is not None else None


def _decode(blobs: list[bytes], device: torch.device) -> list[torch.Tensor | None]:
    """3 x H x W uint8 tensors on ``device``, one per JPEG, None where the decoder refused one (all None where
    torchvision was built without its image library)."""
    import torch  # lazy: heavy import, only when photos are decoded on a device
    from torchvision.io import ImageReadMode, decode_jpeg

    tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torchvision 0.29 points at TorchCodec; still works
        try:  # one batched call: on CUDA nvJPEG decodes the whole batch at once
            return list(decode_jpeg(tensors, mode=ImageReadMode.RGB, device=device))
        except RuntimeError:
            pass
        out: list[torch.Tensor | None] = []
        for t in tensors:  # one bad stream fails the batched call: find it, keep the others
            try:
                out.append(decode_jpeg(t, mode=ImageReadMode.RGB, device=device))
            except RuntimeError:
                out.append(None)
        return out


def _resize_like_pil(x: torch.Tensor, size: tuple[int, int], mode: str) -> torch.Tensor:
    """N x 3 x h x w float (8-bit values) -> N x 3 x H x W, as PIL's ``Image.resize`` on 8-bit RGB does it:
    the horizontal pass, then the vertical one, each antialiased and rounded/clipped to 8 bits (without the
    rounding between passes bicubic overshoot differs from PIL by up to 4 levels; with it, by at most 1)."""
    from torch.nn import functional as F  # lazy: heavy import

    h, w = x.shape[-2:]
    out_h, out_w = size
    if w != out_w:
        x = F.interpolate(x, size=(h, out_w), mode=mode, align_corners=False, antialias=True).round_().clamp_(0, 255)
    if h != out_h:
        x = F.interpolate(x, size=(out_h, out_w), mode=mode, align_corners=False, antialias=True)
        x = x.round_().clamp_(0, 255)
    return x


def _geometry(h: int, w: int, config: Any) -> tuple[tuple[int, int], tuple[int, int]]:
    """((new_h, new_w), (top, left)) of a photo on the input canvas, as resize_for_config computes them."""
    out_h, out_w = config.input_size
    if config.resize == "stretch":
        return (out_h, out_w), (0, 0)
    scale = min(out_w / w, out_h / h)
    new_w, new_h = max(1, round(w * scale)), max(1, round(h * scale))
    return (new_h, new_w), ((out_h - new_h) // 2, (out_w - new_w) // 2)


def _assemble(decoded: dict[int, torch.Tensor], n: int, config: Any, device: torch.device) -> torch.Tensor:
    """N x 3 x H x W float32 on ``device``: the decoded photos resized onto the input canvas and normalised (rows
    of the others are left for the CPU path to fill)."""
    import torch  # lazy: heavy import

    out_h, out_w = config.input_size
    canvas = torch.empty((n, 3, out_h, out_w), dtype=torch.float32, device=device)
    if not decoded:
        return canvas
    fill = torch.tensor([int(round(m * 255)) for m in config.mean], dtype=torch.float32, device=device)
    groups: dict[tuple[int, int], list[int]] = {}  # photos of one size (usual for one camera): one resize call
    for i, img in decoded.items():
        groups.setdefault((int(img.shape[1]), int(img.shape[2])), []).append(i)
    for (h, w), idx in groups.items():
        (new_h, new_w), (top, left) = _geometry(h, w, config)
        x = _resize_like_pil(torch.stack([decoded[i] for i in idx]).float(), (new_h, new_w),
                             _TORCH_MODES[config.interpolation])
        rows = torch.tensor(idx, device=device)
        if (new_h, new_w) != (out_h, out_w):  # letterbox: the mean colour around the photo
            framed = fill.view(1, 3, 1, 1).expand(len(idx), 3, out_h, out_w).clone()
            framed[:, :, top:top + new_h, left:left + new_w] = x
            x = framed
        canvas[rows] = x
    # x = (p / 255 - mean) / std = p * scale + shift, in the same float32 steps as TorchBackbone.preprocess
    mean = torch.tensor(config.mean, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(config.std, dtype=torch.float32).view(1, 3, 1, 1)
    rows = torch.tensor(sorted(decoded), device=device)
    canvas[rows] = canvas[rows] * (1.0 / (255.0 * std)).to(device) + (-mean / std).to(device)
    return canvas


def prepare_on_device(backbone: Any, loaders: Sequence[Callable[[], np.ndarray]], *,
                      device: str | torch.device | None = None) -> tuple[torch.Tensor, int]:
    """What ``backbone.prepare([loader() for loader in loaders])`` gives (N x 3 x H x W float32, resized and
    normalised), with :class:`PhotoFile` JPEGs decoded and resized on ``device`` (default: the backbone's).

    Returns (batch on ``device``, how many photos the device decoded); the others went through the CPU path, in
    order, and its errors propagate as they would without this function. ValueError for a backbone that
    :func:`device_decode_supported` refuses."""
    import torch  # lazy: heavy import

    pre = _preprocessor(backbone)
    if pre is None:
        raise ValueError(f"{backbone!r} cannot prepare photos on a device (see device_decode_supported)")
    device = torch.device(device) if device is not None else pre.device
    config = pre.config
    n = len(loaders)
    read = [_read_jpeg(loader) for loader in loaders]
    eligible = [i for i, r in enumerate(read) if r is not None]
    decoded: dict[int, torch.Tensor] = {}
    if eligible:
        images = _decode([read[i][0] for i in eligible], device)  # type: ignore[index]
        for i, img in zip(eligible, images):
            # the header's size is what the CPU path would decode; anything else is not trusted
            if img is not None and tuple(img.shape) == (3, *read[i][1]):  # type: ignore[index]
                decoded[i] = img

    with torch.inference_mode():  # as TorchBackbone.prepare: no autograd bookkeeping for a batch of inputs
        canvas = _assemble(decoded, n, config, device)
        fallback = [i for i in range(n) if i not in decoded]
        if fallback:  # the CPU path, exactly as without this function, for the photos the device did not decode
            cpu = backbone.prepare([loaders[i]() for i in fallback])
            canvas[torch.tensor(fallback, device=device)] = cpu.to(device=device, dtype=torch.float32)
        if pre.channels_last:  # the layout TorchBackbone.preprocess hands the forward pass
            canvas = canvas.contiguous(memory_format=torch.channels_last)
    return canvas, len(decoded)
