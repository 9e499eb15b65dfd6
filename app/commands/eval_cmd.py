"""``rosette eval --backbone NAME --benchmark NAME [--variant V] [--rerank R] [--verify MATCHER [--lnbnn]
[--shortlist K] [--calibrate-on BENCHMARK]] [--json]``; with ``--verify`` the global model's shortlist is
re-ranked by calibrated spot evidence and the pipeline is built (calibrated) and registered as a model; a fused
pipeline's name evaluates it with its stored calibration (only building calibrates)."""

from __future__ import annotations

import json
import sys

from app.console import print_table
from core.identify.backbones import DEFAULT_BACKBONE
from core.identify.evaluation import FLANK_SETTINGS, RERANK_METHODS
from jobs.actions.benchmarks import EvaluateRequest, evaluate, is_fused_pipeline
from jobs.actions.spots import DEFAULT_LNBNN_SHORTLIST, SpotEvaluationRequest, evaluate_spots


def register(sub) -> None:
    p = sub.add_parser("eval", help="all-vs-all retrieval evaluation of a backbone on a benchmark's test split")
    p.add_argument("--backbone", "--model", dest="backbone", default=DEFAULT_BACKBONE,
                   help="a backbone registry name or a trained model (rosette models list)")
    p.add_argument("--benchmark", required=True)
    p.add_argument("--variant", default="full_rgb")
    p.add_argument("--rerank", default="none", choices=list(RERANK_METHODS))
    p.add_argument("--flank", default="any", choices=list(FLANK_SETTINGS),
                   help="the gallery of each query: any photo (default), only its own flank (same: what curators "
                        "review) or only the other one (cross: left against right); photos without a left/right "
                        "flank are left out of same and cross")
    p.add_argument("--verify", metavar="MATCHER", default=None,
                   help="re-rank the global shortlist with verified spot evidence from this local matcher "
                        "(sift, orb, ...); registers the fused pipeline as a model")
    p.add_argument("--lnbnn", action="store_true",
                   help="with --verify: add HotSpotter's LNBNN gallery voting as a third calibrated scorer")
    p.add_argument("--lnbnn-only", action="store_true",
                   help="with --verify: fuse LNBNN voting with the global score, without pairwise verification")
    p.add_argument("--shortlist", type=int, default=50, help="with --verify: global top-K re-ranked (default 50)")
    p.add_argument("--lnbnn-shortlist", type=int, default=DEFAULT_LNBNN_SHORTLIST, metavar="N",
                   help="with --lnbnn: LNBNN's own top N over the whole gallery join the global top-K (default "
                        f"{DEFAULT_LNBNN_SHORTLIST}; 0: the global top-K alone)")
    p.add_argument("--calibrate-on", metavar="BENCHMARK", default=None,
                   help="with --verify: calibrate the pipeline being built on this benchmark's train split (for a "
                        "test-only --benchmark); a stored pipeline's name keeps its stored calibration")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def progress_printer(label: str):
    def report(done: int, total: int) -> None:
        if sys.stderr.isatty() or done == total:
            print(f"\r{label}: {done}/{total}", end="\n" if done == total else "", file=sys.stderr, flush=True)

    return report


def run(args, ctx) -> int:
    if (args.verify or args.lnbnn or args.lnbnn_only or args.calibrate_on
            or is_fused_pipeline(ctx.catalogue, args.backbone)):
        return run_spots(args, ctx)

    request = EvaluateRequest(benchmark=args.benchmark, backbone=args.backbone, variant=args.variant,
                              rerank=args.rerank, user=ctx.user, flank=args.flank)
    res = evaluate(ctx.catalogue, request, progress=progress_printer("embedding"))
    if args.json:
        keys = ("map_macro", "map_micro", "cmc_macro", "cmc_micro", "n_queries", "n_identities", "model", "variant",
                "benchmark", "rerank", "flank", "flank_counts", "same_sighting_excluded", "with_same_sighting",
                "evaluation_id")
        print(json.dumps({k: res[k] for k in keys if k in res}))
        return 0
    rows = [("mAP (macro, identity-balanced)", f"{res['map_macro']:.4f}"), ("mAP (micro)", f"{res['map_micro']:.4f}")]
    for k in ("1", "5", "10"):
        rows.append((f"CMC@{k} macro / micro", f"{res['cmc_macro'][k]:.4f} / {res['cmc_micro'][k]:.4f}"))
    rows.append(("queries", res["n_queries"]))
    if "with_same_sighting" in res:
        w = res["with_same_sighting"]
        rows.append(("mAP macro with same-sighting photos", f"{w['map_macro']:.4f}"))
    print_table(rows, ["metric", "value"])
    print(f"model {res['model']} ({res['model_config'].get('weight_source', '')}), variant {res['variant']}, "
          f"benchmark {res['benchmark']} test split, re-ranking {res['rerank']}; stored as evaluation {res['evaluation_id']}")
    if res.get("flank", "any") != "any":
        fc = res.get("flank_counts") or {}
        print(f"gallery: {'same flank only' if res['flank'] == 'same' else 'the other flank only (left <-> right)'}; "
              f"{fc.get('left', 0)} left and {fc.get('right', 0)} right test photos; {fc.get('no_side', 0)} without "
              "a left/right flank (front, other, unknown) left out as queries and as candidates")
    return 0


