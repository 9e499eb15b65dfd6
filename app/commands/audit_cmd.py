"""``rosette audit [--user U] [--action A] [--target T] [--since D] [--until D] [--limit N] [--csv PATH]`` and
``rosette audit verify``: read, export and check the hash-chained audit trail (see ``db.audit``)."""

from __future__ import annotations

from app.console import print_table, printable
from jobs.actions import audit as au
from jobs.requests.audit import AuditExportRequest


def register(sub) -> None:
    p = sub.add_parser("audit", help="show, export (--csv) or verify the audit trail")
    p.add_argument("what", nargs="?", choices=["show", "verify"], default="show")
    p.add_argument("--user", dest="who", default=None, help="only this user's changes")
    p.add_argument("--action", default=None, help="action prefix, e.g. 'decision' or 'photo.flank'")
    p.add_argument("--target", default=None, help="e.g. 'photo#12', or 'individual' for all individuals")
    p.add_argument("--since", default=None, help="YYYY-MM-DD (inclusive)")
    p.add_argument("--until", default=None, help="YYYY-MM-DD (inclusive)")
    p.add_argument("--limit", type=int, default=50, help="newest N changes (0: all; default 50)")
    p.add_argument("--csv", default=None, help="write the matching changes to this CSV file")
    p.set_defaults(func=run)


def run(args, ctx) -> int:
    if args.what == "verify":
        check = au.verify_chain(ctx.catalogue)
        if check.ok:
            print(f"audit trail intact: {check.rows} changes, every hash matches")
            return 0
        if check.head_missing:
            print(f"audit trail BROKEN: it ends before change #{check.first_broken_id}, the newest one written; "
                  "the newest changes were deleted outside Rosette")
        else:
            print(f"audit trail BROKEN at change #{check.first_broken_id}: that row or one before it was rewritten "
                  "or deleted outside Rosette")
        return 3
    if args.csv:
        done = au.export_audit(ctx.catalogue, AuditExportRequest(who=args.who, action=args.action, target=args.target,
                                                                 since=args.since, until=args.until, out=args.csv))
        print(f"{done.changes} changes written to {args.csv}")
        return 0
    rows = au.audit_rows(ctx.catalogue, who=args.who, action=args.action, target=args.target, since=args.since,
                         until=args.until, limit=None if args.limit == 0 else args.limit)
    print_table([(r.id, r.at.strftime("%Y-%m-%d %H:%M:%S"), printable(r.user), r.action, r.target,
                  printable(r.details_text())[:100]) for r in rows], ["#", "at (UTC)", "user", "action", "target",
                                                                       "details"])
    return 0
