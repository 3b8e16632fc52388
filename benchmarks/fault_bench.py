#!/usr/bin/env python
"""Approvals under faults (issue 20): nothing lost, nothing applied twice, never out of order, and how long to
converge; then hostile input against the API, against valid requests of the same run.

    .venv/bin/python benchmarks/fault_bench.py [--approvals 1000] [--faults 140] [--seed 20] [--hostile 600]
                                               [--no-kafka] [--quick] [--check]

Everything is started by the benchmark and stopped on any exit: the portal's redis-server (Celery's queue, the
cache; AOF on disk, ``.run/redis-fault-bench/``), one redis-server per engine broker (3 brokers of one engine
cluster: killing a broker's Redis is killing that broker), a project-local PostgreSQL (``devtools.postgres``,
``.run/postgres-fault-bench/``; a fresh database copied from a migrated template kept there while the migrations do
not change), two uvicorn replicas of the portal and a real Celery worker with its beat (``-B``, reconcile every
``QUOTAS_RECONCILE_SECONDS`` = 5 s), all on that database and Redis, and a real Apache Kafka 4.4 cluster of 3 KRaft
nodes (``benchmarks/fault_kafka.py``: fresh, ``.run/kafka/fault-bench/``, reached over SASL/SCRAM through a TCP relay
per broker; ``--no-kafka`` leaves it out). Approvals alternate between the engine cluster and the Kafka cluster.
``--quick`` uses servers of its own (``*-fault-bench-quick``), so it can run beside a full run.

* clean (the baseline): approvals with no fault, over HTTP through the replicas in turn: a member submits
  (``POST /api/requests/``), an admin approves (``POST /api/requests/<id>/approve/``; the commit enqueues the
  pushes), one after the other; approvals/s. The client leaves a replica that refuses, drops the connection or
  answers 5xx for the other one, with backoff; a submit retried after a dropped connection first looks for itself
  (its unique ``reason``), an approve retried after one accepts 409 when the request is approved.
* faulted: ``--approvals`` more, while ``--faults`` faults are injected at approval indexes drawn by a seeded random
  schedule (``--seed``), every kind as often as the number allows, in an order drawn from the same generator:
  ``redis_restart`` (the portal's Redis: SIGTERM, restarted on its port with its data), ``redis_restart_wiped``
  (its data files removed before the restart: the queue loses its messages), ``redis_outage`` (down for 1-3 s while
  approvals go on), ``worker_sigkill`` (SIGKILL of the worker while pushes run; restarted at once, its
  unacknowledged messages come back), ``replica_kill`` (SIGKILL of one uvicorn replica, restarted at once; the
  client uses the other until it answers), ``postgres_restart`` (fast shutdown, started again after 0.5-2 s while
  approvals go on: they get 503 DATABASE_UNAVAILABLE and retry), ``broker_kill`` (SIGKILL of one broker's Redis,
  restarted with its AOF), ``broker_restart_wiped`` (the same with its data removed: the broker holds nothing and is
  whole-pushed) and ``broker_refusing`` (nothing listens on one broker's port for 1-3 s: connections refused);
  on Kafka, ``kafka_broker_kill`` (SIGKILL of one KRaft node, started again from its data after 1-3 s, back once
  every node has it in its metadata) and ``kafka_listener_refusing`` (one broker's SASL listener, as the portal
  reaches it, cut and refusing for 1-3 s while the broker runs on), ``kafka_controller_kill`` (the node leading the
  KRaft quorum killed, back after 1-3 s), ``kafka_node_disk_lost`` (a node killed, its data directory removed and
  formatted again, started after 1-3 s: it rebuilds from the quorum before it answers), ``kafka_password_rotated``
  (the portal's SCRAM password changed in Kafka and its connections cut; the new secret reaches the file the workers
  read once a push met the old one: meanwhile pushes fail with SASL_AUTHENTICATION_FAILED and are retried).
  A fault due while an earlier one still has a part down brings that part back first. ``approval_ratio`` = faulted
  approvals/s / clean approvals/s; ``client_retries`` counts the client's retries by cause.
* then it waits until every broker holds the newest desired-state version: ``converge_s`` from the end of the last
  fault. Every 50 ms during the run a sampler reads each broker's applied version: ``out_of_order`` counts a broker
  seen holding an older version than before (a wiped broker holding nothing is not that: it is whole-pushed).
  ``double_applied``: applications in a broker's push log that applied a version it already held or had passed.
  ``lost``: approved values missing or different on some broker at the end (each broker's config hash against
  every approval). On Kafka (no version of ours there), each broker is asked every 200 ms what it holds: it must
  always hold a prefix of the Kafka approvals, never fewer than before (``out_of_order``); ``double_applied`` and the
  order as written come from the cluster's metadata log (a quota record is written only when a value changes, so a
  retried push writes none: every approval must appear once, never removed, in order); ``lost`` from each broker's
  DescribeClientQuotas at the end. The top-level figures add both targets up; ``by_target`` has each.
* hostile: ``--hostile`` requests through the portal's WSGI app in-process (malformed JSON, a 5 MiB body, a 5,000
  character client-id, a wrong content type, unknown routes, in turn) against the same number of valid GETs of the
  request list: ``hostile_5xx`` (goal 0), ``hostile_not_json`` (error answers under /api/ that are not JSON, goal 0)
  and ``hostile_cost_ratio`` (mean time of a hostile request / mean time of a valid one).

Goals (issue 20): lost, double_applied, out_of_order 0; converge_s <= 60. The last line of output is one JSON
object.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import http.client  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from typing import Any  # noqa: E402

import redis  # noqa: E402

from benchmarks.fault_kafka import (  # noqa: E402
    KAFKA_CLUSTER,
    KAFKA_KINDS,
    KafkaSampler,
    KafkaTarget,
    push_attempts,
    wait_kafka_pushes,
)
from benchmarks.harness import (  # noqa: E402
    Replica,
    fresh_postgres,
    keep_template,
    run_bench,
    wait_answers,
)
from benchmarks.push_bench import (  # noqa: E402
    BROKERS,
    Worker,
    chain_of,
    config_key,
    field_of,
    migrate,
    user_of,
    value_of,
)
from devtools.postgres import PostgresServer  # noqa: E402
from devtools.redis_server import RUN_DIR, RedisServer  # noqa: E402
from engine.errors import EngineUnavailable  # noqa: E402

NAME = "fault-bench"
CLUSTER = "faultbench"
ENGINE_KINDS = (
    "redis_restart", "redis_restart_wiped", "redis_outage", "worker_sigkill", "replica_kill", "postgres_restart",
    "broker_kill", "broker_restart_wiped", "broker_refusing",
)  # fmt: skip
KINDS = ENGINE_KINDS + KAFKA_KINDS
TARGET_CONVERGE_S = 60.0
RECONCILE_S = "5"
REPLICAS = 2
#: A broker's Redis down, as the engine's state reader reports it (EngineUnavailable) or redis-py does.
UNREACHABLE = (EngineUnavailable, redis.RedisError, OSError)
CALL_DEADLINE_S = 120.0  # an approval waits this long for some replica (and the database) to answer


class BeatWorker(Worker):
    """The push worker with its beat, so reconcile runs as in a deployment (every ``RECONCILE_S``)."""

    def command(self) -> list[str]:
        return [*super().command(), "-B", "-s", str(self.log_path.parent / "celerybeat-schedule")]


class Portal:
    """The approvals' HTTP client over the replicas, round robin: a replica that refuses the connection, drops it
    or answers 5xx (the database down) is left for the next one, with a short backoff, until ``CALL_DEADLINE_S``.

    A submit retried after an ambiguous failure (the connection dropped after the request was sent) first looks for
    its own request (its ``reason`` is unique), so a retry never files it twice; an approval retried after one
    answers 409 when the first attempt went through, and the request's state says so."""

    def __init__(self, replicas: list[Replica], member_token: str, admin_token: str) -> None:
        self.replicas, self.member, self.admin = replicas, member_token, admin_token
        self.turn = 0
        self.retries: Counter[str] = Counter()

    def _once(self, port: int, method: str, path: str, token: str, body: Any) -> tuple[int, Any]:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            headers = {"Authorization": f"Token {token}", "Content-Type": "application/json", "Host": "127.0.0.1"}
            c.request(method, path, json.dumps(body).encode() if body is not None else None, headers)
            r = c.getresponse()
            data = r.read()
            try:
                return r.status, json.loads(data) if data else {}
            except ValueError:
                return r.status, {"raw": data[:200].decode(errors="replace")}
        finally:
            c.close()

    def call(self, method: str, path: str, token: str, body: Any = None,
             recheck: Any = None) -> tuple[int, Any]:
        """The first answer below 500 from some replica; ``recheck()`` runs before a retry after an ambiguous
        failure and may return that answer instead (the first attempt went through)."""
        deadline = time.monotonic() + CALL_DEADLINE_S
        pause, ambiguous = 0.05, False
        while True:
            replica = self.replicas[self.turn % len(self.replicas)]
            self.turn += 1
            if ambiguous and recheck is not None:
                found = recheck()
                if found is not None:
                    return found
            try:
                status, data = self._once(replica.port, method, path, token, body)
                if status < 500:
                    return status, data
                self.retries[f"http_{status}"] += 1
                why = f"{status} {data}"
            except ConnectionRefusedError as e:
                self.retries["refused"] += 1
                why = repr(e)
            except (OSError, http.client.HTTPException) as e:  # dropped mid-request: it may have gone through
                self.retries["dropped"] += 1
                ambiguous, why = True, repr(e)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{method} {path}: no replica answered within {CALL_DEADLINE_S:g} s: {why}")
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def approve(self, i: int, cluster: str = CLUSTER) -> None:
        """One approval on ``cluster``: the member submits for user u<i>, an admin approves (the commit enqueues the
        pushes)."""
        reason = f"fault-bench #{i} {os.getpid()}"

        def mine() -> tuple[int, Any] | None:
            try:
                status, page = self._once(self.replicas[self.turn % len(self.replicas)].port, "GET",
                                          f"/api/requests/?cluster={cluster}&page_size=20", self.member, None)
            except (OSError, http.client.HTTPException):
                return None
            rows = page.get("results", page) if status == 200 and isinstance(page, dict) else []
            hit = [r for r in rows if isinstance(r, dict) and r.get("reason") == reason]
            return (201, hit[0]) if hit else None

        status, made = self.call("POST", "/api/requests/", self.member,
                                 {"cluster": cluster, "user": user_of(i), "key": "producer_byte_rate",
                                  "value": value_of(i), "reason": reason}, mine)
        if status != 201:
            raise RuntimeError(f"submit #{i}: {status} {made}")
        path = f"/api/requests/{made['id']}/approve/"
        status, done = self.call("POST", path, self.admin, {"comment": ""})
        if status == 409:  # an earlier attempt of this approval went through before its answer was lost
            status, done = self.call("GET", f"/api/requests/{made['id']}/", self.admin)
            if done.get("state") != "approved":
                raise RuntimeError(f"approve #{i}: 409 and the request is {done.get('state')!r}")
        elif status != 200:
            raise RuntimeError(f"approve #{i}: {status} {done}")