SPOT_KEYS = ("map_macro", "map_micro", "cmc_macro", "cmc_micro", "n_queries", "n_identities", "model", "global_model",
             "variant", "benchmark", "rerank", "same_sighting_excluded", "evaluation_id", "pipeline", "scorers",
             "components", "spots", "calibration", "calibrated_on", "seconds", "flank", "flank_counts", "fusion",
             "calibration_sample")
COMPONENT_WORDS = {"global": "global model alone", "global+verification": "+ spot verification (inliers)",
                   "global+lnbnn": "+ LNBNN voting", "fused": "+ verification + LNBNN", "lnbnn_alone": "LNBNN alone"}


def print_fusion(res: dict) -> None:
    """Every fusion compared: cross-validated on the calibration photos beside its figures on the test split,
    and which was kept and why."""
    fusion = res.get("fusion") or {}
    cv, test = fusion.get("cv") or {}, fusion.get("test") or {}
    kept = fusion.get("kept")
    if not (cv or test):
        return

    def cell(table: dict, name: str, key: str) -> str:
        return f"{table[name][key]:.4f}" if name in table else "-"

    rows = [(("* " if name == kept else "  ") + name, cell(cv, name, "map_macro"), cell(cv, name, "cmc1_macro"),
             cell(test, name, "map_macro"), cell(test, name, "cmc1_macro"))
            for name in dict.fromkeys([*cv, *test])]
    folds = fusion.get("n_folds")
    print_table(rows, ["fusion (* kept)", f"CV mAP ({folds} folds)" if folds else "CV mAP", "CV CMC@1", "test mAP",
                       "test CMC@1"])
    print(f"fusion kept: {kept}: {fusion.get('why', '')}")


def run_spots(args, ctx) -> int:
    if args.variant != "full_rgb" or args.rerank != "none":
        raise ValueError("--verify evaluates full photos without re-ranking; drop --variant / --rerank")
    request = SpotEvaluationRequest(benchmark=args.benchmark, model=args.backbone, matcher=args.verify or "sift",
                                    shortlist=args.shortlist, verification=not args.lnbnn_only,
                                    lnbnn=bool(args.lnbnn or args.lnbnn_only), user=ctx.user,
                                    lnbnn_shortlist=args.lnbnn_shortlist,
                                    calibrate_on=args.calibrate_on, flank=args.flank)
    last = {"what": None}

    def report(what: str, done: int, total: int) -> None:
        if sys.stderr.isatty() or done == total or what != last["what"]:
            print(f"\r{what}: {done}/{total}", end="\n" if done == total else "", file=sys.stderr, flush=True)
        last["what"] = what

    res = evaluate_spots(ctx.catalogue, request, progress=report)
    if args.json:
        print(json.dumps({k: res[k] for k in SPOT_KEYS if k in res}, default=float))
        return 0
    rows = []
    for name, m in res["components"].items():
        rows.append((COMPONENT_WORDS.get(name, name), f"{m['map_macro']:.4f}", f"{m['cmc_macro']['1']:.4f}",
                     f"{m['cmc_macro']['5']:.4f}", f"{m['map_micro']:.4f}"))
    rows.append((f"pipeline {res['model']}", f"{res['map_macro']:.4f}", f"{res['cmc_macro']['1']:.4f}",
                 f"{res['cmc_macro']['5']:.4f}", f"{res['map_micro']:.4f}"))
    print_table(rows, ["ranking", "mAP macro", "CMC@1 macro", "CMC@5 macro", "mAP micro"])
    sp = res["spots"]["test"]
    print(f"{sp['keypoints_mean']:.0f} keypoints per test photo ({100 * sp['masked_share']:.0f}% on a mask, "
          f"{sp['no_spot_evidence']} without spot evidence); {res['spots']['verified_pairs']} pairs verified; "
          f"{res['seconds']['total']:.0f} s")
    print_fusion(res)
    print(res["provenance"])
    if res.get("calibration_sample"):
        print(f"calibration sample: {res['calibration_sample']['words']}")
    if res.get("calibrated_on"):
        print(f"calibration: {res['calibrated_on']['words']}")
    print(f"stored as evaluation {res.get('evaluation_id')}; the pipeline {res['model']} works as --model everywhere")
    return 0
