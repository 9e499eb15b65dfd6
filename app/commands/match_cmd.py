"""Match review from the command line: ``match`` ranks candidates for a photo, ``decide``
records a decision (applied to the catalogue), ``undo-decision`` reverses the latest one."""

from __future__ import annotations

import json

from app.console import print_table
from core.identify.backbones import DEFAULT_BACKBONE
from db.models import DecisionKind
from jobs.actions.decisions import DecideRequest, UndoDecisionRequest, decide, decision_claim, undo_last_decision
from jobs.actions.errors import ConflictError
from jobs.actions.annotations import resolve_target
from jobs.actions.match import candidate_numbers, photo_species, ranked_candidates
from jobs.requests.annotations import TargetRequest


def register(sub) -> None:
    p = sub.add_parser("match", help="rank gallery candidates for a photo or one animal in it")
    _target_arguments(p)
    p.add_argument("--model", default=DEFAULT_BACKBONE)
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--flank", choices=["any", "same", "cross"], default="any")
    p.add_argument("--place", default=None, help="only gallery photos whose sighting place contains this text")
    p.add_argument("--date-from", default=None, help="only gallery photos dated on or after YYYY-MM-DD")
    p.add_argument("--date-to", default=None, help="only gallery photos dated on or before YYYY-MM-DD")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_match)
    p = sub.add_parser("decide", help="record a match decision: same | not | unsure | new")
    p.add_argument("target", nargs="+", metavar="[IMAGE_ID] DECISION",
                   help="the photo (omit it with --annotation) and the decision: same | not | unsure | new")
    p.add_argument("--annotation", type=int, default=None, metavar="ID",
                   help="the animal (annotation) decided on, instead of a photo id")
    p.add_argument("--candidate", type=int, default=None,
                   help="candidate annotation id, as `rosette match` lists it (needed for same/not/unsure)")
    p.add_argument("--model", default=None, help="model whose ranking was reviewed")
    p.add_argument("--name", default=None, help="name for a new individual")
    p.add_argument("--replace", action="store_true",
                   help="record it although the photo already has a standing decision (the newest one stands)")
    p.set_defaults(func=run_decide)
    p = sub.add_parser("undo-decision", help="undo your latest match decision")
    p.set_defaults(func=run_undo)


def _target_arguments(p) -> None:
    p.add_argument("image_id", type=int, nargs="?", default=None, metavar="IMAGE_ID",
                   help="a photo holding one animal (a photo with several is refused with the list of them)")
    p.add_argument("--annotation", type=int, default=None, metavar="ID", help="one animal (annotation) by its id")


def _target(ctx, image_id: int | None, annotation_id: int | None) -> int:
    return resolve_target(ctx.catalogue, TargetRequest(image_id=image_id, annotation_id=annotation_id))


def run_match(args, ctx) -> int:
    query = _target(ctx, args.image_id, args.annotation)
    res = ranked_candidates(ctx.catalogue, query, model_name=args.model, k=args.k, flank_filter=args.flank,
                            place=args.place, date_from=args.date_from, date_to=args.date_to)
    # the one posterior Match review and the Population tab show (a fused pipeline's from its fused probabilities)
    numbers = candidate_numbers(ctx.catalogue, res, species_id=photo_species(ctx.catalogue, query))
    probs = numbers.probabilities
    if args.json:
        print(json.dumps({"query_image_id": res.query_image_id, "query_annotation_id": res.query_image_id,
                          "model": res.model_name, "provenance": res.model_provenance, "index": res.index_used,
                          "p_new": numbers.p_new,
                          "probability_withheld": numbers.withheld,
                          "probability_basis": numbers.note,
                          "candidates": [{"rank": c.rank, "image_id": c.image_id, "annotation_id": c.image_id,
                                          "individual": c.individual_name, "score": c.score, "flank": c.flank,
                                          "same_sighting": c.same_sighting, "probability": p,
                                          "already_in_photo_as": c.in_photo_as}
                                         for c, p in zip(res.candidates, probs)]}))
        return 0
    print_table([(c.rank, c.individual_name, c.image_id, f"{c.score:.4f}",
                  f"{100 * p:.0f}%" if p is not None else "—", c.flank,
                  "; ".join(w for w in ("same sighting" if c.same_sighting else "",
                                        f"already in this photo as #{c.in_photo_as}" if c.in_photo_as else "") if w))
                 for c, p in zip(res.candidates, probs)],
                ["rank", "individual", "annotation", "score", "probability", "flank", ""])
    if numbers.withheld:
        print(numbers.withheld)
    elif numbers.p_new is not None:
        print(f"a new animal: {100 * numbers.p_new:.0f}% ({numbers.note})")
    print(f"scored by {res.model_provenance}")
    if res.index_used:
        print(f"searched by {res.index_used}")
    return 0


def run_decide(args, ctx) -> int:
    # what this command "saw": the photo's version, individual and standing decision, read together; the
    # decision claims them (as the web's does, through the same action), so of several decisions made at once
    # exactly one wins
    if len(args.target) > 2 or (len(args.target) == 2) == (args.annotation is not None):
        raise ValueError("usage: rosette decide IMAGE_ID DECISION, or rosette decide --annotation ID DECISION")
    decision = args.target[-1]
    if decision not in [kind.value for kind in DecisionKind]:
        raise ValueError(f"the decision must be one of {', '.join(k.value for k in DecisionKind)}, got {decision!r}")
    photo = int(args.target[0]) if len(args.target) == 2 else None
    query = _target(ctx, photo, args.annotation)
    seen = decision_claim(ctx.catalogue, query)
    if seen.decision_id is not None and not args.replace:
        raise ConflictError(f"annotation {query} already has a standing decision ({seen.decision} by "
                            f"{seen.user} at {seen.created_at:%Y-%m-%d %H:%M:%S}); `rosette undo-decision` "
                            "it, or pass --replace to record another")
    outcome = decide(ctx.catalogue, DecideRequest(
        query_image_id=query, decision=decision, user=ctx.user, candidate_image_id=args.candidate,
        model_name=args.model, new_name=args.name, seen_individual_id=seen.individual_id,
        seen_decision_id=seen.decision_id, seen_version=seen.version))
    print(f"decision {outcome.decision_id}: annotation {query} {decision}"
          + (f" (individual {outcome.individual_id})" if outcome.individual_id else ""))
    return 0


def run_undo(args, ctx) -> int:
    outcome = undo_last_decision(ctx.catalogue, UndoDecisionRequest(user=ctx.user))
    print(f"undid decision {outcome.decision_id} on photo {outcome.image_id}")
    return 0
