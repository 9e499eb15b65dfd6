"""``rosette serve [--host 127.0.0.1] [--port 7860] [--no-demo] [--preload] [--single-user]``: the browser app.

Sign-in is required (accounts in the catalogue, ``rosette users``); on first start an admin account is created
and its password printed once (or taken from ``$ROSETTE_ADMIN_PASSWORD``). ``--single-user`` serves without
sign-in, on a loopback host only, everyone acting as ``--user`` with the admin role, and the header says so.

Opens the catalogue, seeds the demo catalogue on first start (unless
``--no-demo``), builds the Gradio app and serves it until interrupted. Runs
fully offline: no share link, no analytics, no web fonts, no server-side
rendering (which would need Node).
"""

from __future__ import annotations

import os
import sys
import time

from core.identify.backbones import DEFAULT_BACKBONE
from jobs.actions import maintenance
from jobs.actions.accounts import ensure_first_admin
from jobs.actions.server_start import startup_notes
from jobs.requests.accounts import FirstAdminRequest
from jobs.requests.server_start import StartupNotesRequest
from jobs.worker import start_worker_thread


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve the curation app in the browser")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=7860, help="port to listen on (default: 7860)")
    p.add_argument("--no-demo", action="store_true", help="do not add the demo animals to an empty catalogue")
    p.add_argument("--preload", action="store_true",
                   help=f"load the default backbone ({DEFAULT_BACKBONE}) at startup so the first match is fast")
    p.add_argument("--single-user", action="store_true",
                   help="no sign-in: everyone who reaches the app acts as --user, an admin (loopback hosts only)")
    p.add_argument("--no-worker", action="store_true",
                   help="do not run background jobs in this process (run `rosette worker` separately)")
    p.set_defaults(func=run)


def _offline_environment() -> None:
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("GRADIO_SSR_MODE", "False")


def seed_demo(cat, *, user: str = "demo") -> str | None:
    """Seed the demo catalogue if the catalogue is empty; returns what happened, or None if nothing did."""
    try:
        report = maintenance.seed_demo(cat, user=user)
    except Exception as exc:  # noqa: BLE001 - a broken demo must not stop the app from starting
        return f"demo catalogue could not be added ({type(exc).__name__}: {exc}); starting without it"
    if report is None:
        return None
    counts = ", ".join(f"{n} {status}" for status, n in dict(report.counts).items() if n)
    return f"demo catalogue added: {counts or 'nothing to add'}"


def preload_backbone(cat, name: str = DEFAULT_BACKBONE) -> str:
    """Build the default backbone (the same per-process instance the matcher uses) and embed one
    blank picture, so weights and kernels are warm."""
    seconds = maintenance.preload_backbone(cat, name)
    return f"backbone {name} loaded and warmed up in {seconds:.1f} s"


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def run(args, ctx) -> int:
    _offline_environment()
    t0 = time.perf_counter()
    if args.single_user and args.host not in LOOPBACK_HOSTS:
        raise ValueError(f"--single-user serves without sign-in, so only on this machine (--host 127.0.0.1), "
                         f"not on {args.host}")
    cat = ctx.catalogue
    if args.single_user:
        print(f"single-user mode: no sign-in; every change is recorded as {ctx.user!r} (admin)", flush=True)
    else:
        message = ensure_first_admin(cat, FirstAdminRequest())
        for line in [message] if message else startup_notes(cat, StartupNotesRequest()):
            print(line, flush=True)
    if not args.no_demo:
        message = seed_demo(cat)
        if message:
            print(message, flush=True)
    if args.preload:
        print(preload_backbone(cat), flush=True)

    if not args.no_worker:
        start_worker_thread(cat)
        print("background job worker started", flush=True)

    # gradio is heavy (seconds to import) and reads its settings from the environment set above: imported only by
    # the command that serves
    from app.ui import build_app, launch_options  # lazy: see above

    demo = build_app(cat, single_user=ctx.user if args.single_user else None)
    demo.queue(default_concurrency_limit=4)
    try:
        demo.launch(server_name=args.host, server_port=args.port, prevent_thread_lock=True, quiet=True,
                    inbrowser=False, **launch_options(cat, sign_in=not args.single_user))
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port} ({exc})", file=sys.stderr)
        return 1
    host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
    print(f"Rosette is running at http://{host}:{args.port}/ (started in {time.perf_counter() - t0:.1f} s; "
          f"data directory {cat.data_dir}). Press Ctrl+C to stop.", flush=True)
    try:
        demo.block_thread()
    finally:
        demo.close()
    return 0
