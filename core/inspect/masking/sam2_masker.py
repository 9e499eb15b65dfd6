"""SAM 2 masker: the ``sam2`` package's image predictor driven by clicks and boxes.

Settings: ``checkpoint`` (or ``ROSETTE_SAM2_CHECKPOINT``; without one :class:`Sam2NotConfiguredError` says how to
get one, unless ``random_init=True`` for tests), ``config`` (or ``ROSETTE_SAM2_CONFIG``, default Hiera-tiny) and
``device``. The model is built once per process and shared by all maskers, and each masker keeps the last photo's
image embedding, so more clicks on the same photo only re-run the light prompt decoder. Batch mode (no prompt)
uses the centred default box, one encoder pass per photo, so it costs the same as a click.

Each setting, the prompt rules and the timings: docs/inspect.md."""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.inspect.masking.base import (
    DEFAULT_BOX_MARGIN,
    SAM2_CHECKPOINT_ENV,
    SAM2_CONFIG_ENV,
    MaskResult,
    as_rgb_uint8,
    default_box,
    validate_prompts,
)

__all__ = [
    "DEFAULT_SAM2_CONFIG",
    "Sam2Masker",
    "Sam2NotConfiguredError",
    "available_sam2_configs",
    "clear_model_cache",
    "load_sam2_model",
    "resolve_sam2_config",
]

DEFAULT_SAM2_CONFIG = "configs/sam2.1/sam2.1_hiera_t.yaml"
SAM2_RELEASE_HINT = (
    "download sam2.1_hiera_tiny.pt from the SAM 2 release "
    "(https://dl.fbaipublicfiles.com/segment_anything_2/092824/sam2.1_hiera_tiny.pt, "
    "linked from https://github.com/facebookresearch/sam2) and set "
    f"{SAM2_CHECKPOINT_ENV}=/path/to/sam2.1_hiera_tiny.pt (or pass checkpoint=...); "
    f"use {SAM2_CONFIG_ENV} for a larger model's config. Until then use the 'grabcut' masker"
)


class Sam2NotConfiguredError(RuntimeError):
    """No SAM 2 checkpoint was given or configured."""


@dataclass
class _LoadedModel:
    model: torch.nn.Module
    info: dict[str, Any]
    stat: tuple[int, int] | None  # (size, mtime_ns) of the checkpoint when loaded


_MODEL_CACHE: dict[tuple[str, str, str], _LoadedModel] = {}
_CACHE_LOCK = threading.Lock()


def clear_model_cache() -> None:
    """Forget every loaded SAM 2 model (tests; freeing memory)."""
    with _CACHE_LOCK:
        _MODEL_CACHE.clear()


def cached_model_keys() -> list[tuple[str, str, str]]:
    """(config, checkpoint-or-random-init, device) of every model loaded in this process."""
    with _CACHE_LOCK:
        return list(_MODEL_CACHE)


def _sam2_package_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("sam2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the 'sam2' package is not installed (pip install sam2)")
    return Path(next(iter(spec.submodule_search_locations)))


def available_sam2_configs() -> list[str]:
    """Config names shipped in the installed sam2 package (``configs/...yaml``)."""
    root = _sam2_package_dir()
    return sorted(str(p.relative_to(root)) for p in (root / "configs").rglob("*.yaml"))


def resolve_sam2_config(config: str) -> str:
    """Map ``config`` (full name, file name or stem) to a config name inside the sam2 package."""
    names = available_sam2_configs()
    if config in names:
        return config
    stem = config[:-5] if config.endswith(".yaml") else config
    matches = [n for n in names if n.endswith("/" + stem + ".yaml")]
    if len(matches) == 1:
        return matches[0]
    raise ValueError(
        f"unknown SAM 2 config {config!r}" + (f" (ambiguous: {matches})" if matches else "")
        + f"; the installed sam2 package ships: {', '.join(names)}"
    )


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _ensure_hydra() -> None:
    """Make sure hydra's global config search points at the sam2 package configs."""
    import sam2  # noqa: F401  (its __init__ initialises hydra with the "sam2" config module)
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    if not GlobalHydra.instance().is_initialized():
        initialize_config_module("sam2", version_base="1.2")


def _build(config: str, ckpt: str | None, device: str) -> torch.nn.Module:
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import MissingConfigException
    from sam2.build_sam import build_sam2

    _ensure_hydra()
    try:
        return build_sam2(config, ckpt, device=device)
    except MissingConfigException:
        # someone else initialised hydra with their own config module: point it back at sam2
        GlobalHydra.instance().clear()
        initialize_config_module("sam2", version_base="1.2")
        return build_sam2(config, ckpt, device=device)


