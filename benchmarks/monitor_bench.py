#!/usr/bin/env python
"""End-to-end delay of live samples, engine to WebSocket clients, through the relay, against a trivial echo path.

    .venv/bin/python benchmarks/monitor_bench.py [--entities 1000] [--clients 20] [--seconds 30] [--warmup 5]
                                                 [--watch 5] [--types 1] [--brokers 3] [--client-procs 2]
                                                 [--phases ...] [--tap] [--no-deflate] [--quick] [--check] [--no-pin]

Everything is started by the benchmark and stopped on any exit (Ctrl-C and SIGTERM included): a private
redis-server, a throw-away SQLite database under ``.run/monitor-bench/`` (migrated; one engine cluster with
``--brokers`` brokers, 3 unless told, a staff user, 4 tenants with one member each), the portal
(``portal.asgi:application``) under uvicorn, the relay (``python manage.py relay``) and, for the baseline, a second
uvicorn serving ``echo_app`` of this module.

* publisher (stands for the brokers): one process that, once a second for each broker (the brokers 1/3 s
  apart), publishes one sample per entity and quota type (``--entities`` x ``--types``) through the engine's own
  ``Sampler.publish`` (firehose entry, per-entity streams, minute rollups, latest hash); each sample's ``t`` is
  the wall-clock ms at which it was published. Values are realistic (a tenth of the entities throttled).
* clients (stand for browsers): ``--clients`` WebSocket connections from ``--client-procs`` processes
  (python ``websockets``, asyncio, permessage-deflate as browsers offer it), logged in with a Django session
  cookie each (sessions made with the test client's ``force_login``), the Origin header the portal allows.
  A sample's delay = the client's wall clock when its frame came out of ``recv()`` minus the sample's ``t``
  (same machine, same clock); every sample published with ``t`` in the window (after ``--warmup`` s, for
  ``--seconds`` s) counts. A client stops once it got a frame from after the window from every broker (the
  streams are in order), or 5 s after the window; samples of the window it did not get are reported as missing.

Phases (each on fresh connections):

* ``echo_cluster`` (the baseline, measured first and last; ratios use the mean of both): the same clients
  on a trivial ASGI WebSocket app under the same uvicorn, pinned the same way; per socket, after its
  ``subscribe_cluster``, a raw ``XREAD BLOCK`` tail of the firehose forwards each entry's JSON verbatim inside
  ``{"type": "batch", ...}``: no relay, no channel layer, no session lookup, no permission filter, no re-encoding;
* ``relay_cluster``: the portal's ``/ws/monitor/`` as admins, ``subscribe_cluster``: what the issue asks
  (target: p99 < 1,000 ms), with the relay's CPU (from /proc, over the window) as a fraction of one core;
* ``echo_entities`` / ``relay_entities``: each client ``subscribe``s to ``--watch`` entities (distinct across
  clients); the echo tails those entities' own streams, the portal answers with backfill, then ``points``;
* ``relay_members``: the same as ``relay_cluster`` with each client a member of one of 4 tenants (a tenth of
  the entities each), so the consumer filters every batch; expected counts come from ``entity_owned`` (each
  tenant's ``TenantPatterns``).

On 2+ CPUs the servers under test (uvicorn, the relay) get CPU 0, everything standing for the outside (Redis,
publisher, clients) the others (``--no-pin`` leaves placement to the kernel). Each phase prints p50/p99/max
delay, samples received against expected, the relay's, uvicorn's, Redis's, the publisher's and the clients'
CPU (from /proc and ``INFO cpu``, over the window), how long ``Sampler.publish`` took (inside every delay, the
baseline's too) and the load average (other work on the machine shows in every figure). ``--tap`` adds, in
``relay_cluster``, a plain channel-layer member of the cluster's group in a process of its own, timed the same
way: publish -> relay -> layer, without uvicorn, the consumer or the socket. ``--no-deflate``: clients that do
not offer permessage-deflate (uvicorn's CPU without compression). The last line of output is one JSON object;
``--check`` exits 1 when the target is missed (p99 >= 1 s, or any sample missing, in ``relay_cluster``).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from the repo root: make `portal`, `quotas`, `devtools` importable
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import http.client  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import multiprocessing as mp  # noqa: E402
import os  # noqa: E402
import queue  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from importlib.metadata import version as package_version  # noqa: E402
from typing import Any  # noqa: E402

import redis  # noqa: E402

from benchmarks.api_bench import remove_database  # noqa: E402
from benchmarks.engine_bench import _collect, server_cpu_s  # noqa: E402
from benchmarks.harness import SessionProcess, run_bench, tree_cpu_s  # noqa: E402
from devtools.redis_server import RUN_DIR, RedisServer, free_port  # noqa: E402
from engine.monitor import entity_key, firehose_key  # noqa: E402

CLUSTER = "monbench"
BROKERS_ENV = "MONITOR_BENCH_BROKERS"  # --brokers, told to the spawned processes (clients, publisher) too
BROKERS = int(os.environ.get(BROKERS_ENV) or 3)
QUOTA_TYPES = ("produce", "fetch", "request")
TENANTS = 4  # team-k owns users user-00k* and client-ids client-00k*: a tenth of 1,000 entities each
BENCH_DIR = RUN_DIR / "monitor-bench"
ADMIN = "mon-admin"
GRACE_S = 5.0  # a sample not received this long after the window closed counts as missing
READY_TIMEOUT_S = 60.0
THROTTLED_SHARE = 0.1
TARGET_P99_MS = 1000.0  # from the issue: engine sample -> client, p99 < 1 s
ECHO_REDIS_ENV = "MONITOR_BENCH_REDIS_URL"
ECHO_TYPES_ENV = "MONITOR_BENCH_TYPES"

PHASES = ("echo_cluster", "echo_entities", "relay_cluster", "relay_entities", "relay_members", "echo_cluster_end")
LABELS = {
    "echo_cluster": "trivial echo: raw XREAD of the firehose per socket, forwarded verbatim (baseline)",
    "echo_entities": "trivial echo: raw XREAD of the watched entities' streams per socket",
    "relay_cluster": "relay -> channel layer -> /ws/monitor/, admins, subscribe_cluster",
    "relay_entities": "relay -> channel layer -> /ws/monitor/, admins, subscribe to entities",
    "relay_members": "relay -> channel layer -> /ws/monitor/, tenant members, subscribe_cluster (filtered)",
    "echo_cluster_end": "trivial echo again (baseline, last)",
}


# ---- entities and samples ---------------------------------------------------------------------------------


def entity_names(n: int) -> list[tuple[str, str | None]]:
    """(user, client-id or None) of the active entities: a fifth on a user-level quota, the rest per client."""
    return [(f"user-{i:05d}", None if i % 5 == 0 else f"client-{i:05d}") for i in range(n)]


def tags_of(user: str, client_id: str | None) -> str:
    """Kafka's sensor tags of the entity (the names here need no sanitizing)."""
    return f"{user}:{client_id or ''}"


