"""``rosette worker`` runs background jobs; ``rosette jobs list|cancel|retry`` manages them."""

from __future__ import annotations

import json

from app.console import print_table
from jobs.actions.jobs import CancelJobRequest, RetryJobRequest, cancel_job, list_jobs, recover_stale_jobs, retry_job
from jobs.queue import QUEUES
from jobs.worker import ENGINES, main_loop, run_once


def register(sub) -> None:
    w = sub.add_parser("worker", help="run queued background jobs until interrupted")
    w.add_argument("--once", action="store_true", help="run at most one job and exit")
    w.add_argument("--queue", choices=["light", "heavy", "all"], default="all",
                   help="which queue to serve (default both, one job of each at a time)")
    w.add_argument("--in-process", action="store_true",
                   help="run jobs in this process instead of a supervised child process (debugging)")
    w.add_argument("--engine", choices=list(ENGINES), default="local",
                   help="local: each job in a supervised child process (default); ray: each job as Ray work "
                        "(embedding as a Ray Data pipeline, the rest as Ray tasks) on a Ray cluster")
    w.add_argument("--address", default=None, metavar="HOST:PORT",
                   help="with --engine ray: the head of an existing cluster (`ray start --head` prints it; port "
                        "6379 by default); without it a local Ray cluster is started. Its workers need this data "
                        "directory at the same path (a shared filesystem)")
    w.add_argument("--num-cpus", type=int, default=None,
                   help="with --engine ray and no --address: CPUs of the local Ray cluster (default: all)")
    w.set_defaults(func=run_worker)
    j = sub.add_parser("jobs", help="list, cancel or retry background jobs")
    j.add_argument("action", choices=["list", "cancel", "retry", "recover"])
    j.add_argument("job_id", nargs="?", type=int)
    j.add_argument("--json", action="store_true")
    j.set_defaults(func=run_jobs)


def run_worker(args, ctx) -> int:
    queue = None if args.queue == "all" else args.queue
    if args.engine == "ray" and args.in_process:
        raise ValueError("--in-process is for --engine local; Ray jobs run in Ray's own worker processes")
    if args.once:
        recover_stale_jobs(ctx.catalogue)
        job_id = run_once(ctx.catalogue, engine=args.engine, address=args.address, queue=queue,
                          isolate=not args.in_process, num_cpus=args.num_cpus)
        print(f"ran job {job_id}" if job_id else "no queued job")
        return 0
    where = f" on Ray ({args.address or 'a local cluster'})" if args.engine == "ray" else ""
    print(f"worker running{where}; Ctrl-C to stop", flush=True)
    main_loop(ctx.catalogue, queues=QUEUES if queue is None else (queue,), engine=args.engine, address=args.address,
              num_cpus=args.num_cpus)
    return 0


def run_jobs(args, ctx) -> int:
    cat = ctx.catalogue
    if args.action == "list":
        jobs = list_jobs(cat)
        if args.json:
            print(json.dumps([{"id": j.id, "kind": j.kind, "queue": j.queue, "status": j.status.value,
                               "progress": j.progress, "attempts": j.attempts, "max_attempts": j.max_attempts,
                               "worker": j.worker, "message": j.message} for j in jobs]))
        else:
            print_table([(j.id, j.kind, j.queue, j.status.value, f"{j.progress:.0%}", f"{j.attempts}/{j.max_attempts}",
                          j.worker or "", j.message or "") for j in jobs],
                        ["id", "kind", "queue", "status", "progress", "attempts", "worker", "message"])
        return 0
    if args.action == "recover":
        print(f"recovered jobs: {recover_stale_jobs(cat)}")
        return 0
    if args.job_id is None:
        raise ValueError(f"'jobs {args.action}' needs a job id")
    if args.action == "cancel":
        print(f"job {args.job_id}: {cancel_job(cat, CancelJobRequest(job_id=args.job_id, user=ctx.user)).status}")
    else:
        retry_job(cat, RetryJobRequest(job_id=args.job_id, user=ctx.user))
        print(f"job {args.job_id}: queued again")
    return 0
