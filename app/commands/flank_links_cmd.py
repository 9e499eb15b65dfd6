"""``rosette flank-links list|confirm|reject|undo``: the left-right flank links the two-flank density fit suggests,
answered as Match review's links panel answers them (the same service functions): confirmed, the right-flank
individual is merged into the left-flank one; rejected, the next fit never links the pair."""

from __future__ import annotations

import json

from app.console import printable
from jobs.actions import flank_links as services
from jobs.requests.flank_links import (
    DEFAULT_FLOOR,
    DEFAULT_LIMIT,
    FlankLinkRequest,
    FlankLinkSuggestionsRequest,
    UndoFlankLinkRequest,
)


def register(sub) -> None:
    p = sub.add_parser("flank-links", help="the flank links the two-flank density fit suggests: list them, confirm "
                                           "(merge) or reject a pair, undo an answer")
    actions = p.add_subparsers(dest="flank_links_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="the latest fit's suggested pairs, most probable first")
    listing.add_argument("--species", default=None, help="the fit of this species (default: the latest of any)")
    listing.add_argument("--floor", type=float, default=DEFAULT_FLOOR,
                         help=f"the least probability shown (default {DEFAULT_FLOOR})")
    listing.add_argument("--limit", type=int, default=DEFAULT_LIMIT,
                         help=f"at most this many (default {DEFAULT_LIMIT})")
    listing.add_argument("--json", action="store_true", help="print the suggestions as JSON")
    listing.set_defaults(func=run_list)
    for name, helped, func in (("confirm", "the pair is one animal: merge RIGHT into LEFT", run_confirm),
                               ("reject", "the pair is two animals: the next fit never links them", run_reject),
                               ("undo", "take back the answer to the pair (a confirm's merge is undone)", run_undo)):
        q = actions.add_parser(name, help=helped)
        q.add_argument("left", help="the left-flank individual's name")
        q.add_argument("right", help="the right-flank individual's name")
        if name != "undo":
            q.add_argument("--job", type=int, default=None,
                           help="the fit whose suggestion this answers (default: the latest of the species)")
        q.set_defaults(func=func)


def run_list(args, ctx) -> int:
    got = services.link_suggestions(ctx.catalogue, FlankLinkSuggestionsRequest(species=args.species,
                                                                              floor=args.floor, limit=args.limit))
    if args.json:
        print(json.dumps({"job_id": got.job_id, "species": got.species, "answered": got.answered,
                          "changed": got.changed, "basis": services.BASIS,
                          "suggestions": [x.to_dict() for x in got.suggestions]}))
        return 0
    print(printable(got.message))
    for x in got.suggestions:
        print(printable(f"  {x.words}"))
    return 0


def run_confirm(args, ctx) -> int:
    done = services.confirm_link(ctx.catalogue, FlankLinkRequest(args.left, args.right, user=ctx.user,
                                                                 job_id=args.job))
    print(printable(done.message))
    return 0


def run_reject(args, ctx) -> int:
    done = services.reject_link(ctx.catalogue, FlankLinkRequest(args.left, args.right, user=ctx.user,
                                                                job_id=args.job))
    print(printable(done.message))
    return 0


def run_undo(args, ctx) -> int:
    done = services.undo_link(ctx.catalogue, UndoFlankLinkRequest(args.left, args.right, user=ctx.user))
    print(printable(done.message))
    return 0
