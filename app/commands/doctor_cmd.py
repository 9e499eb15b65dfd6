"""``rosette doctor [--dry-run] [--min-age SECONDS] [--json]``: find and remove files of the photo store that
nothing references (left by an import killed mid-way)."""

from __future__ import annotations

import json

from jobs.actions.maintenance import remove_orphans
from jobs.requests.maintenance import OrphansRequest


def register(sub) -> None:
    p = sub.add_parser("doctor", help="find and remove unreferenced files in the photo store")
    p.add_argument("--dry-run", action="store_true", help="only report what would be removed")
    p.add_argument("--min-age", type=float, default=600.0,
                   help="leave files younger than this many seconds alone (an import may still be writing)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args, ctx) -> int:
    request = OrphansRequest(min_age_s=args.min_age, dry_run=args.dry_run)  # refused before the catalogue opens
    orphans = remove_orphans(ctx.catalogue, request)
    if args.json:
        print(json.dumps({"files": orphans.files, "bytes": orphans.bytes, "removed": orphans.removed,
                          "too_young": orphans.too_young, "dry_run": args.dry_run}))
    else:
        for rel in orphans.files:
            print(rel)
        print(orphans.summary(removed=not args.dry_run))
    return 0
