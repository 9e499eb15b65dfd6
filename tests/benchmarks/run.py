"""`make bench`: run every ``tests/benchmarks/bench_*.py`` and print one table.

Each module exposes ``run() -> list[dict]`` whose rows carry ``benchmark``,
``value``, ``unit`` and optionally ``goal`` and ``note``. A module may be
chosen with ``python tests/benchmarks/run.py NAME ...`` (``NAME`` is the part
after ``bench_``). Rows are also written to ``bench-results.json``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def main(argv: list[str]) -> int:
    wanted = set(argv)
    rows: list[dict] = []
    for path in sorted(HERE.glob("bench_*.py")):
        name = path.stem[len("bench_"):]
        if wanted and name not in wanted:
            continue
        t0 = time.perf_counter()
        try:
            for row in _load(path).run():
                rows.append({"module": name, **row})
        except Exception as exc:  # one broken benchmark must not hide the others
            traceback.print_exc()
            rows.append({"module": name, "benchmark": "(failed)", "value": "-", "unit": "", "note": repr(exc)})
        print(f"[{name}] {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    headers = ["module", "benchmark", "value", "unit", "goal", "note"]
    table = [[_fmt(r.get(h, "")) for h in headers] for r in rows]
    widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h) for i, h in enumerate(headers)]
    print(" | ".join(h.ljust(w) for h, w in zip(headers, widths)))
    print("-+-".join("-" * w for w in widths))
    for row in table:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths)))
    (ROOT / "bench-results.json").write_text(json.dumps(rows, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
