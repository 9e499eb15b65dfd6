"""Training speed and memory through the real path (``db.identify.training.train_model``), one child process per
configuration so each peak RSS is its own.

Rows: seconds per epoch for every head on cached frozen features (head only), partial fine-tuning of the
last 2 and 4 blocks, LoRA rank 16 adapters (supcon and idsim) with their checkpoint size beside --blocks 4's, the one-off view-caching time, and peak resident memory; the same on CUDA when this
machine has a GPU. Figures are per epoch of the training set used and per 1,000 training photos (so they
scale to nyala's ~900 training photos of the identity split).

``ROSETTE_BENCH_TRAIN_DEVICES`` (e.g. ``cuda``) limits the devices run.

Data: a nyala subset (``ROSETTE_BENCH_TRAIN_ANIMALS`` animals, default 40) when ../shared is present, else the
synthetic coat-pattern set the tests make (with masks, so NearID runs on both).
"""

from __future__ import annotations

import csv
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NYALA = Path(os.environ.get("ROSETTE_BENCH_NYALA", ROOT.parent / "shared" / "data" / "nyala"))
ANIMALS = int(os.environ.get("ROSETTE_BENCH_TRAIN_ANIMALS", "40"))
EPOCHS = 3
CONFIGS: list[dict] = [{"head": h} for h in ("supcon", "triplet", "arcface", "lorentz", "nearid", "idsim")] + [
    {"head": "supcon", "blocks": 2}, {"head": "supcon", "blocks": 4}, {"head": "idsim", "blocks": 4},
    {"head": "supcon", "adapter": "lora", "lora_rank": 16}, {"head": "idsim", "adapter": "lora", "lora_rank": 16}]


def _describe(spec: dict) -> str:
    extent = (f"LoRA rank {spec['lora_rank']}" if spec.get("adapter") else
              f"last {spec['blocks']} blocks" if spec.get("blocks") else "head only (cached features)")
    return f"{spec['head']}, {extent}"


def _setup(tmp: Path) -> tuple[Path, str]:
    from db.identify.benchmarks import create_benchmark
    from db.session import open_catalogue

    data = tmp / "data"
    if (NYALA / "manifest.csv").exists():
        rows = list(csv.DictReader(open(NYALA / "manifest.csv", newline="")))
        ids = sorted({r["identity"] for r in rows})[:ANIMALS]
        keep = [r for r in rows if r["identity"] in ids]
        (tmp / "photos").mkdir()
        for r in keep:
            shutil.copy(NYALA / "images" / r["filename"], tmp / "photos" / r["filename"])
        manifest = tmp / "photos" / "manifest.csv"
        with open(manifest, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=["filename", "identity", "flank", "sighting"])
            w.writeheader()
            w.writerows({k: r[k] for k in ("filename", "identity", "flank", "sighting")} for r in keep)
        source = f"nyala subset ({len(ids)} animals, {len(keep)} photos)"
    else:
        from tests.synthetic_reid import make_reid_set

        manifest = make_reid_set(tmp / "photos", individuals=ANIMALS, photos_each=8, seed=0, masks=True)
        source = f"synthetic set ({ANIMALS} animals x 8 photos; ../shared/data/nyala is missing)"
    cat = open_catalogue(data)
    create_benchmark(cat, "bench", manifest=manifest, split="identity", test_fraction=0.3, seed=0)
    if (NYALA / "manifest.csv").exists():  # NearID needs masks: GrabCut the training photos once
        from db.identify.benchmarks import load_benchmark
        from db.inspect.masks import mask_images

        t0 = time.perf_counter()
        mask_images(cat, masker="grabcut", image_ids=load_benchmark(cat, "bench", split="train").image_ids,
                    only_missing=True, user="bench")
        source += f"; GrabCut masks for NearID in {time.perf_counter() - t0:.0f} s"
    cat.close()
    return data, source


