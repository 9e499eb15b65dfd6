"""``rosette index build | show``: the on-disk vector index of a species' gallery (IVF-PQ, memory-mapped shards).

- ``index build --species NAME [--model M] [--wait] [--json]``: queue the ``build_index`` job (heavy queue), or with
  ``--wait`` build it now and print its summary (recall@10, size, build time);
- ``index show [--species NAME] [--model M] [--json]``: whether the index is built, in use or stale, what it holds
  and its measured recall@10.

Match review uses the index once a gallery passes the threshold (100,000 photos, ``$ROSETTE_INDEX_THRESHOLD``) and
queues its build by itself when it is missing; this command builds it ahead of time.
"""

from __future__ import annotations

import json

from jobs.actions.match import IndexBuildRequest, build_vector_index, submit_index_build, vector_index_state
from jobs.actions.models import species_id


def register(sub) -> None:
    p = sub.add_parser("index", help="the on-disk vector index (IVF-PQ) of a species' gallery: build, show")
    isub = p.add_subparsers(dest="index_command", metavar="ACTION", required=True)
    b = isub.add_parser("build", help="build a species' on-disk IVF-PQ index (queued on the heavy queue)")
    b.add_argument("--species", required=True, help="species name or id")
    b.add_argument("--model", default=None,
                   help="model whose features are indexed (default: the species' active model)")
    b.add_argument("--wait", action="store_true", help="build it now and print the summary (else it is queued)")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=run_build)
    s = isub.add_parser("show", help="whether a species' index is built and used, and its recall@10")
    s.add_argument("--species", default=None, help="species name or id (default: the first species)")
    s.add_argument("--model", default=None, help="model (default: the species' active model)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=run_show)


def run_build(args, ctx) -> int:
    request = IndexBuildRequest(species=species_id(ctx.catalogue, args.species), model=args.model, user=ctx.user)
    if args.wait:
        res = build_vector_index(ctx.catalogue, request)
        print(json.dumps(res) if args.json else res["summary"])
        return 0
    job_id, message = submit_index_build(ctx.catalogue, request)
    print(json.dumps({"job": job_id, "message": message}) if args.json else
          message + ("; `rosette worker --once` or a running server picks it up" if job_id else ""))
    return 0


def run_show(args, ctx) -> int:
    state = vector_index_state(ctx.catalogue, species=species_id(ctx.catalogue, args.species), model=args.model)
    if args.json:
        print(json.dumps(state))
        return 0
    print(f"species {state['species_id']}, model {state['model']}: {state['gallery']:,} gallery photos "
          f"(threshold {state['threshold']:,}); index {state['state']}")
    info = state["index"]
    if info:
        recall = "not measured" if info["recall_at_10"] is None else \
            f"{info['recall_at_10']:.3f} on {info['recall_queries']} queries"
        print(f"  {info['n']:,} vectors, {info['shards']} shards, nlist {info['nlist']}, m {info['m']}, "
              f"nprobe {info['nprobe']}; recall@10 {recall}; {info['size_bytes'] / 1e6:.1f} MB, built "
              f"{info['built_at']} in {info['build_seconds']:.0f} s")
    if state["answers_with"]:
        print(f"  match review answers with: {state['answers_with']}")
    print(f"  folder: {state['folder']}")
    return 0
