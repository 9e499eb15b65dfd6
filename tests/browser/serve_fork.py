"""A fork server for the browser tests' ``rosette serve`` processes.

Two thirds of a server's start-up on 2 cores is importing Python (the app, Gradio): this process imports them
once, then forks one child per server, and the child runs ``app.cli.main`` with the arguments it is sent, as
``python -m app.cli`` would. Run as ``python -m tests.browser.serve_fork`` from the repository root; it reads one
JSON request a line on stdin (``{"argv": [...], "log": path, "env": {...}}``) and answers ``{"pid": N}``. When a child ends, its
exit status is written beside its log as ``<log>.rc``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback

# what `rosette serve` sets before it imports gradio, which reads its settings when imported
os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("GRADIO_SSR_MODE", "False")

import importlib  # noqa: E402

import app.cli  # noqa: E402
import app.ui  # noqa: E402,F401 - imported here so that every child finds it (and gradio) loaded

# what opening a catalogue, building the app and its first events import lazily (alembic; torch, timm and the
# backbones; the ONNX export; plotly's figures; scikit-learn's calibration; statsmodels' intervals): about 2 s of
# CPU per server. Imported, never run, so the children fork from a process with no torch threads; a name that
# moved costs time, not correctness
for _name in ("alembic.command", "alembic.runtime.migration", "core.identify.backbones.efficientnet",
              "core.identify.backbones.trained", "core.identify.training", "db.identify.training", "timm",
              "torchvision", "torch.onnx", "onnx", "plotly.graph_objects", "plotly.io", "sklearn.linear_model",
              "sklearn.metrics", "sklearn.model_selection", "sklearn.svm", "sklearn.pipeline", "sklearn.preprocessing",
              "statsmodels.stats.proportion", "PIL.ImageDraw", "PIL.ImageFont"):
    try:
        importlib.import_module(_name)
    except ModuleNotFoundError:
        pass

_logs: dict[int, str] = {}


def _reap(signum, frame) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        log = _logs.pop(pid, None)
        if log is not None:
            with open(f"{log}.rc", "w") as fh:
                fh.write(str(os.waitstatus_to_exitcode(status)))


def _child(argv: list[str], log: str, env: dict[str, str]) -> None:
    """Runs in the forked child: its output goes to the log, then it is ``rosette`` with ``argv``."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server waits for its own job processes
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        os.close(devnull)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [app.cli.__file__, *argv]
        code = app.cli.main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the child must never return into the fork server's loop
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main() -> None:
    signal.signal(signal.SIGCHLD, _reap)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # a child that ends at once is still recorded
        pid = os.fork()
        if pid == 0:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            _child(request["argv"], request["log"], request["env"])
        _logs[pid] = request["log"]
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
