"""``rosette train`` (a background training job, optionally waited for) and ``rosette models list``."""

from __future__ import annotations

import json
import sys

from app.console import print_table
from core.identify.backbones import DEFAULT_BACKBONE
from jobs.actions import training
from jobs.actions.promote import archive, promote
from jobs.requests.models import ArchiveRequest, PromoteRequest
from jobs.requests.training import TrainRequest


def register(sub) -> None:
    p = sub.add_parser("train", help="train a head (and optionally the last backbone blocks) from identities")
    p.add_argument("--head", default="supcon",
                   help="supcon (default), triplet, arcface, lorentz, nearid or idsim (global SupCon + patch transport)")
    p.add_argument("--loss", default=None, help="loss registry name (default: the head's own)")
    p.add_argument("--backbone", default=DEFAULT_BACKBONE)
    p.add_argument("--benchmark", default=None,
                   help="train on this benchmark's train split and evaluate on its test split; several, comma-"
                        "separated (nyala,lions), train one model on all of them (each is a source of the sampler)")
    p.add_argument("--source", choices=["benchmark", "catalogue"], default=None,
                   help="training photos: the benchmark's train split (default with --benchmark) or every photo of "
                        "a confirmed individual (the benchmark's test photos are always left out)")
    p.add_argument("--blocks", default="0",
                   help="backbone blocks to fine-tune: 0 = head only on cached features (default), N = last N, all")
    p.add_argument("--adapter", choices=["lora"], default=None,
                   help="train peft LoRA adapters on the backbone's convolution/attention/MLP layers instead of "
                        "unfreezing blocks (the checkpoint keeps only the adapters)")
    p.add_argument("--rank", type=int, default=None, help="LoRA rank (default 16)")
    p.add_argument("--alpha", type=float, default=None, help="LoRA alpha (default 32)")
    p.add_argument("--patch-weight", type=float, default=None,
                   help="idsim head: lambda of the patch-transport (Sinkhorn) InfoNCE term (default 1.0)")
    p.add_argument("--sampler", choices=["m-per-class", "identity-aware"], default=None,
                   help="batches: identity-aware (the default: pre-scheduled for the run, each identity once per "
                        "batch, proportional to photo count, with hard negatives) or m-per-class (pml "
                        "MPerClassSampler)")
    p.add_argument("--hard-negatives", type=int, default=None,
                   help="identity-aware sampler: hard-negative identities each anchor brings (default 2)")
    p.add_argument("--sources-per-batch", type=int, default=None,
                   help="identity-aware sampler: sources (benchmarks) mixed in each batch (default: all, at most 2)")
    p.add_argument("--identities-per-batch", type=int, default=None,
                   help="identity groups per batch (default 16; refused when more than the training set has)")
    p.add_argument("--hold-out-for-calibration", type=float, default=None, metavar="SHARE",
                   help="keep this share of the benchmark's train identities (0 to 0.5, e.g. 0.2) out of training, "
                        "so a spot pipeline built on the model (rosette eval --verify) calibrates its global scores "
                        "on animals the model never learned (default: 0.2 of a benchmark with 50 or more train "
                        "identities, else none; 0: none)")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--views", type=int, default=8, help="cached augmented views per photo (head-only training)")
    p.add_argument("--lr", type=float, default=None, help="head learning rate (default 1e-3)")
    p.add_argument("--backbone-lr", type=float, default=None, help="learning rate of fine-tuned blocks (default 1e-4)")
    p.add_argument("--anti-symmetry", type=float, default=0.0, help="lambda of the anti-symmetry term (tau 0.3)")
    p.add_argument("--patience", type=int, default=None, help="early stopping patience in epochs (default 10)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default=None, help="name of the new model (default: made from the settings)")
    p.add_argument("--no-diagnose", action="store_true", help="skip the BG/FG, mirror and flank diagnostics")
    p.add_argument("--wait", action="store_true", help="run the job now and wait for it (else it is queued)")
    p.add_argument("--json", action="store_true", help="with --wait: print one JSON object")
    p.set_defaults(func=run_train)
    m = sub.add_parser("models", help="list models (backbones and trained models)")
    msub = m.add_subparsers(dest="models_action", metavar="ACTION", required=True)
    ls = msub.add_parser("list", help="list models with their training and latest evaluation")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_models_list)
    pr = msub.add_parser("promote", help="make a model the active matcher of a species (queues a re-embedding)")
    pr.add_argument("name")
    pr.add_argument("--species", default=None, help="species name or id (default: the model's own, else 'default')")
    pr.set_defaults(func=run_models_promote)
    ar = msub.add_parser("archive", help="archive a candidate model (hidden from pickers, kept for history)")
    ar.add_argument("name")
    ar.set_defaults(func=run_models_archive)


def train_request(args, user: str) -> TrainRequest:
    """The training run the arguments ask for; a bad head or value (``--epochs 0``) is refused here, before
    anything is queued."""
    # lazy, as every ML import of the CLI: core.identify.training imports torch
    from core.identify.training import check_calibration_holdout, parse_blocks

    if args.source == "benchmark" and not args.benchmark:
        raise ValueError("--source benchmark needs --benchmark NAME")
    share = getattr(args, "hold_out_for_calibration", None)
    if share is not None:
        check_calibration_holdout(share, allow_none=True)
    settings = {"calibration_holdout": share,
                "head": args.head, "loss": args.loss, "blocks": parse_blocks(args.blocks), "epochs": args.epochs,
                "views": args.views, "lr": args.lr, "backbone_lr": args.backbone_lr,
                "anti_symmetry": args.anti_symmetry, "patience": args.patience, "seed": args.seed,
                "adapter": args.adapter, "lora_rank": args.rank, "lora_alpha": args.alpha,
                "patch_weight": args.patch_weight, "sampler": args.sampler, "hard_negatives": args.hard_negatives,
                "sources_per_batch": args.sources_per_batch, "identities_per_batch": args.identities_per_batch}
    return TrainRequest(backbone=args.backbone, source=args.source or ("benchmark" if args.benchmark else "catalogue"),
                        benchmark=args.benchmark, name=args.name, device=args.device, diagnose=not args.no_diagnose,
                        user=user, config=settings)