class Sampler(threading.Thread):
    """Reads each broker's applied version every 50 ms; counts a version going backwards (not to nothing)."""

    def __init__(self, brokers: list[RedisServer]) -> None:
        super().__init__(daemon=True)
        self.states = [broker_state(s, b) for b, s in enumerate(brokers, start=1)]
        self.last = [-1] * len(brokers)
        self.out_of_order: list[str] = []
        self.samples = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for i, state in enumerate(self.states):
                try:
                    held = state.applied_version()
                except UNREACHABLE:  # that broker is down right now
                    continue
                if 0 <= held < self.last[i]:
                    self.out_of_order.append(f"broker-{i + 1}: {self.last[i]} then {held}")
                if held >= 0 or self.last[i] < 0:
                    self.last[i] = held
                elif held < 0:
                    self.last[i] = -1  # wiped: nothing held, the next push brings the whole state
            self.samples += 1
            self.stopping.wait(0.05)


def broker_state(server: RedisServer, broker_id: int) -> Any:
    """The engine state of broker ``broker_id``, in its own Redis (short timeouts: it may be down)."""
    from engine.config import namespace_for_broker
    from engine.desired import NamespaceState

    client = redis.Redis.from_url(server.url, socket_connect_timeout=0.2, socket_timeout=0.5)
    return NamespaceState(client, namespace_for_broker(CLUSTER, broker_id), broker_id)


