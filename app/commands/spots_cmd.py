"""``rosette spots matchers | extract | show``: local spot evidence from the shell.

- ``spots matchers``: every local matcher and whether it can run here (learned ones need their weights);
- ``spots extract [--matcher sift] [--species S] [--wait]``: keypoints for a species' photos (a light job);
- ``spots show QUERY CANDIDATE [--pipeline P | --matcher M] [--out PNG] [--json]``: verify one pair, print
  its inlier count and status, and draw the matched spots.
"""

from __future__ import annotations

import json

from PIL import Image as PILImage

from app.console import print_table
from jobs.actions.models import species_id
from jobs.actions.spots import (
    KeypointsRequest,
    MatchedSpotsRequest,
    extract_keypoints,
    matched_spots,
    matcher_rows,
    submit_keypoints,
)


def register(sub) -> None:
    p = sub.add_parser("spots", help="local spot evidence: matchers, keypoint extraction, matched spots of a pair")
    ssub = p.add_subparsers(dest="spots_command", metavar="ACTION", required=True)
    m = ssub.add_parser("matchers", help="list local matchers and whether they can run here")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=run_matchers)
    e = ssub.add_parser("extract", help="extract keypoints for a species' photos (light queue)")
    e.add_argument("--matcher", default="sift")
    e.add_argument("--species", default=None, help="species name or id (default: every photo)")
    e.add_argument("--wait", action="store_true", help="run now and print the summary")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=run_extract)
    s = ssub.add_parser("show", help="verify one pair and draw its matched spots")
    s.add_argument("query", type=int)
    s.add_argument("candidate", type=int)
    s.add_argument("--pipeline", default=None, help="a fused pipeline's name (its matcher and settings)")
    s.add_argument("--matcher", default="sift")
    s.add_argument("--out", default=None, help="write the side-by-side picture to this PNG")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=run_show)


def run_matchers(args, ctx) -> int:
    rows = matcher_rows()
    if args.json:
        print(json.dumps([{"name": n, "available": a == "yes", "description": d} for n, a, d in rows]))
        return 0
    print_table(rows, ["matcher", "available here", "what it is"])
    return 0


def run_extract(args, ctx) -> int:
    species = species_id(ctx.catalogue, args.species) if args.species is not None else None
    request = KeypointsRequest(matcher=args.matcher, species=species, user=ctx.user)
    if args.wait:
        res = extract_keypoints(ctx.catalogue, request)
        print(json.dumps(res) if args.json else res["summary"])
        return 0
    job_id = submit_keypoints(ctx.catalogue, request)
    print(json.dumps({"job": job_id}) if args.json else
          f"queued job {job_id} (keypoints, light queue); `rosette worker --once` or a running server picks it up")
    return 0


def run_show(args, ctx) -> int:
    res = matched_spots(ctx.catalogue, MatchedSpotsRequest(query_image_id=args.query, candidate_image_id=args.candidate,
                                                           pipeline=args.pipeline, matcher=args.matcher))
    if args.out:
        PILImage.fromarray(res.picture).save(args.out)
    out = {"query": args.query, "candidate": args.candidate, "matcher": res.matcher, "inliers": res.n_inliers,
           "status": res.status, "words": res.words, "keypoints": list(res.n_keypoints), "masked": list(res.masked),
           "note": res.note, "picture": args.out}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"photo #{args.query} vs #{args.candidate} ({res.matcher}): {res.n_inliers} matched spots -- {res.words}; "
          f"keypoints {res.n_keypoints[0]} / {res.n_keypoints[1]}" + (f"; note: {res.note}" if res.note else "")
          + (f"; picture written to {args.out}" if args.out else ""))
    return 0
