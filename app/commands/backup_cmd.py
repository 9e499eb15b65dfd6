"""``rosette backup PATH`` and ``rosette restore PATH``: a consistent copy of the catalogue and its files."""

from __future__ import annotations

import json

from db.session import resolve_data_dir
from jobs.actions import maintenance
from jobs.requests.maintenance import BackupRequest, RestoreRequest


def register(sub) -> None:
    b = sub.add_parser("backup", help="write a consistent backup (database + files) to a new folder")
    b.add_argument("path")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=run_backup)
    r = sub.add_parser("restore", help="restore a backup into the data directory (empty unless --force)")
    r.add_argument("path")
    r.add_argument("--force", action="store_true", help="overwrite a catalogue already in the data directory")
    r.set_defaults(func=run_restore)


def run_backup(args, ctx) -> int:
    info = maintenance.backup(ctx.catalogue, BackupRequest(args.path))
    print(json.dumps(info) if args.json else
          f"backup written to {args.path}: {info['counts']['images']} photos, {info['counts']['individuals']} "
          f"individuals, {info['counts']['match_decisions']} decisions, {info['files']} files "
          f"({info['seconds']:.1f} s)")
    return 0


def run_restore(args, ctx) -> int:
    target = resolve_data_dir(ctx.data_dir)
    info = maintenance.restore(RestoreRequest(args.path, str(target), force=args.force))
    print(f"restored the backup of {info['created']} ({info['counts']['images']} photos) into {target}")
    return 0