def wipe(server: RedisServer) -> None:
    """Remove a stopped Redis's data files (its AOF and RDB): it comes back empty."""
    for f in server.dir.glob("*"):
        if f.name not in ("redis.log", "redis.pid", "url"):
            shutil.rmtree(f) if f.is_dir() else f.unlink()


class Restore(threading.Thread):
    """Brings a stopped part back after ``delay_s`` (approvals go on meanwhile), or at once when ``now()`` is called."""

    def __init__(self, action: Any, delay_s: float) -> None:
        super().__init__(daemon=True)
        self.action, self.delay_s = action, delay_s
        self.wake = threading.Event()
        self.ended = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        self.wake.wait(self.delay_s)
        try:
            self.action()
        except BaseException as e:  # reported by finish()
            self.error = e
        self.ended = time.perf_counter()

    def now(self) -> float:
        self.wake.set()
        self.join()
        if self.error is not None:
            raise RuntimeError(f"restoring after a fault failed: {self.error!r}") from self.error
        return self.ended


class Faults:
    """Injects the faults; remembers when the last one ended (its part back up)."""

    def __init__(self, parts: dict[str, Any], rng: random.Random) -> None:
        self.redis: RedisServer = parts["redis"]
        self.brokers: list[RedisServer] = parts["brokers"]
        self.worker: BeatWorker = parts["worker"]
        self.replicas: list[Replica] = parts["replicas"]
        self.postgres: PostgresServer = parts["postgres"]
        self.kafka: KafkaTarget | None = parts.get("kafka")
        self.rng = rng
        self.counts: Counter[str] = Counter()
        self.last_end = time.perf_counter()
        self.pending: list[Restore] = []

    def _later(self, action: Any, delay_s: float) -> None:
        restore = Restore(action, delay_s)
        restore.start()
        self.pending.append(restore)

    def settle(self) -> None:
        """Every part that is down comes back now (a fault due while another runs is injected on a whole system)."""
        while self.pending:
            self.last_end = max(self.last_end, self.pending.pop().now())

    def inject(self, kind: str) -> None:
        self.settle()
        self.counts[kind] += 1
        if kind == "worker_sigkill":
            self.worker.kill()
            self.worker.start()
        elif kind == "redis_outage":
            self.redis.stop()
            self._later(self.redis.start, self.rng.uniform(1.0, 3.0))
            return
        elif kind in ("redis_restart", "redis_restart_wiped"):
            self.redis.stop()
            if kind == "redis_restart_wiped":
                wipe(self.redis)
            self.redis.start()
        elif kind == "replica_kill":
            replica = self.rng.choice(self.replicas)
            replica.kill()
            replica.start()  # back when uvicorn is up; the client uses the other replica meanwhile
            self._later(lambda: wait_answers(replica), 0.0)
            return
        elif kind == "postgres_restart":
            self.postgres.stop()  # fast shutdown: open sessions are cut
            self._later(self.postgres.start, self.rng.uniform(0.5, 2.0))
            return
        elif kind == "kafka_broker_kill":  # one KRaft node crashes; back after 1-3 s, once it has caught up
            assert self.kafka is not None
            node_id = self.rng.choice(self.kafka.node_ids())
            self.kafka.kill(node_id)
            self._later(lambda: self.kafka.restart(node_id), self.rng.uniform(1.0, 3.0))  # type: ignore[union-attr]
            return
        elif kind == "kafka_listener_refusing":  # its SASL listener: open connections cut, new ones refused 1-3 s
            assert self.kafka is not None
            relay = self.kafka.proxies[self.rng.choice(self.kafka.node_ids())]
            relay.refuse()
            self._later(relay.accept, self.rng.uniform(1.0, 3.0))
            return
        elif kind in ("kafka_controller_kill", "kafka_node_disk_lost"):
            assert self.kafka is not None
            if kind == "kafka_controller_kill":  # the quorum's leader crashes: the other two elect one
                node_id = self.kafka.controller()
                self.kafka.kill(node_id)
            else:  # its disk is replaced: an empty, formatted data directory
                node_id = self.rng.choice(self.kafka.node_ids())
                self.kafka.wipe(node_id)
            self._later(lambda: self.kafka.restart(node_id), self.rng.uniform(1.0, 3.0))  # type: ignore[union-attr]
            return
        elif kind == "kafka_password_rotated":  # the portal's secret changed in Kafka; in its file 1-3 s later
            assert self.kafka is not None
            password, delay = self.kafka.rotate(), self.rng.uniform(1.0, 3.0)
            self._later(lambda: self.kafka.install_once_refused(password, delay), 0.0)  # type: ignore[union-attr]
            return
        elif kind in ("broker_kill", "broker_restart_wiped", "broker_refusing"):
            broker = self.rng.choice(self.brokers)
            if kind == "broker_refusing":  # nothing listens on its port for 1-3 s: connections are refused
                broker.stop()
                self._later(broker.start, self.rng.uniform(1.0, 3.0))
                return
            kill_redis(broker)  # broker_kill: SIGKILL, restarted on its port with its data (AOF)
            if kind == "broker_restart_wiped":  # its data lost: the next push brings the whole state
                wipe(broker)
            broker.start()
        else:
            raise ValueError(f"no such fault: {kind}")
        self.last_end = time.perf_counter()

    def finish(self) -> None:
        self.settle()


