#!/usr/bin/env python
"""Quota changes pushed to 3 engine brokers end to end, against a raw loop writing the same keys, in one run.

    .venv/bin/python benchmarks/push_bench.py [--changes 10000] [--batch 100] [--paced 2000] [--concurrency 1]
                                              [--quick] [--profile] [--check] [--no-pin] [--postgres]

Everything is the portal's own, started by the benchmark and stopped on any exit: a private redis-server
(data under ``.run/``), a throw-away SQLite database file under ``.run/`` (``manage.py migrate``), one engine
cluster with 3 brokers whose ``engine_url`` is that Redis, and a real Celery worker
(``celery -A portal worker --pool prefork -c <concurrency>``) pointed at the same Redis and database. On 2+ CPUs
redis-server and the worker share one CPU and this process (the committer, and the raw loop) has the others: the
committer gets the CPU the raw loop's client gets, and the worker runs apart from it as a deployment's workers do.

* raw (the baseline, measured first and last; the ratio uses the mean of both): for each change, for each
  of the 3 brokers, one ``HSET`` of the field the engine stores (``qe:{<cluster>.broker-<id>}:config``,
  ``EntityRef.field() + "\\x1f" + key`` -> ``repr(float)``), one round trip each, no pipelining;
* push: N distinct entities (``user=u00000`` ... ``producer_byte_rate``) committed through
  ``alter_client_quotas(cluster, [Alteration(...)])``, one change per call (each its own desired-state
  version, as N approvals would be); each commit enqueues pushes (on_commit) that the worker runs. End to
  end is from just before the first call to the moment the last of the 3 brokers applied the final version
  (its push-log time, from Redis ``TIME``); changes/s = N / that. Repeated with ``--batch`` changes per call
  on a second cluster (0 skips it).
* paced (``--paced`` changes, one per call): commits on a fixed schedule of 100 per second (an open loop: a call
  starts at its time, or at once when behind), on a third cluster; the latency of each version as below, p99
  against the issue's 1 s.
* latency of version v: the latest of the 3 brokers' first application of a version >= v (push log) minus
  the wall-clock time of v's commit (taken when the commit's on_commit callback starts); p50 and p99.

``--postgres`` runs the portal (this process and the worker) on a project-local PostgreSQL (``devtools.postgres``,
data under ``.run/postgres-push-bench-<pid>/``, removed at the end) with fsync and synchronous commits on, as a
deployment runs it, instead of SQLite: there the worker's bookkeeping UPDATEs of older Push rows do not wait for
the committer's write lock (SQLite has one writer at a time, and its busy handler polls, so a writer in a tight
commit loop starves the worker's transactions for up to the 5 s busy timeout).

Then it checks that every broker's config hash holds exactly the N values and that its push log is a chain
(each application holds the previous one's version, no version applied twice) and fails loudly if not.
It also reports where the time goes without a profiler: time per call, its SQL statements (COMMIT and the
on_commit enqueue apart), the push tasks the worker ran with their run time against its CPU (from its INFO
log and /proc), and Redis commands per change. ``--profile`` then times the sections of one change in the
committing process (lock_in, _entities, _apply_all, bump, log_version, COMMIT, enqueue_pushes and its SET NX and
publish; on PostgreSQL a section only queues its statements: they go at the end of its ``rows.pipeline`` block) and
of the push task body run in-process (changes_since, the engine script, _applied, settle_pushed),
each followed by cProfile's top functions. The last line of output is one JSON object.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from the repo root: make `portal`, `quotas`, `devtools` importable
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import bisect  # noqa: E402
import cProfile  # noqa: E402
import io  # noqa: E402
import multiprocessing as mp  # noqa: E402
import os  # noqa: E402
import pstats  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from importlib.metadata import version as package_version  # noqa: E402
from typing import Any  # noqa: E402

import redis  # noqa: E402

from benchmarks.api_bench import remove_database  # noqa: E402
from benchmarks.engine_bench import _collect, percentile, server_cpu_s  # noqa: E402
from benchmarks.harness import SessionProcess, run_bench  # noqa: E402
from devtools.redis_server import RUN_DIR, RedisServer  # noqa: E402
from engine.config import KEY_SEP, EntityRef, namespace_for_broker  # noqa: E402
from engine.desired import NamespaceState, PushRecord  # noqa: E402
from engine.redis_backend import connect  # noqa: E402

CLUSTER = "pushbench"
BATCH_CLUSTER = "pushbench-b"
PROFILE_CLUSTER = "pushbench-p"
PACED_CLUSTER = "pushbench-r"
BROKERS = 3
KEY = "producer_byte_rate"
TARGET_RATIO = 0.3  # issue 19: push changes/s >= 0.3 x raw changes/s, one change per commit and in batches
PACE = 100.0  # issue 19: changes/s of the paced phase
TARGET_PACED_P99_MS = 1000.0  # issue 19: at PACE, commit -> every broker holds it, p99 <= 1 s
LOG_KEEP = 10_000  # the push log keeps the last 10,000 applications (lua/apply_state.lua)
BENCH_DIR = RUN_DIR / "push-bench"
#: The worker's INFO line for a finished push task (one target, or a group of a cluster's): its run time (in the
#: pool process) and its answer, which holds each target's mode.
TASK_LINE = re.compile(r"Task quotas\.tasks\.push_(?:target|group)\[[^\]]*\] succeeded in ([0-9.e+-]+)s: ([^\n]*)")
MODE = re.compile(r"'mode': '(\w+)'|'(failed|skipped|retry)'")


# ---- the changes -----------------------------------------------------------------------------------------


def user_of(i: int) -> str:
    return f"u{i:05d}"


def value_of(i: int) -> float:
    """A byte rate Kafka accepts (integral, > 0), different for neighbouring entities."""
    return float((i % 4093 + 1) * 1024)


def field_of(i: int) -> str:
    """The config-hash field the engine stores the change under (``desired._field`` of a quota item)."""
    return EntityRef(user=user_of(i)).field() + KEY_SEP + KEY


def config_key(cluster: str, broker_id: int) -> str:
    return f"qe:{{{namespace_for_broker(cluster, broker_id)}}}:config"


# ---- Django, the database, the worker --------------------------------------------------------------------


def setup_django(database: str | Path, redis_url: str) -> dict[str, str]:
    """Point the portal's settings at the throw-away database and Redis (environment, before Django reads it).
    ``database``: a DATABASE_URL, or the path of a SQLite file (as the other benches built on this one pass)."""
    env = {
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": f"sqlite:///{database}" if isinstance(database, Path) else database,
        "QUOTAS_REDIS_URL": redis_url,
        "DJANGO_DEBUG": "0",  # DEBUG keeps every SQL query in memory: not what a deployment measures
        "DJANGO_LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    import django

    django.setup()
    return env


def migrate() -> float:
    """``manage.py migrate`` on the empty database (in-process: the same command); returns its seconds."""
    from django.core.management import call_command

    t0 = time.perf_counter()
    call_command("migrate", interactive=False, verbosity=0)
    return time.perf_counter() - t0


def make_cluster(name: str, redis_url: str) -> Any:
    """An engine cluster (per-broker scope) with 3 brokers whose engine is the benchmark's Redis."""
    from django.db import transaction

    from quotas.models import Broker, Cluster

    with transaction.atomic():
        cluster = Cluster.objects.create(name=name, description="push_bench", connector="engine")
        Broker.objects.bulk_create(
            Broker(cluster=cluster, broker_id=i, host=f"broker-{i}:9092", engine_url=redis_url)
            for i in range(1, BROKERS + 1)
        )
    return cluster


