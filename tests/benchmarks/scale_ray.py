"""Ray Data embedding throughput on the real nyala photos, with 1 and 2 embedding actors, beside the local engine.

The first ``ROSETTE_BENCH_RAY_N`` (default 300) photos of ``../shared/data/nyala`` (else the demo photos the
repository ships) are imported into a fresh catalogue; then one ``embed`` job (efficientnet_lite0, full_rgb) runs
three times on the same photos, each from a cold feature cache (the ``.npy`` files deleted; the backbone's ONNX
export, made once per fingerprint, is kept, as every run after the first finds it):

- the local engine: ``jobs.worker.run_one`` (a supervised child process, as ``rosette worker`` runs it);
- Ray, 1 actor and 2 actors: ``jobs.ray_engine.run_one`` on a local Ray cluster with this machine's CPUs (decoding
  tasks take 0.5 CPU, the actors share the rest).

Each figure is the whole job's wall time, claim to outcome (process or actor start-up included), as photos/s;
the 1-minute load average is in the note because figures on a shared machine mean little without it.
"""

from __future__ import annotations

import csv
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NYALA = ROOT.parent / "shared" / "data" / "nyala"
DEMO = ROOT / "assets" / "demo"
BACKBONE = "efficientnet_lite0"
DECODE_CPUS = 0.5


def _photo_set(dest: Path, n: int) -> tuple[Path, str]:
    """A manifest of the first ``n`` nyala photos (copied under ``dest``) and where they came from."""
    src = NYALA if (NYALA / "manifest.csv").exists() else DEMO
    with open(src / "manifest.csv", newline="") as fh:
        reader = csv.DictReader(fh)
        rows = [r for r in reader if r.get("identity", "").strip()][:n]
        columns = reader.fieldnames or []
    (dest / "images").mkdir(parents=True)
    for r in rows:
        shutil.copyfile(src / "images" / r["filename"], dest / "images" / r["filename"])
    with open(dest / "manifest.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return dest / "manifest.csv", "nyala" if src == NYALA else "demo (../shared/data/nyala absent)"


def _cold(cat) -> None:
    """Delete the cached features (every ``.npy``), keeping the ONNX export beside them."""
    for path in (cat.cache_dir / "features").rglob("*.npy"):
        path.unlink()


def _load() -> str:
    try:
        return f"load {os.getloadavg()[0]:.2f}"
    except OSError:
        return "load ?"


def run() -> list[dict]:
    import ray

    from db.embeddings import all_image_ids
    from db.io.ingest import ingest_path
    from db.models import JobStatus
    from db.session import open_catalogue
    from jobs import queue, ray_engine, worker
    from jobs.ray_embedding import EmbedSettings

    n = int(os.environ.get("ROSETTE_BENCH_RAY_N", "300"))
    cpus = os.cpu_count() or 2
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="rosette-scale-ray-") as tmp:
        manifest, where = _photo_set(Path(tmp) / "photos", n)
        cat = open_catalogue(Path(tmp) / "data")
        ingest_path(cat, manifest, user="bench")
        n_photos = len(all_image_ids(cat))
        params = {"backbone": BACKBONE}

        # warm-up (not timed): the ONNX export of the backbone, made once per fingerprint, as bench_embedding does
        queue.submit_and_run(cat, "embed", params)

        def timed(label: str, run_job, note: str) -> None:
            _cold(cat)
            jid = queue.submit(cat, "embed", params)
            load = _load()
            t0 = time.perf_counter()
            ran = run_job()
            wall = time.perf_counter() - t0
            job = queue.get_job(cat, jid)
            ok = ran == jid and job.status == JobStatus.succeeded
            rows.append({"benchmark": f"scale ray: embed {n_photos} photos, {label}, cold",
                         "value": round(n_photos / wall, 1) if ok else "-", "unit": "photos/s",
                         "note": (f"{where}; {BACKBONE}; job wall {wall:.1f} s incl. start-up; {note}; {load}"
                                  if ok else f"job {jid} {job.status.value}: {job.message}")})

        timed("local engine (child process)", lambda: worker.run_one(cat, isolate=True), "one process")
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        try:
            for actors in (1, 2):
                share = round(min(1.0, (cpus - DECODE_CPUS) / actors), 2)
                settings = EmbedSettings(actors=actors, actor_cpus=share, decode_cpus=DECODE_CPUS)
                timed(f"Ray Data, {actors} actor{'s' if actors > 1 else ''}",
                      lambda s=settings: ray_engine.run_one(cat, embed=s),
                      f"local Ray cluster of {cpus} CPUs, {share} CPU per actor, decode {DECODE_CPUS} CPU")
        finally:
            ray.shutdown()
        cat.close()
    return rows


if __name__ == "__main__":
    for row in run():
        print(f"{row['benchmark']:<70} {row['value']!s:>8} {row['unit']:<9} {row['note']}")
