"""The test database as a ``DATABASE_URL``, for the processes the tests start (Celery workers, uvicorn, the relay).

pytest-django points this process at a test database (SQLite: a file in pytest's temp dir; PostgreSQL:
``test_<name>`` on the server ``DATABASE_URL`` names); a subprocess reads ``DATABASE_URL`` afresh, so it is
given this one, never the environment's own (which names the non-test database).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import psycopg
from django.db import connection


def database_url() -> str:
    """The URL of the database this test session uses (call it once the test database is set up)."""
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    if "postgresql" in db["ENGINE"]:
        auth = quote(db["USER"] or "", safe="")
        if db["PASSWORD"]:
            auth += ":" + quote(db["PASSWORD"], safe="")
        host = db["HOST"] or "127.0.0.1"
        port = f":{db['PORT']}" if db["PORT"] else ""
        return f"postgres://{auth}@{host}{port}/{quote(db['NAME'], safe='')}"
    raise RuntimeError(f"the tests' subprocesses support SQLite and PostgreSQL, not {db['ENGINE']}")


def on_postgres() -> bool:
    """True when the tests run on PostgreSQL (the test command's database)."""
    return "postgresql" in connection.settings_dict["ENGINE"]


def drop_database() -> None:
    """Lose the test database (a restore test's disaster): dropped with whoever is connected (PostgreSQL), or its
    files deleted (SQLite). Django's connection is closed first; ``restore_db`` brings the database back."""
    db = connection.settings_dict
    connection.close()
    if not on_postgres():
        for suffix in ("", "-wal", "-shm"):
            Path(db["NAME"] + suffix).unlink(missing_ok=True)
        return
    conninfo = psycopg.conninfo.make_conninfo(
        dbname="postgres", user=db["USER"], password=db["PASSWORD"], host=db["HOST"], port=str(db["PORT"])
    )
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{db["NAME"]}" WITH (FORCE)')