class Worker(SessionProcess):
    """``celery -A portal worker --pool prefork`` in its own session, so stopping it stops its pool too."""

    grace_s = 15.0  # a warm shutdown of the pool

    def __init__(self, env: dict[str, str], concurrency: int, log_path: Path, cpus: set[int] | None = None) -> None:
        self.env = {**os.environ, **env}
        self.concurrency = concurrency
        self.cpus = cpus  # None: this process's CPUs
        super().__init__(log_path)

    def command(self) -> list[str]:
        exe = Path(sys.executable).parent / "celery"
        base = [str(exe)] if exe.exists() else [sys.executable, "-m", "celery"]
        return [
            *base, "-A", "portal", "worker", "--pool", "prefork", "-c", str(self.concurrency),
            "-n", f"push-bench-{os.getpid()}@%h", "-l", "info",  # INFO: each task's run time, read back
            "--without-heartbeat", "--without-gossip", "--without-mingle",
        ]  # fmt: skip

    def start(self) -> Worker:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.command(), cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=None if self.cpus is None else lambda: os.sched_setaffinity(0, self.cpus),
            )  # fmt: skip
        return self

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"the Celery worker exited with code {self.proc.returncode}:\n{self.log_tail()}")

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def task_runs(self, offset: int) -> list[tuple[float, list[str]]]:
        """(seconds, the mode of each target it pushed) of every push task the worker logged as succeeded since
        ``offset`` (its INFO lines)."""
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        runs = []
        for m in TASK_LINE.finditer(text):
            modes = [mode[1] or mode[2] for mode in MODE.finditer(m[2])]
            runs.append((float(m[1]), modes or ["?"]))
        return runs


# ---- watching the commits --------------------------------------------------------------------------------


@dataclass
class Probe:
    """Wraps ``quotas.push.dispatch.enqueue_pushes`` in this process to see each commit that enqueues (it runs
    on_commit) and its cost.

    The wrapper only observes: it takes the time when the callback starts (the commit has just returned)
    and calls the portal's function unchanged. A commit made under a worker's drain lease enqueues nothing: its
    time is taken when its call returns (``committed``). ``suppress`` skips enqueueing (only for ``--profile``'s
    in-process push measurement, never in a measured phase).
    """

    commit_at: list[float] = field(default_factory=list)
    enqueued_at: dict[int, float] = field(default_factory=dict)
    current: int = 0
    enqueue_s: float = 0.0
    sent: int = 0
    suppress: bool = False
    instrument: Instrument | None = None

    def reset(self) -> None:
        self.commit_at, self.enqueued_at, self.enqueue_s, self.sent = [], {}, 0.0, 0

    def committed(self, call: int) -> None:
        """Call ``call`` returned: its commit time is its enqueue's, or now when it enqueued nothing."""
        self.commit_at.append(self.enqueued_at.get(call, time.time()))

    def install(self) -> Callable[[], None]:
        import quotas.push.dispatch

        original = quotas.push.dispatch.enqueue_pushes

        def enqueue_pushes(
            cluster_id: int, broker_pks: list[int | None] | None = None, *, force: bool = False, **kw: Any
        ) -> int:
            self.enqueued_at.setdefault(self.current, time.time())
            if self.suppress:
                return 0
            t0 = time.perf_counter()
            section = None
            if self.instrument is not None:
                section, self.instrument.section = self.instrument.section, "enqueue"
            try:
                sent = original(cluster_id, broker_pks, force=force, **kw)
            finally:
                if self.instrument is not None and section is not None:
                    self.instrument.section = section
            self.enqueue_s += time.perf_counter() - t0
            self.sent += sent
            return sent

        quotas.push.dispatch.enqueue_pushes = enqueue_pushes  # the commit's receiver looks it up on each call

        def uninstall() -> None:
            quotas.push.dispatch.enqueue_pushes = original

        return uninstall


