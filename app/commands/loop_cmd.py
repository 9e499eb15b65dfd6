"""The curator's loop from the shell: ``rosette calibration``, ``rosette flank-suggest``, ``rosette map`` and
``rosette retrain`` -- the same functions the Models, Mask / Match review and Map tabs call."""

from __future__ import annotations

import json

from app.commands.train_cmd import print_training_table, wait_for_job
from app.console import print_table
from jobs.actions.flanks import AcceptFlankRequest, accept_suggestion, flank_suggestions, unlabelled_photos
from jobs.actions.jobs import get_job
from jobs.actions.map import MapRequest, compute_map, queue_map
from jobs.actions.match import active_model
from jobs.actions.models import RetrainRequest, calibration, retrain, species_id


def register(sub) -> None:
    c = sub.add_parser("calibration", help="how a model's scores read as 'probability this is the same animal'")
    c.add_argument("model")
    c.add_argument("--species", default=None)
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=run_calibration)
    f = sub.add_parser("flank-suggest", help="suggest left / right / other for photos without a flank label")
    f.add_argument("image_ids", nargs="*", type=int, help="photos (default: every photo without a flank label)")
    f.add_argument("--accept", action="store_true", help="set the suggested flanks (as a curator's labels)")
    f.add_argument("--json", action="store_true")
    f.set_defaults(func=run_flank_suggest)
    m = sub.add_parser("map", help="compute the embedding map (UMAP) of a species' photos for a model")
    m.add_argument("--model", default=None, help="default: the species' active model")
    m.add_argument("--species", default=None)
    m.add_argument("--wait", action="store_true", help="run it now instead of queueing it")
    m.set_defaults(func=run_map)
    r = sub.add_parser("retrain", help="train on the decisions since the active model (identity-aware batches, the "
                                       "\"not the same\" decisions as hard negatives), evaluate, diagnose, compare")
    r.add_argument("--species", default=None)
    r.add_argument("--wait", action="store_true")
    r.add_argument("--force", action="store_true", help="retrain even with no identity confirmed since")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=run_retrain)


def run_calibration(args, ctx) -> int:
    rep = calibration(ctx.catalogue, args.model, args.species)  # raises with the real cause when there is none
    if args.json:
        print(json.dumps(rep, default=float))
        return 0
    sources = ", ".join(f"{n} {what}" for what, n in rep["sources"].items())
    print(f"{args.model}: isotonic calibration on {rep['n_outcomes']} outcomes ({sources}), {rep['n_positive']} the "
          f"same animal; a new individual is suggested below {100 * rep['new_individual_threshold']:.0f}%")
    curve = rep["curve"]
    for k in range(0, len(curve["score"]), 7):
        print(f"  score {curve['score'][k]:.3f} -> {100 * curve['probability'][k]:.0f}% same animal")
    rel = rep["reliability_on_decisions"]
    if rel:
        print(f"expected calibration error on the decisions: {rel['ece']:.3f}")
    new = rep.get("new_animal")
    if new:
        print(f"p(new), the probability that a photo's animal is not in the catalogue: expected calibration error "
              f"{new['ece']:.3f} over {new['n_queries']} queries ({new['method']})")
    else:
        print("p(new) is not measured: it needs identified photos of at least 4 animals, some with a second photo")
    return 0


def run_flank_suggest(args, ctx) -> int:
    cat = ctx.catalogue
    ids = list(args.image_ids) or unlabelled_photos(cat)
    if not ids:
        print("every photo has a flank label")
        return 0
    out = flank_suggestions(cat, ids)
    if args.accept:
        for i in ids:
            accept_suggestion(cat, AcceptFlankRequest(image_id=i, user=ctx.user))
    if args.json:
        print(json.dumps({str(k): v for k, v in out.items()}, default=float))
        return 0
    print_table([(i, v["flank"], f"{100 * v['confidence']:.0f}%") for i, v in out.items()],
                ["photo", "suggested flank", "confidence"])
    first = next(iter(out.values()))
    acc = "not measured" if first["accuracy"] is None else f"{100 * first['accuracy']:.1f}%"
    print(f"held-out accuracy {acc} ({first['n_train']} labelled photos, {first['model']})"
          + ("; accepted" if args.accept else "; --accept sets them"))
    return 0


def run_map(args, ctx) -> int:
    cat = ctx.catalogue
    sid = species_id(cat, args.species) if args.species is not None else None
    request = MapRequest(model=args.model or active_model(cat, sid), species=sid, user=ctx.user)
    if args.wait:
        print(compute_map(cat, request)["summary"])
    else:
        job_id, _ = queue_map(cat, request)
        print(f"queued map job {job_id} for {request.model}; the Map tab shows it when done")
    return 0


def run_retrain(args, ctx) -> int:
    cat = ctx.catalogue
    outcome = retrain(cat, RetrainRequest(user=ctx.user, species=args.species, force=args.force))
    job_id = outcome.job_id
    if not args.wait:
        print(f"{outcome.confirmed_since_active} confirmed identities since {outcome.active_model} was trained; "
              f"retraining queued as job {job_id} (identity-aware batches: the pairs marked \"not the same\" are "
              "its hard negatives)")
        return 0
    wait_for_job(cat, job_id, quiet=args.json)
    job = get_job(cat, job_id)
    if job.status.value != "succeeded":
        raise ValueError(f"retraining job {job_id} {job.status.value}: {job.message}")
    res = job.result or {}
    if args.json:
        print(json.dumps({"job_id": job_id, "confirmed_since_active": outcome.confirmed_since_active, **res},
                         default=float))
        return 0
    print_training_table(res)
    if res.get("comparison"):
        for e in res["comparison"]["endpoints"].values():
            print(e["verdict"])
    print("promotion stays your decision: rosette models promote NAME")
    return 0
