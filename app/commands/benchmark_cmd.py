"""``rosette benchmark create|list``: stored benchmarks with a fixed split."""

from __future__ import annotations

import json

from app.console import print_table
from jobs.actions.benchmarks import CreateBenchmarkRequest, benchmark_list, create_benchmark


def register(sub) -> None:
    p = sub.add_parser("benchmark", help="create or list benchmarks (image sets with a fixed split)")
    bsub = p.add_subparsers(dest="benchmark_action", metavar="ACTION", required=True)
    c = bsub.add_parser("create", help="freeze an image set and its train/test split")
    c.add_argument("name")
    c.add_argument("--from-manifest", dest="manifest", default=None,
                   help="CSV manifest (filename,identity[,flank,sighting]); photos not yet in the catalogue are imported")
    c.add_argument("--split", default="identity",
                   help="identity (new animals in test, default), sighting (closed set), test-only (every photo is "
                        "a test photo: a published test set evaluated whole) or column:NAME (the manifest column "
                        "NAME says train or test per photo, e.g. column:source_split)")
    c.add_argument("--test-fraction", type=float, default=0.3)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--replace", action="store_true", help="rebuild a benchmark of the same name")
    c.set_defaults(func=run_create)
    ls = bsub.add_parser("list", help="list benchmarks")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_list)


def run_create(args, ctx) -> int:
    bench = create_benchmark(ctx.catalogue, CreateBenchmarkRequest(
        name=args.name, user=ctx.user, split=args.split, test_fraction=args.test_fraction, seed=args.seed,
        manifest=args.manifest, replace=args.replace)).benchmark
    c = bench.config
    how = (f"{bench.split_kind}-disjoint, fraction {c['test_fraction']}, seed {c['seed']}"
           if bench.split_kind in ("identity", "sighting") else bench.split_kind)
    print(f"benchmark {bench.name!r}: {c['n_images']} images of {c['n_identities']} identities; "
          f"test split: {c['n_test']} images of {c['n_test_identities']} identities ({how})")
    return 0


def run_list(args, ctx) -> int:
    rows = benchmark_list(ctx.catalogue)
    if args.json:
        print(json.dumps(rows))
    else:
        print_table([(r["name"], r["split"], r["n_images"], r["n_test"], r["n_test_identities"], r["seed"]) for r in rows],
                    ["name", "split", "images", "test images", "test identities", "seed"])
    return 0