class Instrument:
    """SQL statements (by section and verb, with their time) and COMMITs of this process, observing only.

    ``connection.execute_wrapper`` sees every statement (BEGIN IMMEDIATE included); COMMIT goes straight to
    sqlite3, so the connection's ``_commit`` is wrapped on the instance for the duration. A lock wait (SQLite's
    busy handler sleeping while the worker writes) shows up in BEGIN or COMMIT.
    """

    def __init__(self) -> None:
        self.count: Counter[tuple[str, str]] = Counter()
        self.seconds: dict[tuple[str, str], float] = {}
        self.section = "alter"

    def _add(self, verb: str, t0: float) -> None:
        key = (self.section, verb)
        self.count[key] += 1
        self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - t0

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self._add(sql.split(None, 1)[0].upper(), t0)

    @contextmanager
    def on(self, connection: Any) -> Iterator[Instrument]:
        original = connection._commit

        def _commit() -> Any:
            t0 = time.perf_counter()
            try:
                return original()
            finally:
                self._add("COMMIT", t0)

        connection._commit = _commit
        try:
            with connection.execute_wrapper(self):
                yield self
        finally:
            del connection._commit

    def per_call(self, calls: int) -> dict[str, dict[str, tuple[float, float]]]:
        """section -> verb -> (statements per call, ms per call)."""
        out: dict[str, dict[str, tuple[float, float]]] = {}
        for (section, verb), n in sorted(self.count.items()):
            out.setdefault(section, {})[verb] = (n / calls, 1000.0 * self.seconds[(section, verb)] / calls)
        return out


# ---- the baseline ----------------------------------------------------------------------------------------


def measure_raw(url: str, cluster: str, n: int) -> dict[str, Any]:
    """The raw loop in a fresh process (spawned: no Django, no heap of this process for its GC to walk)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_raw_process, args=(url, cluster, n, results), daemon=True)
    proc.start()
    try:
        out = _collect(results, [proc], 1, 600)[0]
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.terminate()
    if "error" in out:
        raise RuntimeError("the raw loop failed:\n" + out["error"])
    return out


def _raw_process(url: str, cluster: str, n: int, results: Any) -> None:
    try:
        results.put(raw_loop(url, cluster, n))
    except BaseException:
        results.put({"error": traceback.format_exc()})


def raw_loop(url: str, cluster: str, n: int) -> dict[str, Any]:
    """N changes x 3 brokers, one HSET each of the engine's own field and value, one round trip each."""
    client = connect(url, timeout_s=30.0)
    keys = [config_key(cluster, b) for b in range(1, BROKERS + 1)]
    fields = [field_of(i) for i in range(n)]
    values = [repr(value_of(i)) for i in range(n)]
    hset = client.hset
    for i in range(min(n, 1000)):  # warm: connection, allocator, CPU caches (a scratch key, not timed)
        hset(f"{keys[0]}-warm", fields[i], values[i])
    client.delete(f"{keys[0]}-warm")
    t0 = time.perf_counter()
    for i in range(n):
        f, v = fields[i], values[i]
        for k in keys:
            hset(k, f, v)
    elapsed = time.perf_counter() - t0
    held = [int(client.hlen(k)) for k in keys]
    client.delete(*keys)  # the engine's first (whole) push starts the hash afresh anyway
    client.close()
    if held != [n] * BROKERS:
        raise RuntimeError(f"raw loop: the config hashes hold {held}, not {n} fields each")
    return {"changes_per_s": n / elapsed, "elapsed_s": elapsed, "hset_us": elapsed * 1e6 / (n * BROKERS)}


# ---- the push path ---------------------------------------------------------------------------------------


def states_of(client: redis.Redis, cluster: Any) -> list[NamespaceState]:
    from quotas.models import Broker

    return [
        NamespaceState(client, namespace_for_broker(cluster.name, b.broker_id), b.broker_id)
        for b in Broker.objects.filter(cluster=cluster).order_by("broker_id")
    ]


def wait_applied(states: list[NamespaceState], version: int, worker: Worker, timeout_s: float) -> float:
    """Poll until every namespace holds ``version``; returns the perf_counter time it was seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        held = [s.applied_version() for s in states]
        if min(held) >= version:
            return time.perf_counter()
        worker.check()
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the brokers hold versions {held}, not {version}, after {timeout_s:g} s; worker log:\n"
                f"{worker.log_tail()}"
            )
        time.sleep(0.002)


def wait_idle(cluster: Any, timeout_s: float = 60.0) -> None:
    """Until the worker is done with the cluster: every Push row applied and no drain lease held (a commit made
    under a lease would be pushed by the worker, not by whoever measures pushing it)."""
    from quotas.models import DesiredStateVersion, Push, PushState

    deadline = time.monotonic() + timeout_s
    while (
        Push.objects.filter(cluster=cluster).exclude(state=PushState.APPLIED).exists()
        or DesiredStateVersion.objects.get(cluster=cluster).drain_until is not None
    ):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the worker still holds {cluster.name} after {timeout_s:g} s")
        time.sleep(0.01)
    time.sleep(0.2)  # its last task's acknowledgement


def warm_up(cluster: Any, states: list[NamespaceState], worker: Worker, timeout_s: float = 120.0) -> float:
    """Push the empty version 0 to the brokers through the worker: proves it is up, and warms its connections."""
    from quotas.push.dispatch import enqueue_pushes

    t0 = time.perf_counter()
    enqueue_pushes(cluster.pk)
    return wait_applied(states, 0, worker, timeout_s) - t0


def chain_of(records: list[PushRecord]) -> tuple[bool, str]:
    """Each application holds the version the previous one brought, versions only grow (none applied twice)."""
    if not records:
        return False, "empty push log"
    if records[0].held != -1 and len(records) < LOG_KEEP:
        return False, f"the first application holds {records[0].held}, not -1 (nothing)"
    for prev, rec in zip(records, records[1:], strict=False):
        if rec.held != prev.version:
            return False, f"{rec} holds {rec.held}, but the previous application brought {prev.version}"
        if rec.version <= prev.version:
            return False, f"{rec} applies version {rec.version} again (previous {prev.version})"
    return True, "ok"


def verify(client: redis.Redis, cluster: str, n: int, histories: list[list[PushRecord]], final: int) -> dict[str, Any]:
    """Every broker's config hash holds exactly the N values; every push log is a chain ending at ``final``."""
    expected = {field_of(i): repr(value_of(i)) for i in range(n)}
    problems: list[str] = []
    for b, history in zip(range(1, BROKERS + 1), histories, strict=True):
        raw = client.hgetall(config_key(cluster, b))
        held = {f.decode(): v.decode() for f, v in raw.items()}
        if held != expected:
            missing = len(expected.keys() - held.keys())
            extra = len(held.keys() - expected.keys())
            wrong = sum(1 for f in expected.keys() & held.keys() if held[f] != expected[f])
            problems.append(f"broker-{b}: {len(held)} fields ({missing} missing, {extra} extra, {wrong} different)")
        ok, why = chain_of(history)
        if not ok:
            problems.append(f"broker-{b}: push log is not a chain: {why}")
        elif history[-1].version != final:
            problems.append(f"broker-{b}: the last application is version {history[-1].version}, not {final}")
    return {"ok": not problems, "problems": problems}