def types_of(i: int, types: int) -> list[str]:
    return [QUOTA_TYPES[(i + k) % len(QUOTA_TYPES)] for k in range(types)]


@dataclass
class SampleMaker:
    """Realistic samples of one broker's active sensors, a random walk from tick to tick."""

    cluster: str
    broker: int
    entities: int
    types: int
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self.rng.seed(1000 + self.broker)
        self.sensors: list[dict[str, Any]] = []
        for i, (user, client_id) in enumerate(entity_names(self.entities)):
            throttled = self.rng.random() < THROTTLED_SHARE
            for q in types_of(i, self.types):
                bound = float(self.rng.choice((1, 2, 4, 8, 16, 64)) * 1_048_576) if q != "request" else 50.0
                util = self.rng.uniform(1.05, 1.6) if throttled else self.rng.uniform(0.01, 0.9)
                self.sensors.append({"q": q, "e": tags_of(user, client_id), "bound": bound, "util": util,
                                     "throttled": throttled})  # fmt: skip

    def tick(self, now_ms: int) -> list[dict[str, Any]]:
        rnd = self.rng.random
        out = []
        for s in self.sensors:
            util = max(0.0, s["util"] * (0.9 + 0.2 * rnd()))
            s["util"] = util if s["throttled"] or util < 0.95 else 0.5
            rate = util * s["bound"]
            thr = (util - 1.0) * 1000.0 if util > 1.0 else 0.0
            out.append({
                "t": now_ms, "c": self.cluster, "b": self.broker, "q": s["q"], "e": s["e"], "bound": s["bound"],
                "rate": rate, "util": util, "thr_avg": thr, "thr_max": thr * 1.2, "thr_frac": min(1.0, thr / 1000.0),
            })  # fmt: skip
        return out


def _publisher(url: str, cluster: str, entities: int, types: int, stop: Any, records: Any) -> None:
    """The brokers: each publishes its samples once a second through ``Sampler.publish``, 1/BROKERS s apart."""
    from engine.monitor import Sampler

    try:
        client = redis.Redis.from_url(url)
        samplers = [Sampler(client, cluster, b, managers={}) for b in range(1, BROKERS + 1)]
        makers = [SampleMaker(cluster, b, entities, types) for b in range(1, BROKERS + 1)]
        base = math.ceil(time.time()) + 0.5
        k = 0
        while not stop.is_set():
            for b in range(BROKERS):
                due = base + k + b / BROKERS
                delay = due - time.time()
                if delay > 0 and stop.wait(delay):
                    return
                now_ms = int(time.time() * 1000)
                samples = makers[b].tick(now_ms)
                t0 = time.perf_counter()
                samplers[b].publish(samples, now_ms)
                records.put((b + 1, now_ms, len(samples), time.perf_counter() - t0))
            k += 1
            if time.time() > base + k + 1:  # fell behind by more than a tick: skip ahead rather than burst
                k = int(time.time() - base)
    except KeyboardInterrupt:
        pass


class Publisher:
    def __init__(self, url: str, entities: int, types: int) -> None:
        ctx = mp.get_context("spawn")
        self.stop_event = ctx.Event()
        self.records_q = ctx.Queue()
        self.records: list[tuple[int, int, int, float]] = []
        self.proc = ctx.Process(
            target=_publisher, args=(url, CLUSTER, entities, types, self.stop_event, self.records_q), daemon=True
        )

    def start(self) -> Publisher:
        self.proc.start()
        return self

    def drain(self) -> list[tuple[int, int, int, float]]:
        while True:
            try:
                self.records.append(self.records_q.get_nowait())
            except queue.Empty:
                break
        if self.proc.exitcode not in (None, 0):
            raise RuntimeError(f"the publisher exited with code {self.proc.exitcode}")
        return self.records

    def cpu_s(self) -> float:
        return tree_cpu_s(self.proc.pid) if self.proc.pid else 0.0

    def stop(self) -> None:
        self.stop_event.set()
        self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=5)


# ---- the baseline: a trivial WebSocket echo of the streams -----------------------------------------------


