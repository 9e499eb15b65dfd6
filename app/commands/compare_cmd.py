"""``rosette compare A B --benchmark NAME [--json]``: paired statistics between two models."""

from __future__ import annotations

import json

from app.console import print_table
from jobs.actions.models import CompareRequest, compare


def register(sub) -> None:
    p = sub.add_parser("compare", help="compare two models on a benchmark (paired Wilcoxon, Fisher, Holm)")
    p.add_argument("a", help="model A (or A1,A2,... one per training seed)")
    p.add_argument("b", help="model B (or B1,B2,... paired with A's seeds)")
    p.add_argument("--benchmark", required=True)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--json", action="store_true", help="per-endpoint effect sizes and corrected p-values")
    p.set_defaults(func=run)


def run(args, ctx) -> int:
    res = compare(ctx.catalogue, CompareRequest(a=args.a, b=args.b, benchmark=args.benchmark, alpha=args.alpha))
    if args.json:
        print(json.dumps({k: v for k, v in res.items() if k != "ap_differences"}, default=float))
        return 0
    rows = []
    for ep, e in res["endpoints"].items():
        rows.append((ep, f"{e['mean_a']:.4f}", f"{e['mean_b']:.4f}", f"{100 * e['mean_diff']:+.2f}",
                     f"[{100 * e['ci_low']:+.2f}, {100 * e['ci_high']:+.2f}]", f"{e['p_combined']:.3g}",
                     f"{e['p_holm']:.3g}" if e["p_holm"] is not None else "-", e["n_queries"]))
    print_table(rows, ["endpoint", f"A {res['a']}", f"B {res['b']}", "A-B (points)", "95% CI", "p (Fisher)",
                       "p (Holm)", "queries"])
    print("means per query, as the paired tests compare them; balanced per individual, as the leaderboard shows: "
          + "; ".join(f"{ep} A {e['macro_a']:.4f} / B {e['macro_b']:.4f}" for ep, e in res["endpoints"].items()))
    for e in res["endpoints"].values():
        print(e["verdict"])
    return 0
