"""Masking and variant throughput on the CPU.

- GrabCut masks per second on nyala photos (512 px, default settings: 256 px work size, 5 iterations).
- SAM 2.1 Hiera-tiny (random weights, same compute as the real checkpoint) masks per second on
  the CPU: a new photo (image encoder at 1024 px + prompt decoder) and a re-prompt on the same photo.
- Variant generation: all six variants of one photo per second, including the OpenCV
  inpainting that ``background_inpainted`` needs (masks computed beforehand).

Run: ``.venv/bin/python tests/benchmarks/run.py masking``.
"""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
NYALA = ROOT.parent / "shared" / "data" / "nyala"


def _photos(n: int) -> list[np.ndarray]:
    with open(NYALA / "manifest.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    step = max(1, len(rows) // n)
    return [np.asarray(Image.open(NYALA / "images" / r["filename"]).convert("RGB")) for r in rows[::step][:n]]


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def run() -> list[dict]:
    from core.inspect.inpainting import create_inpainter
    from core.inspect.masking import create_masker, mask_quality
    from core.inspect.variants import VARIANTS, make_variant

    rows: list[dict] = []
    photos = _photos(12)
    note_imgs = f"{len(photos)} nyala photos, longest side 512 px"

    grabcut = create_masker("grabcut")
    t0 = time.perf_counter()
    masks = [grabcut.predict(p).mask for p in photos]
    dt = time.perf_counter() - t0
    sol = float(np.mean([mask_quality(m).solidity for m in masks]))
    rows.append({"benchmark": "grabcut masks/s", "value": _rate(len(photos), dt), "unit": "masks/s",
                 "goal": ">= 1 on one CPU core", "note": f"{note_imgs}; mean solidity {sol:.2f}"})

    sam = create_masker("sam2", random_init=True, device="cpu")
    sam.predict(photos[0][:64, :64])  # warm-up (first call pays allocator / jit-script costs)
    n_sam = 3
    t0 = time.perf_counter()
    for p in photos[:n_sam]:
        sam.predict(p, points=[(p.shape[1] / 2, p.shape[0] / 2)])
    dt_new = time.perf_counter() - t0
    p = photos[n_sam - 1]
    t0 = time.perf_counter()
    for k in range(5):
        sam.predict(p, points=[(p.shape[1] / 2 + k, p.shape[0] / 2)])
    dt_again = time.perf_counter() - t0
    rows.append({"benchmark": "sam2 hiera-tiny masks/s (new photo)", "value": _rate(n_sam, dt_new), "unit": "masks/s",
                 "goal": "interactive: < 3 s per photo on CPU", "note": f"{n_sam} photos, random weights, CPU, "
                 f"{dt_new / n_sam:.2f} s per photo (1024 px encoder + decoder)"})
    rows.append({"benchmark": "sam2 re-prompt on the same photo", "value": _rate(5, dt_again), "unit": "masks/s",
                 "goal": "click refinement feels instant (< 0.2 s)", "note": f"{dt_again / 5 * 1000:.0f} ms per click"})

    inpainter = create_inpainter("opencv")
    t0 = time.perf_counter()
    for p, m in zip(photos, masks):
        filled = inpainter.inpaint(p, m, seed=0)
        for v in VARIANTS:
            make_variant(p, m, v, inpainted=filled)
    dt = time.perf_counter() - t0
    rows.append({"benchmark": "all six variants (opencv inpainting)", "value": _rate(len(photos), dt),
                 "unit": "photos/s", "goal": ">= 5 photos/s", "note": f"{note_imgs}; {dt / len(photos) * 1000:.0f} ms "
                 "per photo for 6 variants"})
    load = os.getloadavg()[0]
    for row in rows:  # throughput on a shared machine is only meaningful next to its load
        row["note"] += f"; load avg {load:.1f} on {os.cpu_count()} cores"
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
