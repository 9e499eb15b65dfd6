"""Selective sensitivity (ID-Sim; docs/DESIGN.md section 4, "Selective sensitivity"): pure edits and statistics.

A selective matcher keeps its similarity when the *context* of a photo changes and drops it when the *identity*
changes. Each test photo with its animal mask is edited along four dimensions (``background``, ``lighting``,
``viewpoint``, ``identity``) at the strengths ``STRENGTHS`` = 0 to 1, and the model's similarity of each edit to
the original is read per strength. At t = 0 every edit returns the photo unchanged (bit-identical), so its
similarity is exactly 1. :mod:`core.inspect.sensitivity_stats` turns the points into slopes with bootstrap
intervals, a selectivity ratio and a verdict.

Each edit's formula, the donor of a new coat, and the statistics: docs/inspect.md."""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import cv2
import numpy as np
from PIL import Image

from core.inspect.inpainting import fit_size_for_diffusion
from core.inspect.masking import as_bool_mask, as_rgb_uint8

__all__ = [
    "CONTEXT_DIMENSIONS",
    "DIMENSIONS",
    "DIMENSION_WORDS",
    "EDIT_VERSION",
    "IDENTITY_PROMPT",
    "STRENGTHS",
    "DiffusionIdentityEditor",
    "EditDirections",
    "EditSettings",
    "background_donors",
    "coat_canvas",
    "draw_directions",
    "edit_background",
    "edit_identity",
    "edit_lighting",
    "edit_photo",
    "edit_viewpoint",
    "nearest_other_individual",
    "photo_seed",
    "viewpoint_homography",
]

DIMENSIONS = ("background", "lighting", "viewpoint", "identity")
CONTEXT_DIMENSIONS = ("background", "lighting", "viewpoint")
STRENGTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
#: Bumped whenever an edit's pixels change for the same settings, so cached embeddings of old edits are not reused.
EDIT_VERSION = 1
#: What each dimension means, in the words a curator reads ("moved more by lighting than by ...").
DIMENSION_WORDS = {
    "background": "a new background",
    "lighting": "lighting",
    "viewpoint": "a change of viewpoint",
    "identity": "a different animal's coat",
}
DIMENSION_COLOURS = {"background": "#e67e22", "lighting": "#daa520", "viewpoint": "#2980b9", "identity": "#c0392b"}
IDENTITY_PROMPT = "the same kind of animal with a different individual's coat pattern, same pose, photo"


# --------------------------------------------------------------------------- settings and per-photo draws


@dataclass(frozen=True)
class EditSettings:
    """How far each context edit goes at strength 1 (the identity edit always ends at the donor's coat)."""

    gamma: float = 1.4  # v ** gamma (darker) or v ** (1 / gamma) (brighter)
    exposure_ev: float = 0.5  # stops: x 1.41 or x 0.71
    temperature: float = 0.2  # red x (1 + T), blue x (1 - T) (warmer) or the reverse (cooler)
    max_angle_deg: float = 30.0  # in-plane rotation and out-of-plane turn
    scale: float = 0.25  # zoom in or out by this fraction
    crop: float = 0.10  # shift of the crop window, as a fraction of the photo's side

    def __post_init__(self) -> None:
        if self.gamma < 1 or self.exposure_ev < 0 or not 0 <= self.temperature < 1:
            raise ValueError("need gamma >= 1, exposure_ev >= 0 and 0 <= temperature < 1")
        if self.exposure_ev * math.log(2) <= self.temperature / (1 - self.temperature) and self.temperature > 0:
            raise ValueError("the exposure change must outweigh the temperature change (ev * ln 2 > T / (1 - T)), "
                             "so that every pixel moves one way as the strength grows")
        if not 0 <= self.max_angle_deg < 80 or not 0 <= self.scale < 1 or not 0 <= self.crop < 0.5:
            raise ValueError("need 0 <= max_angle_deg < 80, 0 <= scale < 1 and 0 <= crop < 0.5")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def fingerprint(self) -> str:
        """16 hex chars over the settings and :data:`EDIT_VERSION` (part of every edited photo's cache key)."""
        blob = json.dumps({**self.to_dict(), "edit_version": EDIT_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class EditDirections:
    """The random choices of one photo's context edits, drawn once so that all strengths follow one path."""

    brightness: int  # +1 brighter, -1 darker (gamma and exposure together)
    temperature: int  # +1 warmer, -1 cooler
    rotation: int  # +1 anticlockwise, -1 clockwise
    turn: int  # +1 / -1: which way the camera turns about the vertical axis
    zoom: int  # +1 zoom in (crop), -1 zoom out
    shift: tuple[float, float]  # crop window shift direction (dx, dy), each in [-1, 1]


def photo_seed(seed: int, key: str) -> int:
    """A per-photo seed from the run's ``seed`` and a stable ``key`` (the photo's content hash): the same photo gets
    the same edits in every run, whatever the order of the photos."""
    digest = hashlib.sha256(f"{int(seed)}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def draw_directions(seed: int) -> EditDirections:
    """One photo's :class:`EditDirections` from its :func:`photo_seed`."""
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1, 1]), size=5)
    dx, dy = rng.uniform(-1.0, 1.0, size=2)
    return EditDirections(*(int(s) for s in signs), shift=(float(dx), float(dy)))


