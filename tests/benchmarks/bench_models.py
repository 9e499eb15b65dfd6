"""Models and the curator's loop: UMAP of 10,000 and 50,000 points, the embedding map's render time in a real
browser (Debian chromium, WebGL scatter), and promotion on nyala (re-embedding the catalogue with the new
active model, then re-ranking the review queue).

Environment: ROSETTE_BENCH_MAP_SIZES (default "10000,50000"), ROSETTE_BENCH_PROMOTE=0 skips the nyala part.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NYALA = ROOT.parent / "shared" / "data" / "nyala"
SIZES = [int(x) for x in os.environ.get("ROSETTE_BENCH_MAP_SIZES", "10000,50000").split(",") if x]


def _clustered(n: int, dim: int = 256, clusters: int = 500, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim))
    x = centres[rng.integers(0, clusters, n)] + 0.6 * rng.normal(size=(n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype("float32")


def _umap_rows() -> tuple[list[dict], dict]:
    from core.inspect.projection import project_2d

    rows, maps = [], {}
    for n in SIZES:
        x = _clustered(n)
        t0 = time.perf_counter()
        xy = project_2d(x, metric="cosine")
        secs = time.perf_counter() - t0
        maps[n] = xy
        rows.append({"benchmark": f"UMAP of {n:,} points (256-d, cosine) to 2-D", "value": secs, "unit": "s",
                     "note": "the Map tab computes this in a background job and caches it"})
    return rows, maps


def _render_rows(maps: dict) -> list[dict]:
    """Time Plotly.newPlot of the Map tab's own script on a page with n points, in headless chromium."""
    from app.tabs.map import MAP_JS, WEBGL_FROM
    from app.ui import plotly_js_path
    from jobs.actions.map import map_html

    chromium = "/usr/bin/chromium"
    if not Path(chromium).exists():
        return [{"benchmark": "map render in the browser", "value": "-", "unit": "", "note": "no /usr/bin/chromium"}]
    from playwright.sync_api import sync_playwright

    rows = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True,
                                    args=["--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
                                          "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        for n, xy in maps.items():
            payload = {"x": xy[:, 0].round(4).tolist(), "y": xy[:, 1].round(4).tolist(), "id": list(range(n)),
                       "label": [f"individual {i % 500}" for i in range(n)], "value": [i % 500 for i in range(n)],
                       "thumb": [""] * n, "poincare": False, "model": "bench", "colour_by": "individual",
                       "categorical": True}
            js = MAP_JS % {"plotly": json.dumps(plotly_js_path().as_uri()), "webgl": WEBGL_FROM}
            page_html = (f"<html><body><div id='area'>{map_html(payload)}</div><script>"
                         f"(() => {{ const element = document.getElementById('area'); const trigger = () => {{}};\n"
                         f"{js}\n}})();</script></body></html>")
            path = Path(tmp) / f"map-{n}.html"
            path.write_text(page_html)
            t0 = time.perf_counter()
            page.goto(path.as_uri())
            page.wait_for_selector("#map-plot[data-ready='1']", timeout=180_000)
            wall = time.perf_counter() - t0
            ms = int(page.get_attribute("#map-plot", "data-render-ms"))
            kind = page.get_attribute("#map-plot", "data-kind")
            rows.append({"benchmark": f"map of {n:,} points drawn in chromium ({kind})", "value": ms / 1000.0,
                         "unit": "s", "note": f"Plotly.newPlot; page load + parse + draw {wall:.1f} s; "
                                              f"{len(page_html) / 1e6:.1f} MB of HTML"})
        browser.close()
    return rows


def _promotion_rows() -> list[dict]:
    if os.environ.get("ROSETTE_BENCH_PROMOTE", "1") == "0" or not (NYALA / "manifest.csv").exists():
        return [{"benchmark": "promotion on nyala", "value": "-", "unit": "",
                 "note": "skipped (ROSETTE_BENCH_PROMOTE=0 or ../shared/data/nyala missing)"}]
    from db.identify.benchmarks import create_benchmark
    from db.identify.matching import review_queue
    from db.session import open_catalogue
    from jobs import queue
    from jobs.actions.promote import PromoteRequest, promote

    with tempfile.TemporaryDirectory(prefix="rosette-bench-promote-") as tmp:
        cat = open_catalogue(Path(tmp) / "data")
        create_benchmark(cat, "nyala", manifest=NYALA / "manifest.csv", split="identity", test_fraction=0.3, seed=0)
        job = queue.submit_and_run(cat, "train", {"benchmark": "nyala", "head": "supcon", "epochs": 1, "views": 1,
                                                 "diagnose": False, "name": "bench-promoted"})
        assert job.status.value == "succeeded", job.message
        review_queue(cat, model_name="efficientnet_lite0")  # the old active model's queue, features cached
        t0 = time.perf_counter()
        res = promote(cat, PromoteRequest(model="bench-promoted", user="bench"))
        queue.run_job(cat, res["job_id"])
        t1 = time.perf_counter()
        items = review_queue(cat, model_name="bench-promoted")
        t2 = time.perf_counter()
        n = queue.get_job(cat, res["job_id"]).result["images"]
        cat.close()
    return [{"benchmark": f"promotion on nyala: re-embed {n:,} photos with the new model", "value": t1 - t0,
             "unit": "s", "note": f"{n / (t1 - t0):.1f} photos/s, background job"},
            {"benchmark": "promotion on nyala: re-rank the review queue", "value": t2 - t1, "unit": "s",
             "note": f"{len(items)} queue entries, features cached"}]


def run() -> list[dict]:
    rows, maps = _umap_rows()
    rows += _render_rows(maps)
    rows += _promotion_rows()
    rows.append({"benchmark": "load average (1 min)", "value": os.getloadavg()[0], "unit": ""})
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
