"""Back up the portal's database to one file, and restore it from one, never leaving a half-restored database.

PostgreSQL: ``pg_dump --format=custom``, restored with ``pg_restore --single-transaction`` into a fresh database
beside the portal's, which is swapped in (two renames in one transaction) only once it is complete and prepared.
SQLite: Python's online backup API, restored into a fresh file beside the portal's, renamed over it once complete.
The PostgreSQL client programs are found as ``devtools.postgres`` finds the server's: the newest Debian installed
(``/usr/lib/postgresql/<major>/bin``), else the PATH. ``manage.py backup_db`` and ``restore_db`` use this module.
"""

from __future__ import annotations

import glob
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
from django.db import connection

PG_MAGIC = b"PGDMP"  # how every pg_dump custom-format archive begins
SQLITE_MAGIC = b"SQLite format 3\x00"
PG_DUMP, SQLITE = "pg_dump custom-format archive", "SQLite database"
#: libpq's own keywords among a database's OPTIONS (Django's own, such as ``pool``, are not for pg_dump)
LIBPQ_OPTIONS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword", "connect_timeout", "options",
                 "target_session_attrs", "application_name", "service", "passfile", "channel_binding")  # fmt: skip


class BackupError(Exception):
    """A backup or restore refused or failed, with nothing changed; ``code`` names why, ``message`` says what to do."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


def file_format(path: Path) -> str | None:
    """What a backup file is by its first bytes: PG_DUMP, SQLITE, or None. Raises BackupError if it cannot be read."""
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        raise BackupError("NO_SUCH_FILE", f"There is no file {path}.") from None
    except IsADirectoryError:
        raise BackupError("NO_SUCH_FILE", f"{path} is a directory, not a backup file.") from None
    except OSError as e:
        raise BackupError("NO_SUCH_FILE", f"{path} cannot be read: {e.strerror}.") from None
    if head.startswith(PG_MAGIC):
        return PG_DUMP
    return SQLITE if head == SQLITE_MAGIC else None


def vendor() -> str:
    """The portal's database: ``postgresql`` or ``sqlite``; BackupError for another."""
    if connection.vendor not in ("postgresql", "sqlite"):
        raise BackupError("UNSUPPORTED_DATABASE", f"Backups cover PostgreSQL and SQLite, not {connection.vendor}.")
    return connection.vendor


def describe() -> str:
    """The portal's database in words, for what the commands print."""
    db = connection.settings_dict
    if vendor() == "sqlite":
        return f"the SQLite database {db['NAME']}"
    return f"the PostgreSQL database {db['NAME']} on {db['HOST'] or 'localhost'}:{db['PORT'] or 5432}"


# ------------------------------------------------------------------ backup


