"""Accounts and roles: what the People tab's Accounts panel shows and does (admins only) and ``rosette users``
(adding, re-roling, new passwords, disabling), the first admin of a new catalogue, and the sign-in door and role
checks the app's handler guard uses."""

from __future__ import annotations

from dataclasses import dataclass

from db import users as store
from db.models import Role
from db.session import Catalogue
from db.users import ADMIN_PASSWORD_ENV, ROLE_RANK, Account, LoginThrottle, require_role, role_allows, role_of, sign_in
from jobs.requests.accounts import (
    AddAccountRequest,
    FirstAdminRequest,
    SetActiveRequest,
    SetPasswordRequest,
    SetRoleRequest,
)

__all__ = ["ACCOUNT_HEADERS", "ROLE_RANK", "Account", "AccountChange", "LoginThrottle", "accounts", "accounts_table",
           "add_account", "change_role", "ensure_first_admin", "require_role", "reset_password", "role_allows",
           "role_of", "set_enabled", "sign_in"]

ACCOUNT_HEADERS = ["Name", "Role", "Can sign in", "Since"]


def accounts(cat: Catalogue) -> list[Account]:
    """Every account, and every name seen only in the history (which cannot sign in), by name."""
    return store.list_users(cat)


def accounts_table(cat: Catalogue) -> list[list[str]]:
    """Every account, and every name seen only in the history (which cannot sign in)."""
    return [[a.name, a.role.value if a.can_sign_in else "-",
             ("yes" if a.active else "disabled") if a.can_sign_in else "no (history only)",
             a.created_at.strftime("%Y-%m-%d")] for a in store.list_users(cat)]


@dataclass(frozen=True)
class AccountChange:
    account: Account
    message: str  # in the Accounts panel's words
    first_admin: str | None = None  # what making the first admin said (its password, unless from the environment)


def ensure_first_admin(cat: Catalogue, request: FirstAdminRequest) -> str | None:
    """On a catalogue where no admin can sign in, create the first admin; what happened (with the password when
    it was made up, shown only this once), or None when an admin who can sign in exists."""
    environ = None if request.password is None else {ADMIN_PASSWORD_ENV: request.password}
    return store.ensure_first_admin(cat, environ=environ)


def add_account(cat: Catalogue, request: AddAccountRequest) -> AccountChange:
    first = None
    if request.ensure_admin and store.parse_role(request.role) != Role.admin:
        # never leave a catalogue whose accounts include no admin
        first = ensure_first_admin(cat, FirstAdminRequest())
    account = store.add_user(cat, request.name, request.password, role=request.role, by=request.by)
    return AccountChange(account, f"Account **{account.name}** added as {account.role.value}.", first_admin=first)


def change_role(cat: Catalogue, request: SetRoleRequest) -> AccountChange:
    account = store.set_role(cat, request.name, request.role, by=request.by)
    return AccountChange(account, f"**{account.name}** is now {account.role.value}.")


def reset_password(cat: Catalogue, request: SetPasswordRequest) -> AccountChange:
    account = store.set_password(cat, request.name, request.password, by=request.by)
    return AccountChange(account, f"Password of **{account.name}** changed.")


def set_enabled(cat: Catalogue, request: SetActiveRequest) -> AccountChange:
    account = store.set_active(cat, request.name, request.active, by=request.by)
    return AccountChange(account, f"**{account.name}** {'can sign in again' if request.active else 'can no longer sign in'}.")