async def echo_app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
    """ASGI app of the baseline: per socket, tail the firehose (``subscribe_cluster``) or the entities' streams
    (``subscribe``) with a raw ``XREAD BLOCK`` and forward each entry's JSON as it is, in the contract's frames."""
    if scope["type"] == "http":  # readiness probe
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    if scope["type"] != "websocket":
        return
    import redis.asyncio as aredis

    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    client = aredis.Redis.from_url(os.environ[ECHO_REDIS_ENV])
    types = os.environ.get(ECHO_TYPES_ENV, ",".join(QUOTA_TYPES)).split(",")
    streams: dict[str, bytes | str] = {}  # key -> last id read
    frames: dict[str, tuple[str, str]] = {}  # key -> (frame head, frame tail) around the entry's JSON
    changed = asyncio.Event()

    async def last_id(key: str) -> bytes | str:
        rows = await client.xrevrange(key, count=1)
        return rows[0][0] if rows else f"{int(time.time() * 1000)}-0"

    async def tail() -> None:
        while True:
            if not streams:
                await changed.wait()
            changed.clear()
            found = await client.xread(dict(streams), block=1000)
            for key, entries in found:
                name = key.decode()
                head, end = frames[name]
                streams[name] = entries[-1][0]
                if end == "}":  # the firehose: one frame per broker tick, its JSON list as it is
                    for _id, fields in entries:
                        await send({"type": "websocket.send", "text": head + fields[b"d"].decode() + end})
                else:  # an entity's stream: its new samples in one frame
                    body = ",".join(fields[b"d"].decode() for _id, fields in entries)
                    await send({"type": "websocket.send", "text": head + body + end})

    task = asyncio.create_task(tail())
    try:
        while True:
            event = await receive()
            if event["type"] == "websocket.disconnect":
                break
            if task.done():
                task.result()  # re-raise the tail's error
            msg = json.loads(event.get("text") or "{}")
            cluster = msg.get("cluster", "")
            if msg.get("action") == "subscribe_cluster":
                key = firehose_key(cluster)
                frames[key] = (f'{{"type":"batch","cluster":{json.dumps(cluster)},"samples":', "}")
                streams[key] = await last_id(key)
            elif msg.get("action") == "subscribe":
                entity = msg["entity"]
                for q in types:
                    key = entity_key(cluster, q, entity)
                    head = f'{{"type":"points","cluster":{json.dumps(cluster)},"entity":{json.dumps(entity)},"points":['
                    frames[key] = (head, "]}")
                    streams[key] = await last_id(key)
                await send({"type": "websocket.send", "text": json.dumps({"type": "subscribed", "cluster": cluster,
                                                                          "entity": entity})})  # fmt: skip
            changed.set()
    finally:
        task.cancel()
        try:
            await task
        except BaseException:  # noqa: B036 - cancelled, or the error already raised above
            pass
        await client.aclose()


# ---- servers ----------------------------------------------------------------------------------------------