def schedule(kinds: tuple[str, ...], n: int, rng: random.Random) -> list[str]:
    """``n`` fault kinds in a seeded order, every kind as often as ``n`` allows (``n // len(kinds)`` times each, the
    rest drawn without repeats), so a full run faces each kind the same number of times."""
    drawn = list(kinds) * (n // len(kinds)) + rng.sample(kinds, n % len(kinds))
    rng.shuffle(drawn)
    return drawn


def kill_redis(server: RedisServer) -> None:
    """SIGKILL a Redis the benchmark started: no shutdown save, what it acknowledged is in its AOF already."""
    if server.proc is not None:
        server.proc.kill()
        server.proc.wait()
        server.proc = None


def newest_version(cluster_id: int) -> int:
    """The cluster's newest desired-state version (a fresh database connection: the server may have restarted)."""
    from django.db import close_old_connections, connection

    from quotas.models import DesiredStateVersion

    close_old_connections()
    connection.close()
    return DesiredStateVersion.objects.get(cluster_id=cluster_id).version


def wait_converged(cluster_id: int, brokers: list[RedisServer], timeout_s: float,
                   kafka: tuple[KafkaTarget, int, dict[str, float]] | None = None) -> float:
    """Seconds until every engine broker holds the cluster's newest desired-state version and, with ``kafka``
    (the target, its cluster's id, the values approved on it), every Kafka broker answers every approved value and
    the portal has every push to it applied."""
    final = newest_version(cluster_id)
    states = [broker_state(s, b) for b, s in enumerate(brokers, start=1)]
    t0 = time.perf_counter()
    while True:
        try:
            if min(s.applied_version() for s in states) >= final:
                break
        except UNREACHABLE:
            pass
        if time.perf_counter() - t0 > timeout_s:
            held = [s.applied_version() for s in states]
            raise RuntimeError(f"not converged after {timeout_s:g} s: brokers hold {held}, desired {final}")
        time.sleep(0.05)
    if kafka is not None:
        target, kafka_id, expected = kafka
        while not target.holds_all(expected):
            if time.perf_counter() - t0 > timeout_s:
                raise RuntimeError(f"Kafka not converged after {timeout_s:g} s: some broker lacks an approved value")
            time.sleep(0.05)
        wait_kafka_pushes(kafka_id, max(1.0, timeout_s - (time.perf_counter() - t0)))
    return time.perf_counter() - t0


def verify(brokers: list[RedisServer], approved: list[int]) -> dict[str, Any]:
    """lost: approved values missing or different on a broker; double_applied: push-log applications of a version
    not newer than the one held (each log segment since the last wipe is checked as a chain). ``approved``: the
    indexes of the engine cluster's approvals."""
    expected = {field_of(i): repr(float(value_of(i))) for i in approved}
    lost, double, problems = 0, 0, []
    for b, server in enumerate(brokers, start=1):
        client = redis.Redis.from_url(server.url)
        held = {f.decode(): v.decode() for f, v in client.hgetall(config_key(CLUSTER, b)).items()}
        missing = [f for f, v in expected.items() if held.get(f) != v]
        lost += len(missing)
        if missing:
            problems.append(f"broker-{b}: {len(missing)} approved values missing or different, e.g. {missing[:3]}")
        history = broker_state(server, b).history()
        ok, why = chain_of(history)
        if not ok and "holds -1" not in why:
            problems.append(f"broker-{b}: {why}")
        double += sum(1 for p, r in zip(history, history[1:], strict=False) if r.version <= p.version)
    return {"lost": lost, "double_applied": double, "problems": problems}


def setup_portal(database_url: str, redis_url: str) -> dict[str, str]:
    """Point the portal's settings at the benchmark's PostgreSQL and Redis (environment, before Django reads it)."""
    env = {
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": database_url,
        "QUOTAS_REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "QUOTAS_RECONCILE_SECONDS": RECONCILE_S,
        "DJANGO_DEBUG": "0",  # DEBUG keeps every SQL query in memory: not what a deployment measures
        "DJANGO_LOG_LEVEL": "WARNING",
        "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
        "PYTHONUNBUFFERED": "1",
    }
    os.environ.update(env)
    import django

    django.setup()
    return env


def make_cluster(brokers: list[RedisServer]) -> Any:
    """An engine cluster of one broker per Redis: killing a broker's Redis is killing that broker."""
    from django.db import transaction

    from quotas.models import Broker, Cluster

    with transaction.atomic():
        cluster = Cluster.objects.create(name=CLUSTER, description="fault_bench", connector="engine")
        Broker.objects.bulk_create(
            Broker(cluster=cluster, broker_id=b, host=f"broker-{b}:9092", engine_url=s.url)
            for b, s in enumerate(brokers, start=1)
        )
    return cluster


def hostile(n: int) -> dict[str, Any]:
    """Hostile input against valid requests, through the WSGI app in-process (same database and Redis)."""
    from django.test import Client
    from django.test.utils import setup_test_environment

    from quotas.models import Tenant

    setup_test_environment()  # the test client's host ("testserver") allowed; nothing else changes
    logging.getLogger("django.request").setLevel(logging.ERROR)  # a WARNING line per refused request: 4xx expected
    member = Tenant.objects.get(name="team-f").members.get()
    client = Client(raise_request_exception=False)
    client.force_login(member)
    big = b"{" + b'"a":"' + b"x" * (5 * 1024 * 1024) + b'"}'
    long_id = {"cluster": CLUSTER, "user": "svc-f-1", "client_id": "c" * 5000, "key": "producer_byte_rate",
               "value": 1024}
    attacks = [
        lambda: client.post("/api/requests/", b"{not json", content_type="application/json"),
        lambda: client.post("/api/requests/", big, content_type="application/json"),
        lambda: client.post("/api/requests/", json.dumps(long_id), content_type="application/json"),
        lambda: client.post("/api/requests/", b"<xml/>", content_type="application/xml"),
        lambda: client.get("/api/nowhere/" + "z" * 2000),
        lambda: client.post(f"/api/clusters/{CLUSTER}/client-quotas/describe", b'{"components": [[[[',
                            content_type="application/json"),
    ]
    statuses: Counter[int] = Counter()
    not_json = 0
    t0 = time.perf_counter()
    for i in range(n):
        r = attacks[i % len(attacks)]()
        statuses[r.status_code] += 1
        if r.status_code >= 400 and "json" not in r.get("Content-Type", ""):
            not_json += 1
    hostile_s = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for _ in range(n):
        assert client.get("/api/requests/?page_size=1").status_code == 200
    valid_s = (time.perf_counter() - t0) / n
    return {
        "hostile_requests": n, "hostile_5xx": sum(c for s, c in statuses.items() if s >= 500),
        "hostile_not_json": not_json, "hostile_statuses": {str(k): v for k, v in sorted(statuses.items())},
        "hostile_ms": round(hostile_s * 1000, 2), "valid_ms": round(valid_s * 1000, 2),
        "hostile_cost_ratio": round(hostile_s / valid_s, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--approvals", type=int, default=1000)
    parser.add_argument("--clean", type=int, default=200, help="approvals of the no-fault baseline")
    parser.add_argument("--faults", type=int, default=140, help="faults, each kind as often as this allows "
                        "(140: ten of each of the 14 kinds; without Kafka, 15 or 16 of each of 9)")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--hostile", type=int, default=600)
    parser.add_argument("--no-kafka", dest="kafka", action="store_false",
                        help="the engine's brokers only: no Kafka cluster, no Kafka faults")
    parser.add_argument("--quick", action="store_true",
                        help="4 approvals per fault kind, one fault of each kind (14, or 9 without Kafka), 30 hostile")
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    args = parser.parse_args(argv)
    kinds = KINDS if args.kafka else ENGINE_KINDS
    if args.quick:
        args.approvals, args.clean, args.faults, args.hostile = 4 * len(kinds), 10, len(kinds), 30

    def cluster_of(i: int) -> str:
        """Approvals alternate between the engine cluster and the Kafka cluster (all engine without Kafka)."""
        return KAFKA_CLUSTER if args.kafka and i % 2 else CLUSTER

    def run(_: RedisServer, cleanups: list[Any]) -> dict[str, Any]:
        t_start = time.perf_counter()
        name = NAME + ("-quick" if args.quick else "")  # a quick run never shares a full run's servers
        run_dir = RUN_DIR / name
        run_dir.mkdir(parents=True, exist_ok=True)
        for log in run_dir.glob("*.log"):
            log.unlink()
        kafka: KafkaTarget | None = None
        if args.kafka:
            kafka = KafkaTarget(name)
            cleanups.append(kafka.stop)
            kafka.start()
        servers = [RedisServer(name=name, persist=True)]
        servers += [RedisServer(name=f"{name}-broker-{b}", persist=True) for b in range(1, BROKERS + 1)]
        for server in servers:
            shutil.rmtree(server.dir, ignore_errors=True)
            server.start()
            cleanups.append(server.stop)
        portal_redis, brokers = servers[0], servers[1:]
        postgres, migrated = fresh_postgres(name, CLUSTER)
        cleanups.append(postgres.stop)
        env = setup_portal(postgres.url, portal_redis.url)
        if not migrated:
            migrate()
            keep_template(postgres, CLUSTER)
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token

        from quotas.models import Cluster, OwnedName, Tenant

        if kafka is not None:  # its super user's password, where the portal's processes read it
            password = kafka.portal_env(Cluster(name=KAFKA_CLUSTER).password_env, run_dir / "kafka-password")
            env.update(password)
            os.environ.update(password)

        cluster = make_cluster(brokers)
        kafka_row = kafka.register() if kafka is not None else None
        users = get_user_model().objects
        admin, member = users.create_user("fb-admin", is_staff=True), users.create_user("fb-member")
        tenant = Tenant.objects.create(name="team-f")
        tenant.members.add(member)
        OwnedName.objects.create(tenant=tenant, entity_type="user", pattern="u*")
        OwnedName.objects.create(tenant=tenant, entity_type="user", pattern="svc-f-*")
        tokens = {u.username: Token.objects.create(user=u).key for u in (admin, member)}
        worker = BeatWorker(env, 1, run_dir / "worker.log").start()
        cleanups.append(worker.stop)
        replicas = [Replica(n, env, run_dir).start() for n in range(1, REPLICAS + 1)]
        for replica in replicas:
            cleanups.append(replica.stop)
        for replica in replicas:
            wait_answers(replica)
        portal = Portal(replicas, tokens["fb-member"], tokens["fb-admin"])
        wait_converged(cluster.pk, brokers, 120)  # the worker is up (version 0 pushed by reconcile or the first push)
        setup_s = time.perf_counter() - t_start

        total = args.clean + args.approvals
        engine_done = [i for i in range(total) if cluster_of(i) == CLUSTER]
        kafka_order = [i for i in range(total) if cluster_of(i) == KAFKA_CLUSTER]

        def kafka_until(n: int) -> tuple[KafkaTarget, int, dict[str, float]] | None:
            """What convergence waits for on Kafka after the first ``n`` approvals."""
            if kafka is None or kafka_row is None:
                return None
            return kafka, kafka_row.pk, {user_of(i): value_of(i) for i in kafka_order if i < n}

        t0 = time.perf_counter()
        for i in range(args.clean):
            portal.approve(i, cluster_of(i))
        clean_rate = args.clean / (time.perf_counter() - t0)
        wait_converged(cluster.pk, brokers, 120, kafka_until(args.clean))

        rng = random.Random(args.seed)
        if args.quick:  # one fault of each kind, in a seeded order, spread over the run
            drawn = rng.sample(kinds, len(kinds))
            at = {args.clean + (n + 1) * args.approvals // (len(drawn) + 1): [k] for n, k in enumerate(drawn)}
        else:
            at = {}
            for kind in schedule(kinds, args.faults, rng):
                at.setdefault(rng.randrange(args.clean, total), []).append(kind)
        parts = {"redis": portal_redis, "brokers": brokers, "worker": worker, "replicas": replicas,
                 "postgres": postgres, "kafka": kafka}
        faults = Faults(parts, rng)
        sampler = Sampler(brokers)
        sampler.start()
        kafka_sampler = KafkaSampler(kafka, [user_of(i) for i in kafka_order]) if kafka is not None else None
        if kafka_sampler is not None:
            kafka_sampler.start()
        portal.retries.clear()
        t0 = time.perf_counter()
        for i in range(args.clean, total):
            for kind in at.get(i, []):
                faults.inject(kind)
            portal.approve(i, cluster_of(i))
            if (i - args.clean + 1) % 100 == 0:
                print(f"{i - args.clean + 1} approvals, {sum(faults.counts.values())} faults", file=sys.stderr,
                      flush=True)
        faults.finish()
        faulted_rate = args.approvals / (time.perf_counter() - t0)
        last_fault = faults.last_end
        wait_converged(cluster.pk, brokers, 600, kafka_until(total))
        converge_s = time.perf_counter() - last_fault
        time.sleep(0.2)
        for thread in (sampler, kafka_sampler):
            if thread is not None and not thread.is_alive():
                raise RuntimeError("a version sampler stopped during the run: out_of_order would be undercounted")
        sampler.stopping.set()
        sampler.join()
        checked = verify(brokers, engine_done)
        by_target: dict[str, Any] = {"engine": {
            "approvals": len(engine_done), "lost": checked["lost"], "double_applied": checked["double_applied"],
            "out_of_order": len(sampler.out_of_order), "samples": sampler.samples,
        }}
        problems = checked["problems"][:5] + sampler.out_of_order[:5]
        if kafka is not None and kafka_sampler is not None and kafka_row is not None:
            time.sleep(3 * kafka_sampler.interval_s)  # a round of reads after convergence
            kafka_sampler.finish()
            expected = {user_of(i): value_of(i) for i in kafka_order}
            kafka_lost, kafka_problems = kafka.lost(expected)
            log = kafka.log_figures([user_of(i) for i in kafka_order])
            by_target["kafka"] = {
                "approvals": len(kafka_order), "lost": kafka_lost, "double_applied": log["double_applied"],
                "out_of_order": len(kafka_sampler.out_of_order) + log["out_of_order"],
                "out_of_order_seen": len(kafka_sampler.out_of_order), "out_of_order_in_log": log["out_of_order"],
                "quota_records": log["records"], "never_written": log["never_written"],
                "samples": kafka_sampler.samples, "reads": sum(kafka_sampler.reads.values()),
                "unreachable_reads": kafka_sampler.unreachable,
                "relay_cuts": sum(p.cut for p in kafka.proxies.values()),
                "auth_failures": kafka.auth_failures,
                **push_attempts(kafka_row.pk),
            }
            # zeros that count: the log holds every approval once and the sampler read every broker to the end
            blind = kafka_sampler.blind()
            if log["never_written"] or log["records"] != len(kafka_order):
                blind.append(f"metadata log: {log['records']} records of {len(kafka_order)} approvals read")
            by_target["kafka"]["unverified"] = blind
            problems += kafka_problems[:5] + log["problems"][:5] + kafka_sampler.out_of_order[:5] + blind[:5]
        summary: dict[str, Any] = {
            "bench": NAME, "seed": args.seed, "approvals": args.approvals, "clean_approvals": args.clean,
            "replicas": REPLICAS, "brokers": BROKERS, "kafka_brokers": len(kafka.node_ids()) if kafka else 0,
            "database": "postgresql", "setup_s": round(setup_s, 1), "template_database": migrated,
            "faults": sum(faults.counts.values()), "fault_counts": dict(faults.counts),
            "lost": sum(t["lost"] for t in by_target.values()),
            "double_applied": sum(t["double_applied"] for t in by_target.values()),
            "out_of_order": sum(t["out_of_order"] for t in by_target.values()), "converge_s": round(converge_s, 2),
            "by_target": by_target,
            "clean_approvals_per_s": round(clean_rate, 2), "faulted_approvals_per_s": round(faulted_rate, 2),
            "approval_ratio": round(faulted_rate / clean_rate, 3), "client_retries": dict(portal.retries),
            "samples": sampler.samples, "problems": problems,
        }
        summary.update(hostile(args.hostile))
        summary["target_met"] = (
            summary["lost"] == 0 and summary["double_applied"] == 0 and summary["out_of_order"] == 0
            and not by_target.get("kafka", {}).get("unverified")
            and summary["converge_s"] <= TARGET_CONVERGE_S and summary["hostile_5xx"] == 0
            and summary["hostile_not_json"] == 0
        )
        for key in ("lost", "double_applied", "out_of_order", "converge_s", "approval_ratio", "hostile_5xx",
                    "hostile_cost_ratio"):
            print(f"{key}: {summary[key]}", flush=True)
        return summary

    return run_bench(NAME + "-baseline-redis", args.check, run)


if __name__ == "__main__":
    sys.exit(main())
