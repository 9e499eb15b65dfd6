"""Embedding on a GPU: images/s of the offline default backbone (efficientnet_lite0, torch runtime) through the
real extraction path (``core.identify.features.extract_features``: JPEG decode, resize, normalise, forward, cache write),
cold cache, and the forward pass alone on preloaded batches, each on CUDA and on the CPU of the same machine.

On CUDA, two extraction rows: JPEGs decoded and resized on the GPU (``PhotoFile`` loaders, nvJPEG,
``core.identify.gpu_decode``; goal >= 3,000 images/s) and on the CPU (PIL, the path before it, still taken by
loaders that only give arrays). One more row compares the two decode paths on the CPU of the same machine.

Only meaningful where ``torch.cuda.is_available()`` (the lent GPU machine); elsewhere one row says so.
Photos: ``ROSETTE_BENCH_NYALA`` (a sample made by ``make_sample.py``) or ../shared/data/nyala.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NYALA = Path(os.environ.get("ROSETTE_BENCH_NYALA", ROOT.parent / "shared" / "data" / "nyala"))
BATCH = int(os.environ.get("ROSETTE_BENCH_EMBED_BATCH", "64"))
GOAL = ">= 3000 images/s"


def _paths() -> list[Path]:
    with open(NYALA / "manifest.csv", newline="") as fh:
        return [NYALA / "images" / r["filename"] for r in csv.DictReader(fh)]


def _extraction(device: str, paths: list[Path], *, decode_on_device: bool = False) -> tuple[float, int]:
    """Seconds of one cold extraction of ``paths`` (best of 2) and the embedding width. ``decode_on_device``:
    ``PhotoFile`` loaders decoded by torchvision on ``device``; else loaders that give arrays (PIL on the CPU)."""
    from core.identify.backbones import create_backbone
    from core.identify.features import PhotoFile, extract_features, load_rgb

    backbone = create_backbone("efficientnet_lite0", device=device, runtime="torch")
    backbone.embed([load_rgb(p) for p in paths[:8]])  # warm-up: cuDNN autotune / oneDNN primitives
    best = float("inf")
    emb = None
    for _ in range(2):
        with tempfile.TemporaryDirectory() as cache:
            items = [(p.stem, PhotoFile(p) if decode_on_device else (lambda p=p: load_rgb(p))) for p in paths]
            t0 = time.perf_counter()
            emb = extract_features(backbone, items, variant="full_rgb", cache_dir=Path(cache), batch_size=BATCH,
                                   workers=4 if device == "cuda" else 1, decode_on_device=decode_on_device)
            best = min(best, time.perf_counter() - t0)
    assert emb is not None and emb.shape[0] == len(paths)
    return best, int(emb.shape[1])


def _forward_only(device: str, n: int) -> float:
    """Images/s of the model's forward pass alone on random preloaded batches (the ceiling for extraction)."""
    import torch

    from core.identify.backbones import create_backbone

    backbone = create_backbone("efficientnet_lite0", device=device, runtime="torch")
    height, width = backbone.config.input_size
    model = backbone.model.eval()
    x = torch.randn(BATCH, 3, height, width, device=device)
    with torch.inference_mode():
        for _ in range(3):
            model(x)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        reps = max(1, n // BATCH)
        for _ in range(reps):
            model(x)
        if device == "cuda":
            torch.cuda.synchronize()
        return reps * BATCH / (time.perf_counter() - t0)


def run() -> list[dict]:
    import torch

    if not torch.cuda.is_available():
        return [{"benchmark": "embedding on CUDA", "value": "-", "unit": "",
                 "note": "no GPU on this machine (run on the lent GPU machine, see the README)"}]
    paths = _paths()
    rows: list[dict] = []
    gpu = torch.cuda.get_device_name(0)
    note = f"{len(paths)} nyala photos, cold cache, batch {BATCH}; {gpu}, {os.cpu_count()} CPU cores"
    torchvision = importlib.util.find_spec("torchvision") is not None  # the GPU decoder; torch alone lacks it
    if torchvision:
        secs, dim = _extraction("cuda", paths, decode_on_device=True)
        rows.append({"benchmark": "extract_features efficientnet_lite0 on cuda, JPEG decode+resize on the GPU",
                     "value": len(paths) / secs, "unit": "images/s", "goal": GOAL,
                     "note": f"{note}; {dim}-d; nvJPEG batched decode, resize/normalise on the GPU"})
    else:
        rows.append({"benchmark": "extract_features efficientnet_lite0 on cuda, JPEG decode+resize on the GPU",
                     "value": "-", "unit": "", "goal": GOAL,
                     "note": "torchvision is not installed here: carry a wheel matching this torch (see the README)"})
    for device in ("cuda", "cpu"):
        secs, dim = _extraction(device, paths)
        rows.append({"benchmark": f"extract_features efficientnet_lite0 on {device}, JPEG decode+resize on the CPU",
                     "value": len(paths) / secs, "unit": "images/s",
                     "note": f"{note}; {dim}-d; PIL decode and resize (loaders that give arrays)"})
        rows.append({"benchmark": f"forward pass alone on {device}", "value": _forward_only(device, 2048),
                     "unit": "images/s", "note": "random preloaded batches: the model's ceiling"})
    if torchvision:
        secs, _ = _extraction("cpu", paths, decode_on_device=True)
        rows.append({"benchmark": "extract_features efficientnet_lite0 on cpu, torchvision decode+resize on the CPU",
                     "value": len(paths) / secs, "unit": "images/s",
                     "note": f"{note}; CPU only: the GPU path's code run on the CPU, next to the PIL row above"})
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
