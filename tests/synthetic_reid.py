"""A small re-ID photo set the tests make: each individual is a coat pattern (its own stripes and spots),
photographed on a different background each time (random crops of the shipped demo photos), at a random
place, size and brightness. Frozen ImageNet features are distracted by the backgrounds; a trained head
can learn the coat. Written with a manifest ``filename,identity,flank,sighting``."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

DEMO_IMAGES = Path(__file__).resolve().parent.parent / "assets" / "demo" / "images"


def _coat(rng: np.random.Generator, size: int = 96) -> Image.Image:
    img = Image.new("RGB", (size, size), tuple(int(v) for v in rng.integers(120, 255, 3)))
    d = ImageDraw.Draw(img)
    colour = tuple(int(v) for v in rng.integers(0, 90, 3))
    angle = rng.uniform(0, np.pi)
    spacing = rng.uniform(9, 22)
    width = int(rng.integers(3, 8))
    c, s = np.cos(angle), np.sin(angle)
    for k in range(-12, 13):
        off = k * spacing
        p0 = (size / 2 + off * s - 2 * size * c, size / 2 - off * c - 2 * size * s)
        p1 = (size / 2 + off * s + 2 * size * c, size / 2 - off * c + 2 * size * s)
        d.line([p0, p1], fill=colour, width=width)
    for _ in range(int(rng.integers(2, 6))):
        x, y, r = rng.uniform(10, size - 10), rng.uniform(10, size - 10), rng.uniform(4, 10)
        d.ellipse([x - r, y - r, x + r, y + r], fill=tuple(int(v) for v in rng.integers(0, 255, 3)))
    return img


def make_reid_set(folder: Path, *, individuals: int = 10, photos_each: int = 6, seed: int = 0,
                  size: int = 160, masks: bool = False) -> Path:
    """Write ``individuals`` x ``photos_each`` photos (RGBA with the coat as alpha mask when ``masks``) and
    ``manifest.csv``; returns the manifest path."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    backgrounds = sorted(DEMO_IMAGES.glob("*.jpg"))
    coats = [_coat(rng) for _ in range(individuals)]
    rows = []
    for i, coat in enumerate(coats):
        for j in range(photos_each):
            bg = Image.open(backgrounds[int(rng.integers(len(backgrounds)))]).convert("RGB")
            w, h = bg.size
            cw, ch = int(w * rng.uniform(0.5, 0.9)), int(h * rng.uniform(0.5, 0.9))
            x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            canvas = bg.crop((x0, y0, x0 + cw, y0 + ch)).resize((size, size))
            side = int(size * rng.uniform(0.35, 0.5))
            patch = coat.resize((side, side)).point(lambda v, f=rng.uniform(0.8, 1.15): min(255, int(v * f)))
            px, py = int(rng.integers(0, size - side)), int(rng.integers(0, size - side))
            canvas.paste(patch, (px, py))
            name = f"ind{i:02d}_{j}.png"
            if masks:
                alpha = Image.new("L", (size, size), 0)
                alpha.paste(255, (px, py, px + side, py + side))
                canvas = canvas.convert("RGBA")
                canvas.putalpha(alpha)
            canvas.save(folder / name)
            rows.append({"filename": name, "identity": f"ind{i:02d}", "flank": "left" if j % 2 == 0 else "right",
                         "sighting": f"ind{i:02d}-s{j // 2}"})
    manifest = folder / "manifest.csv"
    with open(manifest, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["filename", "identity", "flank", "sighting"])
        writer.writeheader()
        writer.writerows(rows)
    return manifest


def synthetic_catalogue(root: Path, *, individuals: int, photos_each: int, seed: int, test_fraction: float = 0.4,
                        masks: bool = False, benchmark: str = "syn"):
    """A catalogue under ``root / "data"`` holding a synthetic set and an identity-split benchmark; returns
    (catalogue, manifest path)."""
    from db.identify.benchmarks import create_benchmark
    from db.session import open_catalogue

    manifest = make_reid_set(root / "photos", individuals=individuals, photos_each=photos_each, seed=seed, masks=masks)
    cat = open_catalogue(root / "data")
    create_benchmark(cat, benchmark, manifest=manifest, split="identity", test_fraction=test_fraction, seed=0)
    return cat, manifest


def make_two_species_manifest(folder: Path, *, seed: int) -> Path:
    """4 individuals x 2 photos as two species: ny00, ny01 (nyala) and leo02, leo03 (lion); the manifest's path."""
    manifest = make_reid_set(folder, individuals=4, photos_each=2, seed=seed, size=64)
    with open(manifest, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        lion = r["identity"] in ("ind02", "ind03")
        r["species"] = "lion" if lion else "nyala"
        r["identity"] = ("leo" if lion else "ny") + r["identity"][3:]
    with open(manifest, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return manifest
