"""Image variants of one photo and its animal mask (docs/DESIGN.md section 4, "Image variants").

With photo I (HxWx3 uint8) and foreground mask M (HxW bool):

- ``full_rgb``:             I
- ``foreground_only``:      I * M              (background zeroed)
- ``background_only``:      I * (1 - M)        (foreground zeroed; the silhouette hole stays,
                                                 so it measures background + silhouette leakage;
                                                 alias ``bg_silhouette``)
- ``background_inpainted``: the inpainter's output for (I, M), passed in as ``inpainted``
- ``silhouette``:           255 * M on all three channels
- ``mirror``:               flip_horizontal(I * M)  (the foreground cut-out, mirrored)

All variants are deterministic and return a new HxWx3 uint8 array.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "MASK_FREE_VARIANTS",
    "VARIANTS",
    "VARIANT_ALIASES",
    "canonical_variant",
    "flip_horizontal",
    "make_variant",
]

VARIANTS = ("full_rgb", "foreground_only", "background_only", "background_inpainted", "silhouette", "mirror")
MASK_FREE_VARIANTS = ("full_rgb",)
#: Other names used in the papers for the same variant.
VARIANT_ALIASES = {"bg_silhouette": "background_only"}


def canonical_variant(variant: str) -> str:
    """The VARIANTS name for ``variant`` (aliases resolved); clear error on unknown names."""
    name = VARIANT_ALIASES.get(variant, variant)
    if name not in VARIANTS:
        raise ValueError(
            f"unknown image variant {variant!r}; known variants: {', '.join(VARIANTS)}"
            f" (aliases: {', '.join(f'{a}={b}' for a, b in VARIANT_ALIASES.items())})"
        )
    return name


def flip_horizontal(rgb: np.ndarray) -> np.ndarray:
    """Left-right mirror: out[y, x] = in[y, W - 1 - x] (a new contiguous array)."""
    return np.ascontiguousarray(np.asarray(rgb)[:, ::-1])


def _check_rgb(rgb: np.ndarray) -> np.ndarray:
    arr = np.asarray(rgb)
    if arr.ndim != 3 or arr.shape[2] != 3:
        raise ValueError(f"expected an HxWx3 image, got shape {arr.shape}")
    if arr.dtype != np.uint8:
        raise ValueError(f"expected a uint8 image, got dtype {arr.dtype}")
    return arr


def _check_mask(mask: np.ndarray | None, variant: str, shape: tuple[int, int]) -> np.ndarray:
    if mask is None:
        raise ValueError(f"the {variant!r} variant needs an animal mask, and this photo has none; mask it first")
    m = np.asarray(mask)
    if m.ndim == 3 and m.shape[2] == 1:
        m = m[:, :, 0]
    if m.shape != shape:
        raise ValueError(f"mask shape {m.shape} does not match the image size {shape}")
    return m.astype(bool)


def make_variant(
    rgb: np.ndarray,
    mask: np.ndarray | None,
    variant: str,
    *,
    inpainted: np.ndarray | None = None,
) -> np.ndarray:
    """The ``variant`` of photo ``rgb`` with foreground ``mask`` (see module docstring), HxWx3 uint8."""
    name = canonical_variant(variant)
    img = _check_rgb(rgb)
    if name == "full_rgb":
        return img.copy()
    m = _check_mask(mask, name, img.shape[:2])
    if name == "foreground_only":
        return np.where(m[:, :, None], img, np.uint8(0))
    if name == "background_only":
        return np.where(m[:, :, None], np.uint8(0), img)
    if name == "silhouette":
        return np.repeat((m.astype(np.uint8) * 255)[:, :, None], 3, axis=2)
    if name == "mirror":
        return flip_horizontal(np.where(m[:, :, None], img, np.uint8(0)))
    # background_inpainted
    if inpainted is None:
        raise ValueError(
            "the 'background_inpainted' variant needs the inpainted photo: pass "
            "inpainted=create_inpainter(...).inpaint(rgb, mask, seed=...)"
        )
    out = _check_rgb(inpainted)
    if out.shape != img.shape:
        raise ValueError(f"inpainted image shape {out.shape} does not match the photo {img.shape}")
    return out.copy()