def backup(path: Path, *, force: bool = False) -> str:
    """Write the portal's whole database to ``path``; returns what was written. A partial file never takes the
    name: the backup is written beside it and renamed once complete. ``force`` overwrites an existing file."""
    kind = vendor()
    if path.is_dir():
        raise BackupError("FILE_EXISTS", f"{path} is a directory: name the backup file to write.")
    if path.exists() and not force:
        raise BackupError("FILE_EXISTS", f"{path} exists: pass --force to overwrite it, or name a new file.")
    if not path.parent.is_dir():
        raise BackupError("NO_SUCH_DIRECTORY", f"There is no directory {path.parent} to write the backup in.")
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        if kind == "postgresql":
            _run(["pg_dump", "--format=custom", f"--file={partial}", f"--dbname={_conninfo()}"], "BACKUP_FAILED")
        else:
            _sqlite_copy(_sqlite_path(must_exist=True), partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    size = path.stat().st_size
    return f"Backed up {describe()} to {path} ({PG_DUMP if kind == 'postgresql' else SQLITE}, {size:,} bytes)."


# ------------------------------------------------------------------ restore


def restore(path: Path, *, replace: bool = False, prepare: Callable[[], None] = lambda: None) -> str:
    """Restore the portal's database from ``path``; returns what was done.

    Refused (BackupError, nothing changed) when the file is missing, not a backup of this database's kind, or the
    database holds tables and ``replace`` is not set, or (on PostgreSQL) sessions are connected to it. The backup is
    restored into a fresh database (file) beside the portal's; ``prepare`` then runs with Django's connection on it
    (the migrations, the restore fence); only when both succeeded does it take the portal's database's place.
    """
    found = file_format(path)
    kind = vendor()
    wanted = PG_DUMP if kind == "postgresql" else SQLITE
    if found is None:
        raise BackupError("NOT_A_BACKUP", f"{path} is neither a {PG_DUMP} nor a {SQLITE}.")
    if found != wanted:
        raise BackupError(
            "WRONG_FORMAT",
            f"{path} is a {found}, and {describe()} takes a {wanted}: restore it into a portal that runs on that "
            "kind of database (DATABASE_URL), or restore a backup made by this one.",
        )
    if kind == "postgresql":
        return _restore_postgres(path, replace, prepare)
    return _restore_sqlite(path, replace, prepare)


def _prepared(name: str, prepare: Callable[[], None]) -> None:
    """Run ``prepare`` with Django's connection on the database (file) ``name``, then back on the portal's."""
    own = connection.settings_dict["NAME"]
    connection.close()
    connection.settings_dict["NAME"] = name
    try:
        prepare()
    except BackupError:
        raise
    except Exception as e:  # e.g. a migration that fails on this backup: said in a line, the copy is dropped
        raise BackupError("RESTORE_FAILED", f"Preparing the restored copy failed, nothing was changed: {e}") from e
    finally:
        connection.close()
        connection.settings_dict["NAME"] = own


def _not_empty(tables: int, replace: bool) -> None:
    if tables and not replace:
        raise BackupError(
            "NOT_EMPTY",
            f"{_sentence(describe())} holds {tables} tables: pass --replace to replace it with the "
            "backup (restored beside it first, swapped in only once complete).",
        )


def _restore_postgres(path: Path, replace: bool, prepare: Callable[[], None]) -> str:
    listed = _run(["pg_restore", "--list", str(path)], "NOT_A_BACKUP")
    if " TABLE public django_migrations " not in listed:
        raise BackupError("NOT_A_BACKUP", f"{path} is a {PG_DUMP}, but not of a portal (no django_migrations).")
    name = connection.settings_dict["NAME"]
    fresh, old = f"{name[:50]}_restoring", f"{name[:50]}_replaced"
    connection.close()  # ours would hold the database open: the swap renames it
    with _maintenance() as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None
        if exists:
            _not_empty(_pg_tables(), replace)
            _refuse_sessions(admin, name)
        admin.execute(f"DROP DATABASE IF EXISTS {_ident(fresh)}")  # left by a restore that was killed
        admin.execute(f"CREATE DATABASE {_ident(fresh)} TEMPLATE template0")
        try:
            _run(["pg_restore", "--no-owner", "--no-privileges", "--exit-on-error", "--single-transaction",
                  f"--dbname={_conninfo(fresh)}", str(path)], "RESTORE_FAILED")  # fmt: skip
            _prepared(fresh, prepare)
            if exists:
                _refuse_sessions(admin, name)
            with admin.transaction():
                if exists:
                    admin.execute(f"ALTER DATABASE {_ident(name)} RENAME TO {_ident(old)}")
                admin.execute(f"ALTER DATABASE {_ident(fresh)} RENAME TO {_ident(name)}")
        except BaseException:
            admin.execute(f"DROP DATABASE IF EXISTS {_ident(fresh)}")
            raise
        if exists:
            admin.execute(f"DROP DATABASE {_ident(old)}")
    return f"Restored {describe()} from {path}{' (it replaced the one there)' if exists else ''}."


def _pg_tables() -> int:
    """How many tables the portal's database holds, outside PostgreSQL's own schemas."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN "
            "('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%%'"
        )
        (tables,) = cursor.fetchone()
    connection.close()
    return int(tables)


def _refuse_sessions(admin: psycopg.Connection[Any], name: str, wait_s: float = 3.0) -> None:
    """Refuse while sessions are connected to ``name``; one that has just closed (ours) takes a moment to go."""
    deadline = time.monotonic() + wait_s
    while True:
        (n,) = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", [name]
        ).fetchone() or (0,)
        if not n or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if n:
        raise BackupError(
            "IN_USE",
            f"{n} session{'s are' if n != 1 else ' is'} connected to the database {name} (the portal, its workers, a "
            "shell?): stop them, then restore. Nothing was changed.",
        )


def _restore_sqlite(path: Path, replace: bool, prepare: Callable[[], None]) -> str:
    try:
        with _sqlite_open(path, read_only=True) as src:
            if src.execute("PRAGMA quick_check").fetchone() != ("ok",):
                raise BackupError("NOT_A_BACKUP", f"{path} is a damaged SQLite database.")
            if not src.execute("SELECT 1 FROM sqlite_master WHERE name = 'django_migrations'").fetchone():
                raise BackupError("NOT_A_BACKUP", f"{path} is a SQLite database, but not a portal's.")
    except sqlite3.DatabaseError as e:
        raise BackupError("NOT_A_BACKUP", f"{path} cannot be read as a SQLite database: {e}.") from None
    target = _sqlite_path(must_exist=False)
    exists = target.exists()
    if exists:
        with _sqlite_open(target, read_only=True) as db:
            _not_empty(db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0], replace)
    fresh = target.with_name(target.name + ".restoring")
    connection.close()
    try:
        _sqlite_copy(path, fresh)
        _prepared(str(fresh), prepare)
        _single_file(fresh)
        if exists:
            try:
                _single_file(target)  # its WAL would otherwise be read into the restored file
            except sqlite3.OperationalError:
                raise BackupError(
                    "IN_USE", f"{_sentence(describe())} is in use (the portal, its workers?): stop them, then restore."
                ) from None
        os.replace(fresh, target)
    finally:
        for leftover in (fresh, Path(f"{fresh}-wal"), Path(f"{fresh}-shm")):
            leftover.unlink(missing_ok=True)
    return f"Restored {describe()} from {path}{' (it replaced the one there)' if exists else ''}."


# ------------------------------------------------------------------ helpers


def client_program(name: str) -> str:
    """A PostgreSQL client program: the newest Debian installed, else the one on the PATH."""
    found = glob.glob(f"/usr/lib/postgresql/*/bin/{name}")
    if found:
        return max(found, key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    on_path = shutil.which(name)
    if on_path is None:
        raise BackupError("PG_CLIENT_MISSING", f"{name} is not installed: apt-get install postgresql-client.")
    return on_path


def _run(args: list[str], code: str) -> str:
    """A PostgreSQL client program (password in the environment, never in its arguments); its output, or
    BackupError(code) with its first error line."""
    env = {**os.environ, "PGPASSWORD": connection.settings_dict["PASSWORD"] or ""}
    done = subprocess.run([client_program(args[0]), *args[1:]], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        first = lines[0] if lines else f"exit status {done.returncode}"
        why = next((line for line in lines if "error" in line.lower()), first)
        raise BackupError(code, f"{args[0]} failed, nothing was changed: {why.strip()}")
    return done.stdout


def _conninfo(name: str | None = None) -> str:
    """A libpq connection string for the portal's database (or ``name`` on its server), without the password."""
    db = connection.settings_dict
    params: dict[str, Any] = {"dbname": name or db["NAME"], "user": db["USER"], "host": db["HOST"], "port": db["PORT"]}
    params.update({k: v for k, v in db.get("OPTIONS", {}).items() if k in LIBPQ_OPTIONS})
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v not in (None, "")})


