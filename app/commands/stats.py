"""``rosette stats [--json]``: counts of individuals, images, sightings, masks, decisions."""

from __future__ import annotations

import json

from app.console import print_table
from jobs.actions.catalogue import catalogue_stats


def register(sub) -> None:
    p = sub.add_parser("stats", help="show catalogue counts")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args, ctx) -> int:
    stats = catalogue_stats(ctx.catalogue)
    if args.json:
        print(json.dumps(stats))
    else:
        print_table(list(stats.items()), ["what", "count"])
    return 0