def run_phase(
    label: str, cluster: Any, n: int, batch: int, client: redis.Redis, worker: Worker, probe: Probe, timeout_s: float,
    pace: float | None = None,
) -> dict[str, Any]:
    """Commit N changes in calls of ``batch``, wait until all 3 brokers hold the last version, and measure.

    ``pace``: calls per second, on a fixed schedule (call k starts at k / pace s, or at once when behind it: an open
    loop, as approvals arrive whether or not pushes keep up); None: as fast as they go."""
    from django.db import connection

    from quotas.models import Alteration, DesiredStateVersion, Push, PushState, QuotaOp, alter_client_quotas

    states = states_of(client, cluster)
    start_version = DesiredStateVersion.objects.get(cluster=cluster).version
    entries = [Alteration([("user", user_of(i))], [QuotaOp(KEY, value_of(i))]) for i in range(n)]
    calls = [entries[lo : lo + batch] for lo in range(0, n, batch)]
    alter_client_quotas(cluster, calls[0], validate_only=True)  # imports and validation caches, not timed
    connection.close()  # each phase opens its connection the same way

    probe.reset()
    log_offset = worker.log_size()
    client.config_resetstat()
    redis_cpu0, worker_cpu0, own_cpu0 = server_cpu_s(client), worker.cpu_s(), time.process_time()
    versions: list[int] = []
    call_s: list[float] = []
    clock = time.perf_counter
    instrument = probe.instrument = Instrument()
    with instrument.on(connection):
        wall0 = time.time()
        t0 = clock()
        for k, chunk in enumerate(calls):
            if pace is not None:
                due = t0 + k / pace
                while clock() < due:
                    time.sleep(max(0.0, min(due - clock(), 0.01)))
            c0 = clock()
            probe.current = k
            versions.append(alter_client_quotas(cluster, chunk).version)
            call_s.append(clock() - c0)
            probe.committed(k)
        t_commits = clock()
    probe.instrument = None
    own_cpu = time.process_time() - own_cpu0
    final = versions[-1]
    t_seen = wait_applied(states, final, worker, timeout_s)
    # the portal's own view: every Push row of the phase marked applied by the worker
    deadline = time.monotonic() + timeout_s
    while Push.objects.filter(cluster=cluster).exclude(state=PushState.APPLIED).exists():
        worker.check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"Push rows of {cluster.name} still not applied after {timeout_s:g} s")
        time.sleep(0.005)
    t_rows = clock()
    worker_cpu = worker.cpu_s() - worker_cpu0
    redis_cpu = server_cpu_s(client) - redis_cpu0
    commandstats = client.info("commandstats")
    connection.close()

    if len(probe.commit_at) != len(calls) or versions != list(range(start_version + 1, final + 1)):
        raise RuntimeError(
            f"{label}: {len(calls)} calls gave {len(probe.commit_at)} commits and versions "
            f"{versions[:3]}..{versions[-3:]} (expected one new version per call)"
        )
    time.sleep(0.2)  # the worker logs a task's line after its result: let the last ones reach the file
    runs = worker.task_runs(log_offset)
    run_s = sorted(t for t, _ in runs)
    histories = [s.history(LOG_KEEP) for s in states]
    phase_records = [[r for r in h if r.version > start_version] for h in histories]
    if any(h and len(h) >= LOG_KEEP and h[0].version > start_version for h in histories):
        raise RuntimeError(f"{label}: the push log was trimmed ({LOG_KEEP} kept): run fewer changes")

    # when each version landed on each broker: the first application of a version >= v (push logs only grow)
    landed: list[list[float]] = []
    for recs in phase_records:
        vs = [r.version for r in recs]
        at = [float(r.at_ms) for r in recs]
        landed.append([at[bisect.bisect_left(vs, v)] for v in versions])
    latencies = sorted(
        max(landed[b][k] for b in range(BROKERS)) - probe.commit_at[k] * 1000.0 for k in range(len(versions))
    )
    end_ms = max(landed[b][-1] for b in range(BROKERS))
    elapsed = end_ms / 1000.0 - wall0
    check = verify(client, cluster.name, n, histories, final)

    modes = Counter(r.mode for recs in phase_records for r in recs)
    applications = [len(recs) for recs in phase_records]
    tasks = probe.sent
    calls_n = len(calls)
    commit_s = t_commits - t0
    cmd_calls = {
        name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in commandstats.items() if stat.get("calls")
    }
    return {
        "label": label,
        "pace": pace,
        "changes": n,
        "batch": batch,
        "calls": calls_n,
        "final_version": final,
        "elapsed_s": elapsed,
        "changes_per_s": n / elapsed,
        "commit_s": commit_s,
        "commit_changes_per_s": n / commit_s,
        "seen_s": t_seen - t0,
        "rows_applied_s": t_rows - t0,
        "call_ms": 1000.0 * sum(call_s) / calls_n,
        "call_p99_ms": 1000.0 * percentile(sorted(call_s), 99),
        "enqueue_ms": 1000.0 * probe.enqueue_s / calls_n,
        "enqueued_calls": len(probe.enqueued_at),
        "sql": instrument.per_call(calls_n),
        "own_cpu_ms_per_call": 1000.0 * own_cpu / calls_n,
        "tasks": tasks,
        "applications": applications,
        "modes": dict(modes),
        "worker_cpu_s": worker_cpu,
        "worker_cpu_ms_per_application": 1000.0 * worker_cpu / sum(applications) if sum(applications) else 0.0,
        "task_runs": len(runs),
        "task_modes": dict(Counter(m for _, modes in runs for m in modes)),
        "task_ms_mean": 1000.0 * sum(run_s) / len(run_s) if run_s else 0.0,
        "task_ms_p50": 1000.0 * percentile(run_s, 50) if run_s else 0.0,
        "task_ms_p99": 1000.0 * percentile(run_s, 99) if run_s else 0.0,
        "task_busy_s": sum(run_s),
        "redis_cpu_s": redis_cpu,
        "redis_commands": cmd_calls,
        "latency_p50_ms": percentile(latencies, 50),
        "latency_p99_ms": percentile(latencies, 99),
        "latency_max_ms": latencies[-1],
        "verified": check["ok"],
        "problems": check["problems"],
    }


