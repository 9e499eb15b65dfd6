"""Inpainters: remove the animal from a photo and fill the hole (the ``background_inpainted`` variant).

Registry names (what the database stores with every inpainted image): ``opencv`` (``cv2.inpaint``, no weights,
deterministic; the offline default) and ``diffusers`` (a FLUX.1-Fill or Stable Diffusion inpainting pipeline with
the paper's settings, weights only from local files). Both take the *animal* mask and fill only
:func:`inpainting_mask` (its convex hull, dilated by ``dilate_px``), so every pixel outside it is the original.

Each inpainter's settings: docs/inspect.md."""

from __future__ import annotations

import inspect
import os
import threading
import warnings
from typing import Any, Protocol, runtime_checkable

import cv2
import numpy as np

from core.inspect.masking import as_bool_mask, as_rgb_uint8, convex_hull_mask
from core.registry import Registry

__all__ = [
    "INPAINTERS",
    "INPAINT_MODEL_ENV",
    "VEGETATION_PROMPT",
    "DiffusersInpainter",
    "Inpainter",
    "InpainterNotConfiguredError",
    "OpenCVInpainter",
    "create_inpainter",
    "default_inpainter_name",
    "describe_inpainters",
    "fit_size_for_diffusion",
    "inpainting_mask",
    "list_inpainters",
]

INPAINT_MODEL_ENV = "ROSETTE_INPAINT_MODEL"
VEGETATION_PROMPT = "natural vegetation, grass, bushes, trees, dappled light"
DEFAULT_DILATE_PX = 8
#: The seeds the evaluation runner draws per image (docs/DESIGN.md section 4: three seeds).
DEFAULT_SEEDS = (0, 1, 2)


class InpainterNotConfiguredError(RuntimeError):
    """No diffusion inpainting model was given or is available offline."""


@runtime_checkable
class Inpainter(Protocol):
    """Fills the animal's region of a photo; ``config`` holds everything needed to reproduce it."""

    name: str
    config: dict[str, Any]

    def inpaint(self, rgb: np.ndarray, mask: np.ndarray, *, seed: int = 0) -> np.ndarray: ...


# --------------------------------------------------------------------------- shared geometry


def inpainting_mask(mask: np.ndarray, *, dilate_px: int = DEFAULT_DILATE_PX) -> np.ndarray:
    """Region to fill: convex hull of the foreground, dilated by ``dilate_px`` (elliptical kernel, 2r+1).

    hull(M) is the filled ``cv2.convexHull`` of all foreground pixels, so legs,
    tail and the background between them are removed together and no
    animal-shaped hole is left for a model to read. Empty mask -> empty region.
    """
    if dilate_px < 0:
        raise ValueError("dilate_px must be >= 0")
    hull = convex_hull_mask(mask)
    if dilate_px == 0 or not hull.any():
        return hull
    k = 2 * int(dilate_px) + 1
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (k, k))
    return cv2.dilate(hull.astype(np.uint8), kernel).astype(bool)


