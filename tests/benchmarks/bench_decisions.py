"""Decisions under load: 8 simulated curators decide on a shared catalogue for 2 minutes.

Each curator repeatedly opens a random photo (reads the version it shows), thinks 0-50 ms, and decides
(same / not / unsure) through ``db.identify.matching.record_decision`` -- the function behind the web handlers and the
CLI -- in its own thread with its own connection. Reported: decisions made, conflicts told, decisions lost
(recorded successes missing from the database; must be 0), versions consistent, p50 / p95 latency.
This drives the database path in one process; it does not go through HTTP.

Environment: ROSETTE_BENCH_CURATORS (8), ROSETTE_BENCH_DECIDE_SECONDS (120).
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CURATORS = int(os.environ.get("ROSETTE_BENCH_CURATORS", "8"))
SECONDS = float(os.environ.get("ROSETTE_BENCH_DECIDE_SECONDS", "120"))


def run() -> list[dict]:
    import numpy as np

    from db import catalogue as ops
    from db.catalogue import ConflictError
    from db.identify.matching import current_decision_version, record_decision
    from db.models import Image, MatchDecision
    from db.session import open_catalogue

    with tempfile.TemporaryDirectory(prefix="rosette-bench-decide-") as tmp:
        cat = open_catalogue(Path(tmp) / "data")
        with cat.unit_of_work() as s:
            inds = [ops.create_individual(s, f"ind{i}", user="bench") for i in range(20)]
            for i in range(60):  # 60 photos: curators collide often
                s.add(Image(content_hash=f"h{i}", original_name=f"p{i}.jpg", blob_path=f"images/h{i}.jpg",
                            format="JPEG", mode="RGB", width=4, height=4, size_bytes=1,
                            individual_id=inds[i % 20].id if i >= 20 else None))
            s.commit()
        made, told, latencies = [], [], []
        lock = threading.Lock()
        stop = time.monotonic() + SECONDS

        def curator(k: int) -> None:
            rng = random.Random(k)
            while time.monotonic() < stop:
                photo = rng.randint(1, 60)
                seen = current_decision_version(cat, photo)
                time.sleep(rng.uniform(0, 0.05))
                decision = rng.choice(["same", "not", "unsure"])
                cand = rng.randint(21, 60) if decision == "same" else None
                t0 = time.perf_counter()
                try:
                    dec = record_decision(cat, query_image_id=photo, decision=decision, user=f"curator{k}",
                                          candidate_image_id=cand, seen_version=seen)
                    with lock:
                        made.append(dec.id)
                except ConflictError:
                    with lock:
                        told.append(photo)
                except Exception:  # noqa: BLE001 - e.g. "already assigned there": a refusal, not a loss
                    with lock:
                        told.append(photo)
                with lock:
                    latencies.append(time.perf_counter() - t0)

        threads = [threading.Thread(target=curator, args=(k,)) for k in range(CURATORS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with cat.unit_of_work() as s:
            stored = {d for (d,) in s.query(MatchDecision.id).all()}
            per_photo = dict(s.query(MatchDecision.query_image_id, MatchDecision.id).all())
            versions = {i: v for i, v in s.query(Image.id, Image.decision_version).all()}
            counts = {}
            for (q,) in s.query(MatchDecision.query_image_id).all():
                counts[q] = counts.get(q, 0) + 1
        cat.close()
    lost = len(set(made) - stored)
    consistent = all(versions[i] == counts.get(i, 0) for i in versions)
    lat = np.array(latencies) * 1000
    del per_photo
    return [
        {"benchmark": f"{CURATORS} curators deciding for {SECONDS:.0f} s: decisions made", "value": len(made),
         "unit": "", "note": f"{len(made) / SECONDS:.1f}/s through record_decision (database path, no HTTP)"},
        {"benchmark": "conflicts told (stale screen or lost race)", "value": len(told), "unit": ""},
        {"benchmark": "decisions lost", "value": lost, "unit": "", "goal": "0"},
        {"benchmark": "photo versions equal their decision counts", "value": "yes" if consistent else "NO", "unit": ""},
        {"benchmark": "decision latency p50 / p95", "value": f"{np.percentile(lat, 50):.1f} / {np.percentile(lat, 95):.1f}",
         "unit": "ms"},
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
