"""Decisions under load over HTTP on loopback: 8 signed-in curators review the demo catalogue for 2 minutes.

``rosette serve`` runs as in production (sign-in, roles, its own worker) on a synthetic catalogue of
``ROSETTE_BENCH_HTTP_PHOTOS`` photos (400: enough that the curators do not run out of undecided photos in
2 minutes; ``tests/synthetic_reid.py``, 50 coat patterns on the demo backgrounds). Each simulated
curator is a ``gradio_client.Client`` signed in with its own curator account (its own Gradio session, so its own
review queue and screen state), loads the review queue, then decides the photo on its screen again and again
(``/decide_same``, ``/decide_not``, ``/decide_unsure``: the endpoints the buttons call), reloading the queue when
it is done. Curators start on the same queue, so they collide on photos often.

Reported: decisions made (answers that say it was recorded), conflicts told (answers "Not recorded": another
curator decided that photo first), refusals (e.g. a photo already in that individual), decisions lost (recorded
answers without a stored decision by that curator: must be 0), every decision attributed to the account that
made it, the audit chain intact, and p50 / p95 latency of a decision round trip.

Environment: ROSETTE_BENCH_CURATORS (8), ROSETTE_BENCH_DECIDE_SECONDS (120), ROSETTE_BENCH_HTTP_PHOTOS (400).
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CURATORS = int(os.environ.get("ROSETTE_BENCH_CURATORS", "8"))
SECONDS = float(os.environ.get("ROSETTE_BENCH_DECIDE_SECONDS", "120"))
PHOTOS = int(os.environ.get("ROSETTE_BENCH_HTTP_PHOTOS", "400"))
PASSWORD = "bench-password"
MODEL = "efficientnet_lite0"


def run() -> list[dict]:
    import numpy as np
    from gradio_client import Client
    from sqlalchemy import func, select

    from db.audit import audit_rows, verify_chain
    from db.io.ingest import ingest_path
    from db.models import MatchDecision
    from db.session import open_catalogue
    from db.users import add_user
    from tests.browser.conftest import start_rosette
    from tests.synthetic_reid import make_reid_set

    with tempfile.TemporaryDirectory(prefix="rosette-bench-http-") as tmp:
        data = Path(tmp) / "data"
        cat = open_catalogue(data)
        manifest = make_reid_set(Path(tmp) / "photos", individuals=max(2, PHOTOS // 8), photos_each=8, seed=5)
        ingest_path(cat, manifest, format="manifest", user="bench")
        names = [f"curator{k}" for k in range(CURATORS)]
        for name in names:
            add_user(cat, name, PASSWORD, role="curator", by="bench")
        cat.close()
        server = start_rosette(data, sign_in=True)
        try:
            warm = Client(server.url, auth=(names[0], PASSWORD), verbose=False)
            warm.predict(MODEL, api_name="/reload_review_queue")  # features of every photo, once
            recorded: Counter[str] = Counter()
            told: Counter[str] = Counter()
            refused: Counter[str] = Counter()
            reasons: Counter[str] = Counter()
            latencies: list[float] = []
            lock = threading.Lock()
            start_gate = threading.Barrier(CURATORS)
            stop_at: list[float] = []

            def curator(k: int) -> None:
                rng = random.Random(k)
                me = names[k]
                client = Client(server.url, auth=(me, PASSWORD), verbose=False)
                client.predict(MODEL, api_name="/reload_review_queue")
                start_gate.wait()
                if k == 0:
                    stop_at.append(time.monotonic() + SECONDS)
                while not stop_at:
                    time.sleep(0.01)
                while time.monotonic() < stop_at[0]:
                    kind = rng.choices(["same", "not", "unsure"], weights=[1, 2, 2])[0]
                    time.sleep(rng.uniform(0, 0.05))  # a glance at the screen
                    t0 = time.perf_counter()
                    try:
                        out = client.predict("", MODEL, api_name=f"/decide_{kind}")
                        status = str(out[-1])
                        outcome = "told" if "Not recorded" in status else "recorded"
                    except Exception as exc:  # noqa: BLE001 - a refusal shown as a message box ("already in ...")
                        outcome, status = "refused", ""
                        with lock:
                            reasons[str(exc)[:70]] += 1
                    elapsed = time.perf_counter() - t0
                    with lock:
                        latencies.append(elapsed)
                        {"told": told, "recorded": recorded, "refused": refused}[outcome][me] += 1
                    if "queue is done" in status or outcome == "refused":
                        client.predict(MODEL, api_name="/reload_review_queue")

            threads = [threading.Thread(target=curator, args=(k,)) for k in range(CURATORS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            server.stop()
            kept = ROOT / "bench-decisions-http-server.log"  # the server's own log, for any error it reported
            kept.write_text(server.log.read_text(errors="replace") if server.log.exists() else "(no log)")
        cat = open_catalogue(data)
        with cat.unit_of_work() as s:
            stored = dict(s.execute(select(MatchDecision.user, func.count(MatchDecision.id))
                                    .group_by(MatchDecision.user)).all())
        attributed = Counter(r.user for r in audit_rows(cat, action="decision.add", limit=None))
        chain = verify_chain(cat)
        cat.close()
    lost = sum(max(0, recorded[n] - stored.get(n, 0)) for n in names)
    attribution_ok = all(attributed.get(n, 0) == stored.get(n, 0) for n in names) and set(stored) <= set(names)
    lat = np.array(latencies) * 1000
    made = sum(recorded.values())
    return [
        {"benchmark": f"{CURATORS} signed-in curators deciding over HTTP for {SECONDS:.0f} s: decisions made",
         "value": made, "unit": "", "note": f"{made / SECONDS:.1f}/s through /gradio_api decide endpoints"},
        {"benchmark": "conflicts told (another curator decided the photo first)", "value": sum(told.values()),
         "unit": ""},
        {"benchmark": "refused with a message", "value": sum(refused.values()), "unit": "",
         "note": "; ".join(f"{n}x {r}" for r, n in reasons.most_common(2))},
        {"benchmark": "decisions lost (recorded answers without a stored decision)", "value": lost, "unit": "",
         "goal": "0"},
        {"benchmark": "each stored decision audited under the account that made it",
         "value": "yes" if attribution_ok else "NO", "unit": ""},
        {"benchmark": "audit hash chain intact", "value": f"yes ({chain.rows} rows)" if chain.ok else "NO", "unit": ""},
        {"benchmark": "decision round trip p50 / p95",
         "value": f"{np.percentile(lat, 50):.0f} / {np.percentile(lat, 95):.0f}", "unit": "ms",
         "note": "HTTP + queue + ranking the next photo"},
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
