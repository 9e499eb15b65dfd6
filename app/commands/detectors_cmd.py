"""``rosette detectors [--json]``: every detector, whether it can run here, and why (its weights, or what is
missing). Reads no catalogue; a file lookup only (no torch)."""

from __future__ import annotations

import json

from app.console import print_table
from core.field.detectors import describe_detectors, detector_status


def register(sub) -> None:
    p = sub.add_parser("detectors", help="list the box detectors and whether each can run here")
    p.add_argument("--json", action="store_true", help="print one JSON list")
    p.set_defaults(func=run)


def run(args, ctx) -> int:
    descriptions = describe_detectors()
    rows = detector_status()
    if args.json:
        print(json.dumps([{"name": n, "available": ok, "reason": why, "description": descriptions.get(n, "")}
                          for n, ok, why in rows]))
        return 0
    print_table([(n, "yes" if ok else "no", why) for n, ok, why in rows], ["detector", "available here", "why"])
    return 0