# --------------------------------------------------------------------------- the edits


def _check_strength(strength: float) -> float:
    t = float(strength)
    if not 0.0 <= t <= 1.0 or math.isnan(t):
        raise ValueError(f"an edit's strength must lie in [0, 1], got {strength!r}")
    return t


def _blend(rgb: np.ndarray, other: np.ndarray, where: np.ndarray, t: float) -> np.ndarray:
    """round((1 - t) rgb + t other) where ``where``, rgb elsewhere (uint8)."""
    mixed = np.rint((1.0 - t) * rgb.astype(np.float32) + t * other.astype(np.float32))
    return np.where(where[:, :, None], np.clip(mixed, 0, 255).astype(np.uint8), rgb)


def _fit(img: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    h, w = shape
    if img.shape[:2] == (h, w):
        return img
    shrink = h * w < img.shape[0] * img.shape[1]
    return cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)


def edit_background(rgb: np.ndarray, mask: np.ndarray, strength: float, *, background: np.ndarray) -> np.ndarray:
    """The animal kept, the rest blended towards ``background`` (resized to the photo) at ``strength``."""
    img = as_rgb_uint8(rgb)
    t = _check_strength(strength)
    if t == 0.0:
        return img.copy()
    m = as_bool_mask(mask, shape=img.shape[:2])
    return _blend(img, _fit(as_rgb_uint8(background), img.shape[:2]), ~m, t)


def edit_lighting(rgb: np.ndarray, strength: float, *, directions: EditDirections,
                  settings: EditSettings = EditSettings()) -> np.ndarray:
    """Gamma, exposure and colour temperature moved ``strength`` of the way (formula: docs/inspect.md)."""
    img = as_rgb_uint8(rgb)
    t = _check_strength(strength)
    if t == 0.0:
        return img.copy()
    b, c = directions.brightness, directions.temperature
    v = img.astype(np.float32) / 255.0
    v = np.power(v, settings.gamma ** (-b * t)) * (2.0 ** (b * t * settings.exposure_ev))
    warm = c * t * settings.temperature
    v[:, :, 0] *= 1.0 + warm
    v[:, :, 2] *= 1.0 - warm
    return np.clip(np.rint(v * 255.0), 0, 255).astype(np.uint8)


