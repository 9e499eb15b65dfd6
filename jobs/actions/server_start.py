"""What ``rosette serve`` says as it starts, beyond making the first admin (:mod:`jobs.actions.accounts`): the
settings it was given that it does not use, so the operator is not left believing they took effect."""

from __future__ import annotations

from db import users as store
from db.session import Catalogue
from db.users import ADMIN_PASSWORD_ENV
from jobs.requests.server_start import StartupNotesRequest


def startup_notes(cat: Catalogue, request: StartupNotesRequest) -> list[str]:
    """One line per setting given to the server that it ignores (the first admin's password once an admin
    exists)."""
    environ = None if request.admin_password is None else {ADMIN_PASSWORD_ENV: request.admin_password}
    note = store.ignored_admin_password(cat, environ=environ)
    return [note] if note else []
