"""Accounts and roles: who may sign in, with what role, and the check every web handler makes.

Passwords are stored as argon2id hashes (argon2-cffi, salted per password, parameters in the hash so they can be
raised later: a hash made with older parameters is re-made at the next sign-in). A user without a password is a
name recorded with past changes that cannot sign in. Role order: viewer < curator < admin.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import func, select

from db.audit import acting_as
from db.catalogue import CatalogueError, NotFoundError
from db.models import Role, User, utcnow

MIN_PASSWORD_CHARS = 8
USERNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
ROLE_RANK = {Role.viewer: 0, Role.curator: 1, Role.admin: 2}
FIRST_ADMIN = "admin"
ADMIN_PASSWORD_ENV = "ROSETTE_ADMIN_PASSWORD"

_hasher = PasswordHasher()


@functools.cache
def _dummy_hash() -> str:
    """Verified against for unknown names, so a wrong name takes as long as a wrong password (made on first use,
    not at import: importing the app must not cost an argon2 hash)."""
    return _hasher.hash(secrets.token_hex(16))


class PermissionDenied(CatalogueError):
    """The signed-in person's role does not allow this."""


@dataclass(frozen=True)
class Account:
    name: str
    role: Role
    can_sign_in: bool
    active: bool
    created_at: datetime


def role_allows(role: Role | str, needed: Role | str) -> bool:
    """True when ``role`` may do what ``needed`` may (admin > curator > viewer)."""
    return ROLE_RANK[Role(role)] >= ROLE_RANK[Role(needed)]


def check_username(name: str) -> str:
    name = (name or "").strip()
    if not USERNAME_RE.match(name):
        raise ValueError(f"{name!r} is not a usable user name: 1-64 letters, digits, '.', '_', '@' or '-', "
                         "starting with a letter or digit")
    return name


def check_password(password: str) -> str:
    if password is None or len(password) < MIN_PASSWORD_CHARS:
        raise ValueError(f"a password needs at least {MIN_PASSWORD_CHARS} characters")
    if any(ord(c) < 32 for c in password):
        raise ValueError("a password cannot contain control characters")
    return password


def parse_role(role: str | Role) -> Role:
    try:
        return Role(str(getattr(role, "value", role)).strip().lower())
    except ValueError:
        raise ValueError(f"unknown role {role!r}; roles are: {', '.join(r.value for r in Role)}") from None


def _get(s, name: str) -> User:
    user = s.scalar(select(User).where(User.name == name))
    if user is None:
        raise NotFoundError(f"no user named {name!r} (the People tab lists the accounts; or `rosette users list`)")
    return user


def _admins_who_can_sign_in(s) -> int:
    return s.scalar(select(func.count(User.id)).where(User.role == Role.admin, User.active.is_(True),
                                                       User.password_hash.is_not(None))) or 0


def add_user(cat, name: str, password: str, *, role: Role | str = Role.viewer, by: str) -> Account:
    """A new account (or a password for a name so far only seen in the history)."""
    name, password, role = check_username(name), check_password(password), parse_role(role)
    with acting_as(by), cat.unit_of_work() as s:
        user = s.scalar(select(User).where(User.name == name))
        if user is not None and user.password_hash:
            raise CatalogueError(f"user {name!r} already exists; set its password or role in the People tab's Accounts "
                                 "panel (or `rosette users passwd` / `users role`)")
        if user is None:
            user = User(name=name)
            s.add(user)
        user.role, user.password_hash, user.active, user.updated_at = role, _hasher.hash(password), True, utcnow()
        s.commit()
        return _account(user)


def set_role(cat, name: str, role: Role | str, *, by: str) -> Account:
    role = parse_role(role)
    with acting_as(by), cat.unit_of_work() as s:
        user = _get(s, name)
        if user.role == Role.admin and role != Role.admin and user.password_hash and _admins_who_can_sign_in(s) <= 1:
            raise CatalogueError(f"{name!r} is the last admin who can sign in; make another admin first")
        user.role, user.updated_at = role, utcnow()
        s.commit()
        return _account(user)


def set_password(cat, name: str, password: str, *, by: str) -> Account:
    password = check_password(password)
    with acting_as(by), cat.unit_of_work() as s:
        user = _get(s, name)
        user.password_hash, user.updated_at = _hasher.hash(password), utcnow()
        s.commit()
        return _account(user)


def set_active(cat, name: str, active: bool, *, by: str) -> Account:
    """Disable (or re-enable) an account: a disabled account cannot sign in and its open sessions are refused."""
    with acting_as(by), cat.unit_of_work() as s:
        user = _get(s, name)
        if not active and user.role == Role.admin and _admins_who_can_sign_in(s) <= 1:
            raise CatalogueError(f"{name!r} is the last admin who can sign in; make another admin first")
        user.active, user.updated_at = bool(active), utcnow()
        s.commit()
        return _account(user)


def _account(user: User) -> Account:
    return Account(name=user.name, role=Role(user.role), can_sign_in=bool(user.password_hash),
                   active=bool(user.active), created_at=user.created_at)


