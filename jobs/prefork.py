"""The pre-forked job runner: a zygote process that imports the heavy libraries once and forks one child per job.

A fresh ``python -m jobs.runner`` spends seconds importing the job code (cv2, faiss, scipy) before its job says a
word, and a job that trains or embeds seconds more on torch and timm. The zygote (``python -m jobs.prefork``,
started by the worker) pays that once, then waits on a socket. For each job the supervisor sends the job's id,
catalogue and environment with three file descriptors -- the job's ``log.txt``, a status pipe and a liveness
pipe -- and the zygote forks a child that runs the job exactly as ``jobs.runner`` does.
Each job is still its own process (a crash or an OOM-kill ends the child, never the supervisor or the
zygote) in its own session (``killpg`` of its pid ends it and what it started); the zygote reports the child's
pid, then its exit status (negative: the signal) on the status pipe, so the supervisor reads the same return
codes as from :class:`subprocess.Popen`. The child's watchdog reads the liveness pipe, whose write end only the
supervisor holds: when the supervisor dies, the child ends.

Why not ``multiprocessing``'s forkserver: each child it starts re-imports the parent's ``__main__`` (for
``rosette serve`` that is ``app.cli`` and gradio, ~10 s), which would undo the point. The zygote never opens a
catalogue and never runs a torch op before it forks (a forked SQLAlchemy pool or a started thread pool would be
shared with the child); each child opens its own catalogue.

The zygote reads the environment once, when it starts: each child gets the supervisor's environment of the
moment, but libraries that read a variable at import (torch's thread count, ``HF_HUB_OFFLINE``) keep the
zygote's. ``ROSETTE_PREFORK=0`` turns the pre-forked runner off (each job then starts a fresh process).
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import json
import os
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
#: What the zygote imports before it says it is ready: what a job's first seconds would otherwise be spent on.
PRELOAD: tuple[str, ...] = ("numpy", "torch", "timm", "cv2", "faiss", "jobs.queue", "jobs.runner")
ZYGOTE_MODULE = "jobs.prefork"
ENV_SWITCH = "ROSETTE_PREFORK"  # "0": every job starts a fresh process
READY_TIMEOUT_S = 180.0  # the zygote's imports (a cold disk took 14 s here), for callers that wait for them
SPAWN_TIMEOUT_S = 30.0  # a ready zygote answers a fork request in milliseconds
RETRY_AFTER_S = 300.0  # after a zygote that failed to start, jobs start fresh processes this long before a new try
MAX_REQUEST = 1 << 20  # one request (the job's environment as JSON) fits one datagram of this size
_CODE = struct.Struct("q")  # a pid, then the exit status (negative: the signal)


def _readable(fd: int | socket.socket, timeout: float | None) -> bool:
    """Whether ``fd`` can be read within ``timeout`` s (None: wait). poll, not select: a server with many
    connections has descriptors above select's limit of 1024."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(None if timeout is None else max(0, int(timeout * 1000))))


class PreforkUnavailable(RuntimeError):
    """The pre-forked runner cannot start this job (the message says why); the caller starts a fresh process."""


class PreforkNotReady(PreforkUnavailable):
    """The zygote is still importing: a job queued meanwhile starts a fresh process rather than wait, so it never
    starts later than it would have without the zygote."""


def _write_code(fd: int, n: int) -> None:
    os.write(fd, _CODE.pack(n))


def _read_code(fd: int) -> int:
    data = b""
    while len(data) < _CODE.size:
        chunk = os.read(fd, _CODE.size - len(data))
        if not chunk:
            raise EOFError("the pre-forked runner closed the status pipe")
        data += chunk
    return _CODE.unpack(data)[0]