def default_device() -> str:
    """``"cuda"`` when torch sees a GPU, else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_sam2_model(
    *,
    config: str = DEFAULT_SAM2_CONFIG,
    checkpoint: str | os.PathLike[str] | None = None,
    device: str | None = None,
    random_init: bool = False,
    seed: int = 0,
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The SAM 2 model for (config, checkpoint, device), built once per process, and its provenance.

    ``checkpoint=None`` requires ``random_init=True`` (weights drawn with
    ``torch.manual_seed(seed)``, without disturbing the global RNG).
    """
    config = resolve_sam2_config(config)
    device = device or default_device()
    if checkpoint is None and not random_init:
        raise Sam2NotConfiguredError(f"no SAM 2 checkpoint configured: {SAM2_RELEASE_HINT}")
    if checkpoint is not None:
        path = Path(checkpoint).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(f"SAM 2 checkpoint {str(path)!r} does not exist: {SAM2_RELEASE_HINT}")
        st = path.stat()
        stat: tuple[int, int] | None = (st.st_size, st.st_mtime_ns)
        weights_key = str(path)
    else:
        path, stat, weights_key = None, None, f"random-init:{int(seed)}"
    key = (config, weights_key, device)
    with _CACHE_LOCK:
        hit = _MODEL_CACHE.get(key)
        if hit is not None and hit.stat == stat:
            return hit.model, dict(hit.info)
        if path is not None:
            try:
                model = _build(config, str(path), device)
            except RuntimeError as exc:
                raise RuntimeError(
                    f"SAM 2 checkpoint {str(path)!r} does not fit config {config!r} (missing or unexpected "
                    "weights): use the config of the same model size, e.g. sam2.1_hiera_tiny.pt with "
                    "configs/sam2.1/sam2.1_hiera_t.yaml"
                ) from exc
            info = {"checkpoint": str(path), "checkpoint_sha256": _file_sha256(path)}
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(seed))
                model = _build(config, None, device)
            info = {"checkpoint": "random-init", "checkpoint_sha256": "random-init", "init_seed": int(seed)}
        info.update({"config": config, "device": device, "image_size": int(model.image_size)})
        _MODEL_CACHE[key] = _LoadedModel(model=model, info=info, stat=stat)
        return model, dict(info)


class Sam2Masker:
    """SAM 2 as a :class:`~core.inspect.masking.Masker` (registry name ``sam2``)."""

    name = "sam2"

    def __init__(
        self,
        *,
        checkpoint: str | os.PathLike[str] | None = None,
        config: str | None = None,
        device: str | None = None,
        random_init: bool = False,
        seed: int = 0,
        margin: float = DEFAULT_BOX_MARGIN,
        mask_threshold: float = 0.0,
    ) -> None:
        if random_init and checkpoint is not None:
            raise ValueError("pass either checkpoint=... or random_init=True, not both")
        if checkpoint is None and not random_init:
            env = os.environ.get(SAM2_CHECKPOINT_ENV, "").strip()
            if not env:
                raise Sam2NotConfiguredError(f"the 'sam2' masker needs a checkpoint: {SAM2_RELEASE_HINT}")
            checkpoint = env
        config = config or os.environ.get(SAM2_CONFIG_ENV, "").strip() or DEFAULT_SAM2_CONFIG
        from sam2.sam2_image_predictor import SAM2ImagePredictor

        self.model, self.info = load_sam2_model(
            config=config, checkpoint=checkpoint, device=device, random_init=random_init, seed=seed
        )
        self.margin = float(margin)
        with warnings.catch_warnings():  # SAM2Transforms uses torch.jit.script, deprecated in recent torch
            warnings.simplefilter("ignore", FutureWarning)
            self.predictor = SAM2ImagePredictor(self.model, mask_threshold=mask_threshold)
        self._image_key: tuple[tuple[int, ...], str] | None = None
        self._lock = threading.Lock()

    @property
    def device(self) -> str:
        return str(self.info["device"])

    def _autocast(self):
        if self.device.startswith("cuda"):
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return nullcontext()

    def set_image(self, rgb: np.ndarray) -> bool:
        """Compute the image embedding unless it is the last photo seen; True when it was computed."""
        img = as_rgb_uint8(rgb)
        key = (img.shape, hashlib.blake2b(img.tobytes(), digest_size=16).hexdigest())
        if key == self._image_key:
            return False
        with torch.inference_mode(), self._autocast():
            self.predictor.set_image(img.copy())  # writable: torch.from_numpy warns on read-only arrays
        self._image_key = key
        return True

    def predict(
        self,
        rgb: np.ndarray,
        *,
        points: Sequence[tuple[float, float]] | None = None,
        point_labels: Sequence[int] | None = None,
        box: tuple[float, float, float, float] | None = None,
        alpha: np.ndarray | None = None,
    ) -> MaskResult:
        """Mask for the clicked / boxed animal (batch mode without prompts; ``alpha`` is ignored)."""
        img = as_rgb_uint8(rgb)
        h, w = img.shape[:2]
        pts, lab, bx = validate_prompts(h, w, points, point_labels, box)
        if pts is None and bx is None:
            rule = f"batch: centred box (frame minus {self.margin:g} of each side), best predicted IoU of 3"
            bx = np.asarray(default_box(h, w, margin=self.margin))
            multimask = True
        elif bx is None and len(pts) == 1:
            rule = "single click: best predicted IoU of 3"
            multimask = True
        else:
            rule = "box and/or several clicks: single mask"
            multimask = False
        with self._lock:
            self.set_image(img)
            with torch.inference_mode(), self._autocast():
                masks, scores, _ = self.predictor.predict(
                    point_coords=pts, point_labels=lab, box=bx, multimask_output=multimask
                )
        best = int(np.argmax(scores))
        mask = np.asarray(masks[best]) > 0.5  # predictor already thresholded logits at mask_threshold
        details: dict[str, Any] = {
            **self.info,
            "prompt": {
                "points": None if pts is None else pts.round(2).tolist(),
                "point_labels": None if lab is None else lab.tolist(),
                "box": None if bx is None else [round(float(v), 2) for v in bx],
            },
            "rule": rule,
            "multimask_output": multimask,
            "score": float(scores[best]),
            "scores": [float(s) for s in np.asarray(scores).reshape(-1)],
        }
        return MaskResult(mask=mask, source=self.name, details=details)