def viewpoint_homography(shape: tuple[int, int], strength: float, *, directions: EditDirections,
                         settings: EditSettings = EditSettings()) -> np.ndarray:
    """The 3x3 homography of the viewpoint edit (identity at strength 0)."""
    h, w = shape
    t = _check_strength(strength)
    cx, cy, f = (w - 1) / 2.0, (h - 1) / 2.0, float(max(h, w))
    turn = math.radians(t * settings.max_angle_deg * directions.turn)
    k = np.array([[f, 0, cx], [0, f, cy], [0, 0, 1]], dtype=np.float64)
    r_y = np.array([[math.cos(turn), 0, math.sin(turn)], [0, 1, 0], [-math.sin(turn), 0, math.cos(turn)]])
    persp = k @ r_y @ np.linalg.inv(k)
    centre = persp @ np.array([cx, cy, 1.0])
    recentre = np.array([[1, 0, cx - centre[0] / centre[2]], [0, 1, cy - centre[1] / centre[2]], [0, 0, 1]])
    angle = math.radians(t * settings.max_angle_deg * directions.rotation)
    zoom = (1.0 + settings.scale) ** (t * directions.zoom)
    dx, dy = directions.shift
    shift = (t * settings.crop * dx * w, t * settings.crop * dy * h)
    ca, sa = zoom * math.cos(angle), zoom * math.sin(angle)
    affine = np.array([[ca, -sa, cx + shift[0] - ca * cx + sa * cy],
                       [sa, ca, cy + shift[1] - sa * cx - ca * cy],
                       [0, 0, 1]], dtype=np.float64)
    return affine @ recentre @ persp


def edit_viewpoint(rgb: np.ndarray, strength: float, *, directions: EditDirections,
                   settings: EditSettings = EditSettings()) -> np.ndarray:
    """The photo seen from a turned, rotated, zoomed and shifted viewpoint (reflected borders)."""
    img = as_rgb_uint8(rgb)
    t = _check_strength(strength)
    if t == 0.0:
        return img.copy()
    hmat = viewpoint_homography(img.shape[:2], t, directions=directions, settings=settings)
    return cv2.warpPerspective(img, hmat, (img.shape[1], img.shape[0]), flags=cv2.INTER_LINEAR,
                               borderMode=cv2.BORDER_REFLECT_101)


def _box(mask: np.ndarray) -> tuple[int, int, int, int]:
    ys, xs = np.nonzero(mask)
    return int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1


def coat_canvas(shape: tuple[int, int], target_mask: np.ndarray, donor_rgb: np.ndarray,
                donor_mask: np.ndarray) -> np.ndarray:
    """An HxWx3 picture holding the donor's coat on the target mask's bounding box (zeros elsewhere): the donor's
    masked pixels in their bounding box, each unmasked pixel of that box filled with its nearest coat pixel, resized
    onto the target's box."""
    donor = as_rgb_uint8(donor_rgb)
    dmask = as_bool_mask(donor_mask, shape=donor.shape[:2])
    tmask = as_bool_mask(target_mask, shape=shape)
    if not dmask.any():
        raise ValueError("the donor photo's mask is empty: it has no coat to give")
    canvas = np.zeros((*shape, 3), np.uint8)
    if not tmask.any():
        return canvas
    y0, y1, x0, x1 = _box(dmask)
    crop, cm = donor[y0:y1, x0:x1], dmask[y0:y1, x0:x1]
    if not cm.all():  # nearest coat pixel for every pixel of the box the donor's mask leaves out
        _, labels = cv2.distanceTransformWithLabels((~cm).astype(np.uint8), cv2.DIST_L2, 5,
                                                    labelType=cv2.DIST_LABEL_PIXEL)
        ys, xs = np.nonzero(cm)
        lut_y = np.zeros(int(labels.max()) + 1, np.intp)
        lut_x = np.zeros_like(lut_y)
        lut_y[labels[ys, xs]], lut_x[labels[ys, xs]] = ys, xs
        crop = crop[lut_y[labels], lut_x[labels]]
    ty0, ty1, tx0, tx1 = _box(tmask)
    canvas[ty0:ty1, tx0:tx1] = _fit(np.ascontiguousarray(crop), (ty1 - ty0, tx1 - tx0))
    return canvas


