"""The request of what ``rosette serve`` says as it starts (:mod:`jobs.actions.server_start`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.requests import Request


@dataclass(frozen=True)
class StartupNotesRequest(Request):
    """``admin_password``: the first admin's password the server was given; None: ``$ROSETTE_ADMIN_PASSWORD``."""

    admin_password: str | None = field(default=None, repr=False)
