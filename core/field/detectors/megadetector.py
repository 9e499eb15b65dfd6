"""``megadetector``: MegaDetector v5 (a YOLOv5x6 network, 1280 px) run inside Rosette, when its weights are here.

Weights are looked for, never downloaded, in ``$ROSETTE_WEIGHTS_DIR`` (and its ``megadetector/`` folder);
``weights_path=`` names a file directly. Inference is MegaDetector's "classic" mode, the one MDv5's published
thresholds are for, and its boxes are rounded as in MegaDetector's batch output, so a caller filters them exactly
as it filters a MegaDetector batch JSON. The file names looked for, in order, and each inference step:
docs/detectors.md.

The network is built by :mod:`core.field.detectors.yolov5` (plain torch), imported on first use."""

from __future__ import annotations

import json
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.annotations import DETECTION_CATEGORIES, Box, Detection, InvalidBoxError
from core.identify.backbones.weights import sha256_file
from core.field.detectors.base import WEIGHTS_DIR_ENV, DetectorUnavailableError, weights_dir
from core.inspect.masking.base import as_rgb_uint8

NAME = "megadetector"
#: MegaDetector v5 files, most preferred first (5a and 5b are equally good; 5a is MegaDetector's default).
PREFERRED_WEIGHTS = ("md_v5a.0.0.pt", "md_v5a.0.1.pt", "md_v5b.0.0.pt", "md_v5b.0.1.pt")
#: Long side of the network input (MDv5 was trained at 1280).
DEFAULT_IMAGE_SIZE = 1280
#: MegaDetector's batch output threshold: boxes below it are dropped (the curator-facing cut, 0.2, comes later).
OUTPUT_THRESHOLD = 0.005
NMS_IOU = 0.45
MAX_DETECTIONS = 300
LETTERBOX_FILL = 114
COORD_DIGITS = 4
CONF_DIGITS = 3
SUBFOLDER = "megadetector"


def missing_weights_reason(root: Path | None = None) -> str:
    where = f" ({root})" if root is not None else " (not set)"
    return (f"no MegaDetector weights in ${WEIGHTS_DIR_ENV}{where} (put md_v5a.0.0.pt there; boxes can also come "
            "from a MegaDetector batch JSON: rosette import FOLDER --detections MD.json)")


@dataclass(frozen=True)
class WeightsFile:
    """A MegaDetector weights file found on this machine."""

    path: Path
    version: str  # "v5a.0.0", "v1000.0.0-spruce", "unknown"
    image_size: int


def version_from_filename(name: str) -> str:
    """``md_v5a.0.0.pt`` -> ``v5a.0.0``; ``md_v1000.0.0-redwood.pt`` -> ``v1000.0.0-redwood``; else ``unknown``."""
    stem = Path(name).name
    if stem.lower().startswith("md_v") and stem.lower().endswith(".pt"):
        return stem[3:-3]
    return "unknown"