def _maintenance() -> psycopg.Connection[Any]:
    """A connection to the server's ``postgres`` database, to create, rename and drop the portal's."""
    try:
        return psycopg.connect(_conninfo("postgres"), password=connection.settings_dict["PASSWORD"] or None,
                               autocommit=True)  # fmt: skip
    except psycopg.Error as e:
        raise BackupError("UNREACHABLE", f"Cannot reach the server's postgres database: {e}".strip()) from None


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sqlite_path(*, must_exist: bool) -> Path:
    path = Path(connection.settings_dict["NAME"])
    if must_exist and not path.is_file():
        raise BackupError("NO_SUCH_FILE", f"There is no SQLite database {path} to back up.")
    if not path.parent.is_dir():
        raise BackupError("NO_SUCH_DIRECTORY", f"There is no directory {path.parent} for the SQLite database.")
    return path


def _sqlite_open(path: Path, *, read_only: bool = False) -> closing[sqlite3.Connection]:
    """A connection closed at the end of its ``with`` (sqlite3's own context manager only commits)."""
    if read_only:
        return closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1))
    return closing(sqlite3.connect(path, timeout=1))


def _sqlite_copy(source: Path, dest: Path) -> None:
    """Copy a SQLite database with the online backup API (consistent while others write), as one file."""
    for leftover in (dest, Path(f"{dest}-wal"), Path(f"{dest}-shm")):
        leftover.unlink(missing_ok=True)
    with _sqlite_open(source, read_only=True) as src, _sqlite_open(dest) as dst:
        src.backup(dst)
    _single_file(dest)


def _single_file(path: Path) -> None:
    """Fold a SQLite database's WAL into its file and leave it in rollback-journal mode: one file to rename (the
    portal turns WAL on again when it connects). Needs the file to itself: OperationalError when it is in use."""
    with _sqlite_open(path) as db:
        if db.execute("PRAGMA journal_mode=DELETE").fetchone() != ("delete",):
            raise sqlite3.OperationalError("database is locked")
