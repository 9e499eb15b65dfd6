"""Request of the audit trail's export (the People tab's "Export CSV", ``rosette audit --csv``)."""

from __future__ import annotations

from dataclasses import dataclass

from core.requests import Request


@dataclass(frozen=True)
class AuditExportRequest(Request):
    """Every change matching the filters as a CSV written to ``out`` (None: a new file under the data directory's
    exports). Filters: ``who`` made it, ``action`` and ``target`` prefixes, ``since`` / ``until`` days
    (YYYY-MM-DD, inclusive)."""

    who: str | None = None
    action: str | None = None
    target: str | None = None
    since: str | None = None
    until: str | None = None
    out: str | None = None
