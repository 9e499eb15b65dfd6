"""``rosette users add|list|role|passwd|disable|enable``: accounts and roles (see ``db.users``).

Passwords are asked twice on a terminal, or read from one line of standard input with ``--password-stdin``
(for scripts); they are never taken as a command-line argument, where other users of the machine could see them.
"""

from __future__ import annotations

import getpass
import sys

from app.console import print_table
from jobs.actions import accounts as acc
from jobs.requests.accounts import AddAccountRequest, SetActiveRequest, SetPasswordRequest, SetRoleRequest


def register(sub) -> None:
    p = sub.add_parser("users", help="accounts and roles: add, list, role, passwd, disable, enable")
    users = p.add_subparsers(dest="users_command", metavar="ACTION", required=True)
    a = users.add_parser("add", help="add an account (roles: viewer, curator, admin)")
    a.add_argument("name")
    a.add_argument("--role", default="viewer", help="viewer (browse, export), curator (decide, mask, label, "
                                                    "import), admin (users, models, promote, delete)")
    a.add_argument("--password-stdin", action="store_true", help="read the password from one line of stdin")
    a.set_defaults(func=run_add)
    ls = users.add_parser("list", help="list accounts and names seen in the history")
    ls.set_defaults(func=run_list)
    r = users.add_parser("role", help="change an account's role")
    r.add_argument("name")
    r.add_argument("role")
    r.set_defaults(func=run_role)
    pw = users.add_parser("passwd", help="set an account's password")
    pw.add_argument("name")
    pw.add_argument("--password-stdin", action="store_true")
    pw.set_defaults(func=run_passwd)
    for verb, active in (("disable", False), ("enable", True)):
        d = users.add_parser(verb, help=f"{verb} an account's sign-in")
        d.add_argument("name")
        d.set_defaults(func=run_set_active, active=active)


def read_password(args) -> str:
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    if not sys.stdin.isatty():
        raise ValueError("no terminal to ask the password on: pass --password-stdin and write it to stdin")
    first = getpass.getpass("New password: ")
    if getpass.getpass("Again: ") != first:
        raise ValueError("the two passwords differ; nothing changed")
    return first


def run_add(args, ctx) -> int:
    password = read_password(args)
    done = acc.add_account(ctx.catalogue, AddAccountRequest(args.name, password, role=args.role, by=ctx.user,
                                                            ensure_admin=True))
    if done.first_admin:
        print(done.first_admin)
    print(f"account {done.account.name!r} added as {done.account.role.value}")
    return 0


def run_list(args, ctx) -> int:
    rows = [(a.name, a.role.value if a.can_sign_in else "-", "yes" if a.can_sign_in and a.active else
             ("disabled" if a.can_sign_in else "no (history only)"), a.created_at.strftime("%Y-%m-%d"))
            for a in acc.accounts(ctx.catalogue)]
    print_table(rows, ["name", "role", "can sign in", "since"])
    return 0


def run_role(args, ctx) -> int:
    done = acc.change_role(ctx.catalogue, SetRoleRequest(args.name, args.role, by=ctx.user))
    print(f"{done.account.name!r} is now {done.account.role.value}")
    return 0


def run_passwd(args, ctx) -> int:
    done = acc.reset_password(ctx.catalogue, SetPasswordRequest(args.name, read_password(args), by=ctx.user))
    print(f"password of {done.account.name!r} changed")
    return 0


def run_set_active(args, ctx) -> int:
    acc.set_enabled(ctx.catalogue, SetActiveRequest(args.name, args.active, by=ctx.user))
    print(f"{args.name!r} {'can sign in again' if args.active else 'can no longer sign in'}")
    return 0
