"""Opening a catalogue: data directory, engine, migrations, units of work.

``open_catalogue(data_dir)`` creates the directory if needed, opens SQLite
(``<data_dir>/catalogue.db``, WAL journal, foreign keys on) or any SQLAlchemy
URL given, and runs the Alembic migrations up to head. ``unit_of_work()``
yields one session per UI event or job; it rolls back unless committed.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

import db.audit  # noqa: F401 - registers the audit-trail listener on every session
from db.storage import BlobStore

DEFAULT_DATA_DIR = "rosette-data"
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """--data-dir, else $ROSETTE_HOME, else ./rosette-data."""
    return Path(data_dir or os.environ.get("ROSETTE_HOME") or DEFAULT_DATA_DIR).expanduser().resolve()


def resolve_database_url(data_dir: Path, url: str | None = None) -> str:
    """--database-url, else $ROSETTE_DATABASE_URL, else SQLite in the data directory."""
    return url or os.environ.get("ROSETTE_DATABASE_URL") or f"sqlite:///{data_dir / 'catalogue.db'}"


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # pragma: no cover - exercised via engine
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _sqlite_read_only_pragmas(dbapi_connection, _record) -> None:  # pragma: no cover - exercised via engine
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA query_only=ON")  # belt and braces: SQLite itself refuses every write
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


#: Seconds to wait for a PostgreSQL server to answer before saying it is not there.
PG_CONNECT_TIMEOUT_S = 10
#: The key of the session-level advisory lock held while migrating a PostgreSQL catalogue (any constant will do,
#: as long as every Rosette uses the same one): two servers starting at once migrate one after the other.
PG_MIGRATION_LOCK = 7_263_011_701


def is_postgres(url: str) -> bool:
    return url.startswith("postgresql")


def display_url(url: str) -> str:
    """The database URL as it may be shown: the password replaced by ``***``."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a malformed URL is still worth naming, minus anything before the host
        return url.split("@")[-1] if "@" in url else url


def make_engine(url: str, *, read_only: bool = False) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _sqlite_read_only_pragmas if read_only else _sqlite_pragmas)
        return engine
    if is_postgres(url):
        # a connection checked before use (a restarted server does not break the next request), a small pool per
        # process (a web server, a worker), recycled now and then so an idle firewall never cuts one silently
        return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10, pool_recycle=1800,
                             pool_timeout=30, connect_args={"connect_timeout": PG_CONNECT_TIMEOUT_S})
    return create_engine(url, pool_pre_ping=True)


def sqlite_file(url: str) -> Path | None:
    """The database file of a plain ``sqlite:///PATH`` URL (None for other URLs and in-memory databases)."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url == prefix or ":memory:" in url or "?" in url:
        return None
    return Path(url[len(prefix):])


def writable(path: Path) -> bool:
    """Whether this process may write ``path`` (a file, or the folder it would be created in)."""
    return os.access(path if path.exists() else path.parent, os.W_OK)


def read_only_url(db_file: Path) -> str:
    """A read-only SQLite URL for ``db_file``; ``immutable=1`` when its folder is read-only too (SQLite could
    not create the WAL index beside it: the file is then read as a snapshot nobody writes)."""
    immutable = "&immutable=1" if not writable(db_file.parent) else ""
    return f"sqlite:///file:{db_file}?mode=ro&uri=true{immutable}"


def alembic_config():
    """Alembic's configuration for the catalogue's migrations (no ini file: the script location is enough)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def upgrade_to_head(engine: Engine, *, revision: str = "head") -> None:
    """Run Alembic migrations up to head (or an older ``revision``, for the upgrade tests) on ``engine``.

    On PostgreSQL the whole upgrade runs under a session-level advisory lock (``pg_advisory_lock``), so servers
    on several machines starting at once migrate one after the other.

    On SQLite, batch migrations rebuild tables (copy, drop, rename); with foreign keys enforced, dropping a
    table that other rows reference fails. As Alembic's batch-mode documentation advises, foreign keys are
    switched off for the migration and ``PRAGMA foreign_key_check`` must come back empty before they are
    switched on again (a violation aborts with the offending rows named).
    """
    from alembic import command

    cfg = alembic_config()
    sqlite = engine.dialect.name == "sqlite"
    postgres = engine.dialect.name == "postgresql"
    with engine.connect() as connection:
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            connection.commit()
        if postgres:  # migration_lock's file lock covers one machine; this covers every server of one database
            connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": PG_MIGRATION_LOCK})
            connection.commit()
        try:
            with connection.begin():
                cfg.attributes["connection"] = connection
                command.upgrade(cfg, revision)
                if sqlite:
                    bad = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                    if bad:
                        raise RuntimeError(f"the catalogue migration left rows pointing nowhere: {bad[:5]}")
        finally:
            if sqlite:
                connection.exec_driver_sql("PRAGMA foreign_keys=ON")
                connection.commit()
            if postgres:
                connection.rollback()  # a failed migration leaves an aborted transaction; unlocking needs a fresh one
                connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": PG_MIGRATION_LOCK})
                connection.commit()


