"""Draw annotation boxes on a frame: each box's outline with its label, the highlighted one thicker."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import cv2
import numpy as np

from core.annotations import Box

#: Outline colours (RGB): the highlighted box, the others.
HIGHLIGHT_COLOUR = (255, 196, 0)
OTHER_COLOUR = (0, 200, 255)


def _box_rect(box: Box, width: int, height: int) -> tuple[int, int, int, int]:
    x0 = min(max(0, round(box.x * width)), width - 1)
    y0 = min(max(0, round(box.y * height)), height - 1)
    x1 = min(max(x0, round((box.x + box.w) * width) - 1), width - 1)
    y1 = min(max(y0, round((box.y + box.h) * height) - 1), height - 1)
    return x0, y0, x1, y1


#: how much light is left on the parts of another animal's box that show in an annotation's crop
NEIGHBOUR_DIM = 0.35


Rect = tuple[float, float, float, float]


def _pixel_span(rect: Rect, width: int, height: int) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) pixels a normalised (x, y, w, h) covers, clipped to the frame (possibly
    empty; the rectangle may reach past the frame's edges)."""
    x, y, w, h = rect
    x0 = min(max(0, round(x * width)), width)
    y0 = min(max(0, round(y * height)), height)
    x1 = min(max(x0, round((x + w) * width)), width)
    y1 = min(max(y0, round((y + h) * height)), height)
    return x0, y0, x1, y1


def dim_neighbours(rgb: np.ndarray, neighbours: Sequence[Rect], own: Rect, *, factor: float = NEIGHBOUR_DIM
                   ) -> np.ndarray:
    """A copy of ``rgb`` (an annotation's crop) with the pixels of other animals' boxes darkened to ``factor``,
    except where they overlap the animal's ``own`` box (all (x, y, w, h) shares of the crop, as
    :func:`core.annotations.box_in_crop` gives them): the crop's margin shows a strip of a neighbour, and a
    curator must see at once which animal is asked about."""
    if not neighbours:
        return rgb
    out = np.array(rgb, copy=True)
    height, width = out.shape[:2]
    dim = np.zeros((height, width), bool)
    for rect in neighbours:
        x0, y0, x1, y1 = _pixel_span(rect, width, height)
        dim[y0:y1, x0:x1] = True
    x0, y0, x1, y1 = _pixel_span(own, width, height)
    dim[y0:y1, x0:x1] = False
    out[dim] = (out[dim].astype(np.float32) * factor).round().astype(out.dtype)
    return out


def draw_boxes(rgb: np.ndarray, boxes: Sequence[Box], labels: Sequence[str], *,
               highlight: int | None = None) -> np.ndarray:
    """A copy of the H x W x 3 uint8 ``rgb`` frame with each normalised box outlined and labelled; the box at
    index ``highlight`` is drawn thicker (and in its own colour). ``labels`` pairs with ``boxes``."""
    if len(boxes) != len(labels):
        raise ValueError(f"{len(boxes)} boxes but {len(labels)} labels")
    out = np.ascontiguousarray(rgb[..., :3] if rgb.ndim == 3 else np.stack([rgb] * 3, axis=-1), dtype=np.uint8).copy()
    height, width = out.shape[:2]
    base = max(1, round(min(width, height) / 300))
    scale = max(0.4, min(width, height) / 800)
    order = [i for i in range(len(boxes)) if i != highlight] + ([highlight] if highlight is not None
                                                                  and 0 <= highlight < len(boxes) else [])
    for i in order:
        hl = i == highlight
        colour = HIGHLIGHT_COLOUR if hl else OTHER_COLOUR
        thick = base * 3 if hl else base
        x0, y0, x1, y1 = _box_rect(boxes[i], width, height)
        cv2.rectangle(out, (x0, y0), (x1, y1), colour, thick)
        label = str(labels[i])
        if not label:
            continue
        text_thick = max(1, thick // 2)
        (tw, th), baseline = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, scale, text_thick)
        ty = y0 - thick if y0 - th - baseline - thick >= 0 else min(height - 1, y0 + th + baseline + thick)
        tx = min(max(0, x0), max(0, width - tw - 2))
        cv2.rectangle(out, (tx, ty - th - baseline), (tx + tw + 2, ty + baseline // 2), colour, cv2.FILLED)
        cv2.putText(out, label, (tx + 1, ty - baseline // 2), cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0),
                    text_thick, cv2.LINE_AA)
    return out


def _ascii(text: object) -> str:
    """OpenCV's fonts draw ASCII only: accents are dropped (Sao Joao), anything else becomes '?'."""
    plain = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode("ascii")
    return "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in plain)


def draw_legend(rgb: np.ndarray, entries: Sequence[tuple[bool, str]]) -> np.ndarray:
    """The frame with a legend strip added below it: one line per ``(highlighted, words)`` entry, each after a
    swatch of its box colour (the highlighted box's, or the others'). The strip is added under the picture, never
    over it, so no box is hidden; the text shrinks to fit the frame's width. No entries: the frame unchanged."""
    if not entries:
        return rgb
    entries = [(hl, _ascii(text)) for hl, text in entries]
    frame = np.ascontiguousarray(rgb[..., :3] if rgb.ndim == 3 else np.stack([rgb] * 3, axis=-1), dtype=np.uint8)
    width = frame.shape[1]
    # large enough to read when a wide frame is shown a few hundred pixels wide, then shrunk to fit its width
    scale = max(0.4, width / 500)
    thick = max(1, round(scale * 1.5))
    swatch = max(10, round(22 * scale))
    pad = max(4, swatch // 3)
    widest = max(cv2.getTextSize(str(text), cv2.FONT_HERSHEY_SIMPLEX, scale, thick)[0][0] for _, text in entries)
    room = width - 3 * pad - swatch
    if widest > room > 0:
        scale = max(0.3, scale * room / widest)
        thick = max(1, round(scale * 1.5))
    line_h = max(swatch, cv2.getTextSize("Ag", cv2.FONT_HERSHEY_SIMPLEX, scale, thick)[0][1] * 2) + pad
    strip = np.full((pad + line_h * len(entries), width, 3), 255, dtype=np.uint8)
    for k, (highlighted, text) in enumerate(entries):
        top = pad + k * line_h
        colour = HIGHLIGHT_COLOUR if highlighted else OTHER_COLOUR
        cv2.rectangle(strip, (pad, top), (pad + swatch, top + swatch), colour, cv2.FILLED if highlighted else
                      max(2, swatch // 5))
        (_, th), _ = cv2.getTextSize(str(text), cv2.FONT_HERSHEY_SIMPLEX, scale, thick)
        cv2.putText(strip, str(text), (2 * pad + swatch, top + (swatch + th) // 2), cv2.FONT_HERSHEY_SIMPLEX, scale,
                    (0, 0, 0), thick, cv2.LINE_AA)
    return np.concatenate([frame, strip], axis=0)
