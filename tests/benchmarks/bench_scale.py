"""`make bench` section ``scale``: Rosette past one machine's comfortable size.

- the catalogue (``scale_db``): 100,000 and 1,000,000 synthetic photos as rows, in SQLite and in a throwaway
  PostgreSQL cluster: p50/p95 of the review queue, a decision's round trip, the leaderboard, ``audit verify``;
- vector search (``scale_faiss``): FAISS query p50 and recall@10 at 100k and 1M (IVF in memory) and with IVF-PQ on
  disk (memory-mapped shards);
- Ray (``scale_ray``): Ray Data embedding throughput on the real nyala photos with 1 and 2 actors, beside the local
  engine.

``ROSETTE_SCALE_SIZES`` (default ``100000,1000000``) sets the catalogue sizes; ``ROSETTE_SCALE_PARTS`` (default
``db,faiss,ray``) chooses parts.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _part(name: str):
    spec = importlib.util.spec_from_file_location(f"scale_{name}", HERE / f"scale_{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def run() -> list[dict]:
    sizes = tuple(int(s) for s in os.environ.get("ROSETTE_SCALE_SIZES", "100000,1000000").split(",") if s)
    parts = [p for p in os.environ.get("ROSETTE_SCALE_PARTS", "db,faiss,ray").split(",") if p]
    rows: list[dict] = []
    for name in parts:
        try:
            module = _part(name)
            rows += module.run(sizes=sizes) if name in ("db", "faiss") else module.run()
        except Exception as exc:  # one failed part must not hide the others
            traceback.print_exc()
            rows.append({"benchmark": f"scale {name} (failed)", "value": "-", "unit": "", "note": repr(exc)})
    return rows
