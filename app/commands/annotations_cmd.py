"""``rosette annotations [--image ID] [--json]``: every animal in the catalogue's photos (its id, photo, box,
confidence, source, individual, flank); ``rosette box add|move|delete|undo``: a curator's box edits, as in
the Mask tab (each audited and undoable)."""

from __future__ import annotations

import json

from app.console import print_table
from jobs.actions.annotations import add_box, annotations, delete_box, move_box, undo_box
from jobs.requests.annotations import (
    AddBoxRequest,
    DeleteBoxRequest,
    ListAnnotationsRequest,
    MoveBoxRequest,
    UndoBoxRequest,
)


def register(sub) -> None:
    p = sub.add_parser("annotations", help="list annotations (one animal in a photo each)")
    p.add_argument("--image", type=int, default=None, metavar="ID", help="only the annotations of this photo")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_list)
    box = sub.add_parser("box", help="draw, move or delete an animal's box on a photo; undo the last change")
    verbs = box.add_subparsers(dest="verb", required=True)
    p = verbs.add_parser("add", help="add an animal's box to a photo: X Y W H, normalised, origin top-left")
    p.add_argument("image_id", type=int, metavar="IMAGE_ID")
    p.add_argument("box", type=float, nargs=4, metavar=("X", "Y", "W", "H"))
    p.set_defaults(func=run_add)
    p = verbs.add_parser("move", help="move or resize an annotation's box")
    p.add_argument("annotation_id", type=int, metavar="ANNOTATION_ID")
    p.add_argument("box", type=float, nargs=4, metavar=("X", "Y", "W", "H"))
    p.set_defaults(func=run_move)
    p = verbs.add_parser("delete", help="remove an annotation that is not an animal")
    p.add_argument("annotation_id", type=int, metavar="ANNOTATION_ID")
    p.set_defaults(func=run_delete)
    p = verbs.add_parser("undo", help="undo the latest box change on a photo")
    p.add_argument("image_id", type=int, metavar="IMAGE_ID")
    p.set_defaults(func=run_undo)


def run_list(args, ctx) -> int:
    rows = annotations(ctx.catalogue, ListAnnotationsRequest(image_id=args.image))
    if args.json:
        print(json.dumps([r.to_dict() for r in rows]))
        return 0
    print_table([(r.id, r.image_id, " ".join(f"{v:.3f}" for v in r.bbox),
                  "" if r.confidence is None else f"{r.confidence:.2f}", r.source, r.individual or "", r.flank)
                 for r in rows], ["id", "photo", "box x y w h", "confidence", "source", "individual", "flank"])
    return 0


def run_add(args, ctx) -> int:
    ann = add_box(ctx.catalogue, AddBoxRequest(image_id=args.image_id, box=tuple(args.box), user=ctx.user))
    print(f"annotation {ann} added to photo {args.image_id}")
    return 0


def run_move(args, ctx) -> int:
    move_box(ctx.catalogue, MoveBoxRequest(annotation_id=args.annotation_id, box=tuple(args.box), user=ctx.user))
    print(f"annotation {args.annotation_id} moved")
    return 0


def run_delete(args, ctx) -> int:
    delete_box(ctx.catalogue, DeleteBoxRequest(annotation_id=args.annotation_id, user=ctx.user))
    print(f"annotation {args.annotation_id} deleted")
    return 0


def run_undo(args, ctx) -> int:
    print(undo_box(ctx.catalogue, UndoBoxRequest(image_id=args.image_id, user=ctx.user)))
    return 0
