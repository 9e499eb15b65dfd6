"""What the Accounts tab shows and does (admins only): the accounts, and adding, re-roling, disabling them."""

from __future__ import annotations

from db.session import Catalogue
from db.users import add_user, list_users, set_active, set_password, set_role

ACCOUNT_HEADERS = ["Name", "Role", "Can sign in", "Since"]


def accounts_table(cat: Catalogue) -> list[list[str]]:
    """Every account, and every name seen only in the history (which cannot sign in)."""
    return [[a.name, a.role.value if a.can_sign_in else "-",
             ("yes" if a.active else "disabled") if a.can_sign_in else "no (history only)",
             a.created_at.strftime("%Y-%m-%d")] for a in list_users(cat)]


def add_account(cat: Catalogue, name: str, password: str, role: str, *, by: str) -> str:
    account = add_user(cat, name, password, role=role, by=by)
    return f"Account **{account.name}** added as {account.role.value}."


def change_role(cat: Catalogue, name: str, role: str, *, by: str) -> str:
    account = set_role(cat, (name or "").strip(), role, by=by)
    return f"**{account.name}** is now {account.role.value}."


def reset_password(cat: Catalogue, name: str, password: str, *, by: str) -> str:
    account = set_password(cat, (name or "").strip(), password, by=by)
    return f"Password of **{account.name}** changed."


def set_enabled(cat: Catalogue, name: str, enabled: bool, *, by: str) -> str:
    account = set_active(cat, (name or "").strip(), enabled, by=by)
    return f"**{account.name}** {'can sign in again' if enabled else 'can no longer sign in'}."