def _one(data: str, spec: dict, device: str) -> dict:
    """Run in a child process: one training run; prints a JSON line."""
    from core.identify.training import TrainConfig
    from core.identify.training_loop import TrainingHooks
    from db.session import open_catalogue
    from db.identify.training import train_model

    cat = open_catalogue(data)
    t0 = time.perf_counter()
    tag = "-".join(f"{v}" for v in spec.values())
    res = train_model(cat, config=TrainConfig(**spec, epochs=EPOCHS, views=4, patience=100),
                      benchmark="bench", device=device, name=f"bench-{tag}-{device}-{time.time_ns()}",
                      hooks=TrainingHooks(folder=Path(data) / "bench-jobs" / f"{tag}-{time.time_ns()}"))
    wall = time.perf_counter() - t0
    from sqlalchemy import select

    from db.models import Model

    with cat.unit_of_work() as s:
        row = s.execute(select(Model.training_config, Model.checkpoint_path).where(Model.name == res["model"])).one()
    hist = row[0]["history"]
    secs = sorted(r["seconds"] for r in hist[1:]) or [hist[0]["seconds"]]  # epoch 1 pays warm-up
    return {"seconds_per_epoch": secs[len(secs) // 2], "wall": wall, "n_train": res["n_train"],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "checkpoint_mb": (Path(data) / row[1]).stat().st_size / 1e6,
            "device": res["runtime"]["device"], "train_seconds": sum(r["seconds"] for r in hist)}


def run() -> list[dict]:
    import torch

    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="rosette-bench-train-") as tmp:
        data, source = _setup(Path(tmp))
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        only = os.environ.get("ROSETTE_BENCH_TRAIN_DEVICES")  # e.g. "cuda" on the lent GPU machine, to save its time
        if only:
            devices = [d for d in devices if d in only.split(",")]
        for device in devices:
            for spec in CONFIGS:
                proc = subprocess.run([sys.executable, __file__, "--one", str(data), json.dumps(spec), device],
                                      capture_output=True, text=True, cwd=ROOT)
                what = f"{_describe(spec)}, {device}"
                if proc.returncode != 0:
                    rows.append({"benchmark": f"train {what}", "value": "-", "unit": "",
                                 "note": proc.stderr.strip().splitlines()[-1][:160] if proc.stderr else "failed"})
                    continue
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                per_k = 1000 * r["seconds_per_epoch"] / max(1, r["n_train"])
                rows.append({"benchmark": f"train {what}: s/epoch", "value": r["seconds_per_epoch"], "unit": "s",
                             "note": f"{r['n_train']} training photos; {per_k:.2f} s per 1,000 photos; {source}"})
                rows.append({"benchmark": f"train {what}: peak RSS", "value": r["peak_rss_mb"], "unit": "MB"})
                if spec.get("blocks") or spec.get("adapter"):
                    rows.append({"benchmark": f"train {what}: checkpoint size", "value": r["checkpoint_mb"],
                                 "unit": "MB", "note": "LoRA keeps the adapters and the head; blocks keep the "
                                                       "whole backbone"})
                if not spec.get("blocks") and not spec.get("adapter") and spec["head"] in ("supcon", "lorentz"):
                    cache = r["wall"] - r["train_seconds"]
                    rows.append({"benchmark": f"train {what}: view caching + setup (first run)",
                                 "value": cache, "unit": "s", "note": "4 views per photo, cached on disk after"})
        if "cuda" not in devices:
            rows.append({"benchmark": "train on CUDA", "value": "-", "unit": "",
                         "note": "no GPU on this machine (the device tool was not lent to this task)"})
    rows.append({"benchmark": "load average (1 min) after training", "value": os.getloadavg()[0], "unit": ""})
    return rows


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "--one":
        print(json.dumps(_one(sys.argv[2], json.loads(sys.argv[3]), sys.argv[4])))
    else:
        for row in run():
            print(row)