def edit_identity(rgb: np.ndarray, mask: np.ndarray, strength: float, *, donor_rgb: np.ndarray | None = None,
                  donor_mask: np.ndarray | None = None, coat: np.ndarray | None = None) -> np.ndarray:
    """Inside the mask, the photo blended towards another animal's coat at ``strength`` (docs/inspect.md);
    ``coat`` (from :func:`coat_canvas`) may be passed instead of the donor, to make it once for all strengths."""
    img = as_rgb_uint8(rgb)
    t = _check_strength(strength)
    if t == 0.0:
        return img.copy()
    m = as_bool_mask(mask, shape=img.shape[:2])
    if coat is None:
        if donor_rgb is None or donor_mask is None:
            raise ValueError("the identity edit needs the donor's photo and mask (or its coat canvas)")
        coat = coat_canvas(img.shape[:2], m, donor_rgb, donor_mask)
    return _blend(img, coat, m, t)


class DiffusionIdentityEditor:
    """The identity edit of the paper: the animal repainted by a diffusers inpainting pipeline, the pipeline's noise
    strength = the edit's strength; only pixels inside the animal's mask change. Built on a
    :class:`core.inspect.inpainting.DiffusersInpainter` (its pipeline, steps, guidance and size rules)."""

    name = "diffusion"

    def __init__(self, inpainter: Any, *, prompt: str = IDENTITY_PROMPT, dilate_px: int = 4) -> None:
        self.pipeline = inpainter.pipeline
        self.steps, self.guidance = int(inpainter.steps), float(inpainter.guidance)
        self.longest_edge, self.multiple = int(inpainter.longest_edge), int(inpainter.multiple)
        self.prompt, self.dilate_px = prompt, int(dilate_px)
        self._params = set(inspect.signature(self.pipeline.__call__).parameters)
        if "strength" not in self._params:
            raise ValueError(f"the inpainting pipeline {type(self.pipeline).__name__} takes no noise 'strength'; "
                             "the identity edit needs one (Stable Diffusion inpainting and FLUX.1-Fill have it)")
        self.config: dict[str, Any] = {
            "identity_edit": self.name, "model": inpainter.config.get("model"),
            "pipeline_class": type(self.pipeline).__name__, "steps": self.steps, "guidance": self.guidance,
            "prompt": prompt, "noise_strength": "the edit's strength", "mask": f"animal mask dilated {dilate_px} px, "
            "composited back inside the animal's mask only", "seed_policy": "torch.Generator('cpu') per photo seed"}

    def __call__(self, rgb: np.ndarray, mask: np.ndarray, strength: float, *, seed: int = 0) -> np.ndarray:
        img = as_rgb_uint8(rgb)
        t = _check_strength(strength)
        if t == 0.0:
            return img.copy()
        import torch  # lazy: torch is only needed when a diffusion model repaints the animal

        m = as_bool_mask(mask, shape=img.shape[:2])
        region = m
        if self.dilate_px > 0:
            k = 2 * self.dilate_px + 1
            region = cv2.dilate(m.astype(np.uint8), cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (k, k))) > 0
        h, w = img.shape[:2]
        th, tw = fit_size_for_diffusion(h, w, longest_edge=self.longest_edge, multiple=self.multiple)
        kwargs: dict[str, Any] = {
            "prompt": self.prompt, "image": Image.fromarray(_fit(img, (th, tw))),
            "mask_image": Image.fromarray((_fit(region.astype(np.uint8) * 255, (th, tw)) > 0).astype(np.uint8) * 255),
            "height": th, "width": tw, "num_inference_steps": self.steps, "guidance_scale": self.guidance,
            "strength": t, "generator": torch.Generator("cpu").manual_seed(int(seed) % (2 ** 63)),
            "output_type": "np"}
        with torch.inference_mode():
            result = self.pipeline(**{k: v for k, v in kwargs.items() if k in self._params})
        out = np.asarray(result.images[0])
        if np.issubdtype(out.dtype, np.floating):
            out = np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)
        out = _fit(np.ascontiguousarray(out[:, :, :3]), (h, w))
        return np.where(m[:, :, None], out, img)


