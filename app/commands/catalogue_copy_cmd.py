"""``rosette catalogue copy --to URL [--force]``: the whole catalogue into another database (SQLite to PostgreSQL
and back), every row and id kept, checked afterwards (row counts per table, the audit chain)."""

from __future__ import annotations

import json
import sys

from app.console import print_table
from jobs.actions import maintenance
from jobs.requests.maintenance import CatalogueCopyRequest


def register(sub) -> None:
    p = sub.add_parser("catalogue", help="the catalogue as a whole: copy it into another database")
    actions = p.add_subparsers(dest="catalogue_action", metavar="ACTION", required=True)
    c = actions.add_parser("copy", help="copy every row (ids kept) into another database, SQLite or PostgreSQL, "
                                        "then compare row counts and verify the audit chain there")
    c.add_argument("--to", required=True, metavar="URL",
                   help="the target database: postgresql+psycopg://user:password@host:port/db or "
                        "sqlite:////path/catalogue.db (migrated to the newest schema first)")
    c.add_argument("--force", action="store_true", help="replace everything in a target that is not empty")
    c.add_argument("--json", action="store_true", help="the report as JSON")
    c.set_defaults(func=run_copy)


def run_copy(args, ctx) -> int:
    request = CatalogueCopyRequest(to=args.to, force=args.force)
    report = maintenance.copy_catalogue(ctx.catalogue, request)
    if args.json:
        print(json.dumps({"ok": report.ok, "source": report.source, "target": report.target,
                          "tables": [{"table": t.table, "source_rows": t.source_rows, "target_rows": t.target_rows,
                                      "ok": t.ok} for t in report.tables],
                          "audit_rows": report.audit.rows, "audit_ok": report.audit.ok,
                          "seconds": round(report.seconds, 3), "photos_stay_in": report.data_dir}))
    else:
        print(f"copied {report.source} -> {report.target} ({report.rows:,} rows, {report.seconds:.1f} s)")
        print_table([(t.table, f"{t.source_rows:,}", f"{t.target_rows:,}", "ok" if t.ok else "DIFFERENT")
                     for t in report.tables], ["table", "source rows", "target rows", "ok"])
        audit = (f"audit chain on the target: ok ({report.audit.rows:,} rows)" if report.audit.ok else
                 f"audit chain on the target: BROKEN at row {report.audit.first_broken_id}")
        print(audit)
        print(f"the photo files were not copied: they stay in the content-addressed store of {report.data_dir}, "
              "which both catalogues use")
    if not report.ok:
        print("error: the copy does not match its source (see the table above); do not use the target",
              file=sys.stderr)
        return 1
    return 0