@dataclass
class Catalogue:
    """An open catalogue: where files live and how to talk to the database."""

    data_dir: Path
    url: str
    engine: Engine
    sessions: sessionmaker[Session] = field(repr=False)
    blobs: BlobStore = field(repr=False)
    read_only: bool = False  # opened read-only: reads work, SQLite refuses every write

    @contextmanager
    def unit_of_work(self) -> Iterator[Session]:
        """One session; everything not committed before the block ends is rolled back."""
        session = self.sessions()
        try:
            yield session
        finally:
            # close() rolls back whatever was not committed; unlike rollback() it leaves
            # loaded objects readable (detached) for the caller.
            session.close()

    @property
    def cache_dir(self) -> Path:
        return self.data_dir / "cache"

    def close(self) -> None:
        self.engine.dispose()


#: Below this much free space, SQLite's "disk I/O error" is reported as the full disk it most likely is.
FULL_DISK_BYTES = 64 * 1024 ** 2


def _server_reason(message: str) -> str | None:
    """A PostgreSQL server's refusal (as psycopg words it) in a curator's words; None when it is none of those."""
    found = re.search(r'password authentication failed for user "[^"]*"', message)
    if found:
        return found.group(0)
    found = re.search(r'(database|role) "[^"]*" does not exist', message)
    if found:
        return found.group(0)
    if "no password supplied" in message:
        return "the server asks for a password and the URL gives none"
    gone = ("Connection refused", "connection refused", "could not connect", "timeout expired", "No route to host",
            "Network is unreachable", "server closed the connection", "the database system is starting up",
            "the database system is shutting down", "No such file or directory")
    if "connection" in message and any(words in message for words in gone):
        return "the server is not running, or not accepting connections at that address"
    if "could not translate host name" in message or "Name or service not known" in message:
        return "the server's host name is unknown"
    return None


def _db_reason(exc: Exception, *, data_dir: Path | None = None) -> str:
    text = str(getattr(exc, "orig", exc))
    server = _server_reason(text)
    if server is not None:
        return server
    if "locked" in text:
        return "it is locked by another program (a running import or server); try again in a moment"
    if "disk" in text and "full" in text or "No space" in text:
        return "the disk is full; free some space first"
    if "disk I/O error" in text and data_dir is not None:
        try:  # SQLite often reports a full disk, met while writing its journal, as an I/O error
            free = shutil.disk_usage(data_dir).free
        except OSError:
            free = None
        if free is not None and free < FULL_DISK_BYTES:
            return (f"the disk is full ({free // 1024:,} kB free where {data_dir} is); free some space first: "
                    "nothing was changed")
    if "readonly" in text or "read-only" in text or "query_only" in text or "attempt to write" in text:
        return ("it is read-only (opened read-only because this user cannot write it, or with --read-only): "
                "nothing was changed")
    return " ".join(text.split())  # one line (a server's message may run over several)


def database_reason(exc: BaseException, *, data_dir: Path | None = None) -> str | None:
    """Why the database refused a write or a read, in the words start-up uses (locked, the disk full, read-only,
    a server gone ...), when ``exc`` is the database refusing; None for any other error."""
    return _db_reason(exc, data_dir=data_dir) if isinstance(exc, (OperationalError, InterfaceError)) else None


