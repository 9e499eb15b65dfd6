"""A throwaway PostgreSQL cluster for the ``postgres`` tests and the scale benchmark.

Debian's ``postgresql`` package puts ``initdb`` and ``pg_ctl`` in ``/usr/lib/postgresql/<version>/bin``. The cluster
lives in a temporary folder, listens on a free loopback port only (its unix socket stays in that folder), runs with
``fsync=off``, asks every TCP client for a scram password, and is stopped (``pg_ctl stop -m immediate``) and deleted on
exit. ``initdb`` refuses to run as root, so when we are root (CI is) the cluster runs as ``nobody``.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

ROLE = "rosette"
DATABASE = "rosette"
UNPRIVILEGED_USER = "nobody"
INSTALL_HINT = "apt-get install postgresql"


def _bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``initdb``, else the folder of ``initdb`` on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: [int(x) if x.isdigit() else 0 for x in Path(p).parent.parent.name.split(".")])
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def initdb_available() -> bool:
    """Debian's PostgreSQL server binaries (``initdb``, ``pg_ctl``) are installed."""
    d = _bin_dir()
    return d is not None and (d / "pg_ctl").exists()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(cmd: list[str], *, cwd: Path, as_nobody: bool, timeout: float = 120) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(LC_ALL="C", LANG="C")
    kwargs: dict = {}
    if as_nobody:
        kwargs = {"user": UNPRIVILEGED_USER, "group": _group_of(UNPRIVILEGED_USER), "extra_groups": []}
        env["HOME"] = str(cwd)
    done = subprocess.run(cmd, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def _group_of(user: str) -> int:
    return pwd.getpwnam(user).pw_gid


def _chown_tree(path: Path, user: str) -> None:
    shutil.chown(path, user=user, group=_group_of(user))
    for p in path.rglob("*"):
        shutil.chown(p, user=user, group=_group_of(user))


def conninfo(url: str, *, database: str | None = None) -> str:
    """A libpq connection string for a ``postgresql+psycopg://`` URL (optionally another database on it)."""
    u = make_url(url)
    if database is not None:
        u = u.set(database=database)
    return u.set(drivername="postgresql").render_as_string(hide_password=False)


@contextmanager
def throwaway_cluster(*, port: int | None = None) -> Iterator[str]:
    """Starts a fresh cluster and yields ``postgresql+psycopg://rosette:<pw>@127.0.0.1:<port>/rosette`` (role
    ``rosette`` is the cluster's superuser, so tests may create databases). Stops and deletes it on exit.
    Raises RuntimeError (never skips) when PostgreSQL is not installed."""
    bin_dir = _bin_dir()
    if bin_dir is None or not (bin_dir / "pg_ctl").exists():
        raise RuntimeError("PostgreSQL's initdb/pg_ctl are missing (looked in /usr/lib/postgresql/*/bin and PATH): "
                           f"{INSTALL_HINT}")
    as_nobody = os.geteuid() == 0
    root = Path(tempfile.mkdtemp(prefix="rosette-pg-"))
    data, sock, log = root / "data", root / "sock", root / "postgres.log"
    password = secrets.token_urlsafe(18)
    started = False
    try:
        sock.mkdir()
        (root / "pwfile").write_text(password + "\n")
        os.chmod(root, 0o700)
        if as_nobody:
            _chown_tree(root, UNPRIVILEGED_USER)  # the cluster's own user must read and write all of it
        _run([str(bin_dir / "initdb"), "-D", str(data), "-U", ROLE, f"--pwfile={root / 'pwfile'}",
              "--auth-host=scram-sha-256", "--auth-local=trust", "--encoding=UTF8", "--locale=C", "--no-sync"],
             cwd=root, as_nobody=as_nobody)
        (root / "pwfile").unlink()
        last_error: Exception | None = None
        for attempt in range(5):
            use_port = port if port is not None else _free_port()
            with open(data / "postgresql.conf", "a") as fh:
                fh.write(f"\n# rosette throwaway cluster (attempt {attempt})\n"
                         f"listen_addresses = '127.0.0.1'\nport = {use_port}\n"
                         f"unix_socket_directories = '{sock}'\nfsync = off\nsynchronous_commit = off\n"
                         "full_page_writes = off\nmax_connections = 100\nshared_buffers = 32MB\n"
                         "password_encryption = 'scram-sha-256'\n")
            try:
                _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "start"],
                     cwd=root, as_nobody=as_nobody, timeout=90)
                started = True
                break
            except RuntimeError as e:  # most likely someone took the port between our probe and the start
                last_error = RuntimeError(f"{e}\n{log.read_text() if log.exists() else ''}")
                if port is not None:
                    break
        if not started:
            raise last_error or RuntimeError("the throwaway PostgreSQL cluster did not start")
        url = f"postgresql+psycopg://{ROLE}:{password}@127.0.0.1:{use_port}/{DATABASE}"
        with psycopg.connect(conninfo(url, database="postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
        yield url
    finally:
        if started:
            try:
                _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                     cwd=root, as_nobody=as_nobody, timeout=60)
            except (RuntimeError, subprocess.TimeoutExpired):
                time.sleep(0.5)  # the folder goes anyway; a leftover postmaster dies when its data folder is gone
        shutil.rmtree(root, ignore_errors=True)


def create_database(url: str, *, name: str | None = None) -> str:
    """Creates an empty database on the cluster of ``url`` (an autocommit ``CREATE DATABASE``) and returns its URL,
    so that each test sees only its own rows."""
    name = name or f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(conninfo(url, database="postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return make_url(url).set(database=name).render_as_string(hide_password=False)