def wait_for_job(cat, job_id: int, *, quiet: bool):
    """Run the queued job here in a supervised child (or, if a worker took it first, follow it), printing its
    progress unless ``quiet``; returns the finished job."""
    last = {"line": ""}

    def report(job) -> None:
        line = f"[{job.progress:4.0%}] {job.message or ''}"
        if line != last["line"] and not quiet:
            print(line, file=sys.stderr, flush=True)
            last["line"] = line

    return training.run_here(cat, job_id, report=report)


def run_train(args, ctx) -> int:
    cat = ctx.catalogue
    job_id = training.train(cat, train_request(args, ctx.user))
    if not args.wait:
        print(f"queued training job {job_id} (heavy queue); the app's worker or `rosette worker` runs it; "
              f"follow it with `rosette jobs list` or the Jobs tab")
        return 0
    try:
        job = wait_for_job(cat, job_id, quiet=args.json)
    except KeyboardInterrupt:
        training.cancel_run(cat, job_id)
        print(f"\ncancelling job {job_id}...", file=sys.stderr)
        raise
    if job.status.value != "succeeded":
        print(f"error: training job {job_id} {job.status.value}: {job.message}", file=sys.stderr)
        if args.json:
            print(json.dumps({"job_id": job_id, "status": job.status.value, "message": job.message}))
        return 1
    res = dict(job.result or {})
    if args.json:
        out = {"job_id": job_id, "model": res.get("model"), **{k: res.get(k) for k in (
            "best_val_map_macro", "frozen_val_map_macro", "epochs_run", "best_epoch", "wall_seconds",
            "seconds_per_epoch", "runtime", "snapshot_hash", "nearid", "diagnostics")}}
        ev = res.get("evaluation") or {}
        out["evaluation"] = ev
        out["evaluations"] = res.get("evaluations")
        out["map_macro"] = ev.get("map_macro")
        print(json.dumps(out, default=float))
        return 0
    print_training_table(res)
    return 0


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def print_training_table(res: dict) -> None:
    ev = res.get("evaluation") or {}
    rt = res.get("runtime") or {}
    rows = [("model", res.get("model")),
            ("validation mAP macro: frozen -> trained", f"{_fmt(res.get('frozen_val_map_macro'))} -> "
                                                         f"{_fmt(res.get('best_val_map_macro'))}"),
            ("epochs run (best)", f"{res.get('epochs_run')} ({res.get('best_epoch')})"),
            ("seconds per epoch", _fmt(res.get("seconds_per_epoch"))),
            ("wall time (s)", _fmt(res.get("wall_seconds"))),
            ("device", f"{rt.get('device')} (torch {rt.get('torch')}, CUDA {rt.get('cuda')})")]
    if ev:
        rows += [("test mAP macro / micro", f"{_fmt(ev.get('map_macro'))} / {_fmt(ev.get('map_micro'))}"),
                 ("test CMC@1 / @5 macro", f"{_fmt((ev.get('cmc_macro') or {}).get('1'))} / "
                                           f"{_fmt((ev.get('cmc_macro') or {}).get('5'))}"),
                 ("test mAP macro with same-sighting photos", _fmt(ev.get("map_macro_with_same_sighting")))]
    if res.get("diagnostics"):
        d = res["diagnostics"]
        rows += [("BG/FG", f"{_fmt(d.get('bg_fg'))} {d.get('bg_fg_band') or ''}"),
                 ("mirror similarity (tier)", f"{_fmt(d.get('mirror_sim_mean'))} ({d.get('mirror_tier')})")]
    if res.get("nearid"):
        rows.append(("NearID SSR / PA", f"{_fmt(res['nearid'].get('ssr'))} / {_fmt(res['nearid'].get('pa'))}"))
    print_table(rows, ["", "value"])


def run_models_promote(args, ctx) -> int:
    res = promote(ctx.catalogue, PromoteRequest(model=args.name, species=args.species, user=ctx.user))
    print(f"{res['model']} is now the active model for {res['species']} (was {res['previous']}); "
          f"re-embedding the species' photos as job {res['job_id']}")
    return 0


def run_models_archive(args, ctx) -> int:
    archive(ctx.catalogue, ArchiveRequest(model=args.name, user=ctx.user))
    print(f"{args.name} archived")
    return 0


def run_models_list(args, ctx) -> int:
    rows = training.models_overview(ctx.catalogue)
    if args.json:
        print(json.dumps(rows, default=float))
        return 0
    print_table([(r["name"], r["head"] or "(frozen)", r["loss"] or "", r["status"],
                  "" if r["blocks"] is None else ("all" if r["blocks"] == -1 else r["blocks"]),
                  _fmt(r["best_val_map_macro"]),
                  "" if not r["latest_evaluation"] else f"{_fmt(r['latest_evaluation']['map_macro'])} "
                                                        f"({r['latest_evaluation']['benchmark']})",
                  r["device"] or "", "" if r["wall_seconds"] is None else f"{r['wall_seconds']:.0f}")
                 for r in rows],
                ["name", "head", "loss", "status", "blocks", "val mAP", "test mAP macro", "device", "train s"])
    return 0
