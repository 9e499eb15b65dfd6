"""``rosette eval --backbone NAME --benchmark NAME [--variant V] [--rerank R] [--json]``."""

from __future__ import annotations

import json
import sys


def register(sub) -> None:
    p = sub.add_parser("eval", help="all-vs-all retrieval evaluation of a backbone on a benchmark's test split")
    p.add_argument("--backbone", "--model", dest="backbone", default="efficientnet_lite0",
                   help="a backbone registry name or a trained model (rosette models list)")
    p.add_argument("--benchmark", required=True)
    p.add_argument("--variant", default="full_rgb")
    from db.evaluation import RERANK_METHODS

    p.add_argument("--rerank", default="none", choices=list(RERANK_METHODS))
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def progress_printer(label: str):
    def report(done: int, total: int) -> None:
        if sys.stderr.isatty() or done == total:
            print(f"\r{label}: {done}/{total}", end="\n" if done == total else "", file=sys.stderr, flush=True)

    return report


def run(args, ctx) -> int:
    from app.cli import print_table
    from db.evaluation import run_evaluation

    res = run_evaluation(ctx.catalogue, backbone=args.backbone, benchmark=args.benchmark, variant=args.variant,
                         rerank=args.rerank, progress=progress_printer("embedding"))
    if args.json:
        keys = ("map_macro", "map_micro", "cmc_macro", "cmc_micro", "n_queries", "n_identities", "model", "variant",
                "benchmark", "rerank", "same_sighting_excluded", "with_same_sighting", "evaluation_id")
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
    return 0
