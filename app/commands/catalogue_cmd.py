"""Catalogue from the command line: ``individuals``, ``rename``, ``merge``, ``split``,
``undo``, ``history`` and ``flank`` (the same operations as the Catalogue and Mask tabs)."""

from __future__ import annotations

import json


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
    p.set_defaults(func=run_export_catalogue)
    p = sub.add_parser("flank", help="set the flank label of a photo")
    p.add_argument("image_id", type=int)
    p.add_argument("flank", choices=["left", "right", "front", "other", "unknown"])
    p.set_defaults(func=run_flank)


def _individual_id(session, ref: str) -> int:
    from db.catalogue import NotFoundError, find_individual_by_name, get_individual

    if ref.isdigit():
        return get_individual(session, int(ref)).id
    ind = find_individual_by_name(session, ref)
    if ind is None:
        raise NotFoundError(f"no individual named {ref!r}")
    return ind.id


def run_list(args, ctx) -> int:
    from app.console import print_table
    from db.catalogue import list_individuals

    with ctx.catalogue.unit_of_work() as s:
        rows = list_individuals(s, search=args.search)
    if args.json:
        print(json.dumps([{"id": r.id, "name": r.name, "images": r.n_images, "sightings": r.n_sightings} for r in rows]))
    else:
        print_table([(r.id, r.name, r.n_images, r.n_sightings) for r in rows], ["id", "name", "photos", "sightings"])
    return 0


def _change(ctx, fn) -> int:
    with ctx.catalogue.unit_of_work() as s:
        message = fn(s)
        s.commit()
    print(message)
    return 0


def run_rename(args, ctx) -> int:
    from db.catalogue import rename_individual

    def do(s):
        ev = rename_individual(s, _individual_id(s, args.individual), args.new_name, user=ctx.user)
        return f"renamed {ev.payload['old']!r} to {ev.payload['new']!r} (event {ev.id})"

    return _change(ctx, do)


def run_merge(args, ctx) -> int:
    from db.catalogue import merge_individuals

    def do(s):
        ev = merge_individuals(s, _individual_id(s, args.source), _individual_id(s, args.target), user=ctx.user)
        p = ev.payload
        return f"merged {p['source_name']!r} into {p['target_name']!r}: {len(p['image_ids'])} photos moved (event {ev.id})"

    return _change(ctx, do)


def run_split(args, ctx) -> int:
    from db.catalogue import split_images

    def do(s):
        new, ev = split_images(s, args.image_ids, new_name=args.name, user=ctx.user)
        return f"split {len(args.image_ids)} photos into new individual {new.name!r} (id {new.id}, event {ev.id})"

    return _change(ctx, do)


def run_undo(args, ctx) -> int:
    from db.catalogue import CatalogueError, last_undoable_event, undo_event

    event_id = args.event_id
    if event_id is None:
        with ctx.catalogue.unit_of_work() as s:
            last = last_undoable_event(s)
            if last is None:
                raise CatalogueError("nothing to undo")
            event_id = last.id

    def do(s):  # its first statement claims the event (db.catalogue.undo_event)
        undo = undo_event(s, event_id, user=ctx.user)
        return f"undid event {event_id} ({undo.payload['kind']})"

    return _change(ctx, do)


def run_history(args, ctx) -> int:
    from app.console import print_table
    from db.catalogue import history

    with ctx.catalogue.unit_of_work() as s:
        ind = _individual_id(s, args.individual) if args.individual else None
        events = history(s, individual_id=ind, limit=args.limit)
        rows = [(e.id, f"{e.created_at:%Y-%m-%d %H:%M:%S}", e.user, e.kind.value,
                 json.dumps(e.payload, sort_keys=True)[:80], "undone" if e.undone_at else "") for e in events]
    print_table(rows, ["event", "when (UTC)", "who", "what", "details", ""])
    return 0


def run_flank(args, ctx) -> int:
    from db.masks import set_flank

    set_flank(ctx.catalogue, args.image_id, args.flank, user=ctx.user)
    print(f"photo {args.image_id}: flank set to {args.flank}")
    return 0


def run_export_catalogue(args, ctx) -> int:
    from db.catalogue_export import export_catalogue

    done = export_catalogue(ctx.catalogue, args.out, user=ctx.user, include_inactive=args.include_inactive)
    print(done.summary)
    return 0
