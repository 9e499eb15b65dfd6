"""Catalogue from the command line: ``individuals``, ``rename``, ``merge``, ``split``,
``undo``, ``history`` and ``flank`` (the same operations as the Catalogue and Mask tabs)."""

from __future__ import annotations

import json

from app.console import print_table
from core.io.privacy import DEFAULT_PEOPLE, PEOPLE_CHOICES
from jobs.actions import catalogue as services
from jobs.actions.errors import CatalogueError
from jobs.actions.export import export_catalogue
from jobs.requests.catalogue import (
    MergeRequest,
    RenameRequest,
    SetFlanksRequest,
    SplitRequest,
    UndoRequest,
)
from jobs.requests.export import ExportCatalogueRequest


def register(sub) -> None:
    p = sub.add_parser("individuals", help="list individuals with photo and sighting counts")
    p.add_argument("--search", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_list)
    p = sub.add_parser("rename", help="rename an individual")
    p.add_argument("individual", help="id or current name")
    p.add_argument("new_name")
    p.set_defaults(func=run_rename)
    p = sub.add_parser("merge", help="move every photo of SOURCE into TARGET and retire SOURCE")
    p.add_argument("source", help="id or name")
    p.add_argument("target", help="id or name")
    p.set_defaults(func=run_merge)
    p = sub.add_parser("split", help="move photos into a new individual")
    p.add_argument("image_ids", nargs="+", type=int)
    p.add_argument("--name", default=None, help="name of the new individual (default: a generated one)")
    p.set_defaults(func=run_split)
    p = sub.add_parser("undo", help="undo the latest catalogue change (or the event given)")
    p.add_argument("event_id", nargs="?", type=int)
    p.set_defaults(func=run_undo)
    p = sub.add_parser("history", help="recent identity events (who changed what, when)")
    p.add_argument("--individual", default=None, help="id or name")
    p.add_argument("--limit", type=int, default=30)
    p.set_defaults(func=run_history)
    p = sub.add_parser("export-catalogue", help="individuals, photos, sightings and decisions as CSV, with a "
                                                "sheet per individual, in one zip")
    p.add_argument("--out", required=True, help="the zip to write")
    p.add_argument("--include-inactive", action="store_true", help="also individuals merged away or retired")
    p.add_argument("--people", default=DEFAULT_PEOPLE, choices=list(PEOPLE_CHOICES),
                   help="the sheet pictures of photos showing people: blur the people (default), omit the pictures, "
                        "or keep them unblurred (recorded in the audit trail)")
    p.set_defaults(func=run_export_catalogue)
    p = sub.add_parser("flank", help="set the flank label of a photo")
    p.add_argument("image_id", type=int)
    p.add_argument("flank", choices=["left", "right", "front", "other", "unknown"])
    p.set_defaults(func=run_flank)


def run_list(args, ctx) -> int:
    rows = services.list_individuals(ctx.catalogue, search=args.search)
    if args.json:
        print(json.dumps([{"id": r.id, "name": r.name, "images": r.n_images, "sightings": r.n_sightings} for r in rows]))
    else:
        print_table([(r.id, r.name, r.n_images, r.n_sightings) for r in rows], ["id", "name", "photos", "sightings"])
    return 0


def run_rename(args, ctx) -> int:
    cat = ctx.catalogue
    done = services.rename(cat, RenameRequest(services.individual_id(cat, args.individual), args.new_name,
                                              user=ctx.user))
    print(f"renamed {done.old!r} to {done.new!r} (event {done.event_id})")
    return 0


def run_merge(args, ctx) -> int:
    cat = ctx.catalogue
    done = services.merge(cat, MergeRequest(services.individual_id(cat, args.source),
                                            services.individual_id(cat, args.target), user=ctx.user))
    print(f"merged {done.source_name!r} into {done.target_name!r}: {done.moved} photos moved (event {done.event_id})")
    return 0


def run_split(args, ctx) -> int:
    done = services.split(ctx.catalogue, SplitRequest(tuple(args.image_ids), user=ctx.user, new_name=args.name))
    print(f"split {len(args.image_ids)} photos into new individual {done.name!r} (id {done.individual_id}, "
          f"event {done.event_id})")
    return 0


def run_undo(args, ctx) -> int:
    event_id = args.event_id
    if event_id is None:
        event_id = services.last_change_id(ctx.catalogue)
        if event_id is None:
            raise CatalogueError("nothing to undo")
    done = services.undo(ctx.catalogue, UndoRequest(user=ctx.user, event_id=event_id))
    print(f"undid event {done.event_id} ({done.kind})")
    return 0


def run_history(args, ctx) -> int:
    cat = ctx.catalogue
    ind = services.individual_id(cat, args.individual) if args.individual else None
    rows = [(e.id, f"{e.created_at:%Y-%m-%d %H:%M:%S}", e.user, e.kind, json.dumps(e.payload, sort_keys=True)[:80],
             "undone" if e.undone else "") for e in services.history_entries(cat, individual_id=ind, limit=args.limit)]
    print_table(rows, ["event", "when (UTC)", "who", "what", "details", ""])
    return 0


def run_flank(args, ctx) -> int:
    services.set_flanks(ctx.catalogue, SetFlanksRequest((args.image_id,), args.flank, user=ctx.user))
    print(f"photo {args.image_id}: flank set to {args.flank}")
    return 0


def run_export_catalogue(args, ctx) -> int:
    done = export_catalogue(ctx.catalogue, ExportCatalogueRequest(user=ctx.user, include_inactive=args.include_inactive,
                                                                  out=args.out, people=args.people))
    print(done.summary)
    return 0
