"""Child-process entry point: ``python -m jobs.runner --data-dir D --database-url U JOB_ID``.

Runs one job that its supervisor (``jobs.worker``) already moved to ``running``,
records the outcome itself and exits 0. Anything that kills this process (a
crash in native code, out-of-memory, a hung CUDA call the supervisor
terminates) leaves the job ``running``; the supervisor sees the exit code and
records what happened. A watchdog thread ends this process when its
supervisor dies, so no orphan keeps training.

:func:`run` is the same work for a child forked by the pre-forked runner
(:mod:`jobs.prefork`), whose parent is the zygote, not the supervisor: its
watchdog reads a pipe that only the supervisor holds open instead.
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


def _watch_pipe(fd: int) -> None:
    """Blocks until the supervisor's end of the pipe closes (it exited or died: the kernel closes it), then ends
    this process as :func:`_watch_parent` does."""
    while True:
        try:
            if not os.read(fd, 1):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    os._exit(3)


def run(data_dir: str, database_url: str, job_id: int, *, alive_fd: int | None = None) -> int:
    """Run job ``job_id`` in this process with a watchdog on the supervisor: the pipe ``alive_fd`` when given,
    else the parent process. Returns the exit code (0: the outcome was recorded)."""
    if alive_fd is None:
        watch = threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True)
    else:
        watch = threading.Thread(target=_watch_pipe, args=(alive_fd,), daemon=True)
    watch.start()
    from db.session import open_catalogue  # lazy: would close an import circle
    from jobs.queue import execute  # lazy: imports cv2, faiss (start-up time)

    cat = open_catalogue(data_dir, url=database_url, migrate=False)
    try:
        status = execute(cat, job_id)
        print(f"job {job_id} {status.value}", flush=True)
    finally:
        cat.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.runner")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--database-url", required=True)
    p.add_argument("job_id", type=int)
    args = p.parse_args(argv)
    return run(args.data_dir, args.database_url, args.job_id)


if __name__ == "__main__":
    sys.exit(main())