def read_embedded_metadata(path: str | Path) -> dict[str, Any] | None:
    """The ``megadetector_info.json`` MegaDetector writes inside MDv1000 files (a torch zip), or None. A zip
    listing and one small member read: no unpickling."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            roots = {n.split("/")[0] for n in names}
            if len(roots) != 1:
                return None
            member = f"{next(iter(roots))}/megadetector_info.json"
            if member not in names or zf.getinfo(member).file_size > 1_000_000:
                return None
            data = json.loads(zf.read(member).decode("utf-8"))
    except (OSError, zipfile.BadZipFile, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _describe(path: Path) -> tuple[WeightsFile | None, str | None]:
    """(the file as usable weights, None) or (None, why it cannot be used)."""
    meta = read_embedded_metadata(path) if path.name.lower().startswith("md_v1000") else None
    model_type = str(meta.get("model_type")) if meta and meta.get("model_type") else None
    if model_type is not None and model_type.lower() != "yolov5":
        return None, (f"{path.name} is a {model_type} network; only YOLOv5-based MegaDetector weights (MDv5a/b) "
                      "run here")
    size = DEFAULT_IMAGE_SIZE
    if meta and isinstance(meta.get("image_size"), int) and meta["image_size"] > 0:
        size = int(meta["image_size"])
    version = str(meta.get("model_version_string")) if meta and meta.get("model_version_string") else \
        version_from_filename(path.name)
    return WeightsFile(path=path, version=version, image_size=size), None


def candidate_files(root: Path) -> list[Path]:
    """MegaDetector files under ``root`` and ``root/megadetector``, most preferred first (a directory listing)."""
    out: list[Path] = []
    for folder in (root, root / SUBFOLDER):
        if not folder.is_dir():
            continue
        try:
            files = sorted(p for p in folder.iterdir() if p.is_file())
        except OSError:
            continue
        by_name = {p.name: p for p in files}
        ranked = [by_name[n] for n in PREFERRED_WEIGHTS if n in by_name]
        ranked += [p for p in files if p.name.startswith("md_v5") and p.suffix == ".pt" and p not in ranked]
        ranked += [p for p in files if p.name.startswith("md_v1000") and p.suffix == ".pt"]
        out += [p for p in ranked if p not in out]
    return out


def find_weights(weights_path: str | Path | None = None) -> tuple[WeightsFile | None, str]:
    """(weights to use, one-line reason): the explicit ``weights_path``, else the best file in
    ``$ROSETTE_WEIGHTS_DIR``; (None, why not) when there is none. File lookups only (no torch)."""
    if weights_path is not None:
        p = Path(weights_path).expanduser()
        if not p.is_file():
            return None, f"MegaDetector weights {p} do not exist"
        found, why = _describe(p)
        return (found, f"weights: {p} (MegaDetector {found.version})") if found else (None, str(why))
    root = weights_dir()
    if root is None or not root.is_dir():
        return None, missing_weights_reason(root)
    skipped: list[str] = []
    for p in candidate_files(root):
        found, why = _describe(p)
        if found is not None:
            return found, f"weights: {p} (MegaDetector {found.version})"
        skipped.append(str(why))
    if skipped:
        return None, f"{skipped[0]}; {missing_weights_reason(root)}"
    return None, missing_weights_reason(root)


def available() -> tuple[bool, str]:
    """(True, which weights) when MegaDetector can run here, else (False, a one-line reason). No torch import."""
    found, reason = find_weights()
    return found is not None, reason


# --------------------------------------------------------------------------- pre- and post-processing (numpy)


def letterbox(rgb: np.ndarray, size: int = DEFAULT_IMAGE_SIZE, stride: int = 64
              ) -> tuple[np.ndarray, float, tuple[float, float]]:
    """YOLOv5's ``letterbox(auto=True, scaleup=True)`` as MegaDetector's classic mode calls it: scale so the long
    side is ``size`` (up or down), pad each side with grey 114 to the next multiple of ``stride``. Returns (image,
    scale, (pad left, pad top))."""
    import cv2  # lazy: OpenCV is only needed when a detector runs

    h, w = rgb.shape[:2]
    r = min(size / h, size / w)
    new_w, new_h = round(w * r), round(h * r)
    dw, dh = (size - new_w) % stride / 2, (size - new_h) % stride / 2
    img = rgb
    if (w, h) != (new_w, new_h):
        img = cv2.resize(rgb, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    top, bottom = round(dh - 0.1), round(dh + 0.1)
    left, right = round(dw - 0.1), round(dw + 0.1)
    img = cv2.copyMakeBorder(img, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(LETTERBOX_FILL,) * 3)
    return img, r, (dw, dh)


def _truncate(x: float, digits: int) -> float:
    f = 10 ** digits
    return math.floor(x * f) / f


def to_detections(xyxy: np.ndarray, conf: np.ndarray, cls: np.ndarray, input_hw: tuple[int, int],
                  image_hw: tuple[int, int], *, min_confidence: float = OUTPUT_THRESHOLD) -> list[Detection]:
    """Boxes (N x 4, x0 y0 x1 y1 in the letterboxed input's pixels), confidences and 0-based MegaDetector class
    indices -> :class:`Detection` s in the photo's normalised [x, y, w, h], best first (YOLOv5 ``scale_coords``
    then MegaDetector's truncation to 4 / 3 decimals). Boxes that round to no area are left out."""
    ih, iw = input_hw
    h, w = image_hw
    if len(xyxy) == 0:
        return []
    b = np.asarray(xyxy, dtype=np.float64).reshape(-1, 4).copy()
    gain = min(ih / h, iw / w)
    pad_x, pad_y = (iw - w * gain) / 2, (ih - h * gain) / 2
    b[:, [0, 2]] = np.clip((b[:, [0, 2]] - pad_x) / gain, 0, w)
    b[:, [1, 3]] = np.clip((b[:, [1, 3]] - pad_y) / gain, 0, h)
    b = np.round(b)
    out: list[Detection] = []
    for (x0, y0, x1, y1), c, k in zip(b, np.asarray(conf, dtype=np.float64), np.asarray(cls).astype(int)):
        if c < min_confidence:
            continue
        category = DETECTION_CATEGORIES.get(str(int(k) + 1))
        if category is None:
            raise ValueError(f"MegaDetector class index {int(k)} is not one of {sorted(DETECTION_CATEGORIES)}")
        values = [_truncate(x0 / w, COORD_DIGITS), _truncate(y0 / h, COORD_DIGITS),
                  _truncate((x1 - x0) / w, COORD_DIGITS), _truncate((y1 - y0) / h, COORD_DIGITS)]
        try:
            box = Box(*values)
        except InvalidBoxError:  # narrower than a pixel / 1e-4 of the frame
            continue
        out.append(Detection(category=category, box=box, confidence=min(1.0, _truncate(float(c), CONF_DIGITS))))
    out.sort(key=lambda d: -d.confidence)
    return out


def postprocess(pred: Any, input_hw: tuple[int, int], image_hw: tuple[int, int], *,
                min_confidence: float = OUTPUT_THRESHOLD, iou_threshold: float = NMS_IOU,
                max_detections: int = MAX_DETECTIONS) -> list[Detection]:
    """One image's raw YOLOv5 output (a torch tensor, anchors x (5 + nc): cx, cy, w, h in the letterboxed input's
    pixels, objectness, class scores) -> :class:`Detection` s, as MegaDetector's classic mode: score = objectness x
    best class score, both above ``min_confidence``; per-class NMS at ``iou_threshold``; the ``max_detections``
    best; then :func:`to_detections`."""
    import torch  # lazy: torch is a heavy ML library, imported only when a detector runs
    import torchvision  # lazy: as torch (its NMS)

    with torch.inference_mode():
        pred = pred[pred[:, 4] > min_confidence]
        if len(pred) == 0:
            return []
        conf, cls = (pred[:, 5:] * pred[:, 4:5]).max(1)
        keep = conf > min_confidence
        pred, conf, cls = pred[keep], conf[keep], cls[keep]
        if len(pred) == 0:
            return []
        cx, cy, bw, bh = pred[:, 0], pred[:, 1], pred[:, 2], pred[:, 3]
        xyxy = torch.stack((cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2), 1)
        kept = torchvision.ops.batched_nms(xyxy, conf, cls, iou_threshold)[:max_detections]
        xyxy, conf, cls = xyxy[kept].cpu().numpy(), conf[kept].cpu().numpy(), cls[kept].cpu().numpy()
    return to_detections(xyxy, conf, cls, input_hw, image_hw, min_confidence=min_confidence)


# --------------------------------------------------------------------------- the detector


class MegaDetector:
    """MegaDetector v5 on this machine's weights (where they are looked for: docs/detectors.md). The network
    loads on first :meth:`detect`; creating one without weights raises :class:`DetectorUnavailableError` with the
    reason."""

    name = NAME

    def __init__(self, *, weights_path: str | Path | None = None, min_confidence: float = OUTPUT_THRESHOLD,
                 image_size: int | None = None, iou_threshold: float = NMS_IOU,
                 max_detections: int = MAX_DETECTIONS, device: str = "cpu") -> None:
        found, reason = find_weights(weights_path)
        if found is None:
            raise DetectorUnavailableError(reason)
        if not 0.0 <= float(min_confidence) <= 1.0:
            raise ValueError(f"min_confidence must be in [0, 1], got {min_confidence}")
        if not 0.0 < float(iou_threshold) <= 1.0:
            raise ValueError(f"iou_threshold must be in (0, 1], got {iou_threshold}")
        if image_size is not None and int(image_size) < 32:
            raise ValueError(f"image_size must be at least 32, got {image_size}")
        self.weights = found
        self.min_confidence = float(min_confidence)
        self.image_size = int(image_size) if image_size is not None else found.image_size
        self.iou_threshold = float(iou_threshold)
        self.max_detections = int(max_detections)
        self.device = device
        self._net: Any = None
        self._info: dict[str, Any] = {}
        self._sha256: str | None = None

    @staticmethod
    def available() -> tuple[bool, str]:
        return available()

    @property
    def network(self) -> Any:
        """The loaded, BN-fused network (``core.field.detectors.yolov5.YOLOv5``), loaded on first use."""
        if self._net is None:
            # lazy: core.field.detectors.yolov5 imports torch (a heavy ML library), needed only when a detector runs
            from core.field.detectors.yolov5 import CheckpointError, load_checkpoint

            try:
                net, info = load_checkpoint(self.weights.path, map_location=self.device)
            except CheckpointError as exc:
                raise ValueError(f"MegaDetector weights {exc}") from None
            if net.nc != len(DETECTION_CATEGORIES):
                raise ValueError(f"{self.weights.path.name} detects {net.nc} classes; MegaDetector has "
                                 f"{len(DETECTION_CATEGORIES)} (animal, person, vehicle)")
            self._net = net.fuse().to(self.device).eval()
            self._info = info
        return self._net

    def detect(self, rgb: np.ndarray, *, min_confidence: float | None = None) -> list[Detection]:
        """Animal / person / vehicle boxes in an HxWx3 RGB photo, best first."""
        import torch  # lazy: torch is a heavy ML library, imported only when a detector runs

        thr = self.min_confidence if min_confidence is None else float(min_confidence)
        img = as_rgb_uint8(rgb)
        net = self.network
        boxed, _, _ = letterbox(img, self.image_size, net.max_stride)
        x = torch.from_numpy(np.ascontiguousarray(boxed.transpose(2, 0, 1))).to(self.device)
        x = x.unsqueeze(0).float().div_(255.0)
        with torch.inference_mode():
            pred = net(x)[0]  # (anchors, 5 + nc): cx, cy, w, h, objectness, class scores
        return postprocess(pred, boxed.shape[:2], img.shape[:2], min_confidence=thr,
                           iou_threshold=self.iou_threshold, max_detections=self.max_detections)

    def details(self) -> dict[str, Any]:
        """Provenance: the weights file, its sha256 and MegaDetector version, and the inference settings."""
        if self._sha256 is None:
            self._sha256 = sha256_file(self.weights.path)
        out: dict[str, Any] = {
            "detector": self.name,
            "version": self.weights.version,
            "weights": str(self.weights.path),
            "weights_sha256": self._sha256,
            "architecture": "YOLOv5, rebuilt from the config stored in the weights file (MDv5: YOLOv5x6)",
            "image_size": self.image_size,
            "preprocessing": "letterbox (MegaDetector classic: long side to image_size, grey padding to the stride)",
            "min_confidence": self.min_confidence,
            "iou_threshold": self.iou_threshold,
            "max_detections": self.max_detections,
            "categories": dict(DETECTION_CATEGORIES),
        }
        return out

    @property
    def checkpoint_info(self) -> dict[str, Any]:
        """What loading the weights found (loads them): class names, config, and the pickled globals that were
        replaced by inert stand-ins instead of being imported (``stand_ins``)."""
        self.network  # noqa: B018  (loads on first use)
        return dict(self._info)