IdentityEditor = Callable[..., np.ndarray]


def edit_photo(rgb: np.ndarray, mask: np.ndarray, dimension: str, strength: float, *,
               directions: EditDirections | None = None, settings: EditSettings = EditSettings(),
               background: np.ndarray | None = None, donor_rgb: np.ndarray | None = None,
               donor_mask: np.ndarray | None = None, coat: np.ndarray | None = None,
               identity_editor: IdentityEditor | None = None, seed: int = 0) -> np.ndarray:
    """One edit of one photo: ``dimension`` (one of :data:`DIMENSIONS`) at ``strength`` (0..1). What each needs:
    background: ``background``; lighting and viewpoint: ``directions``; identity: the donor (or ``coat``), or an
    ``identity_editor(rgb, mask, strength, seed=...)`` such as :class:`DiffusionIdentityEditor`."""
    t = _check_strength(strength)
    if dimension == "background":
        if background is None:
            raise ValueError("the background edit needs the new background")
        return edit_background(rgb, mask, t, background=background)
    if dimension in ("lighting", "viewpoint"):
        if directions is None:
            raise ValueError(f"the {dimension} edit needs the photo's edit directions (draw_directions)")
        fn = edit_lighting if dimension == "lighting" else edit_viewpoint
        return fn(rgb, t, directions=directions, settings=settings)
    if dimension == "identity":
        if identity_editor is not None:
            return identity_editor(rgb, mask, t, seed=seed)
        return edit_identity(rgb, mask, t, donor_rgb=donor_rgb, donor_mask=donor_mask, coat=coat)
    raise ValueError(f"unknown edit dimension {dimension!r}; expected one of {', '.join(DIMENSIONS)}")


# --------------------------------------------------------------------------- donors


def nearest_other_individual(scores: np.ndarray, labels: Sequence[Any],
                             groups: Sequence[Any] | None = None) -> np.ndarray:
    """For each photo i, the index of the photo j with the highest score s(i, j) among photos of *another*
    individual (labels differ) of the same group (species), -1 when there is none. Ties go to the lower index."""
    s = np.asarray(scores, dtype=np.float64)
    lab = np.asarray([str(x) for x in labels])
    if s.shape != (len(lab), len(lab)):
        raise ValueError(f"scores must be N x N for {len(lab)} photos, got {s.shape}")
    allowed = lab[:, None] != lab[None, :]
    if groups is not None:
        grp = np.asarray([str(g) for g in groups])
        allowed &= grp[:, None] == grp[None, :]
    masked = np.where(allowed, s, -np.inf)
    best = np.argmax(masked, axis=1)
    return np.where(allowed.any(axis=1), best, -1)


def background_donors(keys: Sequence[str], labels: Sequence[Any], sightings: Sequence[Any] | None, *,
                      seed: int = 0) -> np.ndarray:
    """For each photo, the photo whose painted-out background it receives: drawn (seeded per photo, by its key)
    among the photos of another individual and another sighting; failing that, of another sighting; failing that,
    any other photo; -1 when the set has one photo. Candidates are taken in key order, so the draw does not depend
    on the order of the photos."""
    n = len(keys)
    lab = [str(x) for x in labels]
    sig = [None if sightings is None else sightings[i] for i in range(n)]
    order = sorted(range(n), key=lambda i: keys[i])
    out = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        other_sighting = [j for j in order if j != i and (sig[i] is None or sig[j] != sig[i] or sig[j] is None)]
        tiers = ([j for j in other_sighting if lab[j] != lab[i]], other_sighting, [j for j in order if j != i])
        pool = next((tier for tier in tiers if tier), [])
        if pool:
            out[i] = pool[int(np.random.default_rng(photo_seed(seed, keys[i])).integers(len(pool)))]
    return out
