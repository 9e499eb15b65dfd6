"""The words the Mask and Diagnostics tabs share: curator words for the image variants and the mask warnings,
who made a mask or fills a background, the ML term as a hover tooltip, numbers for display.

Words are for curators; the ML term goes in a tooltip (``<abbr title=...>``), and every number carries its
provenance (model, weights, variant, masker, inpainter + seed) in a hover text.
"""

from __future__ import annotations

import html
import math
import os
from typing import Any

from core.inspect.inpainting import INPAINT_MODEL_ENV, list_inpainters
from core.inspect.masking import SAM2_CHECKPOINT_ENV, default_masker_name, list_maskers, sam2_checkpoint_configured

#: Curator words for each image variant (the registry name goes in the tooltip).
VARIANT_WORDS: dict[str, str] = {
    "full_rgb": "Whole photo",
    "foreground_only": "Animal only",
    "background_only": "Background with animal-shaped hole",
    "background_inpainted": "Background, animal painted out",
    "silhouette": "Outline only",
    "mirror": "Animal mirrored",
}
VARIANT_HELP: dict[str, str] = {
    "full_rgb": "full_rgb: the photo as it is",
    "foreground_only": "foreground_only: background set to black, only the animal's pixels kept",
    "background_only": "background_only (bg_silhouette): animal set to black; the hole keeps its silhouette",
    "background_inpainted": "background_inpainted: the animal's convex hull removed and filled in by the inpainter",
    "silhouette": "silhouette: the binary mask in white on black",
    "mirror": "mirror: horizontal flip of the animal cut-out",
}
FLAG_WORDS: dict[str, tuple[str, str]] = {
    "empty": ("No animal was found: the mask is empty.", "empty mask (0 foreground pixels)"),
    "full_frame": ("The whole photo was taken as the animal.", "full-frame mask: foreground >= 95 % of the frame"),
    "multi_component": ("The mask is in several separate pieces.",
                        "multi-component mask: more than one 8-connected component holding >= 1 % of the mask"),
    "short_of_box": ("The mask stops well short of the box you drew: head, neck, legs or tail are likely missing.",
                     "partial mask: its bounding box spans < 75 % of the drawn box's width or height"),
    "misses_clicks": ("A click on the animal lies outside the mask: part of the animal is likely missing.",
                      "an animal click (label 1) falls on a background pixel of the mask"),
}


def tip(text: str, term: str) -> str:
    """``text`` with the ML term ``term`` as a hover tooltip (HTML ``<abbr>``, survives Gradio's sanitiser)."""
    return f'<abbr title="{html.escape(term, quote=True)}">{html.escape(text)}</abbr>'


def fmt(x: float | None, digits: int = 3) -> str:
    """A number for display; an em dash for missing / NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.{digits}f}"


def masker_in_use() -> tuple[str, str]:
    """(registry name, sentence for curators) of the masker the Mask tab runs: SAM 2 if configured, else GrabCut."""
    name = default_masker_name()
    if name == "sam2":
        ckpt = os.path.basename(os.environ.get(SAM2_CHECKPOINT_ENV, "").strip())
        return name, f"SAM 2 (Segment Anything 2, checkpoint {ckpt})"
    return name, "GrabCut (classical, no SAM 2 checkpoint configured)"


def describe_mask_source(source: str | None, details: dict[str, Any] | None = None) -> str:
    """Who made a mask, in words: ``GrabCut (classical ...)``, ``SAM 2 (checkpoint ...)`` or ``the file's alpha``."""
    details = details or {}
    if not source:
        return "no mask yet"
    if source == "grabcut":
        return "GrabCut (classical)" if sam2_checkpoint_configured() else \
            "GrabCut (classical, no SAM 2 checkpoint configured)"
    if source == "sam2":
        ckpt = details.get("checkpoint") or "?"
        return f"SAM 2 (Segment Anything 2, checkpoint {str(ckpt).rsplit('/', 1)[-1]})"
    if source == "alpha":
        return "the photo file's own transparency (alpha channel)"
    return source


def masker_names() -> list[str]:
    """The maskers a curator can choose (the photo file's own alpha is not one to choose)."""
    return [n for n in list_maskers() if n != "alpha"]


def inpainter_names() -> list[str]:
    return list_inpainters()


def describe_inpainter(name: str) -> str:
    """Which inpainter fills the background, in words (OpenCV Telea unless diffusers is configured)."""
    if name == "opencv":
        return "OpenCV Telea (classical, no diffusion model configured)" \
            if not os.environ.get(INPAINT_MODEL_ENV, "").strip() else "OpenCV Telea (classical)"
    if name == "diffusers":
        return f"diffusion model {os.environ.get(INPAINT_MODEL_ENV, '').strip() or '(not configured)'}"
    return name


def weights_label(model_config: dict[str, Any]) -> str:
    """The weights part of a backbone config in one line (source and the start of the sha256)."""
    source = model_config.get("weights") or model_config.get("weight_source") or model_config.get("weights_source")
    sha = model_config.get("weights_sha256") or model_config.get("checkpoint_hash")
    parts = [str(source)] if source else []
    if sha:
        parts.append(f"sha256 {str(sha)[:12]}")
    return ", ".join(parts) or "weights not recorded"
