"""What the People tab's audit trail shows: the trail as a table, filtered, and as a CSV file to download."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from db.audit import audit_csv, audit_rows, audit_users, verify_chain
from db.session import Catalogue

AUDIT_HEADERS = ["#", "When (UTC)", "Who", "Action", "Target", "Details"]
SHOWN_ROWS = 500


def _filters(user: str | None, action: str | None, target: str | None, since: str | None,
             until: str | None) -> dict[str, str | None]:
    return {"user": None if user in (None, "", "anyone") else user, "action": action, "target": target,
            "since": since, "until": until}


def audit_table(cat: Catalogue, user: str | None = None, action: str | None = None, target: str | None = None,
                since: str | None = None, until: str | None = None) -> tuple[list[list[object]], str]:
    """The newest matching changes (at most ``SHOWN_ROWS``) and a line saying how many and whether the chain holds."""
    rows = audit_rows(cat, **_filters(user, action, target, since, until), limit=SHOWN_ROWS + 1)
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
    return ["anyone", *audit_users(cat)]


def audit_csv_file(cat: Catalogue, user: str | None = None, action: str | None = None, target: str | None = None,
                   since: str | None = None, until: str | None = None) -> tuple[str, str]:
    """Every matching change as a CSV under ``exports/`` (formula-like cells defused); its path and a message."""
    rows = audit_rows(cat, **_filters(user, action, target, since, until), limit=None)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
    path = Path(cat.data_dir) / "exports" / f"audit-{stamp}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(audit_csv(rows), encoding="utf-8")
    return str(path), f"{len(rows)} changes written to {path.name}."