def report_phase(r: dict[str, Any], raw_cps: float, concurrency: int) -> None:
    ratio = r["changes_per_s"] / raw_cps
    verdict = f"(target >= {TARGET_RATIO:g}: {'OK' if ratio >= TARGET_RATIO else 'MISSED'})"
    if r.get("pace"):  # its rate is the schedule's: its target is the latency, reported after it
        verdict = "(paced: the rate is the schedule's; its target is the p99 below)"
    per = f"{r['batch']} change{'s' * (r['batch'] > 1)} per AlterClientQuotas call"
    print(
        f"{r['label']:<13} {r['changes']:,} changes ({per}, {r['calls']:,} versions) on {BROKERS} brokers in "
        f"{r['elapsed_s']:.2f} s: {r['changes_per_s']:,.0f} changes/s = {ratio:.3f} x raw {verdict}",
        flush=True,
    )
    print(
        f"{'':<13} approval -> applied on every broker: p50 {r['latency_p50_ms']:.1f} ms, p99 "
        f"{r['latency_p99_ms']:.1f} ms, max {r['latency_max_ms']:.1f} ms",
        flush=True,
    )
    print(
        f"{'':<13} commits alone {r['commit_s']:.2f} s ({r['commit_changes_per_s']:,.0f} changes/s); last broker "
        f"seen at {r['seen_s']:.2f} s; every Push row applied at {r['rows_applied_s']:.2f} s",
        flush=True,
    )
    redis_per_change = sum(r["redis_commands"].values()) / r["changes"]
    top = ", ".join(f"{k} {v:,}" for k, v in sorted(r["redis_commands"].items(), key=lambda kv: -kv[1])[:8])
    print(
        f"{'':<13} per call {r['call_ms']:.3f} ms (p99 {r['call_p99_ms']:.2f} ms) of which enqueue "
        f"{r['enqueue_ms']:.3f} ms ({r['enqueued_calls']:,} of {r['calls']:,} calls enqueued, the rest under a "
        f"worker's drain lease); committer CPU {r['own_cpu_ms_per_call']:.3f} ms/call; {r['tasks']:,} target pushes "
        f"enqueued by commits (worker -c {concurrency}, {r['worker_cpu_s']:.2f} s CPU = "
        f"{r['worker_cpu_ms_per_application']:.2f} ms per application on a broker); "
        f"applications per broker {r['applications']} {r['modes']}",
        flush=True,
    )
    print(
        f"{'':<13} worker: {r['task_runs']} push tasks (messages) logged, target modes {r['task_modes']}, run time "
        f"mean {r['task_ms_mean']:.1f} ms (p50 {r['task_ms_p50']:.1f}, p99 {r['task_ms_p99']:.1f}) against "
        f"{1000.0 * r['worker_cpu_s'] / max(r['task_runs'], 1):.1f} ms of worker CPU per task (all its processes); "
        f"busy {r['task_busy_s']:.2f} s of {r['elapsed_s']:.2f} s",
        flush=True,
    )
    parts = []
    for section, verbs in r["sql"].items():
        n = sum(c for c, _ in verbs.values())
        ms = sum(t for _, t in verbs.values())
        detail = ", ".join(f"{verb} {c:g} x = {t:.3f} ms" for verb, (c, t) in verbs.items())
        parts.append(f"{section}: {n:g} statements {ms:.3f} ms ({detail})")
    print(f"{'':<13} SQL per call: " + "; ".join(parts), flush=True)
    print(
        f"{'':<13} redis CPU {r['redis_cpu_s']:.2f} s, {redis_per_change:.1f} commands/change: {top}",
        flush=True,
    )
    status = (
        "OK: each config hash holds exactly the N values, each push log is a chain"
        if r["verified"]
        else ("FAILED: " + "; ".join(r["problems"]))
    )
    print(f"{'':<13} verify {status}", flush=True)


# ---- profile ---------------------------------------------------------------------------------------------


