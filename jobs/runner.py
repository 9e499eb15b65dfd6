"""Child-process entry point: ``python -m jobs.runner --data-dir D --database-url U JOB_ID``.

Runs one job that its supervisor (``jobs.worker``) already moved to ``running``,
records the outcome itself and exits 0. Anything that kills this process (a
crash in native code, out-of-memory, a hung CUDA call the supervisor
terminates) leaves the job ``running``; the supervisor sees the exit code and
records what happened. A watchdog thread ends this process when its
supervisor dies, so no orphan keeps training.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(3)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.runner")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--database-url", required=True)
    p.add_argument("job_id", type=int)
    args = p.parse_args(argv)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    from db.session import open_catalogue  # lazy: would close an import circle
    from jobs.queue import execute  # lazy: imports cv2, faiss (start-up time)

    cat = open_catalogue(args.data_dir, url=args.database_url, migrate=False)
    try:
        status = execute(cat, args.job_id)
        print(f"job {args.job_id} {status.value}", flush=True)
    finally:
        cat.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