def _hide_password(message: str, url: str) -> str:
    """``message`` with the URL's password (should a driver ever quote it) replaced by ``***``."""
    try:
        password = make_url(url).password
    except Exception:  # noqa: BLE001 - no URL, no password to hide
        return message
    return message.replace(str(password), "***") if password else message


@contextmanager
def migration_lock(root: Path) -> Iterator[None]:
    """Hold ``<data dir>/.migrate.lock`` (an exclusive ``flock``) while migrating: processes starting on a new
    data folder at once migrate one after the other, and the later ones find the schema at head (without it,
    two of them both created the tables and one failed with "table ... already exists"). Where ``fcntl`` is
    missing (Windows) it does nothing."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    try:
        fh = open(root / ".migrate.lock", "a+b")
    except OSError:  # an unwritable folder: opening read-only migrates nothing anyway
        yield
        return
    with fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def open_catalogue(data_dir: str | os.PathLike[str] | None = None, *, url: str | None = None, migrate: bool = True,
                   read_only: bool | None = None) -> Catalogue:
    """Open (creating and migrating if needed) the catalogue in ``data_dir``.

    ``read_only``: None (default) opens read-only by itself when the SQLite file or its folder cannot be
    written (a catalogue on a read-only mount, or owned by someone else): reading works, every write is refused
    by SQLite with a clear message. True forces it (``rosette --read-only``).
    """
    root = resolve_data_dir(data_dir)
    if root.exists() and not root.is_dir():
        raise ValueError(f"the data directory {root} is a file, not a folder; choose a folder (--data-dir)")
    db_url = resolve_database_url(root, url)
    db_file = sqlite_file(db_url)
    if read_only is None:
        read_only = db_file is not None and db_file.exists() and not (writable(db_file) and writable(db_file.parent))
    if read_only:
        if db_file is None or not db_file.exists():
            raise ValueError(f"a read-only catalogue must already exist: {db_file or db_url} does not")
        return _open_read_only(root, db_file, migrate=migrate)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot create the data directory {root}: {exc.strerror or exc}") from None
    try:
        engine = make_engine(db_url)
    except Exception as exc:  # noqa: BLE001 - sqlalchemy raises several kinds for a malformed URL
        raise ValueError(f"cannot use the database URL {display_url(db_url)!r}: "
                         f"{_hide_password(str(exc), db_url)}") from None
    if migrate:
        try:
            with migration_lock(root):
                upgrade_to_head(engine)
        except (OperationalError, InterfaceError) as exc:
            engine.dispose()
            raise ValueError(f"cannot open the catalogue database {display_url(db_url)}: "
                             f"{_hide_password(_db_reason(exc), db_url)}") from None
    return Catalogue(
        data_dir=root,
        url=db_url,
        engine=engine,
        sessions=sessionmaker(engine, expire_on_commit=False, info={"data_dir": str(root)}),
        blobs=BlobStore(root),
    )


def head_revision() -> str:
    """The newest schema revision this Rosette knows (the Alembic head)."""
    from alembic.script import ScriptDirectory  # lazy, as in the other migration helpers here

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def _open_read_only(root: Path, db_file: Path, *, migrate: bool) -> Catalogue:
    """The catalogue opened read-only; it must already be at the newest schema (migrating would write)."""
    from alembic.migration import MigrationContext
    from alembic.script import ScriptDirectory

    url = read_only_url(db_file)
    engine = make_engine(url, read_only=True)
    try:
        with engine.connect() as connection:
            current = MigrationContext.configure(connection).get_current_revision()
    except OperationalError as exc:
        engine.dispose()
        raise ValueError(f"cannot read the catalogue database {db_file}: {_db_reason(exc)}") from None
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if migrate and current != head:
        engine.dispose()
        raise ValueError(f"the catalogue {db_file} is read-only and needs upgrading (schema {current}, this Rosette "
                         f"needs {head}); open it once where it can be written, or copy it")
    return Catalogue(data_dir=root, url=url, engine=engine, sessions=sessionmaker(engine, expire_on_commit=False),
                     blobs=BlobStore(root), read_only=True)