def list_users(cat) -> list[Account]:
    with cat.unit_of_work() as s:
        return [_account(u) for u in s.scalars(select(User).order_by(User.name))]


def authenticate(cat, name: str, password: str) -> bool:
    """True when ``name`` is an active account and ``password`` is its password (same cost for unknown names)."""
    with cat.unit_of_work() as s:
        user = s.scalar(select(User).where(User.name == (name or "").strip()))
        stored = user.password_hash if user is not None and user.active else None
        try:
            _hasher.verify(stored or _dummy_hash(), password or "")
        except (VerificationError, InvalidHashError):
            return False
        if stored is None:
            return False
        if _hasher.check_needs_rehash(stored):
            with acting_as(user.name):
                user.password_hash = _hasher.hash(password)
                s.commit()
        return True


@dataclass
class LoginThrottle:
    """Slows password guessing: after ``max_failures`` wrong passwords for one name within ``window_s``, that
    name may not sign in for ``lock_s`` seconds (even with the right password). In memory, per server."""

    max_failures: int = 5
    window_s: float = 300.0
    lock_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _failures: dict[str, deque[float]] = field(default_factory=lambda: defaultdict(deque), repr=False)
    _locked_until: dict[str, float] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def locked(self, name: str) -> bool:
        with self._lock:
            return self._locked_until.get(name.strip().lower(), 0.0) > self.clock()

    def record(self, name: str, ok: bool) -> None:
        key, now = name.strip().lower(), self.clock()
        with self._lock:
            if ok:
                self._failures.pop(key, None)
                return
            recent = self._failures[key]
            recent.append(now)
            while recent and recent[0] < now - self.window_s:
                recent.popleft()
            if len(recent) >= self.max_failures:
                self._locked_until[key] = now + self.lock_s
                recent.clear()


def sign_in(cat, name: str, password: str, *, throttle: LoginThrottle) -> bool:
    """The web app's door: :func:`authenticate`, refused while ``name`` is locked out by ``throttle``."""
    if throttle.locked(name or ""):
        return False
    ok = authenticate(cat, name, password)
    throttle.record(name or "", ok)
    return ok


def role_of(cat, name: str | None) -> Role | None:
    """The role of an active account that can sign in, else None."""
    if not name:
        return None
    with cat.unit_of_work() as s:
        user = s.scalar(select(User).where(User.name == name))
        if user is None or not user.active or not user.password_hash:
            return None
        return Role(user.role)


def require_role(cat, name: str | None, needed: Role | str) -> Role:
    """The user's role, or :class:`PermissionDenied` saying what role the action needs."""
    role = role_of(cat, name)
    if role is None:
        raise PermissionDenied("Sign in first: this needs an account (an admin adds it in the People tab).")
    if not role_allows(role, needed):
        raise PermissionDenied(f"{name} is a {role.value}; this needs the {Role(needed).value} role "
                               "(an admin can change roles in the People tab).")
    return role


def ensure_first_admin(cat, *, environ: dict[str, str] | None = None) -> str | None:
    """On a catalogue where no admin can sign in, create the first admin (a catalogue is never left without
    one: accounts added from the shell before the first ``serve`` do not count).

    The password is ``$ROSETTE_ADMIN_PASSWORD`` when set, else a random one returned in the message (printed
    once, never stored in clear). The name is ``admin`` (``admin2``... when taken). Returns None when an admin
    who can sign in already exists.
    """
    environ = os.environ if environ is None else environ
    with cat.unit_of_work() as s:
        if _admins_who_can_sign_in(s):
            return None
        taken = set(s.scalars(select(User.name)))
    name = next(n for n in (FIRST_ADMIN, *(f"{FIRST_ADMIN}{k}" for k in range(2, 1000))) if n not in taken)
    given = environ.get(ADMIN_PASSWORD_ENV)
    password = given or secrets.token_urlsafe(12)
    add_user(cat, name, password, role=Role.admin, by="system")
    if given:
        return f"first admin account {name!r} created with the password from ${ADMIN_PASSWORD_ENV}"
    return (f"first admin account created: user {name!r}, password {password}\n"
            f"  (shown only this once; change it in the People tab or with `rosette users passwd {name}`)")


def ignored_admin_password(cat, *, environ: dict[str, str] | None = None) -> str | None:
    """One line saying ``$ROSETTE_ADMIN_PASSWORD`` is not used, when it is set and an admin who can sign in exists
    already: it only ever sets the first admin's password, so a server started with it on an existing catalogue
    would otherwise leave the operator believing it took effect. None when it is not set or no admin exists."""
    environ = os.environ if environ is None else environ
    if not environ.get(ADMIN_PASSWORD_ENV):
        return None
    with cat.unit_of_work() as s:
        if not _admins_who_can_sign_in(s):
            return None
    return (f"note: ${ADMIN_PASSWORD_ENV} is ignored: this catalogue has its accounts already (it only sets the "
            "first admin's password); change a password with `rosette users passwd NAME` or in the People tab")
