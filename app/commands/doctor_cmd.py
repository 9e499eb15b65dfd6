"""``rosette doctor [--dry-run] [--min-age SECONDS] [--json]``: find and remove files of the photo store that
nothing references (left by an import killed mid-way)."""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser("doctor", help="find and remove unreferenced files in the photo store")
    p.add_argument("--dry-run", action="store_true", help="only report what would be removed")
    p.add_argument("--min-age", type=float, default=600.0,
                   help="leave files younger than this many seconds alone (an import may still be writing)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args, ctx) -> int:
    from db.doctor import find_orphans, remove_orphans

    if args.min_age < 0:
        raise ValueError("--min-age must be 0 or more seconds")
    orphans = find_orphans(ctx.catalogue, min_age_s=args.min_age)
    if not args.dry_run and orphans.files:
        remove_orphans(ctx.catalogue, orphans)
    if args.json:
        print(json.dumps({"files": orphans.files, "bytes": orphans.bytes, "removed": orphans.removed,
                          "too_young": orphans.too_young, "dry_run": args.dry_run}))
    else:
        for rel in orphans.files:
            print(rel)
        print(orphans.summary(removed=not args.dry_run))
    return 0