def fit_size_for_diffusion(h: int, w: int, *, longest_edge: int = 1024, multiple: int = 8) -> tuple[int, int]:
    """(height, width) for a diffusion model: longest side <= ``longest_edge``, both sides multiples of ``multiple``.

    s = min(1, longest_edge / max(h, w)); side' = max(multiple, round(side * s / multiple) * multiple),
    capped at floor(longest_edge / multiple) * multiple. Photos are never upscaled beyond rounding.
    """
    if h < 1 or w < 1:
        raise ValueError(f"invalid image size {h}x{w}")
    if multiple < 1 or longest_edge < multiple:
        raise ValueError("need multiple >= 1 and longest_edge >= multiple")
    s = min(1.0, longest_edge / max(h, w))
    cap = (longest_edge // multiple) * multiple

    def fit(side: int) -> int:
        return min(cap, max(multiple, int(round(side * s / multiple)) * multiple))

    return fit(h), fit(w)


def _resize(img: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
    h, w = hw
    if img.shape[:2] == (h, w):
        return img.copy()
    shrinking = h * w < img.shape[0] * img.shape[1]
    return cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_CUBIC)


def _resize_region(region: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
    """Resize a bool region so that it still covers every pixel of the original (area > 0)."""
    h, w = hw
    if region.shape == (h, w):
        return region.copy()
    return cv2.resize(region.astype(np.float32), (w, h), interpolation=cv2.INTER_AREA) > 0


def _composite(original: np.ndarray, filled: np.ndarray, region: np.ndarray) -> np.ndarray:
    return np.where(region[:, :, None], filled, original).astype(np.uint8)


# --------------------------------------------------------------------------- opencv


class OpenCVInpainter:
    """``cv2.inpaint`` (Telea) on the convex-hull mask; registry name ``opencv``."""

    name = "opencv"

    def __init__(self, *, radius: int = 3, work_max_side: int = 512, dilate_px: int = DEFAULT_DILATE_PX) -> None:
        self.radius = int(radius)
        self.work_max_side = int(work_max_side)
        self.dilate_px = int(dilate_px)
        self.config: dict[str, Any] = {
            "inpainter": self.name,
            "model": "opencv-telea",
            "opencv_version": cv2.__version__,
            "radius": self.radius,
            "work_max_side": self.work_max_side,
            "mask": f"convex hull of the animal, dilated {self.dilate_px} px",
            "dilate_px": self.dilate_px,
            "seed_policy": "deterministic: seed ignored",
            "composite": "original pixels outside the inpainting mask",
        }

    def inpaint(self, rgb: np.ndarray, mask: np.ndarray, *, seed: int = 0) -> np.ndarray:
        """Photo with the animal's convex hull filled from its surroundings (HxWx3 uint8)."""
        img = as_rgb_uint8(rgb)
        region = inpainting_mask(as_bool_mask(mask, shape=img.shape[:2]), dilate_px=self.dilate_px)
        if not region.any():
            return img.copy()
        h, w = img.shape[:2]
        s = min(1.0, self.work_max_side / max(h, w)) if self.work_max_side else 1.0
        work_hw = (max(1, round(h * s)), max(1, round(w * s)))
        small = _resize(img, work_hw)
        small_region = _resize_region(region, work_hw)
        filled = cv2.inpaint(small, small_region.astype(np.uint8) * 255, self.radius, cv2.INPAINT_TELEA)
        return _composite(img, _resize(filled, (h, w)), region)


# --------------------------------------------------------------------------- diffusers

_PIPELINE_CACHE: dict[tuple[str, str, str], Any] = {}
_PIPELINE_LOCK = threading.Lock()


def _load_pipeline(model_id: str, *, device: str, dtype: Any) -> Any:
    """DiffusionPipeline.from_pretrained(model_id, local_files_only=True), once per process."""
    key = (model_id, device, str(dtype))
    with _PIPELINE_LOCK:
        if key in _PIPELINE_CACHE:
            return _PIPELINE_CACHE[key]
        from diffusers import DiffusionPipeline

        try:
            with warnings.catch_warnings():  # newer diffusers prefer dtype=; torch_dtype= works in every version
                warnings.simplefilter("ignore", FutureWarning)
                pipe = DiffusionPipeline.from_pretrained(model_id, torch_dtype=dtype, local_files_only=True)
        except (OSError, ValueError, EnvironmentError) as exc:
            looks_local = model_id.startswith((".", "/", "~")) or os.path.isdir(os.path.expanduser(model_id))
            how = (
                "point it at a folder holding a saved diffusers pipeline (with model_index.json)"
                if looks_local
                else f"download it once with internet (`hf download {model_id}`; FLUX.1-Fill-dev needs its licence "
                "accepted on the Hub) or point it at a local diffusers folder"
            )
            first_line = str(exc).splitlines()[0] if str(exc) else ""
            raise InpainterNotConfiguredError(
                f"could not load the inpainting model {model_id!r} from local files "
                f"({exc.__class__.__name__}: {first_line}); {how} via {INPAINT_MODEL_ENV} or model_id=...; "
                "the 'opencv' inpainter works offline"
            ) from exc
        if getattr(pipe, "safety_checker", None) is not None:
            pipe.safety_checker = None  # vegetation backgrounds; a false positive would blank the image
        pipe = pipe.to(device)
        _PIPELINE_CACHE[key] = pipe
        return pipe


class DiffusersInpainter:
    """A diffusers inpainting pipeline (FLUX.1-Fill or SD inpainting); registry name ``diffusers``.

    Pass ``pipeline=`` to use an already-built pipeline (tests build a tiny
    random one), else ``model_id=`` / env ``ROSETTE_INPAINT_MODEL`` is loaded
    from local files only.
    """

    name = "diffusers"

    def __init__(
        self,
        *,
        model_id: str | None = None,
        pipeline: Any = None,
        prompt: str = VEGETATION_PROMPT,
        negative_prompt: str | None = None,
        steps: int = 50,
        guidance: float | None = None,
        longest_edge: int = 1024,
        multiple: int = 8,
        dilate_px: int = DEFAULT_DILATE_PX,
        device: str | None = None,
        dtype: str | None = None,
        show_progress: bool = False,
    ) -> None:
        if pipeline is None:
            model_id = model_id or os.environ.get(INPAINT_MODEL_ENV, "").strip() or None
            if not model_id:
                raise InpainterNotConfiguredError(
                    "the 'diffusers' inpainter needs a model: set "
                    f"{INPAINT_MODEL_ENV} (or model_id=...) to a local diffusers folder or a Hub id already in "
                    "the Hugging Face cache, e.g. black-forest-labs/FLUX.1-Fill-dev or "
                    "stabilityai/stable-diffusion-2-inpainting; the 'opencv' inpainter works offline"
                )
            import torch

            device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            if dtype is None:
                torch_dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
            else:
                torch_dtype = getattr(torch, dtype)
            pipeline = _load_pipeline(model_id, device=device, dtype=torch_dtype)
        else:
            model_id = model_id or f"custom:{type(pipeline).__name__}"
        self.pipeline = pipeline
        pipeline_class = type(pipeline).__name__
        self.is_flux = "Flux" in pipeline_class
        self.prompt = prompt
        self.negative_prompt = negative_prompt
        self.steps = int(steps)
        self.guidance = float(guidance if guidance is not None else (30.0 if self.is_flux else 7.5))
        self.longest_edge = int(longest_edge)
        self.multiple = int(multiple)
        self.dilate_px = int(dilate_px)
        if hasattr(pipeline, "set_progress_bar_config"):
            pipeline.set_progress_bar_config(disable=not show_progress)
        self._call_params = set(inspect.signature(pipeline.__call__).parameters)
        pipe_device = getattr(pipeline, "device", None)
        pipe_dtype = getattr(pipeline, "dtype", None)
        self.config: dict[str, Any] = {
            "inpainter": self.name,
            "model": model_id,
            "pipeline_class": pipeline_class,
            "steps": self.steps,
            "guidance": self.guidance,
            "prompt": self.prompt,
            "negative_prompt": self.negative_prompt,
            "seed_policy": "torch.Generator('cpu').manual_seed(seed), one image per seed; runner seeds 0, 1, 2",
            "longest_edge": self.longest_edge,
            "multiple": self.multiple,
            "mask": f"convex hull of the animal, dilated {self.dilate_px} px",
            "dilate_px": self.dilate_px,
            "device": str(pipe_device) if pipe_device is not None else None,
            "dtype": str(pipe_dtype) if pipe_dtype is not None else None,
            "composite": "original pixels outside the inpainting mask",
        }

    def inpaint(self, rgb: np.ndarray, mask: np.ndarray, *, seed: int = 0) -> np.ndarray:
        """Photo with the animal's convex hull regenerated by the pipeline for ``seed`` (HxWx3 uint8)."""
        import torch
        from PIL import Image

        img = as_rgb_uint8(rgb)
        region = inpainting_mask(as_bool_mask(mask, shape=img.shape[:2]), dilate_px=self.dilate_px)
        if not region.any():
            return img.copy()
        h, w = img.shape[:2]
        th, tw = fit_size_for_diffusion(h, w, longest_edge=self.longest_edge, multiple=self.multiple)
        small = _resize(img, (th, tw))
        small_region = _resize_region(region, (th, tw))
        kwargs: dict[str, Any] = {
            "prompt": self.prompt,
            "image": Image.fromarray(small),
            "mask_image": Image.fromarray(small_region.astype(np.uint8) * 255),
            "height": th,
            "width": tw,
            "num_inference_steps": self.steps,
            "guidance_scale": self.guidance,
            "generator": torch.Generator("cpu").manual_seed(int(seed)),
            "output_type": "np",
        }
        if self.negative_prompt and "negative_prompt" in self._call_params:
            kwargs["negative_prompt"] = self.negative_prompt
        with torch.inference_mode():
            result = self.pipeline(**{k: v for k, v in kwargs.items() if k in self._call_params})
        out = np.asarray(result.images[0])
        if np.issubdtype(out.dtype, np.floating):
            out = np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)
        if out.shape[:2] != (th, tw):
            out = _resize(out, (th, tw))
        return _composite(img, _resize(out[:, :, :3], (h, w)), region)


# --------------------------------------------------------------------------- registry

INPAINTERS: Registry[Inpainter] = Registry("inpainter")


@INPAINTERS.register("opencv", description="OpenCV Telea inpainting of the convex hull (offline, no weights)")
def _make_opencv(**opts: Any) -> Inpainter:
    return OpenCVInpainter(**opts)


@INPAINTERS.register("diffusers", description="diffusion inpainting (FLUX.1-Fill / SD inpainting), needs weights")
def _make_diffusers(**opts: Any) -> Inpainter:
    return DiffusersInpainter(**opts)


def list_inpainters() -> list[str]:
    """Registered inpainter names."""
    return INPAINTERS.names()


def describe_inpainters() -> dict[str, str]:
    """Inpainter name -> one-line description."""
    return INPAINTERS.describe()


def create_inpainter(name: str, **opts: Any) -> Inpainter:
    """Build the inpainter registered under ``name`` (raises UnknownComponentError on unknown names)."""
    return INPAINTERS.create(name, **opts)


def default_inpainter_name() -> str:
    """``"diffusers"`` when ``ROSETTE_INPAINT_MODEL`` is set, else ``"opencv"``."""
    return "diffusers" if os.environ.get(INPAINT_MODEL_ENV, "").strip() else "opencv"