class Service(SessionProcess):
    """A server process in its own session (uvicorn, the relay), so stopping it stops its children too."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.cmd = cmd
        self.env = env
        super().__init__(log_path)

    def start(self, cpus: set[int] | None = None) -> Service:
        mine = os.sched_getaffinity(0) if cpus is not None else None
        if cpus is not None:
            os.sched_setaffinity(0, cpus)  # the server inherits it, every thread of it
        try:
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(
                    self.cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
        finally:
            if mine is not None:
                os.sched_setaffinity(0, mine)
        return self

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with code {self.proc.returncode}:\n{self.log_tail()}")

    def wait_http(self, port: int, path: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", path)
                status = conn.getresponse().status
                conn.close()
                if status == 200:
                    return
                raise RuntimeError(f"{self.name}: GET {path} answered {status}:\n{self.log_tail()}")
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not answer within {timeout_s:g} s:\n{self.log_tail()}")


def uvicorn_cmd(app: str, port: int) -> list[str]:
    return [
        sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--lifespan", "off", "--no-access-log", "--log-level", "warning",
    ]  # fmt: skip


# ---- database ---------------------------------------------------------------------------------------------


def setup_django(db_path: Path, redis_url: str) -> dict[str, str]:
    """Point the portal's settings at the throw-away database and Redis (environment, before Django reads it)."""
    env = {
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": f"sqlite:///{db_path}",
        "QUOTAS_REDIS_URL": redis_url,
        "DJANGO_DEBUG": "0",
        "DJANGO_LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    import django

    django.setup()
    return env


@dataclass
class Accounts:
    admin_cookies: list[str]
    member_cookies: list[str]
    member_visible: list[int]  # per member cookie: how many of the samples of a broker tick it may see


def build_database(clients: int, entities: int, types: int, redis_url: str) -> tuple[Accounts, float]:
    """Migrate; the cluster and its brokers; a staff user and one session per client; tenants and members."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections, transaction
    from django.test import Client

    from quotas.choices import EntityType
    from quotas.models import Broker, Cluster, OwnedName, Tenant
    from quotas.models.tenants import TenantPatterns, entity_owned

    t0 = time.perf_counter()
    call_command("migrate", interactive=False, verbosity=0)
    users = get_user_model().objects
    with transaction.atomic():
        cluster = Cluster.objects.create(name=CLUSTER, description="monitor_bench", connector="engine")
        Broker.objects.bulk_create(
            Broker(cluster=cluster, broker_id=i, host=f"broker-{i}:9092", engine_url=redis_url)
            for i in range(1, BROKERS + 1)
        )
        admin = users.create_user(ADMIN, password="x", is_staff=True)
        tenants = []
        for k in range(TENANTS):
            tenant = Tenant.objects.create(name=f"team-{k}")
            OwnedName.objects.create(tenant=tenant, entity_type=EntityType.USER, pattern=f"user-00{k}*")
            OwnedName.objects.create(tenant=tenant, entity_type=EntityType.CLIENT_ID, pattern=f"client-00{k}*")
            tenants.append(tenant)
        members = []
        for k, tenant in enumerate(tenants):
            member = users.create_user(f"mon-member-{k}", password="x")
            tenant.members.add(member)
            members.append(member)
    names = entity_names(entities)
    # each tenant's patterns read once (a query per entity took minutes at 100,000 entities)
    patterns = [TenantPatterns(t) for t in tenants]
    visible = [
        sum(len(types_of(i, types)) for i, (u, c) in enumerate(names) if entity_owned(t, u, c)) * BROKERS
        for t in patterns
    ]

    def session(user: Any) -> str:
        c = Client()
        c.force_login(user)
        return c.cookies["sessionid"].value

    admin_cookies = [session(admin) for _ in range(clients)]
    member_cookies = [session(members[j % TENANTS]) for j in range(clients)]
    accounts = Accounts(admin_cookies, member_cookies, [visible[j % TENANTS] for j in range(clients)])
    connections.close_all()
    return accounts, time.perf_counter() - t0


# ---- clients ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientSpec:
    index: int
    cookie: str
    subscriptions: list[str]  # JSON frames sent after connecting
    live: str  # "batch" or "points": the frames whose samples are timed


def _client_proc(
    pidx: int, url: str, origin: str, specs: list[ClientSpec], deflate: bool, ready: Any, ctl: Any, results: Any
) -> None:
    """One process of asyncio WebSocket clients: connect, subscribe, report ready, time the window's samples."""
    try:
        out = asyncio.run(_clients(pidx, url, origin, specs, deflate, ready, ctl))
        results.put({"pidx": pidx, "clients": out})
    except KeyboardInterrupt:
        pass
    except BaseException:
        results.put({"pidx": pidx, "error": traceback.format_exc()})
        ready.put(-1)


async def _clients(
    pidx: int, url: str, origin: str, specs: list[ClientSpec], deflate: bool, ready: Any, ctl: Any
) -> list[Any]:
    from websockets.asyncio.client import connect

    window: list[tuple[float, float]] = []  # set once: (start ms, end ms)
    firsts = [asyncio.Event() for _ in specs]

    async def one(spec: ClientSpec, first: asyncio.Event) -> dict[str, Any]:
        delays: Counter[int] = Counter()  # delay in 0.1 ms -> samples
        other: Counter[str] = Counter()
        frames = nbytes = 0
        past: set[int] = set()  # brokers with a frame after the window: done once every broker has one
        ticks: dict[int, list[float]] = {}  # t -> [first, last] delay of its samples here (ms)
        key = "samples" if spec.live == "batch" else "points"
        async with connect(
            url, origin=origin, additional_headers={"Cookie": f"sessionid={spec.cookie}"}, max_size=None,
            ping_interval=None, proxy=None, open_timeout=30, compression="deflate" if deflate else None,
        ) as ws:  # fmt: skip
            for frame in spec.subscriptions:
                await ws.send(frame)
            while True:
                if window and time.time() * 1000 > window[0][1] + GRACE_S * 1000:
                    break
                try:
                    raw = await asyncio.wait_for(ws.recv(), 0.5)
                except TimeoutError:
                    continue
                now = time.time() * 1000
                msg = json.loads(raw)
                kind = msg.get("type")
                if kind == spec.live:
                    first.set()
                    if not window:
                        continue
                    start, end = window[0]
                    counted = 0
                    points = msg[key]
                    for t, n in Counter(p["t"] for p in points).items():
                        if start <= t < end:
                            d = now - t
                            delays[round(d * 10)] += n
                            counted += n
                            span = ticks.get(t)
                            if span is None:
                                ticks[t] = [d, d]
                            elif d > span[1]:
                                span[1] = d
                        elif t >= end:  # this broker's ticks of the window came before (each stream is in order)
                            past.update(p["b"] for p in points if p["t"] >= end)
                    if counted:
                        frames += 1
                        nbytes += len(raw)
                    if len(past) >= BROKERS:
                        break
                elif kind == "error":
                    raise RuntimeError(f"client {spec.index}: the server answered {raw[:500]}")
                else:
                    other[kind] += 1
        return {"index": spec.index, "delays": dict(delays), "frames": frames, "bytes": nbytes, "other": dict(other),
                "ticks": ticks}  # fmt: skip

    tasks = [asyncio.create_task(one(s, f)) for s, f in zip(specs, firsts, strict=True)]
    all_first = asyncio.create_task(asyncio.wait([asyncio.create_task(f.wait()) for f in firsts]))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all_first.done():
        for t in tasks:
            if t.done():
                t.result()  # a client that ended before being ready: its error
                raise RuntimeError(f"a client of process {pidx} closed before its first live frame")
        if time.monotonic() > deadline:
            waiting = [s.index for s, f in zip(specs, firsts, strict=True) if not f.is_set()]
            raise RuntimeError(f"clients {waiting} got no live frame within {READY_TIMEOUT_S:g} s")
        await asyncio.sleep(0.05)
    ready.put(pidx)
    while not window:
        try:
            window.append(ctl.get_nowait())
        except queue.Empty:
            await asyncio.sleep(0.02)
    return list(await asyncio.gather(*tasks))


def _tap_proc(pidx: int, redis_url: str, cluster: str, ready: Any, ctl: Any, results: Any) -> None:
    """A channel-layer member of the cluster's group in a process of its own: what the relay delivers to the layer,
    timed as the clients time it (no uvicorn, no consumer, no WebSocket)."""
    try:
        out = asyncio.run(_tap(pidx, redis_url, cluster, ready, ctl))
        results.put({"pidx": pidx, "clients": [], "tap": out})
    except KeyboardInterrupt:
        pass
    except BaseException:
        results.put({"pidx": pidx, "error": traceback.format_exc()})
        ready.put(-1)


async def _tap(pidx: int, redis_url: str, cluster: str, ready: Any, ctl: Any) -> dict[str, Any]:
    from channels_redis.core import RedisChannelLayer

    from telemetry_ui.live.monitoring import cluster_group

    layer = RedisChannelLayer(hosts=[redis_url])
    channel = await layer.new_channel()
    group = cluster_group(cluster)
    await layer.group_add(group, channel)
    delays: Counter[int] = Counter()
    ticks: dict[int, float] = {}  # t -> delay (ms)
    past: set[int] = set()
    window: tuple[float, float] | None = None
    deadline = time.monotonic() + READY_TIMEOUT_S
    try:
        first = False
        while True:
            if window is None and first:
                try:
                    window = ctl.get_nowait()
                except queue.Empty:
                    pass
            if window is not None and time.time() * 1000 > window[1] + GRACE_S * 1000:
                break
            if not first and time.monotonic() > deadline:
                raise RuntimeError(f"the channel-layer tap got nothing within {READY_TIMEOUT_S:g} s")
            try:
                msg = await asyncio.wait_for(layer.receive(channel), 0.5)
            except TimeoutError:
                continue
            now = time.time() * 1000
            if msg.get("type") != "mon.batch":
                continue
            if not first:
                first = True
                ready.put(pidx)
            if window is None:
                continue
            for t, n in Counter(p["t"] for p in msg["samples"]).items():
                if window[0] <= t < window[1]:
                    delays[round((now - t) * 10)] += n
                    ticks[t] = now - t
                elif t >= window[1]:
                    past.update(p["b"] for p in msg["samples"] if p["t"] >= window[1])
            if len(past) >= BROKERS:
                break
    finally:
        await layer.group_discard(group, channel)
        await layer.close_pools()
    return {"delays": dict(delays), "ticks": ticks}


# ---- phases -----------------------------------------------------------------------------------------------


@dataclass
class Env:
    args: argparse.Namespace
    portal: Service
    portal_port: int
    echo: Service
    echo_port: int
    relay: Service | None
    publisher: Publisher
    client: redis.Redis
    accounts: Accounts
    client_cpus: set[int] | None
    redis_url: str


def weighted_percentile(pairs: list[tuple[float, int]], total: int, p: float) -> float:
    """Nearest-rank percentile over (value, count) pairs sorted by value."""
    rank = max(1, math.ceil(p / 100.0 * total))
    seen = 0
    for value, n in pairs:
        seen += n
        if seen >= rank:
            return value
    return pairs[-1][0] if pairs else math.nan


def specs_for(phase: str, env: Env) -> tuple[list[ClientSpec], list[int]]:
    """The clients of a phase and, per client, the samples of one broker tick it should receive."""
    args, accounts = env.args, env.accounts
    sub_cluster = json.dumps({"action": "subscribe_cluster", "cluster": CLUSTER})
    names = entity_names(args.entities)
    per_tick = args.entities * args.types * BROKERS
    specs, expected = [], []
    for j in range(args.clients):
        if phase.endswith("entities"):
            stride = max(1, args.entities // (args.clients * args.watch))
            picks = sorted({(j * args.watch + k) * stride % args.entities for k in range(args.watch)})
            subs = [json.dumps({"action": "subscribe", "cluster": CLUSTER, "entity": tags_of(*names[i])})
                    for i in picks]  # fmt: skip
            specs.append(ClientSpec(j, accounts.admin_cookies[j], subs, "points"))
            expected.append(sum(len(types_of(i, args.types)) for i in picks) * BROKERS)
        elif phase == "relay_members":
            specs.append(ClientSpec(j, accounts.member_cookies[j], [sub_cluster], "batch"))
            expected.append(accounts.member_visible[j])
        else:
            specs.append(ClientSpec(j, accounts.admin_cookies[j], [sub_cluster], "batch"))
            expected.append(per_tick)
    return specs, expected


def run_phase(phase: str, env: Env) -> dict[str, Any]:
    args = env.args
    port = env.echo_port if phase.startswith("echo") else env.portal_port
    url, origin = f"ws://127.0.0.1:{port}/ws/monitor/", f"http://127.0.0.1:{port}"
    specs, expected_per_tick = specs_for(phase, env)
    ctx = mp.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    nproc = max(1, min(args.client_procs, len(specs)))
    tap = args.tap and phase == "relay_cluster"
    ctls = [ctx.Queue() for _ in range(nproc + tap)]
    procs = [
        ctx.Process(target=_client_proc, daemon=True,
                    args=(p, url, origin, specs[p::nproc], args.deflate, ready, ctls[p], results))
        for p in range(nproc)
    ]  # fmt: skip
    if tap:
        procs.append(ctx.Process(target=_tap_proc, daemon=True,
                                 args=(nproc, env.redis_url, CLUSTER, ready, ctls[nproc], results)))  # fmt: skip
    if env.client_cpus is not None:
        os.sched_setaffinity(0, env.client_cpus)
    outs: list[dict[str, Any]] = []
    try:
        for p in procs:
            p.start()
        got = _collect(ready, procs, len(procs), READY_TIMEOUT_S + 60)
        if -1 in got:
            errors = [r["error"] for r in _collect(results, procs, 1, 10) if "error" in r]
            for svc in (env.portal, env.relay):
                if svc is not None:
                    errors.append(f"{svc.name} log:\n{svc.log_tail()}")
            raise RuntimeError(f"{phase}: a client failed:\n" + "\n".join(errors))
        start_ms = time.time() * 1000 + args.warmup * 1000
        end_ms = start_ms + args.seconds * 1000
        for q in ctls:
            q.put((start_ms, end_ms))
        time.sleep(max(0.0, start_ms / 1000 - time.time()))
        cpu0 = cpu_snapshot(env, procs[:nproc])
        time.sleep(max(0.0, end_ms / 1000 - time.time()))
        cpu1 = cpu_snapshot(env, procs[:nproc])
        outs = _collect(results, procs, len(procs), GRACE_S + 120)
        for p in procs:
            p.join(timeout=10)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    errors = [o["error"] for o in outs if "error" in o]
    if errors:
        raise RuntimeError(f"{phase}: a client failed:\n" + "\n".join(errors))
    for svc in (env.portal, env.echo, env.relay):
        if svc is not None:
            svc.check()

    records = [r for r in env.publisher.drain() if start_ms <= r[1] < end_ms]
    ticks = len(records)
    clients = sorted((c for o in outs for c in o["clients"]), key=lambda c: c["index"])
    hist: Counter[int] = Counter()
    for c in clients:
        hist.update({int(k): v for k, v in c["delays"].items()})
    pairs = sorted((k / 10.0, n) for k, n in hist.items())
    received = sum(hist.values())
    expected = sum(e * ticks // BROKERS for e in expected_per_tick)
    per_tick_all = args.entities * args.types * BROKERS
    elapsed = (cpu1["t"] - cpu0["t"]) or 1.0
    cpu = {k: (cpu1[k] - cpu0[k]) / elapsed for k in cpu0 if k != "t"}
    publish_ms = sorted(r[3] * 1000 for r in records)
    tap_ticks: dict[int, float] = {}
    for o in outs:
        if "tap" in o:
            tap_ticks = {int(t): d for t, d in o["tap"]["ticks"].items()}
    spans: dict[int, list[float]] = {}
    for c in clients:
        for t, (lo, hi) in c["ticks"].items():
            span = spans.setdefault(int(t), [lo, hi])
            span[0], span[1] = min(span[0], lo), max(span[1], hi)
    published = {r[1]: r for r in records}
    slowest = [
        {"t_s": round((t - start_ms) / 1000, 2), "broker": published[t][0] if t in published else None,
         "publish_ms": round(published[t][3] * 1000, 1) if t in published else None,
         "tap_ms": round(tap_ticks[t], 1) if t in tap_ticks else None,
         "first_ms": round(lo, 1), "last_ms": round(hi, 1)}
        for t, (lo, hi) in sorted(spans.items(), key=lambda kv: -kv[1][1])[:3]
    ]  # fmt: skip
    tapped: dict[str, float] = {}
    for o in outs:
        if "tap" in o:
            th = sorted((int(k) / 10.0, n) for k, n in o["tap"]["delays"].items())
            n_tap = sum(n for _d, n in th)
            tapped = {
                "tap_p50_ms": weighted_percentile(th, n_tap, 50),
                "tap_p99_ms": weighted_percentile(th, n_tap, 99),
                "tap_received": n_tap,
                "tap_expected": per_tick_all * ticks // BROKERS,
            }
    return {
        **tapped,
        "phase": phase,
        "clients": len(specs),
        "ticks": ticks,
        "expected": expected,
        "received": received,
        "missing": max(0, expected - received),
        "p50_ms": weighted_percentile(pairs, received, 50),
        "p99_ms": weighted_percentile(pairs, received, 99),
        "max_ms": pairs[-1][0] if pairs else math.nan,
        "frames": sum(c["frames"] for c in clients),
        "mb_per_s": sum(c["bytes"] for c in clients) / elapsed / 1e6,
        "publish_ms_p50": publish_ms[len(publish_ms) // 2] if publish_ms else math.nan,
        "publish_ms_p99": publish_ms[min(len(publish_ms) - 1, math.ceil(0.99 * len(publish_ms)) - 1)]
        if publish_ms
        else math.nan,
        "cpu": cpu,
        "other": dict(sum((Counter(c["other"]) for c in clients), Counter())),
        "slowest": slowest,
    }


def cpu_snapshot(env: Env, procs: list[Any]) -> dict[str, float]:
    return {
        "t": time.monotonic(),
        "relay": env.relay.cpu_s() if env.relay is not None else 0.0,
        "uvicorn": env.portal.cpu_s(),
        "echo": env.echo.cpu_s(),
        "redis": server_cpu_s(env.client),
        "publisher": env.publisher.cpu_s(),
        "clients": sum(tree_cpu_s(p.pid) for p in procs if p.pid),
    }


def report(r: dict[str, Any], baseline: dict[str, Any] | None) -> None:
    cpu = r["cpu"]
    server = "echo" if r["phase"].startswith("echo") else "uvicorn"
    line = (
        f"{r['phase']:<16} p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  max {r['max_ms']:7.1f} ms  "
        f"{r['received']:,}/{r['expected']:,} samples ({r['missing']:,} missing) in {r['frames']:,} frames "
        f"{r['mb_per_s']:.1f} MB/s; CPU (cores): relay {cpu['relay']:.3f}, {server} {cpu[server]:.3f}, "
        f"redis {cpu['redis']:.3f}, publisher {cpu['publisher']:.3f} (publish p50 {r['publish_ms_p50']:.1f} ms, p99 "
        f"{r['publish_ms_p99']:.1f} ms), "
        f"clients {cpu['clients']:.3f}; load average {r['loadavg']:.2f}"
    )
    if baseline is not None:
        line += f"  (p99 {r['p99_ms'] / baseline['p99_ms']:.1f} x baseline)"
    print(line, flush=True)
    if "tap_p50_ms" in r:
        print(
            f"{'':<16} channel-layer tap (a group member in a process of its own: publish -> relay -> layer): p50 "
            f"{r['tap_p50_ms']:.1f} ms  p99 {r['tap_p99_ms']:.1f} ms  {r['tap_received']:,}/{r['tap_expected']:,} "
            "samples",
            flush=True,
        )
    if r["slowest"]:
        parts = [
            f"at +{w['t_s']:g} s broker {w['broker']}: publish {w['publish_ms']} ms"
            + (f", layer {w['tap_ms']} ms" if w["tap_ms"] is not None else "")
            + f", clients {w['first_ms']}-{w['last_ms']} ms"
            for w in r["slowest"]
        ]
        print(f"{'':<16} slowest ticks (delay from t): " + "; ".join(parts), flush=True)
    if r["other"]:
        print(f"{'':<16} other frames: {r['other']}", flush=True)


# ---- main -------------------------------------------------------------------------------------------------


def pin(wanted: bool) -> tuple[set[int], set[int]] | None:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else []
    if not wanted or len(cpus) < 2:
        return None
    return {cpus[0]}, set(cpus[1:])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entities", type=int, default=None, help="active entities (default 1000; --quick 400)")
    parser.add_argument("--types", type=int, default=1, choices=(1, 2, 3), help="quota types sampled per entity")
    parser.add_argument(
        "--brokers", type=int, default=BROKERS,
        help=f"brokers publishing each entity's samples once a second, 1/brokers s apart (default {BROKERS})",
    )  # fmt: skip
    parser.add_argument("--clients", type=int, default=None, help="WebSocket clients (default 20; --quick 4)")
    parser.add_argument("--client-procs", type=int, default=None, help="client processes (default 2; --quick 1)")
    parser.add_argument("--watch", type=int, default=5, help="entities each client subscribes to in *_entities")
    parser.add_argument("--seconds", type=float, default=None, help="measured window per phase (default 30)")
    parser.add_argument("--warmup", type=float, default=None, help="seconds before each window (default 5)")
    parser.add_argument(
        "--phases", default=",".join(PHASES),
        help="comma-separated phases to run, in the default order (default: all; --quick leaves out echo_cluster_end)",
    )  # fmt: skip
    parser.add_argument(
        "--tap", action="store_true",
        help="in relay_cluster, also time the batches as a channel-layer group member in a process of its own "
        "receives them (publish -> relay -> layer, without uvicorn), to split the delay",
    )  # fmt: skip
    parser.add_argument(
        "--no-deflate", dest="deflate", action="store_false",
        help="clients do not offer permessage-deflate (browsers do, so it is on by default)",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a short small run for a smoke test")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--no-pin", dest="pin", action="store_false",
        help="do not put uvicorn and the relay on CPU 0 and the rest on the other CPUs (the default on 2+ CPUs)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    q = args.quick
    args.entities = args.entities if args.entities is not None else (400 if q else 1000)
    args.clients = args.clients if args.clients is not None else (4 if q else 20)
    args.client_procs = args.client_procs if args.client_procs is not None else (1 if q else 2)
    args.seconds = args.seconds if args.seconds is not None else (3.0 if q else 30.0)
    args.warmup = args.warmup if args.warmup is not None else (2.0 if q else 5.0)
    if min(args.entities, args.clients, args.client_procs, args.watch, args.brokers) < 1 or args.seconds <= 0 \
            or args.warmup < 0:
        parser.error("counts must be positive, --seconds positive, --warmup at least 0")
    args.phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = set(args.phases) - set(PHASES)
    if unknown or not args.phases:
        parser.error(f"--phases: unknown {sorted(unknown)}; choose from {', '.join(PHASES)}")
    if args.quick and "echo_cluster_end" in args.phases and len(args.phases) == len(PHASES):
        args.phases.remove("echo_cluster_end")
    if args.entities < 10 * TENANTS * 10:
        parser.error(f"--entities at least {10 * TENANTS * 10} (each tenant owns a tenth of them)")
    return args


def run(args: argparse.Namespace, server: RedisServer, stack: list[Callable[[], None]]) -> dict[str, Any]:
    pins = pin(args.pin)
    if pins is not None and server.proc is not None:
        os.sched_setaffinity(server.proc.pid, pins[1])
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    db_dir = Path(tempfile.mkdtemp(prefix="db-", dir=BENCH_DIR))
    stack.append(lambda: shutil.rmtree(db_dir, ignore_errors=True))
    db_path = db_dir / "monitor-bench.sqlite3"
    stack.append(lambda: remove_database(db_path))
    env_vars = setup_django(db_path, server.url)
    accounts, setup_s = build_database(args.clients, args.entities, args.types, server.url)
    types = sorted({q for i in range(len(QUOTA_TYPES)) for q in types_of(i, args.types)})
    child_env = {**os.environ, **env_vars, ECHO_REDIS_ENV: server.url, ECHO_TYPES_ENV: ",".join(types)}
    server_cpus = pins[0] if pins else None

    client = redis.Redis.from_url(server.url)
    stack.append(client.close)
    publisher = Publisher(server.url, args.entities, args.types)
    stack.append(publisher.stop)
    if pins is not None:
        os.sched_setaffinity(0, pins[1])  # the publisher and the clients inherit it
    publisher.start()

    portal_port, echo_port = free_port(), free_port()
    portal = Service("uvicorn (portal)", uvicorn_cmd("portal.asgi:application", portal_port), child_env,
                     BENCH_DIR / "uvicorn.log")  # fmt: skip
    stack.append(portal.stop)
    portal.start(server_cpus)
    echo = Service("uvicorn (echo)", uvicorn_cmd("benchmarks.monitor_bench:echo_app", echo_port), child_env,
                   BENCH_DIR / "echo.log")  # fmt: skip
    stack.append(echo.stop)
    echo.start(server_cpus)
    portal.wait_http(portal_port, "/healthz")
    echo.wait_http(echo_port, "/")
    env = Env(args, portal, portal_port, echo, echo_port, None, publisher, client, accounts,
              pins[1] if pins else None, server.url)  # fmt: skip

    where = f"uvicorn and the relay on CPU {sorted(pins[0])}, the rest on {sorted(pins[1])}" if pins else "not pinned"
    print(
        f"setup            redis {client.info('server')['redis_version']}, uvicorn {package_version('uvicorn')}, "
        f"Django {package_version('django')}, channels {package_version('channels')}, channels_redis "
        f"{package_version('channels_redis')}, websockets {package_version('websockets')} ({where}; {os.cpu_count()} "
        f"CPUs); SQLite migrated with {args.clients} sessions in {setup_s:.1f} s; {args.entities:,} entities x "
        f"{args.types} quota type(s) x {BROKERS} brokers at 1 Hz = {args.entities * args.types * BROKERS:,} "
        f"samples/s; {args.clients} clients in {min(args.client_procs, args.clients)} process(es); "
        f"{args.warmup:g} s warm-up + {args.seconds:g} s per phase; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )

    figures: dict[str, dict[str, Any]] = {}
    phases = [p for p in PHASES if p in args.phases]
    for phase in phases:
        if phase.startswith("relay") and env.relay is None:
            relay = Service("relay", [sys.executable, "manage.py", "relay"], child_env, BENCH_DIR / "relay.log")
            stack.append(relay.stop)
            relay.start(server_cpus)
            env.relay = relay
        if phase == "echo_cluster_end" and env.relay is not None:
            env.relay.stop()  # the baseline runs without it, as the first one did
            env.relay = None
        r = run_phase(phase, env)
        figures[phase] = r
        base = figures.get("echo_entities" if phase.endswith("entities") else "echo_cluster")
        r["loadavg"] = os.getloadavg()[0]  # other work on the machine shows here: read the figures with it
        report(r, base if phase.startswith("relay") else None)

    ends = [figures[p] for p in ("echo_cluster", "echo_cluster_end") if p in figures]
    base_p50 = sum(r["p50_ms"] for r in ends) / len(ends) if ends else math.nan
    base_p99 = sum(r["p99_ms"] for r in ends) / len(ends) if ends else math.nan
    if len(ends) == 2:
        print(f"baseline drift   p99 {ends[1]['p99_ms'] / ends[0]['p99_ms'] - 1:+.1%} (last vs first)", flush=True)
    main = figures.get("relay_cluster")
    summary: dict[str, Any] = {}
    p99_ok = False
    if main is not None:
        ratio = main["p99_ms"] / base_p99 if base_p99 > 0 else math.nan
        p99_ok = main["p99_ms"] < TARGET_P99_MS and main["missing"] == 0
        relay_core = main["cpu"]["relay"]
        print(
            f"relay_cluster    p99 {main['p99_ms']:.1f} ms (target < {TARGET_P99_MS:g} ms, nothing missing: "
            f"{'OK' if p99_ok else 'MISSED'}); {ratio:.1f} x the echo baseline's p99 {base_p99:.1f} ms (p50 "
            f"{main['p50_ms']:.1f} vs {base_p50:.1f} ms); relay CPU {relay_core:.3f} of one core, uvicorn "
            f"{main['cpu']['uvicorn']:.3f}",
            flush=True,
        )
        summary.update(
            p99_ms=round(main["p99_ms"], 1),
            p50_ms=round(main["p50_ms"], 1),
            max_ms=round(main["max_ms"], 1),
            missing=main["missing"],
            relay_cpu_cores=round(relay_core, 4),
            **{k: round(main[k], 1) for k in ("tap_p50_ms", "tap_p99_ms") if k in main},
            uvicorn_cpu_cores=round(main["cpu"]["uvicorn"], 4),
            p99_ratio=round(ratio, 3),
        )
    summary.update(baseline_p99_ms=round(base_p99, 1), baseline_p50_ms=round(base_p50, 1))
    for phase, r in figures.items():
        summary[phase] = {
            "p50_ms": round(r["p50_ms"], 1), "p99_ms": round(r["p99_ms"], 1), "max_ms": round(r["max_ms"], 1),
            "received": r["received"], "expected": r["expected"], "missing": r["missing"],
            "mb_per_s": round(r["mb_per_s"], 2), "cpu": {k: round(v, 4) for k, v in r["cpu"].items()},
            "loadavg": round(r["loadavg"], 2), "publish_ms_p50": round(r["publish_ms_p50"], 1),
            "publish_ms_p99": round(r["publish_ms_p99"], 1), "slowest": r["slowest"],
        }  # fmt: skip
    summary.update(
        entities=args.entities,
        types=args.types,
        samples_per_s=args.entities * args.types * BROKERS,
        clients=args.clients,
        watch=args.watch,
        deflate=args.deflate,
        seconds=args.seconds,
        pinned=pins is not None,
        cpus=os.cpu_count(),
        quick=args.quick,
        target_p99_ms=TARGET_P99_MS,
        target_met=p99_ok,
    )
    return summary


def main(argv: list[str] | None = None) -> int:
    """Run every phase; whatever was started (servers, relay, publisher, Redis, the database) goes on any exit."""
    global BROKERS
    args = parse_args(argv)
    BROKERS = args.brokers
    os.environ[BROKERS_ENV] = str(args.brokers)  # the spawned processes import this module again: they read it
    return run_bench("monitor-bench", args.check, lambda server, stack: run(args, server, stack), "target_met")


if __name__ == "__main__":
    sys.exit(main())