class PreforkedChild:
    """A job's process forked by the zygote, watched like a :class:`subprocess.Popen`: ``pid``, ``poll()``,
    ``wait(timeout)`` (raises :class:`subprocess.TimeoutExpired`) and ``returncode``."""

    def __init__(self, pid: int, status_r: int, alive_w: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._status_r = status_r
        self._alive_w = alive_w  # closing it (or this process dying) tells the child's watchdog to end the child

    def poll(self) -> int | None:
        if self.returncode is None and _readable(self._status_r, 0):
            self._collect()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not _readable(self._status_r, timeout):
                raise subprocess.TimeoutExpired(f"job process {self.pid}", timeout or 0.0)
            self._collect()
        assert self.returncode is not None
        return self.returncode

    def _collect(self) -> None:
        try:
            self.returncode = _read_code(self._status_r)
        except (OSError, EOFError):
            # the zygote died before it could report: the child lives on unwatched, so end it and say so
            _kill_group(self.pid)
            self.returncode = 255
        finally:
            os.close(self._status_r)
            os.close(self._alive_w)


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
            return
        except (ProcessLookupError, PermissionError):
            continue


class Zygote:
    """The supervisor's handle on one zygote process: :meth:`start` it (returns at once; the imports go on in
    the zygote), then :meth:`spawn` a child per job (waits for the imports to finish the first time)."""

    def __init__(self, *, preload: tuple[str, ...] | None = None, module: str | None = None) -> None:
        self.preload = PRELOAD if preload is None else preload
        self.module = module or ZYGOTE_MODULE
        self.info: dict[str, Any] | None = None  # the zygote's ready message: its pid, what it imported
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()  # two supervisor threads (light and heavy queue) share one zygote
        self._started = time.monotonic()

    def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
        try:
            # its own session: a Ctrl-C in the server's terminal is for the server, which ends the zygote by closing
            # the socket
            self._proc = subprocess.Popen(
                [sys.executable, "-m", self.module, "--fd", str(theirs.fileno()), "--preload", ",".join(self.preload)],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                start_new_session=True, cwd=str(REPO_ROOT), env=env)
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        self._started = time.monotonic()

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def exit_code(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> dict[str, Any]:
        """Block until the zygote has imported :data:`PRELOAD` (its ready message); raises
        :class:`PreforkUnavailable` when it died or did not answer in ``timeout`` s."""
        with self._lock:
            return self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> dict[str, Any]:
        if self.info is not None:
            return self.info
        if self._sock is None or self._proc is None:
            raise PreforkUnavailable("the pre-forked runner was not started")
        if not _readable(self._sock, timeout):
            raise PreforkNotReady(f"the pre-forked runner is still importing its libraries, started "
                                  f"{time.monotonic() - self._started:.0f} s ago")
        msg = self._sock.recv(MAX_REQUEST)
        if not msg:
            rc = self._proc.wait(timeout=5)
            raise PreforkUnavailable(f"the pre-forked runner exited with code {rc} before it was ready")
        self.info = json.loads(msg)
        return self.info

    def spawn(self, *, job_id: int, data_dir: str, database_url: str, log_fd: int,
              ready_timeout: float = READY_TIMEOUT_S) -> PreforkedChild:
        """Fork a child that runs job ``job_id`` with its stdout and stderr on ``log_fd``, once the zygote is ready
        (waiting up to ``ready_timeout`` s for that)."""
        request = json.dumps({"job_id": int(job_id), "data_dir": data_dir, "database_url": database_url,
                              "env": dict(os.environ), "cwd": str(REPO_ROOT)}).encode()
        status_r, status_w = os.pipe()
        alive_r, alive_w = os.pipe()
        try:
            with self._lock:
                self._wait_ready(ready_timeout)
                assert self._sock is not None
                try:
                    socket.send_fds(self._sock, [request], [log_fd, status_w, alive_r])
                except OSError as exc:
                    raise PreforkUnavailable(f"the pre-forked runner is gone ({exc})") from None
            os.close(status_w)
            os.close(alive_r)
            status_w = alive_r = -1
            if not _readable(status_r, SPAWN_TIMEOUT_S):
                raise PreforkUnavailable(f"the pre-forked runner did not fork in {SPAWN_TIMEOUT_S:.0f} s")
            try:
                pid = _read_code(status_r)
            except EOFError:
                raise PreforkUnavailable("the pre-forked runner died before it forked") from None
            if pid <= 0:
                raise PreforkUnavailable("the pre-forked runner could not fork (out of memory or processes?)")
        except BaseException:
            for fd in (status_r, status_w, alive_r, alive_w):
                if fd >= 0:
                    os.close(fd)
            raise
        return PreforkedChild(pid, status_r, alive_w)

    def close(self, *, timeout: float = 5.0) -> None:
        """Ask the zygote to exit (closing its socket is the request); its running children are not touched."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


_shared_lock = threading.Lock()
_shared: Zygote | None = None
_failed: tuple[float, str] | None = None  # when the last zygote failed to start, and why


def warm_up() -> None:
    """Start this process's zygote now (its imports run while the worker idles), unless turned off or failing."""
    try:
        shared_zygote()
    except PreforkUnavailable:
        pass


def shared_zygote() -> Zygote:
    """This process's zygote, started (again, if the last one died) when needed; raises
    :class:`PreforkUnavailable` when it is turned off, cannot run here, or failed to start a moment ago."""
    global _shared
    if os.environ.get(ENV_SWITCH, "1").strip() == "0":
        raise PreforkUnavailable(f"turned off by {ENV_SWITCH}=0")
    if not (hasattr(os, "fork") and hasattr(socket, "send_fds") and hasattr(socket, "SOCK_SEQPACKET")):
        raise PreforkUnavailable("this platform cannot fork a child and hand it file descriptors")
    with _shared_lock:
        if _failed is not None and time.monotonic() - _failed[0] < RETRY_AFTER_S:
            raise PreforkUnavailable(_failed[1])
        if _shared is not None and not _shared.alive():
            dead, _shared = _shared, None
            dead.close(timeout=1.0)
            if dead.info is None:  # it never got ready: another would most likely fail the same way
                raise _failure(f"the pre-forked runner exited with code {dead.exit_code} before it was ready")
        if _shared is None:
            zygote = Zygote()
            try:
                zygote.start()
            except OSError as exc:
                raise _failure(f"the pre-forked runner could not start ({exc})") from None
            _shared = zygote
        return _shared


def _failure(why: str) -> PreforkUnavailable:
    global _failed
    _failed = (time.monotonic(), why)
    return PreforkUnavailable(why)


def spawn_job(*, job_id: int, data_dir: str, database_url: str, log_fd: int) -> PreforkedChild:
    """Fork a child of this process's zygote for job ``job_id`` (starting the zygote if needed); raises
    :class:`PreforkUnavailable` saying why not (:class:`PreforkNotReady` while its imports go on: it does not
    wait for them). A zygote that died before it was ready is given up for
    :data:`RETRY_AFTER_S` (jobs start fresh processes meanwhile instead of each waiting for a new one); one that
    died after it was ready is started again for the next job."""
    global _shared
    zygote = shared_zygote()
    try:
        return zygote.spawn(job_id=job_id, data_dir=data_dir, database_url=database_url, log_fd=log_fd,
                            ready_timeout=0.0)
    except PreforkNotReady:
        raise
    except PreforkUnavailable as exc:
        if zygote.info is None:
            with _shared_lock:
                if _shared is zygote:
                    _shared = None
                _failure(str(exc))
            zygote.close(timeout=1.0)
        raise


def reset() -> None:
    """Close this process's zygote and forget any failure (tests; a process that exits)."""
    global _shared, _failed
    with _shared_lock:
        zygote, _shared, _failed = _shared, None, None
    if zygote is not None:
        zygote.close()


atexit.register(reset)


# ---- the zygote's side ----------------------------------------------------------------------------------------


def _serve(sock: socket.socket, preload: list[str]) -> None:
    """The zygote's loop: import ``preload``, say ready, then fork a child per request and report each child's
    pid and exit status, until the supervisor closes the socket."""
    imported, missing = [], []
    for name in preload:
        try:
            importlib.import_module(name)  # named at run time by the supervisor: cannot be a top-level import
            imported.append(name)
        except Exception as exc:  # noqa: BLE001 - a job that needs it will say why; the others need not wait
            missing.append(f"{name}: {exc}")
    try:
        from jobs.registry import load_extra_job_kinds  # lazy: the job kinds named by $ROSETTE_JOB_KINDS

        load_extra_job_kinds()
    except Exception as exc:  # noqa: BLE001 - the child imports them again and reports the error in its job
        missing.append(str(exc))

    sig_r, sig_w = os.pipe()
    os.set_blocking(sig_r, False)
    os.set_blocking(sig_w, False)
    old = {signal.SIGCHLD: signal.signal(signal.SIGCHLD, lambda *_: None),  # wakes the selector via sig_w
           signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN)}
    signal.set_wakeup_fd(sig_w)
    running: dict[int, int] = {}  # child pid -> its status pipe
    sock.send(json.dumps({"pid": os.getpid(), "imported": imported, "missing": missing}).encode())
    with selectors.DefaultSelector() as sel:
        sel.register(sock, selectors.EVENT_READ)
        sel.register(sig_r, selectors.EVENT_READ)
        own = [sock.fileno(), sig_r, sig_w, sel.fileno()]  # a child closes these: they are the zygote's
        while True:
            for key, _ in sel.select():
                if key.fileobj is sock:
                    msg, fds, _flags, _addr = socket.recv_fds(sock, MAX_REQUEST, 3)
                    if not msg:
                        return  # the supervisor is gone (or closed us): its children end by their own watchdogs
                    if len(fds) != 3:
                        for fd in fds:
                            os.close(fd)
                        continue
                    _fork_one(json.loads(msg), *fds, running=running, own=own, old=old)
                else:
                    try:
                        os.read(sig_r, 4096)
                    except BlockingIOError:
                        pass
                    _reap(running)


def _reap(running: dict[int, int]) -> None:
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = running.pop(pid, None)
        if fd is not None:
            try:
                _write_code(fd, os.waitstatus_to_exitcode(status))
            except OSError:
                pass  # its supervisor is gone
            os.close(fd)


def _fork_one(request: dict[str, Any], log_fd: int, status_w: int, alive_r: int, *, running: dict[int, int],
              own: list[int], old: dict[int, Any]) -> None:
    try:
        pid = os.fork()
    except OSError:
        pid = -1
    if pid == 0:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for sig, handler in old.items():
                signal.signal(sig, handler)
            for fd in [*own, *running.values(), status_w]:  # other jobs' pipes must not outlive their jobs
                os.close(fd)
            code = _child(request, log_fd, alive_r)
        except BaseException:  # noqa: BLE001 - whatever happens, this process must not return into the zygote loop
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - a closed stream at exit
                    pass
            os._exit(code)
    try:
        _write_code(status_w, max(pid, 0))
    except OSError:
        pass
    if pid > 0:
        running[pid] = status_w
    else:
        os.close(status_w)
    os.close(log_fd)
    os.close(alive_r)


def _child(request: dict[str, Any], log_fd: int, alive_r: int) -> int:
    """In the forked child: become a job process like a fresh ``python -m jobs.runner`` and run the job."""
    os.setsid()  # first: the supervisor ends the job with killpg(pid)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(null)
    os.close(log_fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    # the zygote's exit handlers are the zygote's (a library's temporary folder, say): the child runs only its own
    atexit._clear()
    if "numpy" in sys.modules:  # every child would otherwise draw the same numpy.random stream (Python's own
        sys.modules["numpy"].random.seed()  # random module reseeds itself after a fork)
    from jobs import runner  # lazy: imported (and preloaded) in the zygote only, never by the supervisor

    try:
        return runner.run(request["data_dir"], request["database_url"], int(request["job_id"]), alive_fd=alive_r)
    finally:
        atexit._run_exitfuncs()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.prefork")
    p.add_argument("--fd", type=int, required=True, help="the socket to the supervisor")
    p.add_argument("--preload", default=",".join(PRELOAD))
    args = p.parse_args(argv)
    atexit.unregister(reset)  # that is the supervisor's clean-up
    sock = socket.socket(fileno=args.fd)
    try:
        _serve(sock, [m for m in args.preload.split(",") if m])
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
