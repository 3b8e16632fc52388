"""The shell every service-starting benchmark runs in: its own Redis, cleanups on any exit, one JSON line.

And the parts several of them start: the portal's processes in sessions of their own (``Service``, ``Replica``)
and a project-local PostgreSQL whose database is copied from a migrated template (``fresh_postgres``).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import math
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devtools.postgres import PostgresServer
from devtools.processes import stop_session
from devtools.redis_server import RedisServer, free_port
from portal.keys import make_keys

ROOT = Path(__file__).resolve().parent.parent
Cleanups = list[Callable[[], None]]

# The benchmarks run the portal with DJANGO_DEBUG off, as deployments do, and so with keys of its own (it refuses to
# start without): a fresh pair for this run unless the environment has them; the processes it starts inherit them.
for _name, _value in make_keys().items():
    os.environ.setdefault(_name, _value)


def tree_cpu_s(pid: int) -> float:
    """User + system CPU of a process and its descendants (uvicorn's workers), from /proc; 0 elsewhere."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue  # gone, or not Linux
    return total


def tree_sched_s(pid: int) -> tuple[float, float]:
    """Seconds a process and its descendants ran on a CPU and waited in a run queue for one, every thread
    (``/proc/<pid>/task/<tid>/schedstat``); (0, 0) elsewhere. Waiting is what a machine shared with other work
    adds to every request's time."""
    run = wait = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                fields = (task / "schedstat").read_text().split()
                run, wait = run + int(fields[0]) / 1e9, wait + int(fields[1]) / 1e9
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue  # gone, or not Linux
    return run, wait


def rss_max_mb(pid: int) -> float:
    """The peak resident memory of a process (VmHWM), MiB; NaN when it is gone or not on Linux."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


Client = Callable[[int, list[Any]], None]


def _client_threads(client: Client, ids: list[int], queue: Any) -> None:
    out: list[Any] = []
    threads = [threading.Thread(target=client, args=(i, out)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    queue.put(out)


def fan_out(client: Client, clients: int, procs: int, timeout_s: float) -> list[Any]:
    """Run ``client(idx, out)`` for idx in range(clients), a thread each, spread over ``procs`` forked processes
    (one Python process cannot load a server past its GIL); returns what the clients appended to ``out``."""
    ctx = mp.get_context("fork")  # forked: the client (often a closure) is inherited, not pickled
    queue = ctx.Queue()
    ps = [ctx.Process(target=_client_threads, args=(client, list(range(i, clients, procs)), queue))
          for i in range(procs)]
    for p in ps:
        p.start()
    results: list[Any] = []
    for _ in ps:
        results.extend(queue.get(timeout=timeout_s))
    for p in ps:
        p.join()
    return results


class SessionProcess:
    """A service a benchmark started in a session of its own (uvicorn, a worker, the relay): its log, its CPU
    (with its children) and a stop that takes the whole session down. Subclasses start ``self.proc``."""

    grace_s = 10.0

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def cpu_s(self) -> float:
        return tree_cpu_s(self.proc.pid) if self.proc is not None else 0.0

    def stop(self) -> None:
        """SIGTERM to the session, SIGKILL if it lingers past ``grace_s``."""
        if self.proc is None:
            return
        stop_session(self.proc, self.grace_s)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL to the whole session (a fault): the process and its children die mid-work, nothing shuts down
        cleanly, open connections are cut."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None


class Service(SessionProcess):
    """One command of the portal (uvicorn, a worker, the relay, the load generator) in a session of its own,
    logging to ``<log_dir>/<name>.log``."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], log_dir: Path) -> None:
        super().__init__(log_dir / f"{name}.log")
        self.name, self.cmd, self.env = name, cmd, {**os.environ, **env}

    def start(self) -> Service:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self

    def pids(self) -> list[int]:
        """The process and its descendants (uvicorn's, Celery's pool and beat)."""
        if self.proc is None:
            return []
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            try:
                for task in Path(f"/proc/{pid}/task").iterdir():
                    todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
        return out

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with code {self.proc.returncode}:\n{self.log_tail()}")


class Replica(SessionProcess):
    """One uvicorn replica of the portal (``portal.asgi``) on its own port, sharing the database and Redis."""

    def __init__(self, index: int, env: dict[str, str], run_dir: Path) -> None:
        super().__init__(run_dir / f"replica-{index}.log")
        self.env, self.port = {**os.environ, **env}, free_port()

    def start(self) -> Replica:
        cmd = [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port",
               str(self.port), "--lifespan", "off", "--no-access-log", "--log-level", "warning"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self

    def answers(self) -> bool:
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            c.request("GET", "/healthz")
            c.getresponse().read()
            c.close()
            return True
        except OSError:
            return False


def wait_answers(replica: Replica, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not replica.answers():
        if replica.proc is None or replica.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"replica on port {replica.port} did not come back:\n{replica.log_tail()}")
        time.sleep(0.1)


def psql(pg: PostgresServer, sql: str) -> str:
    """One statement on the server's ``postgres`` database; its output (tuples only)."""
    done = pg._run("psql", "-h", str(pg.dir), "-p", str(pg.port), "-U", "quotas", "-d", "postgres",
                   "-v", "ON_ERROR_STOP=1", "-tA", "-c", sql)
    if done.returncode != 0:
        raise RuntimeError(f"PostgreSQL refused {sql!r}: {done.stderr.strip()}")
    return done.stdout.strip()


def migrations_digest() -> str:
    """What the migrated schema depends on: every migration file of the project."""
    digest = hashlib.sha256()
    for path in sorted(ROOT.glob("*/migrations/*.py")):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def fresh_postgres(name: str, database: str, durable: bool = False) -> tuple[PostgresServer, bool]:
    """The benchmark's project-local PostgreSQL with an empty database ``database``: a copy of the migrated
    template when the migrations have not changed since it was made (``migrate`` takes most of a quick run
    otherwise), else an empty one to migrate. Returns the server and whether the copy is migrated already.
    ``durable``: fsync and synchronous commits on, as a deployment runs."""
    pg = PostgresServer(name=name, database="postgres", durable=durable)
    pg.start()
    pg.database = database
    psql(pg, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    template = f"{database}_{migrations_digest()}"
    if psql(pg, f"SELECT 1 FROM pg_database WHERE datname = '{template}'") == "1":
        psql(pg, f'CREATE DATABASE "{database}" TEMPLATE "{template}"')
        return pg, True
    psql(pg, f'CREATE DATABASE "{database}"')
    return pg, False


def keep_template(pg: PostgresServer, database: str) -> None:
    """The freshly migrated database, kept as the template of the next runs (older templates dropped)."""
    from django.db import connections

    connections.close_all()
    template = f"{database}_{migrations_digest()}"
    for old in psql(pg, f"SELECT datname FROM pg_database WHERE datname LIKE '{database}\\_%'").split():
        psql(pg, f'DROP DATABASE IF EXISTS "{old}"')
    psql(pg, f'CREATE DATABASE "{template}" TEMPLATE "{database}"')


def finite(value: Any) -> Any:
    """NaN (a figure of a phase that did not run) as null: the JSON line stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    return value


def run_bench(
    name: str, check: bool, run: Callable[[RedisServer, Cleanups], dict[str, Any]], met_key: str = "target_met"
) -> int:
    """Start a Redis of the benchmark's own, call ``run(server, cleanups)`` and, on any exit (Ctrl-C and SIGTERM
    included), run the cleanups it registered last-in first-out, then Redis's; print the summary as the last
    line. Returns the exit status: 130 when interrupted, 1 when ``check`` and a target was missed."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C even when started with SIGINT ignored
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # SystemExit unwinds through the finally below
    started = time.perf_counter()
    stack: Cleanups = []
    try:
        server = RedisServer(name=name)
        stack.append(server.stop)
        server.start()
        summary = run(server, stack)
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    finally:
        while stack:
            try:
                stack.pop()()
            except Exception as e:  # keep stopping the rest
                print(f"{name}: cleanup failed: {e!r}", file=sys.stderr)
    summary["elapsed_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(finite(summary), separators=(",", ":")), flush=True)
    return 1 if check and not summary[met_key] else 0
