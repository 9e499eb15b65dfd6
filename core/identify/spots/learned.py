"""Learned local matchers on kornia: ``disk-lightglue``, ``aliked-lightglue`` and ``loftr``.

Per photo, as for the classical matchers, the longest side is resized to ``max_side`` and a mask keeps only the
animal's keypoints (eroded by ``MASK_ERODE_FRACTION``). Keypoints and correspondences are (x, y) in each original
photo's pixels. Weights are only read from this machine, never downloaded: ``$ROSETTE_WEIGHTS_DIR`` first, then
torch hub's checkpoint folder under kornia's own names; a missing file raises
:class:`~core.identify.spots.MatcherUnavailableError` naming files, folders and URLs. ``pretrained=False`` builds
seeded random networks for tests.

Each matcher's settings, how LoFTR carries the mask, and the weight files' names: docs/spots.md."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from core.identify.backbones.weights import sha256_file
from core.registry import UnknownComponentError
from core.identify.spots.base import Correspondences, LocalFeatures, MatcherConfig, MatcherUnavailableError
from core.identify.spots.classical import MASK_ERODE_FRACTION, working_grey

__all__ = [
    "WEIGHT_FILES",
    "WeightFile",
    "create_learned_matcher",
    "find_weight_file",
    "learned_weights_available",
]

RANDOM_SOURCE = "random (test)"
RANDOM_SEED = 0
LIGHTGLUE_FILTER_THRESHOLD = 0.1  # kornia's default
DISK_NMS_WINDOW = 5  # kornia's default
ALIKED_MODEL = "aliked-n16"
ALIKED_DETECTION_THRESHOLD = 0.2  # kornia's default
ALIKED_NMS_RADIUS = 2  # kornia's default


@dataclass(frozen=True)
class WeightFile:
    """One weight file: its name under ``$ROSETTE_WEIGHTS_DIR``, the name kornia caches it as in torch hub's
    checkpoint folder, and where it is published (for the error message only; nothing is downloaded)."""

    role: str
    local_name: str
    hub_name: str
    url: str


WEIGHT_FILES: dict[str, tuple[WeightFile, ...]] = {
    "disk-lightglue": (
        WeightFile("DISK detector/descriptor (depth)", "disk_depth.pth", "depth-save.pth",
                   "https://huggingface.co/kornia/disk/resolve/main/depth-save.pth"),
        WeightFile("LightGlue for DISK", "lightglue_disk.pth", "disk_lightglue_v0-1_arxiv-pth",
                   "https://huggingface.co/kornia/lightglue/resolve/main/disk_lightglue.pth"),
    ),
    "aliked-lightglue": (
        WeightFile(f"ALIKED detector/descriptor ({ALIKED_MODEL})", "aliked_n16.pth", f"{ALIKED_MODEL}.pth",
                   f"https://huggingface.co/kornia/aliked/resolve/main/{ALIKED_MODEL}.pth"),
        WeightFile("LightGlue for ALIKED", "lightglue_aliked.pth", "aliked_lightglue_v0-1_arxiv-pth",
                   "https://huggingface.co/kornia/lightglue/resolve/main/aliked_lightglue.pth"),
    ),
    "loftr": (
        WeightFile("LoFTR (outdoor)", "loftr_outdoor.ckpt", "loftr_outdoor.ckpt",
                   "https://huggingface.co/kornia/loftr/resolve/main/loftr_outdoor.ckpt"),
    ),
}

_KORNIA_CLASSES = {"disk-lightglue": ("DISK", "LightGlue"), "aliked-lightglue": ("ALIKED", "LightGlue"),
                   "loftr": ("LoFTR",)}


# ------------------------------------------------------------------------------------------- finding files


def _check_name(name: str) -> None:
    if name not in WEIGHT_FILES:
        raise UnknownComponentError(f"unknown learned local matcher {name!r}; available: {', '.join(WEIGHT_FILES)}")


def _rosette_dir() -> Path | None:
    root = os.environ.get("ROSETTE_WEIGHTS_DIR")
    return Path(root).expanduser() if root else None


def _hub_checkpoints_dir() -> Path:
    import torch  # heavy ML library: imported on use

    return Path(torch.hub.get_dir()).expanduser() / "checkpoints"


def find_weight_file(w: WeightFile) -> tuple[Path, str] | None:
    """(path, "ROSETTE_WEIGHTS_DIR" or "torch hub") of ``w`` on this machine, or None. A file lookup only."""
    root = _rosette_dir()
    if root is not None and (root / w.local_name).is_file():
        return root / w.local_name, "ROSETTE_WEIGHTS_DIR"
    hub = _hub_checkpoints_dir() / w.hub_name
    if hub.is_file():
        return hub, "torch hub"
    return None


def _kornia_missing(name: str) -> str | None:
    """Why kornia cannot run ``name`` here (not installed, or too old to have the network), or None."""
    if importlib.util.find_spec("kornia") is None:
        return "kornia is not installed (pip install kornia)"
    import kornia.feature  # heavy ML library: imported on use

    absent = [c for c in _KORNIA_CLASSES[name] if not hasattr(kornia.feature, c)]
    if absent:
        return (f"the installed kornia {getattr(kornia, '__version__', '?')} has no kornia.feature."
                f"{', '.join(absent)} (upgrade kornia)")
    return None


def learned_weights_available(name: str) -> bool:
    """Whether ``create_learned_matcher(name)`` would find kornia and every weight file here (nothing is loaded)."""
    _check_name(name)
    if importlib.util.find_spec("kornia") is None:
        return False
    if not all(find_weight_file(w) is not None for w in WEIGHT_FILES[name]):
        return False
    return _kornia_missing(name) is None


def _missing_message(name: str, missing: list[WeightFile]) -> str:
    root = _rosette_dir()
    hub = _hub_checkpoints_dir()
    where_root = f"ROSETTE_WEIGHTS_DIR={root}" if root is not None else "ROSETTE_WEIGHTS_DIR (not set)"
    lines = [f"the learned local matcher {name!r} needs pretrained weights that are not on this machine "
             f"(nothing is downloaded). Put each file below in either folder:",
             f"  - {where_root}, under the first name;",
             f"  - torch hub's checkpoint folder {hub}, under the second name (where kornia caches it)."]
    for w in missing:
        first = str(root / w.local_name) if root is not None else f"$ROSETTE_WEIGHTS_DIR/{w.local_name}"
        lines.append(f"  {w.role}: {first} or {hub / w.hub_name} (from {w.url})")
    return "\n".join(lines)


def _locate_weights(name: str) -> list[tuple[WeightFile, Path, str]]:
    found, missing = [], []
    for w in WEIGHT_FILES[name]:
        hit = find_weight_file(w)
        if hit is None:
            missing.append(w)
        else:
            found.append((w, hit[0], hit[1]))
    if missing:
        raise MatcherUnavailableError(_missing_message(name, missing))
    return found


def _load_checkpoint(path: Path, *keys: str) -> dict[str, Any]:
    """The state dict in ``path`` (under the first of ``keys`` present, else the top level); weights only."""
    import torch  # heavy ML library: imported on use

    try:
        ckpt = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # corrupt / truncated / not a torch file
        raise MatcherUnavailableError(f"the weight file {path} could not be read ({exc}); replace it") from exc
    if not isinstance(ckpt, dict):
        raise MatcherUnavailableError(f"the weight file {path} holds no state dict; replace it")
    for k in keys:
        if isinstance(ckpt.get(k), dict):
            return ckpt[k]
    return ckpt


def _load_into(module: Any, state_dict: dict[str, Any], path: Path, *, strict: bool) -> None:
    """Load ``state_dict``; with ``strict=False`` only derived buffers may be missing (as kornia does)."""
    try:
        result = module.load_state_dict(state_dict, strict=strict)
    except RuntimeError as exc:
        raise MatcherUnavailableError(f"the weight file {path} does not fit {type(module).__name__} ({exc})") from exc
    if not strict:
        params = dict(module.named_parameters())
        missing = [k for k in result.missing_keys if k in params]
        if missing:
            raise MatcherUnavailableError(f"the weight file {path} does not fit {type(module).__name__}: "
                                          f"{len(missing)} parameters missing (e.g. {missing[0]})")


# ------------------------------------------------------------------------------------------- geometry helpers


def _working_size(f: LocalFeatures) -> tuple[int, int]:
    """(W, H) of the working image ``f`` was extracted from (as :func:`working_grey` computes it)."""
    h, w = f.image_size
    return max(1, round(w * f.scale)), max(1, round(h * f.scale))


def _to_original(pts: np.ndarray, scale: float, image_size: tuple[int, int]) -> np.ndarray:
    """Working (x, y) -> original photo pixels, clipped to the photo."""
    h, w = image_size
    out = np.asarray(pts, dtype=np.float64).reshape(-1, 2) / scale
    out[:, 0] = np.clip(out[:, 0], 0.0, w - 1)
    out[:, 1] = np.clip(out[:, 1], 0.0, h - 1)
    return out.astype(np.float32)


def _inside(pts: np.ndarray, shape: tuple[int, int], valid: np.ndarray | None) -> np.ndarray:
    """Which working (x, y) points lie on a pixel of an image of ``shape`` (H, W) (and of ``valid``, if given)."""
    pts = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
    ix, iy = np.rint(pts[:, 0]), np.rint(pts[:, 1])
    ok = np.isfinite(ix) & np.isfinite(iy) & (ix >= 0) & (iy >= 0) & (ix < shape[1]) & (iy < shape[0])
    if valid is not None and ok.any():
        sel = np.flatnonzero(ok)
        ok[sel] = valid[iy[sel].astype(np.int64), ix[sel].astype(np.int64)]
    return ok


def _strongest(scores: np.ndarray, limit: int) -> np.ndarray:
    """Indices of the ``limit`` highest scores, best first (ties: lower index first)."""
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    order = np.lexsort((np.arange(len(scores)), -scores))
    return order[:limit]


def _resolve_device(device: Any) -> Any:
    import torch  # heavy ML library: imported on use

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _seeded_build(fn: Any) -> Any:
    """Build a module with a fixed seed (random weights are reproducible) without touching the global RNG."""
    import torch  # heavy ML library: imported on use

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RANDOM_SEED)
        return fn()


# ------------------------------------------------------------------------------------------- matchers


class LightGlueMatcher:
    """Sparse keypoints (DISK or ALIKED) + LightGlue."""

    def __init__(self, config: MatcherConfig, detector: Any, matcher: Any, device: Any) -> None:
        self.config = config
        self.device = device
        self.detector = detector.to(device).eval()
        self.matcher = matcher.to(device).eval()

    def _detect(self, image: Any) -> tuple[Any, Any, Any]:
        """(keypoints N x 2 working px, descriptors N x D, scores N) as tensors."""
        if self.config.descriptor == "disk":
            f = self.detector(image, n=None, window_size=DISK_NMS_WINDOW, score_threshold=0.0,
                              pad_if_not_divisible=True)[0]
            return f.keypoints, f.descriptors, f.detection_scores
        f = self.detector(image)[0]
        return f.keypoints, f.descriptors, f.keypoint_scores

    def extract(self, rgb: np.ndarray, mask: np.ndarray | None = None) -> LocalFeatures:
        import torch  # heavy ML library: imported on use

        grey, det_mask, scale = working_grey(rgb, mask, max_side=self.config.max_side)
        h, w = grey.shape
        img = np.asarray(rgb)
        if img.shape[:2] != (h, w):
            img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
        tensor = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)[None].float().div(255.0)
        with torch.inference_mode():
            kps, desc, scores = self._detect(tensor.to(self.device))
            kps = kps.float().cpu().numpy().reshape(-1, 2)
            desc = desc.float().cpu().numpy().reshape(len(kps), -1)
            scores = scores.float().cpu().numpy().reshape(-1)
        keep = np.flatnonzero(_inside(kps, (h, w), None if det_mask is None else det_mask > 0))
        keep = keep[_strongest(scores[keep], self.config.max_keypoints)]
        dim = self.config.descriptor_dim
        if keep.size == 0:
            return LocalFeatures(np.zeros((0, 2)), np.zeros((0, dim), np.float32), rgb.shape[:2], scale,
                                 mask is not None)
        return LocalFeatures(_to_original(kps[keep], scale, rgb.shape[:2]),
                             np.ascontiguousarray(desc[keep], dtype=np.float32), rgb.shape[:2], scale,
                             mask is not None)

    def _side(self, f: LocalFeatures) -> dict[str, Any]:
        import torch  # heavy ML library: imported on use

        w, h = _working_size(f)
        kp = np.clip(f.keypoints.astype(np.float64) * f.scale, 0.0, [w - 1, h - 1]).astype(np.float32)
        return {"keypoints": torch.from_numpy(kp)[None].to(self.device),
                "descriptors": torch.from_numpy(np.ascontiguousarray(f.descriptors, np.float32))[None].to(self.device),
                "image_size": torch.tensor([[w, h]], device=self.device)}

    def match(self, a: LocalFeatures, b: LocalFeatures) -> Correspondences:
        import torch  # heavy ML library: imported on use

        for f in (a, b):
            if f.descriptors.shape[1] != self.config.descriptor_dim:
                raise ValueError(f"{self.config.name} matches {self.config.descriptor_dim}-d descriptors, got "
                                 f"{f.descriptors.shape[1]}-d ones (features of another matcher?)")
        if a.n == 0 or b.n == 0:
            return Correspondences.empty()
        data = {"image0": self._side(a), "image1": self._side(b)}
        with torch.inference_mode():
            out = self.matcher(data)
            pairs = out["matches"][0].cpu().numpy().reshape(-1, 2).astype(np.int64)
            conf = out["scores"][0].float().cpu().numpy().reshape(-1)
        if pairs.shape[0] == 0:
            return Correspondences.empty()
        return Correspondences(a.keypoints[pairs[:, 0]], b.keypoints[pairs[:, 1]],
                               np.clip(np.nan_to_num(conf, nan=0.0), 0.0, 1.0))


class LoFTRMatcher:
    """Detector-free: the working grey images of a pair are matched by LoFTR."""

    def __init__(self, config: MatcherConfig, net: Any, device: Any) -> None:
        self.config = config
        self.device = device
        self.net = net.to(device).eval()

    def extract(self, rgb: np.ndarray, mask: np.ndarray | None = None) -> LocalFeatures:
        grey, det_mask, scale = working_grey(rgb, mask, max_side=self.config.max_side)
        image = np.ascontiguousarray(grey, dtype=np.uint8)
        if det_mask is not None:  # the mask travels in the image: background 0, animal >= 1
            image = np.where(det_mask > 0, np.maximum(image, 1), 0).astype(np.uint8)
        return LocalFeatures(np.zeros((0, 2), np.float32), np.zeros((0, 0), np.float32), rgb.shape[:2], scale,
                             mask is not None, image=image)

    def _tensor(self, f: LocalFeatures) -> Any:
        import torch  # heavy ML library: imported on use

        if f.image is None:
            raise ValueError("loftr matches the working images kept by its own extract(); these features have none "
                             "(extracted by another matcher?)")
        return torch.from_numpy(np.ascontiguousarray(f.image, dtype=np.uint8))[None, None].float().div(255.0) \
            .to(self.device)

    def match(self, a: LocalFeatures, b: LocalFeatures) -> Correspondences:
        import torch  # heavy ML library: imported on use

        t0, t1 = self._tensor(a), self._tensor(b)
        with torch.inference_mode():
            out = self.net({"image0": t0, "image1": t1})
            # LoFTR puts pixel centres at +0.5; this module (like OpenCV) at integer coordinates
            k0 = out["keypoints0"].double().cpu().numpy().reshape(-1, 2) - 0.5
            k1 = out["keypoints1"].double().cpu().numpy().reshape(-1, 2) - 0.5
            conf = out["confidence"].float().cpu().numpy().reshape(-1)
        if k0.shape[0] == 0:
            return Correspondences.empty()
        assert a.image is not None and b.image is not None
        keep = _inside(k0, a.image.shape[:2], a.image > 0 if a.masked else None) & \
            _inside(k1, b.image.shape[:2], b.image > 0 if b.masked else None)
        idx = np.flatnonzero(keep)
        idx = idx[_strongest(conf[idx], self.config.max_keypoints)]
        if idx.size == 0:
            return Correspondences.empty()
        return Correspondences(_to_original(k0[idx], a.scale, a.image_size),
                               _to_original(k1[idx], b.scale, b.image_size),
                               np.clip(np.nan_to_num(conf[idx], nan=0.0), 0.0, 1.0))


# ------------------------------------------------------------------------------------------- factory


def _lightglue(features: str, path: Path | None) -> Any:
    """kornia's LightGlue configured for ``features`` ("disk" / "aliked"), built without its download
    (``features=None`` + the same config), then loaded from ``path`` as kornia loads it (or random)."""
    from kornia.feature import LightGlue  # heavy ML library: imported on use

    conf = {k: v for k, v in LightGlue.features[features].items() if k != "weights"}
    net = _seeded_build(lambda: LightGlue(None, filter_threshold=LIGHTGLUE_FILTER_THRESHOLD, **conf))
    if path is not None:
        sd = _load_checkpoint(path)
        sd = {k[len("matcher."):] if k.startswith("matcher.") else k: v for k, v in sd.items()}
        for i in range(net.conf.n_layers):  # the published files use the original layer names
            sd = {k.replace(f"self_attn.{i}", f"transformers.{i}.self_attn")
                  .replace(f"cross_attn.{i}", f"transformers.{i}.cross_attn"): v for k, v in sd.items()}
        _load_into(net, sd, path, strict=False)
    return net


def create_learned_matcher(name: str, *, pretrained: bool = True, device: Any = None, max_side: int = 512,
                           max_keypoints: int = 1000, **opts: Any) -> LightGlueMatcher | LoFTRMatcher:
    """Build ``disk-lightglue``, ``aliked-lightglue`` or ``loftr`` (each described in docs/spots.md).

    ``pretrained=True`` reads the weight files from this machine only and raises
    :class:`~core.identify.spots.MatcherUnavailableError` naming the files and folders when one is missing;
    ``pretrained=False`` uses seeded random weights (tests). ``device``: None = CUDA when available, else CPU.
    """
    _check_name(name)
    if opts:
        raise TypeError(f"{name}: unexpected options {', '.join(sorted(opts))}")
    why = _kornia_missing(name)
    if why is not None:
        raise MatcherUnavailableError(f"the learned local matcher {name!r} cannot run here: {why}")
    import kornia  # heavy ML library: imported on use
    from kornia import feature as KF  # heavy ML library: imported on use

    files = _locate_weights(name) if pretrained else []
    paths = [p for _, p, _ in files]
    if pretrained:
        source = " + ".join(f"{w.role}: {w.local_name if where == 'ROSETTE_WEIGHTS_DIR' else w.hub_name} ({where})"
                            for w, _, where in files)

        sha = ",".join(sha256_file(p) for p in paths)
    else:
        source, sha = RANDOM_SOURCE, None
    dev = _resolve_device(device)
    extra: dict[str, Any] = {"kornia": kornia.__version__, "mask_erode": MASK_ERODE_FRACTION}

    if name == "loftr":
        net = _seeded_build(lambda: KF.LoFTR(pretrained=None))
        if pretrained:
            _load_into(net, _load_checkpoint(paths[0], "state_dict"), paths[0], strict=True)
        extra.update(checkpoint="outdoor", coarse_threshold=float(net.config["match_coarse"]["thr"]),
                     mask="background zeroed; correspondences outside the mask dropped")
        cfg = MatcherConfig(name=name, descriptor="loftr", descriptor_dim=0, max_side=int(max_side),
                            max_keypoints=int(max_keypoints), ratio=1.0, dense=True, weight_source=source,
                            weights_sha256=sha, extra=tuple(extra.items()))
        return LoFTRMatcher(cfg, net, dev)

    if name == "disk-lightglue":
        descriptor = "disk"
        detector = _seeded_build(lambda: KF.DISK(desc_dim=128))
        if pretrained:
            _load_into(detector, _load_checkpoint(paths[0], "extractor"), paths[0], strict=True)
        extra.update(checkpoint="depth", nms_window=DISK_NMS_WINDOW, score_threshold=0.0)
    else:
        descriptor = "aliked"
        detector = _seeded_build(lambda: KF.ALIKED(model_name=ALIKED_MODEL, max_num_keypoints=-1,
                                                   detection_threshold=ALIKED_DETECTION_THRESHOLD,
                                                   nms_radius=ALIKED_NMS_RADIUS))
        if pretrained:
            _load_into(detector, _load_checkpoint(paths[0]), paths[0], strict=False)
        extra.update(checkpoint=ALIKED_MODEL, detection_threshold=ALIKED_DETECTION_THRESHOLD,
                     nms_radius=ALIKED_NMS_RADIUS)
    matcher = _lightglue(descriptor, paths[1] if pretrained else None)
    extra.update(lightglue=f"{descriptor} {KF.LightGlue.version}", filter_threshold=LIGHTGLUE_FILTER_THRESHOLD)
    cfg = MatcherConfig(name=name, descriptor=descriptor, descriptor_dim=int(matcher.conf.input_dim),
                        max_side=int(max_side), max_keypoints=int(max_keypoints), ratio=1.0, weight_source=source,
                        weights_sha256=sha, extra=tuple(extra.items()))
    return LightGlueMatcher(cfg, detector, matcher, dev)
