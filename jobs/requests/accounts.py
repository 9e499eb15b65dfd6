"""Requests of the account changes (admins only in the app; ``rosette users`` from the shell). ``by`` is who
makes the change. Passwords are never shown in a request's repr."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.requests import Request


@dataclass(frozen=True)
class AddAccountRequest(Request):
    """A new account (or a password for a name so far only seen in the history).

    ``ensure_admin``: before adding an account that is not an admin, make the first admin when no admin can
    sign in (``rosette users add`` on a new catalogue), so a catalogue is never left without one."""

    name: str
    password: str = field(repr=False)
    role: str
    by: str
    ensure_admin: bool = False


@dataclass(frozen=True)
class SetRoleRequest(Request):
    name: str
    role: str
    by: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", (self.name or "").strip())


@dataclass(frozen=True)
class SetPasswordRequest(Request):
    name: str
    password: str = field(repr=False)
    by: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", (self.name or "").strip())


@dataclass(frozen=True)
class SetActiveRequest(Request):
    """Disable an account (``active`` False: it cannot sign in, its open sessions are refused) or enable it."""

    name: str
    active: bool
    by: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", (self.name or "").strip())


@dataclass(frozen=True)
class FirstAdminRequest(Request):
    """Make the first admin when no admin can sign in. ``password`` None: ``$ROSETTE_ADMIN_PASSWORD`` when set,
    else a random one, shown once."""

    password: str | None = field(default=None, repr=False)
