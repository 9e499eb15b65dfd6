"""The catalogue at scale: a synthetic catalogue of N photos as rows only (no image files), in SQLite and in
PostgreSQL, and the latency of what curators do against it.

Rows per N photos: N/10 individuals, N photos (70% assigned), 0.3 N standing decisions, one stored top match per
photo (``match_suggestions``, what the review queue reads past the on-the-fly limit), N/10 chained audit rows and
200 evaluations of 50 models on one benchmark. Rows go in through SQLAlchemy Core in chunks of 20,000.

Timed, each through the function the web handlers and the CLI call:
- review queue: ``db.identify.suggestions.queue_from_suggestions`` (200 items), 20 runs;
- decision round trip: ``record_decision`` ("not the same") on a pending photo then ``standing_decision`` reading
  it back, 20 runs;
- leaderboard: ``db.inspect.leaderboard.leaderboard``, 20 runs;
- audit verify: ``db.audit.verify_chain`` over the whole chain, 3 runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CHUNK = 20_000


def _chunks(n: int, make: Callable[[int], dict]) -> Iterator[list[dict]]:
    for start in range(0, n, CHUNK):
        yield [make(i) for i in range(start, min(n, start + CHUNK))]


def populate(cat, n_photos: int, *, seed: int = 0) -> dict[str, float]:
    """Fill an empty, migrated catalogue with the synthetic rows; returns seconds per table."""
    from sqlalchemy import insert

    from db.audit import GENESIS, row_hash
    from db.models import (AuditEvent, DecisionKind, Evaluation, Image, Individual, MatchDecision, MatchSuggestion,
                           Model, Photo)

    rng = random.Random(seed)
    n_ind = max(1, n_photos // 10)
    t0 = datetime(2026, 1, 1)
    owner = [rng.randrange(n_ind) + 1 if rng.random() < 0.7 else None for _ in range(n_photos)]
    decided = set(rng.sample(range(n_photos), int(0.3 * n_photos)))
    timings: dict[str, float] = {}

    def load(name: str, table, n: int, make: Callable[[int], dict]) -> None:
        start = time.perf_counter()
        for rows in _chunks(n, make):
            with cat.engine.begin() as conn:
                conn.execute(insert(table), rows)
        timings[name] = time.perf_counter() - start

    load("individuals", Individual.__table__, n_ind,
         lambda i: {"id": i + 1, "name": f"animal-{i + 1:07d}", "active": True, "species_id": 1, "created_at": t0})
    def photo(i: int) -> dict:
        return {"id": i + 1, "content_hash": hashlib.sha256(str(i).encode()).hexdigest(), "original_name": f"p{i}.jpg",
                "blob_path": f"blobs/{i % 256:02x}/{i}.jpg", "format": "JPEG", "mode": "RGB", "width": 1600,
                "height": 1200, "size_bytes": 350_000, "imported_at": t0 + timedelta(seconds=i)}

    load("photos", Photo.__table__, n_photos, photo)  # one whole-photo annotation per photo, as after 0008
    load("images", Image.__table__, n_photos, lambda i: {
        **photo(i), "photo_id": i + 1, "flank": "unknown", "species_id": 1, "individual_id": owner[i],
        "decision_version": 1 if i in decided else 0})
    decided_list = sorted(decided)
    load("match_decisions", MatchDecision.__table__, len(decided_list), lambda k: {
        "id": k + 1, "query_image_id": decided_list[k] + 1, "candidate_image_id": (decided_list[k] + 7) % n_photos + 1,
        "decision": DecisionKind.not_same.value if k % 3 else DecisionKind.same.value, "score": 0.5,
        "rank": 1, "model_name": "scale-model-0", "user": f"curator{k % 8}", "created_at": t0})
    load("match_suggestions", MatchSuggestion.__table__, n_photos, lambda i: {
        "image_id": i + 1, "model_name": "scale-model-0", "top_image_id": rng.randrange(n_photos) + 1,
        "top_score": rng.random(), "computed_at": t0})
    prev = [GENESIS]

    def audit_row(k: int) -> dict:
        at = t0 + timedelta(seconds=k)
        details = {"photo": k + 1, "individual": owner[k % n_photos]}
        digest = row_hash(prev[0], at=at, user="importer", action="image.add", target=f"image#{k + 1}",
                          details=details)
        row = {"id": k + 1, "at": at, "user": "importer", "action": "image.add", "target": f"image#{k + 1}",
               "details": details, "prev_hash": prev[0], "row_hash": digest}
        prev[0] = digest
        return row

    load("audit_events", AuditEvent.__table__, max(1, n_photos // 10), audit_row)
    load("models", Model.__table__, 50, lambda m: {
        "id": m + 1, "name": f"scale-model-{m}", "backbone": "efficientnet_lite0", "config": {"dim": 256},
        "created_at": t0})
    load("evaluations", Evaluation.__table__, 200, lambda e: {
        "id": e + 1, "model_name": f"scale-model-{e % 50}", "model_config": {}, "benchmark_name": "scale",
        "kind": "retrieval", "variant": "full_rgb", "metrics": {"map_macro": rng.random(), "n_queries": 1000},
        "created_at": t0 + timedelta(minutes=e)})
    if cat.engine.dialect.name == "postgresql":  # the rows carried their ids: move the sequences past them
        with cat.engine.begin() as conn:
            for table in ("individuals", "photos", "images", "match_decisions", "audit_events", "models", "evaluations"):
                conn.exec_driver_sql(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                                     f"(SELECT max(id) FROM {table}))")
            conn.exec_driver_sql("ANALYZE")
    else:
        with cat.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")
    return timings


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered), p95


def measure(cat, n_photos: int, *, seed: int = 0) -> dict[str, tuple[float, float]]:
    """p50/p95 seconds of the four operations on a populated catalogue."""
    from db.audit import verify_chain
    from db.inspect.leaderboard import leaderboard
    from db.identify.matching import record_decision, standing_decision
    from db.identify.suggestions import queue_from_suggestions

    rng = random.Random(seed + 1)
    out: dict[str, list[float]] = {"review queue": [], "decision round trip": [], "leaderboard": [],
                                   "audit verify": []}
    for _ in range(20):
        start = time.perf_counter()
        items = queue_from_suggestions(cat, model_name="scale-model-0", limit=200)
        out["review queue"].append(time.perf_counter() - start)
        assert len(items) == 200, len(items)
    pending = [it.image_id for it in queue_from_suggestions(cat, model_name="scale-model-0", limit=200)]
    for k in range(20):
        query = pending[k]
        start = time.perf_counter()
        record_decision(cat, query_image_id=query, decision="not", user="bench",
                        candidate_image_id=rng.randrange(n_photos) + 1, score=0.4, rank=1)
        _version, standing = standing_decision(cat, query)
        out["decision round trip"].append(time.perf_counter() - start)
        assert standing is not None and standing.user == "bench"
    for _ in range(20):
        start = time.perf_counter()
        rows = leaderboard(cat, benchmark="scale")
        out["leaderboard"].append(time.perf_counter() - start)
        assert len(rows) == 50, len(rows)
    for _ in range(3):
        start = time.perf_counter()
        check = verify_chain(cat)
        out["audit verify"].append(time.perf_counter() - start)
        assert check.ok, check
    return {name: _percentiles(v) for name, v in out.items()}


@contextlib.contextmanager
def _catalogue(dialect: str, folder: Path, pg_url: str | None) -> Iterator:
    from db.session import open_catalogue

    if dialect == "sqlite":
        cat = open_catalogue(folder / "data")
    else:
        assert pg_url is not None
        cat = open_catalogue(folder / "data", url=pg_url)
    try:
        yield cat
    finally:
        cat.close()


def run(sizes: tuple[int, ...] = (100_000, 1_000_000), dialects: tuple[str, ...] = ("sqlite", "postgresql")
        ) -> list[dict]:
    rows: list[dict] = []
    cluster = contextlib.nullcontext(None)
    if "postgresql" in dialects:
        from tests.pg_cluster import create_database, throwaway_cluster

        cluster = throwaway_cluster()
    with cluster as pg_admin_url:
        for dialect in dialects:
            for n in sizes:
                with tempfile.TemporaryDirectory(prefix="rosette-scale-") as tmp:
                    url = create_database(pg_admin_url, name=f"scale_{n}") if dialect == "postgresql" else None
                    with _catalogue(dialect, Path(tmp), url) as cat:
                        start = time.perf_counter()
                        loads = populate(cat, n)
                        load_s = time.perf_counter() - start
                        rows.append({"benchmark": f"scale {dialect} {n:,} photos: load rows", "value": load_s,
                                     "unit": "s", "note": ", ".join(f"{k} {v:.1f}s" for k, v in loads.items())})
                        for name, (p50, p95) in measure(cat, n).items():
                            rows.append({"benchmark": f"scale {dialect} {n:,} photos: {name} p50",
                                         "value": p50 * 1000, "unit": "ms", "note": f"p95 {p95 * 1000:,.1f} ms"})
    return rows


if __name__ == "__main__":
    for row in run(sizes=tuple(int(a) for a in sys.argv[2:]) or (10_000,), dialects=tuple(sys.argv[1].split(","))):
        print(row)
