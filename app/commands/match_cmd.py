"""Match review from the command line: ``match`` ranks candidates for a photo, ``decide``
records a decision (applied to the catalogue), ``undo-decision`` reverses the latest one."""

from __future__ import annotations

import json

from core.backbones import DEFAULT_BACKBONE
from db.models import DecisionKind


def register(sub) -> None:
    p = sub.add_parser("match", help="rank gallery candidates for a photo")
    p.add_argument("image_id", type=int)
    p.add_argument("--model", default=DEFAULT_BACKBONE)
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--flank", choices=["any", "same", "cross"], default="any")
    p.add_argument("--place", default=None, help="only gallery photos whose sighting place contains this text")
    p.add_argument("--date-from", default=None, help="only gallery photos dated on or after YYYY-MM-DD")
    p.add_argument("--date-to", default=None, help="only gallery photos dated on or before YYYY-MM-DD")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_match)
    p = sub.add_parser("decide", help="record a match decision: same | not | unsure | new")
    p.add_argument("image_id", type=int)
    p.add_argument("decision", choices=[kind.value for kind in DecisionKind])
    p.add_argument("--candidate", type=int, default=None, help="candidate photo id (needed for same/not/unsure)")
    p.add_argument("--model", default=None, help="model whose ranking was reviewed")
    p.add_argument("--name", default=None, help="name for a new individual")
    p.add_argument("--replace", action="store_true",
                   help="record it although the photo already has a standing decision (the newest one stands)")
    p.set_defaults(func=run_decide)
    p = sub.add_parser("undo-decision", help="undo your latest match decision")
    p.set_defaults(func=run_undo)


def run_match(args, ctx) -> int:
    from app.console import print_table
    from db.matching import rank_candidates

    res = rank_candidates(ctx.catalogue, args.image_id, model_name=args.model, k=args.k, flank_filter=args.flank,
                          place=args.place, date_from=args.date_from, date_to=args.date_to)
    if args.json:
        print(json.dumps({"query_image_id": res.query_image_id, "model": res.model_name,
                          "provenance": res.model_provenance,
                          "candidates": [{"rank": c.rank, "image_id": c.image_id, "individual": c.individual_name,
                                          "score": c.score, "flank": c.flank, "same_sighting": c.same_sighting}
                                         for c in res.candidates]}))
        return 0
    print_table([(c.rank, c.individual_name, c.image_id, f"{c.score:.4f}", c.flank,
                  "same sighting" if c.same_sighting else "") for c in res.candidates],
                ["rank", "individual", "photo", "score", "flank", ""])
    print(f"scored by {res.model_provenance}")
    return 0


def run_decide(args, ctx) -> int:
    from db.matching import record_decision, standing_decision

    # what this command "saw": the photo's version and its standing decision, read together; the decision
    # claims that version (as the web's does), so of several decisions made at once exactly one wins
    version, standing = standing_decision(ctx.catalogue, args.image_id)
    if standing is not None and not args.replace:
        from db.catalogue import ConflictError

        raise ConflictError(f"photo {args.image_id} already has a standing decision ({standing.decision.value} by "
                            f"{standing.user} at {standing.created_at:%Y-%m-%d %H:%M:%S}); `rosette undo-decision` "
                            "it, or pass --replace to record another")
    dec = record_decision(ctx.catalogue, query_image_id=args.image_id, decision=args.decision, user=ctx.user,
                          candidate_image_id=args.candidate, model_name=args.model, new_name=args.name,
                          seen_version=version, seen_decision_id=standing.id if standing is not None else None)
    print(f"decision {dec.id}: photo {args.image_id} {args.decision}"
          + (f" (individual {dec.candidate_individual_id})" if dec.candidate_individual_id else ""))
    return 0


def run_undo(args, ctx) -> int:
    from db.matching import undo_decision

    dec = undo_decision(ctx.catalogue, user=ctx.user)
    print(f"undid decision {dec.id} on photo {dec.query_image_id}")
    return 0
