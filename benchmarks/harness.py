"""The shell every service-starting benchmark runs in: its own Redis, cleanups on any exit, one JSON line."""

from __future__ import annotations

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

from devtools.processes import stop_session
from devtools.redis_server import RedisServer
from portal.keys import make_keys

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
