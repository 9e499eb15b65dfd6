"""The ``rosette`` command line.

Global options come before the subcommand (``rosette --data-dir DIR import ...``).
Each subcommand lives in its own module under ``app/commands/`` exposing
``register(subparsers)``; that function sets ``func(args, ctx) -> int`` as the
handler via ``parser.set_defaults(func=...)``. The modules are listed in :data:`COMMANDS` (adding a command means
adding its module there).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from app.commands import (
    annotations_cmd,
    audit_cmd,
    backup_cmd,
    benchmark_cmd,
    catalogue_cmd,
    catalogue_copy_cmd,
    compare_cmd,
    density_cmd,
    deployments_cmd,
    detectors_cmd,
    diagnose_cmd,
    doctor_cmd,
    eval_cmd,
    export_cmd,
    export_data_cmd,
    flank_links_cmd,
    import_cmd,
    index_cmd,
    individual_cmd,
    jobs_cmd,
    loop_cmd,
    mask_cmd,
    match_cmd,
    population_cmd,
    serve,
    species_cmd,
    spots_cmd,
    stats,
    train_cmd,
    users_cmd,
)
from app.console import print_table, printable  # noqa: F401  (the commands' output helpers, also read from here)
from db.session import open_catalogue
from jobs.actions.audit import acting_as
from jobs.actions.maintenance import database_problem

COMMANDS = (annotations_cmd, audit_cmd, backup_cmd, benchmark_cmd, catalogue_cmd, catalogue_copy_cmd, compare_cmd, density_cmd, deployments_cmd, detectors_cmd, diagnose_cmd, doctor_cmd, eval_cmd, export_cmd, export_data_cmd, flank_links_cmd, import_cmd, index_cmd, individual_cmd, jobs_cmd, loop_cmd, mask_cmd, match_cmd, population_cmd, serve, species_cmd, spots_cmd, stats, train_cmd, users_cmd)
"""Every subcommand's module, in the order their help lists them."""


@dataclass
class CliContext:
    """What every command gets: where the catalogue is and who is acting."""

    data_dir: str | None
    database_url: str | None
    user: str
    read_only: bool = False

    @cached_property
    def catalogue(self):
        cat = open_catalogue(self.data_dir, url=self.database_url, read_only=True if self.read_only else None)
        if cat.read_only and not self.read_only:
            print(f"note: {cat.data_dir} cannot be written by this user; the catalogue is open read-only",
                  file=sys.stderr)
        return cat


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rosette", description="Wildlife re-identification curation.")
    parser.add_argument("--data-dir", default=None, help="data directory (default: $ROSETTE_HOME or ./rosette-data)")
    parser.add_argument("--database-url", default=None,
                        help="SQLAlchemy URL (default: $ROSETTE_DATABASE_URL or SQLite in the data directory)")
    parser.add_argument("--read-only", action="store_true",
                        help="open the catalogue read-only (also chosen by itself when it cannot be written)")
    parser.add_argument("--user", default="curator", help="name recorded with every change (default: curator)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    ctx = CliContext(data_dir=args.data_dir, database_url=args.database_url, user=args.user,
                     read_only=args.read_only)
    try:
        with acting_as(ctx.user):  # every change this command makes is audited as --user
            return int(args.func(args, ctx) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, PermissionError) as exc:
        # Domain errors carry curator-readable messages; no traceback for them.
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a full disk, a vanished folder ...: say what, not a traceback
        print(f"error: {exc.strerror or exc}{f' ({exc.filename})' if getattr(exc, 'filename', None) else ''}",
              file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001
        opened = ctx.__dict__.get("catalogue")  # the cached catalogue, when the command opened one
        reason = database_problem(exc, data_dir=opened.data_dir if opened is not None else None)
        if reason is not None:
            print(f"error: the catalogue database could not be used: {reason}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    raise SystemExit(main())
