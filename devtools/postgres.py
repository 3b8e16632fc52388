"""Start and stop a project-local PostgreSQL cluster on 127.0.0.1 (Debian's server binaries).

The test command runs the suite on PostgreSQL as production does, without touching a PostgreSQL already
on the machine: ``initdb`` makes a cluster under ``.run/postgres-<name>/data``, the server listens on its own
free port of 127.0.0.1 and keeps its unix socket in that folder, and one database is created for the portal.
Debian ships the server programs outside the PATH (``/usr/lib/postgresql/<major>/bin``); the newest found
is used. PostgreSQL refuses to run as root, so as root the cluster belongs to the ``postgres`` system user
(the package makes it) and its programs run through ``runuser -u postgres --``.

    python -m devtools.postgres start [--name NAME] [--port N] [--db DB]   # prints the DATABASE_URL
    python -m devtools.postgres stop [--name NAME]
"""

from __future__ import annotations

import argparse
import glob
import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path

from devtools.redis_server import RUN_DIR, free_port

#: The role the portal connects as (the cluster's superuser: tests create and drop their test database).
USER = "quotas"
PASSWORD = "quotas-local"  # the server listens on 127.0.0.1 only; a fixed password keeps the URL reproducible


def bin_dir() -> Path:
    """The newest PostgreSQL server binaries Debian installed (``/usr/lib/postgresql/<major>/bin``)."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")]
    if not found:
        on_path = shutil.which("initdb") or shutil.which("pg_ctl")
        if on_path:
            return Path(on_path).resolve().parent
        raise RuntimeError(
            "PostgreSQL's server is not installed: run `apt-get install -y postgresql` "
            "(scripts/run_tests.sh does this for you)"
        )
    return max(found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)


class PostgresServer:
    """A PostgreSQL cluster owned by this project (context manager): ``initdb`` once, then start/stop."""

    def __init__(
        self, name: str = "test", port: int | None = None, database: str = "quotas", durable: bool = False
    ) -> None:
        """``durable``: fsync and synchronous commits on, as a deployment runs (benchmarks); else tuned for
        throw-away test data."""
        self.name = name
        self.durable = durable
        self.dir = RUN_DIR / f"postgres-{name}"
        self.data = self.dir / "data"
        self.database = database
        self.port = port or free_port()
        self.bin = bin_dir()
        self._as_postgres = os.geteuid() == 0

    @property
    def url(self) -> str:
        return f"postgres://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{self.database}"

    def _run(self, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
        """A server program, as the ``postgres`` user when we are root (the server refuses to run as root)."""
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]

    def _initdb(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        pwfile = self.dir / "pwfile"
        pwfile.write_text(PASSWORD + "\n")
        if self._as_postgres:
            owner = pwd.getpwnam("postgres")
            for path in (self.dir, pwfile):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        pwfile.chmod(0o600)
        done = self._run(
            "initdb", "-D", str(self.data), "-U", USER, f"--pwfile={pwfile}", "--auth=scram-sha-256",
            "--auth-local=trust", "-E", "UTF8", "--locale=C", "--no-sync",
        )
        pwfile.unlink()
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed in {self.data}:\n{done.stdout}{done.stderr}")

    def start(self) -> PostgresServer:
        if not (self.data / "PG_VERSION").exists():
            self._initdb()
        elif (self.data / "postmaster.pid").exists():
            self.stop()  # left running (or its pid file left) by a run that did not stop it: one server per folder
        # tuned for throw-away test data: no fsync, a small footprint on a shared 2-core machine
        durability = "" if self.durable else "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.dir} "
            f"{durability}-c max_connections=200 -c shared_buffers=64MB"
        )
        done = self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.dir / "postgres.log"), "-o", options, "-w", "-t", "60",
            "start",
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"PostgreSQL did not start on 127.0.0.1:{self.port}: {done.stderr.strip() or done.stdout.strip()}; "
                f"see {self.dir / 'postgres.log'}"
            )
        (self.dir / "port").write_text(f"{self.port}\n")
        self._create_database()
        (self.dir / "url").write_text(self.url + "\n")
        return self

    def _create_database(self) -> None:
        psql = [
            str(self.bin / "psql"), "-h", str(self.dir), "-p", str(self.port), "-U", USER, "-d", "postgres",
            "-v", "ON_ERROR_STOP=1", "-tA",
        ]
        if self._as_postgres:
            psql = ["runuser", "-u", "postgres", "--", *psql]
        deadline = time.monotonic() + 30
        while True:
            found = subprocess.run(
                [*psql, "-c", f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'"],
                capture_output=True, text=True,
            )
            if found.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if found.returncode != 0:
            raise RuntimeError(f"PostgreSQL on port {self.port} does not answer: {found.stderr.strip()}")
        if found.stdout.strip() != "1":
            made = subprocess.run([*psql, "-c", f'CREATE DATABASE "{self.database}"'], capture_output=True, text=True)
            if made.returncode != 0:
                raise RuntimeError(f"could not create database {self.database!r}: {made.stderr.strip()}")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--name", default="test")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--db", default="quotas", help="the database to create (default quotas)")
    args = parser.parse_args(argv)
    server = PostgresServer(name=args.name, port=args.port, database=args.db)
    if args.action == "start":
        server.start()
        print(server.url)
    else:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
