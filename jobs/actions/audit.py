"""The audit trail: the People tab's table (filtered) and its CSV export, ``rosette audit`` (show, ``--csv``,
``verify``), and who the changes made now are attributed to (``acting_as``, set by the app's handler guard and by
every command)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from db import audit as store
from db.audit import AuditRow, ChainCheck, acting_as, verify_chain
from db.session import Catalogue
from jobs.requests.audit import AuditExportRequest

__all__ = ["AUDIT_HEADERS", "SHOWN_ROWS", "AuditExported", "AuditRow", "ChainCheck", "acting_as", "audit_choices",
           "audit_rows", "audit_table", "export_audit", "verify_chain", "who_filter"]

AUDIT_HEADERS = ["#", "When (UTC)", "Who", "Action", "Target", "Details"]
SHOWN_ROWS = 500
ANYONE = "anyone"  # the People tab's "Who" choice meaning no filter


def who_filter(user: str | None) -> str | None:
    """The People tab's "Who" choice as a filter (``anyone``, or nothing chosen: every user)."""
    return None if user in (None, "", ANYONE) else user


def audit_rows(cat: Catalogue, *, who: str | None = None, action: str | None = None, target: str | None = None,
               since: str | None = None, until: str | None = None, limit: int | None = None) -> list[AuditRow]:
    """The newest matching changes first (at most ``limit``; None: all)."""
    return store.audit_rows(cat, user=who, action=action, target=target, since=since, until=until, limit=limit)


def audit_table(cat: Catalogue, user: str | None = None, action: str | None = None, target: str | None = None,
                since: str | None = None, until: str | None = None) -> tuple[list[list[object]], str]:
    """The newest matching changes (at most ``SHOWN_ROWS``) and a line saying how many and whether the chain holds."""
    rows = audit_rows(cat, who=who_filter(user), action=action, target=target, since=since, until=until,
                      limit=SHOWN_ROWS + 1)
    table = [[r.id, r.at.strftime("%Y-%m-%d %H:%M:%S"), r.user, r.action, r.target, r.details_readable()[:300]]
             for r in rows[:SHOWN_ROWS]]
    check = verify_chain(cat)
    chain = (f"hash chain intact over all {check.rows} changes" if check.ok else
             f"**hash chain broken: it ends before change #{check.first_broken_id}**, the newest written; the newest "
             "changes were deleted outside Rosette" if check.head_missing else
             f"**hash chain broken at change #{check.first_broken_id}**: a row was rewritten or deleted outside "
             "Rosette")
    more = f"the newest {SHOWN_ROWS} of more" if len(rows) > SHOWN_ROWS else str(len(rows))
    return table, f"{more} matching changes; {chain}."


def audit_choices(cat: Catalogue) -> list[str]:
    return [ANYONE, *store.audit_users(cat)]


@dataclass(frozen=True)
class AuditExported:
    path: str
    changes: int  # rows written

    @property
    def message(self) -> str:
        return f"{self.changes} changes written to {Path(self.path).name}."


def export_audit(cat: Catalogue, request: AuditExportRequest) -> AuditExported:
    """Every matching change as a CSV (formula-like cells defused), at ``request.out`` or under ``exports/``."""
    rows = audit_rows(cat, who=request.who, action=request.action, target=request.target, since=request.since,
                      until=request.until, limit=None)
    if request.out is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
        path = Path(cat.data_dir) / "exports" / f"audit-{stamp}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
    else:
        path = Path(request.out)
    path.write_text(store.audit_csv(rows), encoding="utf-8")
    return AuditExported(path=str(path), changes=len(rows))
