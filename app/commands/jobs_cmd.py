"""``rosette worker`` runs background jobs; ``rosette jobs list|cancel|retry`` manages them."""

from __future__ import annotations

import json

from app.console import print_table
from jobs.actions.jobs import CancelJobRequest, RetryJobRequest, cancel_job, list_jobs, recover_stale_jobs, retry_job
from jobs.queue import QUEUES
from jobs.worker import main_loop, run_one


def register(sub) -> None:
    w = sub.add_parser("worker", help="run queued background jobs until interrupted")
    w.add_argument("--once", action="store_true", help="run at most one job and exit")
    w.add_argument("--queue", choices=["light", "heavy", "all"], default="all",
                   help="which queue to serve (default both, one job of each at a time)")
    w.add_argument("--in-process", action="store_true",
                   help="run jobs in this process instead of a supervised child process (debugging)")
    w.set_defaults(func=run_worker)
    j = sub.add_parser("jobs", help="list, cancel or retry background jobs")
    j.add_argument("action", choices=["list", "cancel", "retry", "recover"])
    j.add_argument("job_id", nargs="?", type=int)
    j.add_argument("--json", action="store_true")
    j.set_defaults(func=run_jobs)


def run_worker(args, ctx) -> int:
    queue = None if args.queue == "all" else args.queue
    if args.once:
        recover_stale_jobs(ctx.catalogue)
        job_id = run_one(ctx.catalogue, queue=queue, isolate=not args.in_process)
        print(f"ran job {job_id}" if job_id else "no queued job")
        return 0
    print("worker running; Ctrl-C to stop")
    main_loop(ctx.catalogue, queues=QUEUES if queue is None else (queue,))
    return 0


def run_jobs(args, ctx) -> int:
    cat = ctx.catalogue
    if args.action == "list":
        jobs = list_jobs(cat)
        if args.json:
            print(json.dumps([{"id": j.id, "kind": j.kind, "queue": j.queue, "status": j.status.value,
                               "progress": j.progress, "attempts": j.attempts, "max_attempts": j.max_attempts,
                               "message": j.message} for j in jobs]))
        else:
            print_table([(j.id, j.kind, j.queue, j.status.value, f"{j.progress:.0%}", f"{j.attempts}/{j.max_attempts}",
                          j.message or "") for j in jobs],
                        ["id", "kind", "queue", "status", "progress", "attempts", "message"])
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