class Sections:
    """Wall time spent in named portal functions in this process, each wrapped where it is looked up, for a while.

    Functions are called through their module (or class) attribute, so wrapping the attribute sees every call;
    nested sections overlap (``bump`` includes ``log_version``). Only observes: arguments and results pass through.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: Counter[str] = Counter()

    def _timed(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - t0
                self.calls[label] += 1

        return timed

    @contextmanager
    def on(self, targets: list[tuple[Any, str, str]]) -> Iterator[Sections]:
        restore: list[Callable[[], None]] = []
        try:
            for owner, name, label in targets:
                own = vars(owner).get(name) if hasattr(owner, "__dict__") else None
                if isinstance(own, classmethod):
                    setattr(owner, name, classmethod(self._timed(label, own.__func__)))
                else:
                    setattr(owner, name, self._timed(label, getattr(owner, name)))
                if own is None:
                    restore.append(lambda o=owner, n=name: delattr(o, n))
                else:
                    restore.append(lambda o=owner, n=name, v=own: setattr(o, n, v))
            yield self
        finally:
            for undo in reversed(restore):
                undo()

    def per_call(self, calls: int) -> dict[str, float]:
        return {label: 1000.0 * sec / calls for label, sec in self.seconds.items()}


def _top(prof: cProfile.Profile, lines: int = 15) -> str:
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(lines)
    return "\n".join(line for line in buf.getvalue().splitlines() if line.strip())


def _sql_line(instrument: Instrument, calls: int) -> str:
    parts = []
    for section, verbs in instrument.per_call(calls).items():
        n = sum(c for c, _ in verbs.values())
        ms = sum(t for _, t in verbs.values())
        detail = ", ".join(f"{verb} {c:g} x = {t:.3f} ms" for verb, (c, t) in verbs.items())
        parts.append(f"{section}: {n:g} statements {ms:.3f} ms ({detail})")
    return "; ".join(parts)


def profile_paths(
    redis_url: str, client: redis.Redis, worker: Worker, probe: Probe, n: int, worker_cpu_ms: float
) -> dict[str, Any]:
    """Where a change's time goes: the committer (timed sections, then cProfile) and the push task body in-process."""
    from django.db import connection

    import quotas.models.pushes
    import quotas.models.quotas
    import quotas.push.booking
    import quotas.push.dispatch
    import quotas.push.target_push
    import quotas.workflow.quota_requests
    from quotas.connectors.engine import EngineConnector
    from quotas.models import Alteration, Broker, DesiredStateVersion, QuotaOp, alter_client_quotas
    from quotas.tasks import push_target

    push_task = getattr(push_target, "_get_current_object", lambda: push_target)()  # the task behind the proxy

    cluster = make_cluster(PROFILE_CLUSTER, redis_url)
    states = states_of(client, cluster)
    warm_up(cluster, states, worker)
    out: dict[str, Any] = {}

    def change(name: str, i: int) -> None:
        alter_client_quotas(cluster, [Alteration([("user", name)], [QuotaOp(KEY, value_of(i))])])

    # 1. the committer with timed sections, as in the measured phase (real enqueue; the worker pushes meanwhile)
    committer = [
        (quotas.models.quotas, "_validate_entry", "validate"),
        (DesiredStateVersion, "lock_in", "lock_in (the lock and its reads, queued)"),
        (quotas.models.quotas, "_entities", "_entities (new entities: SQLite inserts them)"),
        (quotas.models.quotas, "_apply_all", "_apply_all (entity, value rows, queued)"),
        (DesiredStateVersion, "bump", "bump (UPDATE + log_version, queued)"),
        (quotas.models.pushes, "log_version", "  log_version (change log, Push rows)"),
        (quotas.push.dispatch, "enqueue_pushes", "enqueue_pushes (on_commit, after COMMIT)"),
        (redis.Redis, "set", "  Redis SET NX of the 3 pending flags"),
        (push_task, "apply_async", "  apply_async (Celery publish)"),
    ]
    sections, instrument = Sections(), Instrument()
    change("warm", 0)
    probe.instrument = instrument
    cpu0, t0 = time.process_time(), time.perf_counter()
    try:
        with sections.on(committer), instrument.on(connection):
            for i in range(n):
                change(user_of(i), i)
    finally:
        probe.instrument = None
    wall_ms, cpu_ms = 1000.0 * (time.perf_counter() - t0) / n, 1000.0 * (time.process_time() - cpu0) / n
    timed = sections.per_call(n)
    split = {label: timed.get(label, 0.0) for _, _, label in committer}
    split["COMMIT (journal or WAL + fsync)"] = instrument.per_call(n).get("alter", {}).get("COMMIT", (0, 0.0))[1]
    split["the rest (atomic, BEGIN, the queued statements, glue)"] = wall_ms - sum(
        v for k, v in split.items() if not k.startswith(" ")
    )
    print(
        f"profile       committer, {n} calls of one change: {wall_ms:.3f} ms/call wall, {cpu_ms:.3f} ms CPU; "
        "by section (ms/call; indented = inside the line above):",
        flush=True,
    )
    for label, ms in split.items():
        print(f"{'':<16}{label:<48} {ms:7.3f} ms  {100.0 * ms / wall_ms:5.1f}%", flush=True)
    print(f"{'':<14}SQL per call: {_sql_line(instrument, n)}", flush=True)
    out["committer_ms"] = {"wall": wall_ms, "cpu": cpu_ms, **split}

    prof = cProfile.Profile()
    k = max(10, n // 2)
    prof.enable()
    for i in range(k):
        change(f"c{i:05d}", i)
    prof.disable()
    print(f"profile       committer under cProfile ({k} calls), by own time:\n{_top(prof)}", flush=True)
    wait_applied(states, n + 1 + k, worker, 120.0)

    # 2. the push task body in-process, one version per push (no coalescing: its cost per push, worst case)
    body = [
        (EngineConnector, "applied_version", "applied_version (Redis GET)"),
        (quotas.push.target_push, "changes_since", "changes_since (SELECT change log)"),
        (quotas.push.target_push, "_send", "_send (the engine's apply script)"),
        (quotas.push.booking, "_applied", "_applied (UPDATE Push rows and attempts + settle_pushed)"),
        (quotas.workflow.quota_requests, "settle_pushed", "  settle_pushed (SELECT applying requests)"),
    ]
    m = max(20, n // 5)
    brokers = list(Broker.objects.filter(cluster=cluster).order_by("broker_id").values_list("pk", flat=True))
    sections, instrument = Sections(), Instrument()
    instrument.section = "push"
    prof = cProfile.Profile()
    pushes = profiled = 0
    push_s = push_cpu = 0.0
    wait_idle(cluster)
    probe.suppress = True  # nothing enqueued: this process pushes, the worker stays idle
    try:
        for i in range(2 * m):
            change(f"p{i:05d}", i)
            for pk in brokers:
                if i < m:  # timed sections
                    with sections.on(body), instrument.on(connection):
                        c0, t0 = time.process_time(), time.perf_counter()
                        quotas.push.target_push.push_target(cluster.pk, pk)
                        push_s += time.perf_counter() - t0
                        push_cpu += time.process_time() - c0
                    pushes += 1
                else:  # cProfile
                    prof.enable()
                    quotas.push.target_push.push_target(cluster.pk, pk)
                    prof.disable()
                    profiled += 1
    finally:
        probe.suppress = False
    wall_ms, cpu_ms = 1000.0 * push_s / pushes, 1000.0 * push_cpu / pushes
    timed = sections.per_call(pushes)
    split = {label: timed.get(label, 0.0) for _, _, label in body}
    split["the rest (flag DEL, Cluster/Broker/version SELECTs)"] = wall_ms - sum(
        v for k, v in split.items() if not k.startswith(" ")
    )
    print(
        f"profile       push task body in-process, {pushes} pushes of one version each: {wall_ms:.3f} ms/push wall, "
        f"{cpu_ms:.3f} ms CPU (the worker spent {worker_cpu_ms:.3f} ms CPU per application in the measured phase), "
        "by section:",
        flush=True,
    )
    for label, ms in split.items():
        print(f"{'':<16}{label:<52} {ms:7.3f} ms  {100.0 * ms / wall_ms:5.1f}%", flush=True)
    print(f"{'':<14}SQL per push: {_sql_line(instrument, pushes)}", flush=True)
    print(f"profile       push task body under cProfile ({profiled} pushes), by own time:\n{_top(prof)}", flush=True)
    out["push_ms"] = {"wall": wall_ms, "cpu": cpu_ms, **split}
    connection.close()
    return out


# ---- main ------------------------------------------------------------------------------------------------


def pin(server: RedisServer, wanted: bool) -> tuple[list[int], list[int]] | None:
    """redis-server on one CPU, this process (the committer, and the raw loop it spawns) on the others (2+ CPUs);
    the worker is started on redis-server's CPU (``run``), as a deployment runs its Celery workers apart from the
    portal's processes: the committer has a CPU to itself as the raw loop's client has."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else []
    if not wanted or server.proc is None or len(cpus) < 2:
        return None
    os.sched_setaffinity(server.proc.pid, {cpus[0]})
    os.sched_setaffinity(0, set(cpus[1:]))
    return [cpus[0]], cpus[1:]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--changes", type=int, default=None, help="quota changes per phase (default 10000; --quick 300)"
    )
    parser.add_argument(
        "--batch", type=int, default=None,
        help="also measure with this many changes per AlterClientQuotas call (default 100; --quick 50; 0 = skip)",
    )  # fmt: skip
    parser.add_argument(
        "--paced", type=int, default=None,
        help=f"changes of the paced phase, one per commit at {PACE:g}/s (default 2000; --quick 100; 0 = skip)",
    )  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=1, help="Celery worker processes (prefork -c; default 1)")
    parser.add_argument("--quick", action="store_true", help="a small run for a smoke test")
    parser.add_argument(
        "--profile", action="store_true", help="also cProfile the committer and the push task body (in-process)"
    )
    parser.add_argument("--profile-changes", type=int, default=None, help="changes of the profile (default 1000)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the target ratio is missed")
    parser.add_argument(
        "--no-pin", dest="pin", action="store_false",
        help="no CPU placement (by default on 2+ CPUs: redis-server and the worker on one, this process on the rest)",
    )  # fmt: skip
    parser.add_argument(
        "--postgres", action="store_true",
        help="the portal on a project-local PostgreSQL (fsync on) instead of a SQLite file",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.changes is None:
        args.changes = 300 if args.quick else 10_000
    if args.batch is None:
        args.batch = 50 if args.quick else 100
    if args.paced is None:
        args.paced = 100 if args.quick else 2000
    if args.profile_changes is None:
        args.profile_changes = 100 if args.quick else 1000
    if args.changes < 1 or args.batch < 0 or args.paced < 0 or args.concurrency < 1 or args.profile_changes < 1:
        parser.error("--changes, --concurrency and --profile-changes must be positive, --batch at least 0")
    return args


def run(args: argparse.Namespace, server: RedisServer, stack: list[Callable[[], None]]) -> dict[str, Any]:
    url = server.url
    pins = pin(server, args.pin)
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    db_dir = Path(tempfile.mkdtemp(prefix="db-", dir=BENCH_DIR))
    stack.append(lambda: shutil.rmtree(db_dir, ignore_errors=True))
    db_path = db_dir / "push-bench.sqlite3"
    if args.postgres:
        from devtools.postgres import PostgresServer

        pg = PostgresServer(name=f"push-bench-{os.getpid()}", durable=True).start()
        stack.append(lambda: shutil.rmtree(pg.dir, ignore_errors=True))
        stack.append(pg.stop)
        database, where_db = pg.url, f"PostgreSQL on 127.0.0.1:{pg.port} (fsync on)"
    else:
        stack.append(lambda: remove_database(db_path))
        database, where_db = f"sqlite:///{db_path}", f"SQLite {db_path}"
    env = setup_django(database, url)
    migrate_s = migrate()
    cluster = make_cluster(CLUSTER, url)
    batch_cluster = make_cluster(BATCH_CLUSTER, url) if args.batch else None
    paced_cluster = make_cluster(PACED_CLUSTER, url) if args.paced else None

    from django.db import connections

    connections.close_all()
    worker = Worker(env, args.concurrency, BENCH_DIR / "celery-worker.log", set(pins[0]) if pins else None)
    stack.append(worker.stop)
    worker.start()
    probe = Probe()
    stack.append(probe.install())
    client = connect(url, timeout_s=30.0)
    stack.append(client.close)
    warm_s = warm_up(cluster, states_of(client, cluster), worker)
    if batch_cluster is not None:
        warm_up(batch_cluster, states_of(client, batch_cluster), worker)
    if paced_cluster is not None:
        warm_up(paced_cluster, states_of(client, paced_cluster), worker)
    where = f"redis-server and the worker on CPU {pins[0]}, this process on {pins[1]}" if pins else "not pinned"
    print(
        f"setup         redis {client.info('server')['redis_version']} ({where}); {where_db} "
        f"(migrated in {migrate_s:.1f} s); Django {package_version('django')}, Celery {package_version('celery')}; "
        f"worker `celery -A portal worker --pool prefork -c {args.concurrency}` up and warm in {warm_s:.1f} s; "
        f"cluster {CLUSTER!r} with {BROKERS} engine brokers; {args.changes:,} changes per phase; "
        f"{os.cpu_count()} CPUs; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )

    timeout_s = max(120.0, args.changes * 0.05)
    raw_first = measure_raw(url, CLUSTER, args.changes)
    print(
        f"raw           {raw_first['changes_per_s']:,.0f} changes/s ({args.changes:,} x {BROKERS} HSET, one round "
        f"trip each: {raw_first['hset_us']:.1f} us/HSET)",
        flush=True,
    )
    # the raw loop's keys are the engine's: start them afresh (the brokers hold version 0, an empty state)
    client.delete(*[config_key(CLUSTER, b) for b in range(1, BROKERS + 1)])
    primary = run_phase("push", cluster, args.changes, 1, client, worker, probe, timeout_s)
    batched = None
    if batch_cluster is not None:
        batched = run_phase(f"push x{args.batch}", batch_cluster, args.changes, args.batch, client, worker, probe,
                            timeout_s)  # fmt: skip
    paced = None
    if paced_cluster is not None:
        paced = run_phase(f"paced {PACE:g}/s", paced_cluster, args.paced, 1, client, worker, probe, timeout_s, PACE)
    raw_last = measure_raw(url, f"{CLUSTER}-raw", args.changes)  # same key shapes; the engine's hashes stay as checked
    raw_cps = (raw_first["changes_per_s"] + raw_last["changes_per_s"]) / 2
    print(
        f"raw (last)    {raw_last['changes_per_s']:,.0f} changes/s; the ratios use the mean {raw_cps:,.0f} "
        f"(drift {raw_last['changes_per_s'] / raw_first['changes_per_s'] - 1:+.1%})",
        flush=True,
    )
    report_phase(primary, raw_cps, args.concurrency)
    if batched is not None:
        report_phase(batched, raw_cps, args.concurrency)
    if paced is not None:
        report_phase(paced, raw_cps, args.concurrency)
        ok = paced["latency_p99_ms"] <= TARGET_PACED_P99_MS
        print(
            f"{'':<13} paced at {PACE:g} changes/s (achieved {paced['changes'] / paced['commit_s']:.1f} commits/s): "
            f"commit -> every broker p99 {paced['latency_p99_ms']:.1f} ms (target <= {TARGET_PACED_P99_MS:g}: "
            f"{'OK' if ok else 'MISSED'})",
            flush=True,
        )

    profile = None
    if args.profile:
        per_application = primary["worker_cpu_ms_per_application"]
        profile = profile_paths(url, client, worker, probe, args.profile_changes, per_application)

    failures = [p for r in (primary, batched, paced) if r is not None for p in r["problems"]]
    if failures:
        raise RuntimeError("push_bench: verification failed:\n" + "\n".join(failures))

    ratio = primary["changes_per_s"] / raw_cps
    summary: dict[str, Any] = {
        "changes": args.changes,
        "raw_changes_per_s": round(raw_cps, 1),
        "push_changes_per_s": round(primary["changes_per_s"], 1),
        "push_ratio": round(ratio, 4),
        "latency_p50_ms": round(primary["latency_p50_ms"], 1),
        "latency_p99_ms": round(primary["latency_p99_ms"], 1),
        "worker_concurrency": args.concurrency,
        "target_ratio": TARGET_RATIO,
    }
    met = [ratio >= TARGET_RATIO]
    if batched is not None:
        summary.update(
            batch=args.batch,
            batch_changes_per_s=round(batched["changes_per_s"], 1),
            batch_ratio=round(batched["changes_per_s"] / raw_cps, 4),
            batch_latency_p50_ms=round(batched["latency_p50_ms"], 1),
            batch_latency_p99_ms=round(batched["latency_p99_ms"], 1),
        )
        met.append(batched["changes_per_s"] / raw_cps >= TARGET_RATIO)
    if paced is not None:
        summary.update(
            paced_rate=PACE,
            paced_changes=args.paced,
            paced_commits_per_s=round(paced["changes"] / paced["commit_s"], 1),
            paced_latency_p50_ms=round(paced["latency_p50_ms"], 1),
            paced_latency_p99_ms=round(paced["latency_p99_ms"], 1),
            target_paced_p99_ms=TARGET_PACED_P99_MS,
        )
        met.append(paced["latency_p99_ms"] <= TARGET_PACED_P99_MS)
    summary["target_met"] = all(met)
    summary.update(
        raw_first_changes_per_s=round(raw_first["changes_per_s"], 1),
        raw_last_changes_per_s=round(raw_last["changes_per_s"], 1),
        push_elapsed_s=round(primary["elapsed_s"], 3),
        commit_changes_per_s=round(primary["commit_changes_per_s"], 1),
        call_ms=round(primary["call_ms"], 4),
        enqueue_ms=round(primary["enqueue_ms"], 4),
        push_tasks=primary["tasks"],
        applications_per_broker=primary["applications"],
        worker_cpu_ms_per_application=round(primary["worker_cpu_ms_per_application"], 3),
        rows_applied_s=round(primary["rows_applied_s"], 3),
        latency_max_ms=round(primary["latency_max_ms"], 1),
        verified=True,
        pinned=pins is not None,
        cpus=os.cpu_count(),
        quick=args.quick,
        database="postgresql" if args.postgres else "sqlite",
        load_average=[round(x, 2) for x in os.getloadavg()],
    )
    if profile is not None:
        summary["profile"] = {
            part: {k.strip(): round(v, 4) for k, v in figures.items()} for part, figures in profile.items()
        }
    return summary


def main(argv: list[str] | None = None) -> int:
    """Run every phase; whatever was started (worker, Redis, the database file) goes on any exit."""
    args = parse_args(argv)
    return run_bench("push-bench", args.check, lambda server, stack: run(args, server, stack), "target_met")


if __name__ == "__main__":
    sys.exit(main())
