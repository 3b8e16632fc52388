#!/usr/bin/env python
"""How close the Redis quota engine gets to what Redis itself can serve, in one run against one Redis.

    .venv/bin/python benchmarks/engine_bench.py [--redis-url URL] [--seconds 5] [--batch 100]
                                                [--entities 10000] [--quick] [--profile] [--check]

Measured against the same Redis, one phase after the other:

* ceiling: ``redis-benchmark -P 32 -c 50`` running a no-op ``EVALSHA`` (the most script calls/s Redis serves);
* throughput: rate and token-bucket decisions/s through the engine's own client path (2 processes, each
  looping ``record_many`` batches), with the Redis server time per decision from ``INFO commandstats``;
* latency: p50/p99 of one decision (``record``) against one no-op ``EVALSHA``, interleaved on one connection;
* memory: ``used_memory`` per rate entity whose 11-sample ring is full;
* cluster (``--cluster``, on by default when the benchmark starts its own Redis): the rate phase on a 3-master
  Redis Cluster (``devtools.redis_cluster``, the masters pinned to the single Redis's CPU), alternated with the
  same phase on the single Redis (2 pairs, 1 with ``--quick``) so both see the same load of a shared machine:
  ``cluster_rate_ratio`` = cluster decisions/s / single-Redis decisions/s and ``cluster_server_ratio`` = their
  script time per decision (issue 33: >= 0.8 and <= 1.2); per master its share of the decisions, script time
  and CPU per decision, and what 3 machines would give, derived from them (``cluster_machines_decisions_per_s``:
  each master saturating a core of its own, the busiest bounding; ``cluster_machines_vs_one_redis`` against one
  Redis on one core); the keys and bytes per entity on the cluster.

Without ``--redis-url`` it starts a private redis-server under ``.run/`` and always stops it. With
``--redis-url`` it resets that server's stats (``CONFIG RESETSTAT``) and writes keys under ``qe:{bench-*``,
which it removes at the end. The last line of output is one JSON object with the figures and their ratios.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from the repo root: make `quotas` and `devtools` importable
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import cProfile  # noqa: E402
import csv  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import multiprocessing as mp  # noqa: E402
import os  # noqa: E402
import pstats  # noqa: E402
import queue  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from typing import Any  # noqa: E402
from urllib.parse import unquote, urlparse  # noqa: E402

import redis  # noqa: E402

from devtools.redis_cluster import RedisCluster  # noqa: E402
from devtools.redis_server import RUN_DIR, RedisServer  # noqa: E402
from engine.entities import DEFAULT, QuotaType  # noqa: E402
from engine.managers import ClientQuotaManager, ControllerMutationQuotaManager, UsageRecord  # noqa: E402
from engine.redis_backend import RedisBackend, connect  # noqa: E402

PROCESSES = 2
SAMPLES = 11
WINDOW_S = 1
RATE_QUOTA = 5e6  # producer_byte_rate of <default>: 5 MB/s per client-id
TB_QUOTA = 1000.0  # controller_mutation_rate of <default>: 1000 partition mutations/s per client-id
USER = "bench-user"
NOOP = "return 1"
KEY_PATTERN = "qe:{bench-*"
PIPELINE = 32
BENCH_CLIENTS = 50

#: figure -> (comparison, limit), from the issue.
TARGETS: dict[str, tuple[str, float]] = {
    "rate_ratio": (">=", 0.20),
    "token_bucket_ratio": (">=", 0.30),
    "rate_server_us": ("<=", 5.0),
    "token_bucket_server_us": ("<=", 3.0),
    "p99_latency_ratio": ("<=", 2.0),
    "bytes_per_rate_entity": ("<=", 400.0),
    # issue 33: a decision on a Redis Cluster costs what it costs on one Redis (checked when the cluster runs)
    "cluster_server_ratio": ("<=", 1.2),
    "cluster_rate_ratio": (">=", 0.8),
}

KINDS = ("rate", "token_bucket")
NAMESPACES = {"rate": "bench-rate", "token_bucket": "bench-tb", "latency": "bench-lat", "memory": "bench-mem"}


# ---- workload --------------------------------------------------------------------------------------------


def make_manager(kind: str, backend: RedisBackend, namespace: str) -> ClientQuotaManager:
    """A manager configured as a broker would be: one <default> client-id quota, 11 one-second samples."""
    if kind == "rate":
        m = ClientQuotaManager(QuotaType.PRODUCE, backend, samples=SAMPLES, window_s=WINDOW_S, namespace=namespace)
        m.update_quota(None, DEFAULT, RATE_QUOTA)
    else:
        m = ControllerMutationQuotaManager(backend, samples=SAMPLES, window_s=WINDOW_S, namespace=namespace)
        m.update_quota(None, DEFAULT, TB_QUOTA)
    return m


def usage_values(kind: str, rng: random.Random, n: int) -> list[float]:
    """Realistic usage per request: produce sizes log-normal around 4 KiB; 1-12 partition mutations."""
    if kind == "rate":
        return [float(min(1 << 20, max(64, int(rng.lognormvariate(math.log(4096), 1.0))))) for _ in range(n)]
    return [float(rng.randint(1, 12)) for _ in range(n)]


def now_ms() -> int:
    return int(time.time() * 1000)


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    i = max(0, min(len(sorted_values) - 1, math.ceil(p / 100.0 * len(sorted_values)) - 1))
    return sorted_values[i]


# ---- Redis helpers ---------------------------------------------------------------------------------------


def endpoint(url: str) -> dict[str, Any]:
    """Host, port, credentials and db of a redis:// URL, for redis-benchmark's command line."""
    u = urlparse(url)
    if u.scheme not in ("redis", ""):
        raise SystemExit(f"engine_bench: redis-benchmark needs a plain redis:// endpoint, got {url!r}")
    db = u.path.lstrip("/")
    return {
        "host": u.hostname or "127.0.0.1",
        "port": u.port or 6379,
        "username": unquote(u.username) if u.username else None,
        "password": unquote(u.password) if u.password else None,
        "db": int(db) if db else 0,
    }


def script_usec(client: redis.Redis) -> tuple[int, int]:
    """Calls and server microseconds of all script calls since the last CONFIG RESETSTAT."""
    stats = client.info("commandstats")
    calls = usec = 0
    for name in ("cmdstat_evalsha", "cmdstat_eval"):
        if name in stats:
            calls += int(stats[name]["calls"])
            usec += int(stats[name]["usec"])
    return calls, usec


def server_cpu_s(client: redis.Redis) -> float:
    """Redis process CPU (user + sys, all threads): also counts networking, which commandstats leaves out."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def delete_bench_keys(client: redis.Redis) -> int:
    """Remove what the benchmark wrote to a Redis it does not own (never FLUSHALL someone else's data)."""
    n = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=KEY_PATTERN, count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            n += client.unlink(*batch)
            batch = []
    if batch:
        n += client.unlink(*batch)
    return n


# ---- ceiling ---------------------------------------------------------------------------------------------


def _redis_benchmark(ep: dict[str, Any], sha: str, n: int) -> float:
    exe = shutil.which("redis-benchmark")
    if exe is None:
        raise RuntimeError("redis-benchmark is not installed (it ships with redis-server: apt-get install redis-tools)")
    cmd = [
        exe,
        "-h",
        ep["host"],
        "-p",
        str(ep["port"]),
        "-P",
        str(PIPELINE),
        "-c",
        str(BENCH_CLIENTS),
        "-n",
        str(n),
        "--csv",
    ]
    if ep["password"]:
        cmd += ["-a", ep["password"]]
        if ep["username"]:
            cmd += ["--user", ep["username"]]
    if ep["db"]:
        cmd += ["--dbnum", str(ep["db"])]
    cmd += ["evalsha", sha, "0"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300).stdout
    for row in csv.reader(io.StringIO(out)):
        if len(row) >= 2 and row[0].lower().startswith("evalsha"):
            return float(row[1])
    raise RuntimeError(f"could not parse redis-benchmark output: {out!r}")


def measure_ceiling(client: redis.Redis, ep: dict[str, Any], target_s: float, calibrate_n: int) -> dict[str, Any]:
    """No-op EVALSHA calls/s with -P 32: what Redis serves when scripts cost nothing, the yardstick for the engine."""
    sha = client.script_load(NOOP)
    rps = _redis_benchmark(ep, sha, calibrate_n)  # calibration, so the measured run lasts about target_s
    n = int(min(50_000_000, max(calibrate_n, rps * target_s)))
    client.config_resetstat()
    t0 = time.perf_counter()
    rps = _redis_benchmark(ep, sha, n)
    elapsed = time.perf_counter() - t0
    calls, usec = script_usec(client)
    return {"ops": rps, "n": n, "elapsed_s": elapsed, "sha": sha, "server_us": usec / calls if calls else 0.0}


# ---- throughput ------------------------------------------------------------------------------------------


def prefill(kind: str, url: str, namespace: str, entities: int, chunk: int = 1000) -> None:
    """Give every sensor of the pool a full 12-window history, so a phase measures steady state, not cold keys."""
    backend = RedisBackend(connect(url, timeout_s=30.0))
    m = make_manager(kind, backend, namespace)
    clients = [f"client-{i}" for i in range(entities)]
    values = usage_values(kind, random.Random(3), entities)
    windows = SAMPLES + 1
    end = now_ms()
    try:
        for w in range(windows):
            t = end - (windows - w) * WINDOW_S * 1000
            for lo in range(0, entities, chunk):
                hi = min(lo + chunk, entities)
                m.record_many([UsageRecord(USER, clients[i], values[i], t) for i in range(lo, hi)])
    finally:
        backend.client.close()


def _throughput_worker(
    index: int,
    kind: str,
    url: str,
    namespace: str,
    batch: int,
    entities: int,
    seconds: float,
    profile_path: str | None,
    ready: Any,
    start: Any,
    results: Any,
) -> None:
    """One client process: its own connection and manager, looping record_many until its time is up."""
    try:
        backend = RedisBackend(connect(url, timeout_s=5.0))
        m = make_manager(kind, backend, namespace)
        rng = random.Random(1000 + index)
        size = 1 << 16
        mask = size - 1
        clients = [f"client-{i}" for i in range(entities)]
        # walk shuffled passes over the pool, so a batch holds distinct entities: no decision gets a
        # cheaper ride on another's read and write of the same sensor
        picks: list[str] = []
        while len(picks) < size:
            rng.shuffle(clients)
            picks += clients
        picks = picks[:size]
        values = usage_values(kind, rng, size)
        record_many = m.record_many
        t = now_ms()
        record_many([UsageRecord(USER, picks[k], values[k], t) for k in range(batch)])  # loads script, connects
        ready.put(index)
        start.wait()
        prof = cProfile.Profile() if profile_path else None
        n = violated = degraded = batches = 0
        p = batch
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        end = t0 + seconds
        if prof:
            prof.enable()
        while time.perf_counter() < end:
            t = now_ms()
            usages = [UsageRecord(USER, picks[(p + k) & mask], values[(p + k) & mask], t) for k in range(batch)]
            p += batch
            res = record_many(usages)
            n += len(res)
            batches += 1
            violated += sum(1 for r in res if r.violated)
            if res[0].degraded:  # the fail policy answers a whole batch when Redis is unreachable
                degraded += len(res)
        if prof:
            prof.disable()
            prof.dump_stats(profile_path)
        elapsed = time.perf_counter() - t0
        results.put(
            {
                "index": index,
                "decisions": n,
                "batches": batches,
                "elapsed_s": elapsed,
                "violated": violated,
                "degraded": degraded,
                "client_cpu_s": time.process_time() - cpu0,
            }
        )
    except KeyboardInterrupt:
        pass
    except BaseException:
        results.put({"index": index, "error": traceback.format_exc()})
        ready.put(-1)


def _collect(q: Any, procs: list[Any], count: int, timeout_s: float) -> list[Any]:
    """Read ``count`` items, failing fast when a worker died instead of waiting out the timeout."""
    items: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(items) < count:
        try:
            items.append(q.get(timeout=0.2))
            continue
        except queue.Empty:
            pass
        dead = [p for p in procs if p.exitcode not in (None, 0)]
        if dead:
            raise RuntimeError(f"a benchmark worker exited with code {dead[0].exitcode}")
        if time.monotonic() > deadline:
            raise RuntimeError("benchmark workers did not answer in time")
    return items


def measure_throughput(
    kind: str,
    url: str,
    client: redis.Redis,
    batch: int,
    entities: int,
    seconds: float,
    profile: bool,
    warm: bool,
) -> dict[str, Any]:
    """Decisions/s of 2 client processes through record_many, and the Redis time each decision costs."""
    ctx = mp.get_context("spawn")  # each worker starts clean: no connection or state inherited
    ready, results, start = ctx.Queue(), ctx.Queue(), ctx.Event()
    if warm:
        prefill(kind, url, NAMESPACES[kind], entities)
    profile_path = str(RUN_DIR / f"engine_bench-{kind}.prof") if profile else None
    if profile_path:
        RUN_DIR.mkdir(parents=True, exist_ok=True)
    procs = [
        ctx.Process(
            target=_throughput_worker,
            daemon=True,
            args=(
                i,
                kind,
                url,
                NAMESPACES[kind],
                batch,
                entities,
                seconds,
                profile_path if i == 0 else None,
                ready,
                start,
                results,
            ),
        )
        for i in range(PROCESSES)
    ]
    try:
        for p in procs:
            p.start()
        if -1 in _collect(ready, procs, PROCESSES, 60):
            errors = [r["error"] for r in _collect(results, procs, 1, 10) if "error" in r]
            raise RuntimeError("a benchmark worker failed:\n" + "\n".join(errors))
        client.config_resetstat()
        cpu0 = server_cpu_s(client)
        start.set()
        outs = _collect(results, procs, PROCESSES, seconds + 120)
        for p in procs:
            p.join(timeout=30)
        cpu1 = server_cpu_s(client)
        calls, usec = script_usec(client)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    errors = [o["error"] for o in outs if "error" in o]
    if errors:
        raise RuntimeError("a benchmark worker failed:\n" + "\n".join(errors))
    decisions = sum(o["decisions"] for o in outs)
    batches = sum(o["batches"] for o in outs)
    result = {
        "decisions_per_s": sum(o["decisions"] / o["elapsed_s"] for o in outs),
        "decisions": decisions,
        "batches": batches,
        "script_calls": calls,
        "server_us": usec / decisions if decisions else 0.0,
        "server_process_us": (cpu1 - cpu0) * 1e6 / decisions if decisions else 0.0,
        "client_cpu_us": sum(o["client_cpu_s"] for o in outs) * 1e6 / decisions if decisions else 0.0,
        "violated": sum(o["violated"] for o in outs),
        "degraded": sum(o["degraded"] for o in outs),
        "per_process": [round(o["decisions"] / o["elapsed_s"]) for o in sorted(outs, key=lambda o: o["index"])],
    }
    if profile_path and Path(profile_path).exists():
        buf = io.StringIO()
        pstats.Stats(profile_path, stream=buf).sort_stats("tottime").print_stats(14)
        result["profile"] = buf.getvalue()
    return result


# ---- latency ---------------------------------------------------------------------------------------------


def measure_latency(url: str, sha: str, n: int, entities: int, warm: bool) -> dict[str, float]:
    """One decision's round trip against one no-op script call's, interleaved so both see the same conditions."""
    if warm:
        for kind in KINDS:
            prefill(kind, url, NAMESPACES["latency"], entities)
    client = connect(url, timeout_s=5.0)
    backend = RedisBackend(client)
    rate = make_manager("rate", backend, NAMESPACES["latency"])
    tb = make_manager("token_bucket", backend, NAMESPACES["latency"])
    rng = random.Random(7)
    clients = [f"client-{i}" for i in range(entities)]
    rate_values = usage_values("rate", rng, 4096)
    tb_values = usage_values("token_bucket", rng, 4096)
    warm = max(200, n // 10)
    noop_ns: list[int] = []
    rate_ns: list[int] = []
    tb_ns: list[int] = []
    clock = time.perf_counter_ns
    evalsha = client.evalsha
    try:
        for i in range(warm + n):
            c = clients[rng.randrange(entities)]
            t = now_ms()
            a = clock()
            evalsha(sha, 0)
            b = clock()
            rate.record(USER, c, rate_values[i & 4095], t)
            d = clock()
            tb.record(USER, c, tb_values[i & 4095], t)
            e = clock()
            if i >= warm:
                noop_ns.append(b - a)
                rate_ns.append(d - b)
                tb_ns.append(e - d)
    finally:
        client.close()
    out: dict[str, float] = {"n": n}
    for name, series in (("noop", noop_ns), ("decision", rate_ns), ("token_bucket", tb_ns)):
        series.sort()
        out[f"{name}_p50_us"] = percentile(series, 50) / 1000
        out[f"{name}_p99_us"] = percentile(series, 99) / 1000
    return out


# ---- memory ----------------------------------------------------------------------------------------------


def measure_memory(client: redis.Redis, url: str, n: int, own_server: bool, chunk: int = 1000) -> dict[str, Any]:
    """used_memory per rate entity once its 12-slot ring (11 samples + current) is full, without throttle keys."""
    namespace = NAMESPACES["memory"]
    if own_server:
        client.flushall()
    else:
        delete_bench_keys(client)
    backend = RedisBackend(connect(url, timeout_s=5.0))
    m = make_manager("rate", backend, namespace)
    backend.client.ping()
    backend.client.script_load(backend.script.script)  # the engine's script cache entry exists before measuring
    before = int(client.info("memory")["used_memory"])
    windows = SAMPLES + 2  # 13 windows: the 12-slot ring is full and has wrapped once
    base = now_ms() - (windows + 1) * WINDOW_S * 1000
    clients = [f"client-{i}" for i in range(n)]
    violated = 0
    for w in range(windows):
        for j, lo in enumerate(range(0, n, chunk)):
            t = base + w * WINDOW_S * 1000 + j % 100  # a small offset inside the window
            res = m.record_many([UsageRecord(USER, c, 1000.0, t) for c in clients[lo : lo + chunk]])
            violated += sum(1 for r in res if r.violated or r.degraded)
    backend.client.close()
    after = int(client.info("memory")["used_memory"])
    if own_server:
        keys = int(client.dbsize())
    else:
        keys = sum(1 for _ in client.scan_iter(match=f"qe:{{{namespace}|*", count=1000))
    sample_key = m.sensor_key(m.resolve(USER, clients[0]).tags)
    return {
        "entities": n,
        "bytes_per_entity": (after - before) / n,
        "keys": keys,
        "keys_ok": keys == n,
        "violated": violated,
        "value_bytes": int(client.strlen(sample_key)),
        "memory_usage": int(client.memory_usage(sample_key, samples=0) or 0),
        "key_bytes": len(sample_key),
    }


# ---- Redis Cluster ---------------------------------------------------------------------------------------


class ClusterStats:
    """A cluster's masters seen as one server for the stats the phases read (summed over the masters); key
    commands go to the key's master through the cluster client."""

    def __init__(self, cluster: RedisCluster) -> None:
        self.nodes = [redis.Redis.from_url(u, socket_timeout=30) for u in cluster.node_urls]
        self.keys = connect(cluster.url, timeout_s=30.0)
        self.cpu_log: list[list[float]] = []  # each master's CPU seconds, at every read of INFO cpu

    def config_resetstat(self) -> None:
        for n in self.nodes:
            n.config_resetstat()

    def flushall(self) -> None:
        for n in self.nodes:
            n.flushall()

    def dbsize(self) -> int:
        return sum(int(n.dbsize()) for n in self.nodes)

    def per_node(self, section: str) -> list[dict[str, Any]]:
        return [n.info(section) for n in self.nodes]

    def info(self, section: str) -> dict[str, Any]:
        parts = self.per_node(section)
        if section == "cpu":
            self.cpu_log.append([float(p["used_cpu_user"]) + float(p["used_cpu_sys"]) for p in parts])
        if section == "commandstats":
            out: dict[str, Any] = {}
            for part in parts:
                for name, st in part.items():
                    acc = out.setdefault(name, {"calls": 0, "usec": 0})
                    acc["calls"] += int(st["calls"])
                    acc["usec"] += int(st["usec"])
            return out
        summed: dict[str, Any] = {}
        for part in parts:
            for k, v in part.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    summed[k] = summed.get(k, 0) + v
        return summed

    def strlen(self, key: str) -> int:
        return int(self.keys.strlen(key))

    def memory_usage(self, key: str, samples: int = 0) -> int:
        return int(self.keys.memory_usage(key, samples=samples) or 0)

    def close(self) -> None:
        for n in self.nodes:
            n.close()
        self.keys.close()


def measure_cluster(
    args: argparse.Namespace, single_url: str, single_client: redis.Redis, cpu: int | None
) -> dict[str, Any]:
    """The rate phase on a 3-master Redis Cluster against the same phase on the single Redis, in pairs run one
    right after the other (so both see the same load of a shared machine), and the memory figure on the cluster.

    Per master: its share of the decisions (its share of the pool's sensors: the workers walk the pool evenly),
    its script time and its process CPU per decision of its own. The masters share one core here, so the
    cluster's decisions/s says little about a deployment; what 3 machines would give is derived from the
    per-master figures: each master saturates its own core at 1 / (its time per decision x its share)
    decisions/s of the cluster's, and the busiest one bounds the cluster.
    """
    cluster = RedisCluster(name="bench", masters=3, cpus=str(cpu) if cpu is not None else None).start()
    stats = ClusterStats(cluster)
    rounds = 1 if args.quick else 2
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    usec = [0] * len(stats.nodes)
    calls = [0] * len(stats.nodes)
    node_cpu = [0.0] * len(stats.nodes)
    try:
        for _ in range(rounds):
            one = measure_throughput(
                "rate", single_url, single_client, args.batch, args.entities, args.seconds, False, not args.cold
            )
            r = measure_throughput(
                "rate", cluster.url, stats, args.batch, args.entities, args.seconds, False, not args.cold  # type: ignore[arg-type]
            )
            pairs.append((one, r))
            for i, st in enumerate(stats.per_node("commandstats")):
                calls[i] += stats_calls(st)
                usec[i] += sum(int(st[n]["usec"]) for n in ("cmdstat_evalsha", "cmdstat_eval") if n in st)
            for i, (a, b) in enumerate(zip(*stats.cpu_log[-2:], strict=True)):
                node_cpu[i] += b - a
        node_keys = [int(n.dbsize()) for n in stats.nodes]
        mem = measure_memory(stats, cluster.url, args.memory_entities, True)  # type: ignore[arg-type]
    finally:
        stats.close()
        cluster.stop()

    def total(which: int, name: str) -> float:
        return sum(p[which][name] for p in pairs)

    def per_decision(which: int, name: str) -> float:  # a figure per decision, over every round
        return sum(p[which][name] * p[which]["decisions"] for p in pairs) / max(1, total(which, "decisions"))

    one_rate = total(0, "decisions_per_s") / rounds
    r = {
        "decisions_per_s": total(1, "decisions_per_s") / rounds, "decisions": int(total(1, "decisions")),
        "server_us": per_decision(1, "server_us"), "server_process_us": per_decision(1, "server_process_us"),
        "client_cpu_us": per_decision(1, "client_cpu_us"), "script_calls": int(total(1, "script_calls")),
        "degraded": int(total(1, "degraded")),
    }
    per_node = calls
    masters = len(per_node)
    shares = [k / max(1, sum(node_keys)) for k in node_keys]
    decisions = r["decisions"]
    node_server_us = [u / max(1.0, decisions * sh) for u, sh in zip(usec, shares, strict=True)]
    node_cpu_us = [c * 1e6 / max(1.0, decisions * sh) for c, sh in zip(node_cpu, shares, strict=True)]
    # with a core per master: the busiest master (its time per decision x its share) bounds the cluster
    busiest_server = max(t * sh for t, sh in zip(node_server_us, shares, strict=True))
    busiest_cpu = max(t * sh for t, sh in zip(node_cpu_us, shares, strict=True))
    return {
        "masters": masters,
        "decisions_per_s": r["decisions_per_s"],
        "ratio": r["decisions_per_s"] / one_rate,
        "rounds": rounds,
        "single_decisions_per_s": one_rate,
        "single_server_us": per_decision(0, "server_us"),
        "single_process_us": per_decision(0, "server_process_us"),
        "single_client_cpu_us": per_decision(0, "client_cpu_us"),
        "server_us": r["server_us"],
        "process_us": r["server_process_us"],
        "client_cpu_us": r["client_cpu_us"],
        "script_calls": r["script_calls"],
        "decisions": decisions,
        "decisions_per_call": decisions / max(1, r["script_calls"]),
        "per_shard_decisions_per_s": r["decisions_per_s"] / masters,
        # a shard with a core of its own: 1 / the Redis process CPU per decision (CPU time, so a preempted script
        # does not count its wait as commandstats' usec does)
        "shard_capacity_per_s": 1e6 / r["server_process_us"] if r["server_process_us"] else 0.0,
        "share_of_calls": [round(c / max(1, sum(calls)), 3) for c in calls],
        "node_share": shares,
        "node_server_us": node_server_us,
        "node_cpu_us": node_cpu_us,
        "machines_by_server_per_s": 1e6 / busiest_server if busiest_server else 0.0,
        "machines_by_cpu_per_s": 1e6 / busiest_cpu if busiest_cpu else 0.0,
        "bytes_per_entity": mem["bytes_per_entity"],
        "keys_per_entity": mem["keys"] / mem["entities"],
        "degraded": r["degraded"],
    }


def stats_calls(commandstats: dict[str, Any]) -> int:
    return sum(int(commandstats[n]["calls"]) for n in ("cmdstat_evalsha", "cmdstat_eval") if n in commandstats)


# ---- report ----------------------------------------------------------------------------------------------


def check(name: str, value: float) -> bool:
    op, limit = TARGETS[name]
    return value >= limit if op == ">=" else value <= limit


def verdict(name: str, value: float) -> str:
    op, limit = TARGETS[name]
    return f"(target {op} {limit:g}: {'OK' if check(name, value) else 'MISSED'})"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis-url", help="benchmark this Redis instead of starting one (its stats get reset)")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per throughput phase (default 5)")
    parser.add_argument("--batch", type=int, default=256, help="usage records per record_many call (default 256)")
    parser.add_argument(
        "--entities", type=int, default=None, help="distinct client-ids in the throughput pool (default 1000)"
    )
    parser.add_argument(
        "--scale-entities", type=int, default=None,
        help="also run the rate phase over this many entities and report it (default 10 x --entities; 0 = skip)",
    )
    parser.add_argument(
        "--memory-entities", type=int, default=None, help="rate entities for the memory figure (default 20000)"
    )
    parser.add_argument("--latency-n", type=int, default=None, help="single calls per latency series (default 5000)")
    parser.add_argument("--quick", action="store_true", help="a short run for a smoke test (about 10 s)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="cProfile one client process of each throughput phase and print where its time goes (slows that process)",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="skip the 12-window history written before the "
        "throughput and latency phases (sensors then start empty and are cheaper than in steady state)",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--cluster", action=argparse.BooleanOptionalAction, default=None,
        help="also run the rate phase on a 3-master Redis Cluster (default: on when the benchmark starts its Redis)",
    )
    parser.add_argument(
        "--no-pin", dest="pin", action="store_false",
        help="do not give the started redis-server a CPU of its own (it is pinned by default on 2+ CPUs)",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    if args.seconds is None:
        args.seconds = 1.0 if quick else 5.0
    if args.entities is None:
        args.entities = 1000
    if args.scale_entities is None:
        args.scale_entities = 10 * args.entities
    if args.memory_entities is None:
        args.memory_entities = 2000 if quick else 20_000
    if args.latency_n is None:
        args.latency_n = 500 if quick else 5000
    if args.batch < 1 or args.entities < 1 or args.memory_entities < 1 or args.latency_n < 1 or args.seconds <= 0:
        parser.error("--batch, --entities, --memory-entities, --latency-n and --seconds must be positive")
    return args


def run(args: argparse.Namespace, url: str, own_server: bool, redis_cpu: int | None = None) -> dict[str, Any]:
    """All phases in order against one Redis; prints a line per figure and returns the JSON summary."""
    client = connect(url, timeout_s=30.0)
    ep = endpoint(url)
    version = client.info("server")["redis_version"]
    print(
        f"redis {version} at {ep['host']}:{ep['port']} ({'started by the benchmark' if own_server else 'given'}); "
        f"{PROCESSES} client processes, batch {args.batch}, {args.entities} entities, {args.seconds:g} s per phase, "
        f"sensors {'cold' if args.cold else 'prefilled with 12 windows'}, {os.cpu_count()} CPUs",
        flush=True,
    )
    cpus = os.cpu_count() or 1
    if cpus < PROCESSES + 2:
        print(
            f"note          {PROCESSES} client processes and redis-server share {cpus} CPUs: decisions/s is bound by "
            "their summed CPU, and commandstats usec also counts time redis-server waited for a CPU",
            flush=True,
        )
    if own_server:
        client.flushall()
    else:
        delete_bench_keys(client)

    ceiling = measure_ceiling(
        client, ep, target_s=1.0 if args.quick else 3.0, calibrate_n=50_000 if args.quick else 200_000
    )
    ceiling_ops = ceiling["ops"]
    print(
        f"ceiling       no-op EVALSHA via redis-benchmark -P {PIPELINE} -c {BENCH_CLIENTS} -n {ceiling['n']}: "
        f"{ceiling_ops:,.0f} calls/s ({ceiling['elapsed_s']:.1f} s); server {ceiling['server_us']:.2f} us/call",
        flush=True,
    )

    through: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        r = measure_throughput(kind, url, client, args.batch, args.entities, args.seconds, args.profile, not args.cold)
        through[kind] = r
        ratio_key, server_key = f"{kind}_ratio", f"{kind}_server_us"
        ratio = r["decisions_per_s"] / ceiling_ops
        label = "rate" if kind == "rate" else "token bucket"
        print(
            f"{label:<13} {r['decisions_per_s']:,.0f} decisions/s {r['per_process']} = {ratio:.3f} x ceiling "
            f"{verdict(ratio_key, ratio)}",
            flush=True,
        )
        print(
            f"{'':<13} server {r['server_us']:.2f} us/decision in scripts (no-op {ceiling['server_us']:.2f} us/call) "
            f"{verdict(server_key, r['server_us'])}; redis process CPU {r['server_process_us']:.2f} us/decision; "
            f"client CPU {r['client_cpu_us']:.2f} us/decision; {r['decisions']:,} decisions in {r['batches']:,} "
            f"batches ({r['script_calls']:,} script calls), {r['violated']} violated, {r['degraded']} degraded",
            flush=True,
        )
        if "profile" in r:
            print(f"profile of one {label} client process (by own time):\n{r['profile']}", flush=True)
        if r["degraded"]:
            print(f"WARNING: {r['degraded']} {label} decisions were answered by the fail policy (Redis timed out)")

    scale: dict[str, Any] | None = None
    if args.scale_entities and not args.quick:
        # the same rate phase over a 10x larger pool: more sensors open a slot each second (the slow path)
        scale = measure_throughput(
            "rate", url, client, args.batch, args.scale_entities, args.seconds, False, not args.cold
        )
        print(
            f"rate @{args.scale_entities // 1000}k   {scale['decisions_per_s']:,.0f} decisions/s "
            f"= {scale['decisions_per_s'] / ceiling_ops:.3f} x ceiling with {args.scale_entities:,} entities; "
            f"server {scale['server_us']:.2f} us/decision (reported, not a target of its own)",
            flush=True,
        )

    lat = measure_latency(url, ceiling["sha"], args.latency_n, args.entities, not args.cold)
    p50_ratio = lat["decision_p50_us"] / lat["noop_p50_us"]
    p99_ratio = lat["decision_p99_us"] / lat["noop_p99_us"]
    print(
        f"latency       one rate decision p50 {lat['decision_p50_us']:.0f} us / p99 {lat['decision_p99_us']:.0f} us "
        f"vs one no-op call p50 {lat['noop_p50_us']:.0f} us / p99 {lat['noop_p99_us']:.0f} us ({args.latency_n} "
        f"each): p50 ratio {p50_ratio:.2f}, p99 ratio {p99_ratio:.2f} {verdict('p99_latency_ratio', p99_ratio)}",
        flush=True,
    )
    print(
        f"{'':<13} one token-bucket decision p50 {lat['token_bucket_p50_us']:.0f} us / "
        f"p99 {lat['token_bucket_p99_us']:.0f} us",
        flush=True,
    )

    mem = measure_memory(client, url, args.memory_entities, own_server)
    bpe = mem["bytes_per_entity"]
    print(
        f"memory        {mem['entities']:,} rate entities ({SAMPLES} samples, ring full): {bpe:.1f} bytes/entity "
        f"{verdict('bytes_per_rate_entity', bpe)}; {'DBSIZE' if own_server else 'keys'} {mem['keys']:,} "
        f"({'== entities' if mem['keys_ok'] else '!= entities: throttle keys or leftovers counted'}); value "
        f"{mem['value_bytes']} B, key {mem['key_bytes']} B, MEMORY USAGE {mem['memory_usage']} B",
        flush=True,
    )

    clustered: dict[str, Any] | None = None
    if args.cluster if args.cluster is not None else own_server:
        clustered = measure_cluster(args, url, client, redis_cpu)
        c = clustered
        print(
            f"cluster       rate on {c['masters']} masters (on the single Redis's CPU), {c['rounds']} pair(s) of "
            f"phases alternated with the same phase on one Redis: {c['decisions_per_s']:,.0f} against "
            f"{c['single_decisions_per_s']:,.0f} decisions/s = {c['ratio']:.3f} x one Redis "
            f"{verdict('cluster_rate_ratio', c['ratio'])}; {c['decisions_per_call']:.1f} decisions per script call "
            f"(batches split by slot), calls per master {c['share_of_calls']}",
            flush=True,
        )
        server_ratio = c["server_us"] / c["single_server_us"]
        print(
            f"{'':<13} server {c['server_us']:.2f} us/decision in scripts = {server_ratio:.2f} x one Redis's "
            f"{c['single_server_us']:.2f} {verdict('cluster_server_ratio', server_ratio)}; redis CPU "
            f"{c['process_us']:.2f} us/decision (one Redis: {c['single_process_us']:.2f}); client CPU "
            f"{c['client_cpu_us']:.2f} us/decision (one Redis: {c['single_client_cpu_us']:.2f})",
            flush=True,
        )
        nodes = ", ".join(
            f"{sh:.3f} of the decisions at {sv:.2f} us script / {cp:.2f} us CPU"
            for sh, sv, cp in zip(c["node_share"], c["node_server_us"], c["node_cpu_us"], strict=True)
        )
        print(f"{'':<13} per master: {nodes}", flush=True)
        single_capacity = 1e6 / c["single_process_us"] if c["single_process_us"] else 0.0
        print(
            f"{'':<13} on {c['masters']} machines (a core per master; derived from the per-master figures, the "
            f"busiest master bounding): {c['machines_by_cpu_per_s']:,.0f} decisions/s by Redis CPU = "
            f"{c['machines_by_cpu_per_s'] / single_capacity if single_capacity else 0:.2f} x one Redis on one core "
            f"({single_capacity:,.0f}/s); {c['machines_by_server_per_s']:,.0f}/s by script time alone (no "
            "networking); the clients not counted",
            flush=True,
        )
        print(
            f"{'':<13} per shard {c['per_shard_decisions_per_s']:,.0f} decisions/s measured, "
            f"{c['shard_capacity_per_s']:,.0f} decisions/s with a core of its own (1 / redis CPU); "
            f"{c['keys_per_entity']:.2f} keys and {c['bytes_per_entity']:.1f} bytes per rate entity",
            flush=True,
        )

    if not own_server:
        delete_bench_keys(client)
    client.close()

    figures = {
        "rate_ratio": through["rate"]["decisions_per_s"] / ceiling_ops,
        "token_bucket_ratio": through["token_bucket"]["decisions_per_s"] / ceiling_ops,
        "rate_server_us": through["rate"]["server_us"],
        "token_bucket_server_us": through["token_bucket"]["server_us"],
        "p99_latency_ratio": p99_ratio,
        "bytes_per_rate_entity": bpe,
    }
    if clustered is not None:
        figures["cluster_server_ratio"] = clustered["server_us"] / max(1e-9, clustered["single_server_us"])
        figures["cluster_rate_ratio"] = clustered["ratio"]
    targets = {name: check(name, value) for name, value in figures.items()}
    summary: dict[str, Any] = {k: round(v, 4) for k, v in figures.items()}
    if clustered is not None:
        summary.update(
            cluster_masters=clustered["masters"],
            cluster_rate_decisions_per_s=round(clustered["decisions_per_s"]),
            cluster_server_us=round(clustered["server_us"], 3),
            cluster_process_server_us=round(clustered["process_us"], 3),
            cluster_client_cpu_us=round(clustered["client_cpu_us"], 3),
            cluster_node_share=[round(x, 3) for x in clustered["node_share"]],
            cluster_node_server_us=[round(x, 3) for x in clustered["node_server_us"]],
            cluster_node_cpu_us=[round(x, 3) for x in clustered["node_cpu_us"]],
            cluster_machines_decisions_per_s=round(clustered["machines_by_cpu_per_s"]),
            cluster_machines_by_script_time_per_s=round(clustered["machines_by_server_per_s"]),
            cluster_machines_vs_one_redis=round(
                clustered["machines_by_cpu_per_s"] * clustered["single_process_us"] / 1e6, 3
            ),
            cluster_rounds=clustered["rounds"],
            cluster_paired_rate_decisions_per_s=round(clustered["single_decisions_per_s"]),
            cluster_paired_rate_server_us=round(clustered["single_server_us"], 3),
            cluster_paired_rate_process_server_us=round(clustered["single_process_us"], 3),
            cluster_decisions_per_call=round(clustered["decisions_per_call"], 2),
            cluster_decisions_per_s_per_shard=round(clustered["per_shard_decisions_per_s"]),
            cluster_shard_capacity_per_s=round(clustered["shard_capacity_per_s"]),
            cluster_bytes_per_rate_entity=round(clustered["bytes_per_entity"], 1),
            cluster_keys_per_rate_entity=round(clustered["keys_per_entity"], 3),
            cluster_degraded=clustered["degraded"],
        )
    if scale is not None:
        summary.update(
            scale_entities=args.scale_entities,
            rate_ratio_at_scale=round(scale["decisions_per_s"] / ceiling_ops, 4),
            rate_server_us_at_scale=round(scale["server_us"], 4),
        )
    summary.update(
        p50_latency_ratio=round(p50_ratio, 4),
        ceiling_ops=round(ceiling_ops),
        noop_server_us=round(ceiling["server_us"], 4),
        rate_decisions_per_s=round(through["rate"]["decisions_per_s"]),
        token_bucket_decisions_per_s=round(through["token_bucket"]["decisions_per_s"]),
        rate_process_server_us=round(through["rate"]["server_process_us"], 3),
        token_bucket_process_server_us=round(through["token_bucket"]["server_process_us"], 3),
        rate_client_cpu_us=round(through["rate"]["client_cpu_us"], 3),
        token_bucket_client_cpu_us=round(through["token_bucket"]["client_cpu_us"], 3),
        rate_violated=through["rate"]["violated"],
        token_bucket_violated=through["token_bucket"]["violated"],
        degraded=through["rate"]["degraded"] + through["token_bucket"]["degraded"],
        decision_p50_us=round(lat["decision_p50_us"], 1),
        decision_p99_us=round(lat["decision_p99_us"], 1),
        noop_p50_us=round(lat["noop_p50_us"], 1),
        noop_p99_us=round(lat["noop_p99_us"], 1),
        token_bucket_p50_us=round(lat["token_bucket_p50_us"], 1),
        token_bucket_p99_us=round(lat["token_bucket_p99_us"], 1),
        memory_entities=mem["entities"],
        memory_keys=mem["keys"],
        memory_keys_ok=mem["keys_ok"],
        batch=args.batch,
        entities=args.entities,
        processes=PROCESSES,
        seconds=args.seconds,
        latency_n=args.latency_n,
        quick=args.quick,
        cold=args.cold,
        redis_version=version,
        cpus=os.cpu_count(),
        targets=targets,
        targets_met=all(targets.values()),
    )
    return summary


def pin_cpus(server: RedisServer | None, wanted: bool) -> bool:
    """Give the Redis this run started a core of its own and everything else the others.

    A deployment gives Redis its own core; on a 2-CPU machine, letting the clients and
    redis-benchmark preempt it inflates both the server time per decision (commandstats
    counts wall time inside the script) and the ceiling's noise. The children (client
    processes, redis-benchmark) inherit this process's affinity.
    """
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else []
    if not wanted or server is None or server.proc is None or len(cpus) < 2:
        return False
    os.sched_setaffinity(server.proc.pid, {cpus[0]})
    server.cpu = cpus[0]  # type: ignore[attr-defined]  # a cluster phase pins its masters there too
    os.sched_setaffinity(0, set(cpus[1:]))
    print(f"pinning       redis-server on CPU {cpus[0]}; clients and redis-benchmark on CPUs {cpus[1:]}", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    """Run every phase; the Redis this started is stopped on any exit, Ctrl-C and SIGTERM included."""
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C even when started with SIGINT ignored
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # SystemExit unwinds through the finally below
    server: RedisServer | None = None
    started = time.perf_counter()
    try:
        if args.redis_url:
            url = args.redis_url
        else:
            server = RedisServer(name="bench").start()
            url = server.url
        pinned = pin_cpus(server, args.pin)
        summary = run(args, url, own_server=server is not None, redis_cpu=getattr(server, "cpu", None))
        summary["pinned"] = pinned
    except KeyboardInterrupt:
        print("engine_bench: interrupted", file=sys.stderr)
        return 130
    finally:
        if server is not None:
            server.stop()
    summary["elapsed_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(summary, separators=(",", ":")), flush=True)
    return 1 if args.check and not summary["targets_met"] else 0


if __name__ == "__main__":
    sys.exit(main())
