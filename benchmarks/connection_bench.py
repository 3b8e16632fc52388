#!/usr/bin/env python
"""Connection admissions/s through Redis against the no-op-script ceiling, in one run against one Redis.

    .venv/bin/python benchmarks/connection_bench.py [--redis-url URL] [--seconds 5] [--batch 256] [--ips 100]

Two client processes call ``RedisConnectionQuotas.admit_many`` (one script call per batch of
accepted sockets) on one broker with broker, listener and per-IP creation-rate quotas all set
(so every admission records three rate sensors and the counts), sockets coming from a pool of
100 hosts (a connection storm); the same run is repeated with 10x the hosts and reported beside
it (each host's sensor is then read and written once per batch). The ceiling is the engine
benchmark's: ``redis-benchmark -P 32`` on a no-op ``EVALSHA``, measured in the same run.
The last line is one JSON object; target: ``admission_ratio`` >= 0.20.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from benchmarks.engine_bench import endpoint, measure_ceiling, pin_cpus, script_usec, server_cpu_s  # noqa: E402
from devtools.redis_server import RedisServer  # noqa: E402
from engine.connections import ACCEPTED, ConnectionConfig, RedisConnectionQuotas  # noqa: E402
from engine.redis_backend import connect  # noqa: E402

PROCESSES = 2
TARGET = 0.20
PROPS = {
    "listeners": "EXTERNAL,REPLICATION,ADMIN",
    "inter.broker.listener.name": "REPLICATION",
    "max.connection.creation.rate": 100_000_000,
    "listener.name.EXTERNAL.max.connection.creation.rate": 100_000_000,
    "listener.name.ADMIN.max.connection.creation.rate": 100_000_000,
}


def _worker(index: int, url: str, namespace: str, batch: int, ips: int, seconds: float, ready: Any,
            start: Any, results: Any) -> None:
    """One acceptor process: admit batches of sockets until its time is up."""
    quotas = RedisConnectionQuotas(connect(url, timeout_s=5.0), namespace, ConnectionConfig.from_props(PROPS))
    quotas.update_ip_rate(None, 10_000_000)  # a <default> IP quota: every admission records the IP's sensor
    rng = random.Random(index)
    pool = [f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}" for i in range(ips)]
    listeners = ["EXTERNAL", "ADMIN"]
    quotas.admit_many([("EXTERNAL", pool[0], int(time.time() * 1000))])  # loads the script
    ready.put(index)
    start.wait()
    n = accepted = 0
    cpu0, t0 = time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        t = int(time.time() * 1000)
        answers = quotas.admit_many([(rng.choice(listeners), rng.choice(pool), t) for _ in range(batch)])
        n += len(answers)
        accepted += sum(1 for a in answers if a.result == ACCEPTED)
    results.put({"n": n, "accepted": accepted, "elapsed": time.perf_counter() - t0,
                 "cpu": time.process_time() - cpu0})


def measure_admissions(url: str, client: Any, batch: int, ips: int, seconds: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, results, start = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_worker, daemon=True,
                         args=(i, url, "bench-conn", batch, ips, seconds, ready, start, results))
             for i in range(PROCESSES)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=60)
    client.config_resetstat()
    cpu0 = server_cpu_s(client)
    start.set()
    outs = [results.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    cpu1 = server_cpu_s(client)
    _, usec = script_usec(client)
    n = sum(o["n"] for o in outs)
    return {
        "admissions_per_s": sum(o["n"] / o["elapsed"] for o in outs),
        "admissions": n,
        "accepted": sum(o["accepted"] for o in outs),
        "server_us": usec / n,
        "server_process_us": (cpu1 - cpu0) * 1e6 / n,
        "client_cpu_us": sum(o["cpu"] for o in outs) * 1e6 / n,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis-url", help="benchmark this Redis instead of starting one (its stats get reset)")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--ips", type=int, default=100, help="distinct client hosts (default 100)")
    parser.add_argument("--scale-ips", type=int, default=None, help="also report this many hosts (default 10x)")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--no-pin", dest="pin", action="store_false")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = min(args.seconds, 1.0)
    server = None if args.redis_url else RedisServer(name="bench-conn").start()
    try:
        url = args.redis_url or server.url  # type: ignore[union-attr]
        pinned = pin_cpus(server, args.pin)
        client = connect(url, timeout_s=30.0)
        ceiling = measure_ceiling(client, endpoint(url), 1.0 if args.quick else 3.0, 50_000 if args.quick else 200_000)
        r = measure_admissions(url, client, args.batch, args.ips, args.seconds)
        scale_ips = 10 * args.ips if args.scale_ips is None else args.scale_ips
        scale = measure_admissions(url, client, args.batch, scale_ips, args.seconds) if scale_ips else None
        for key in client.scan_iter(match="qe:{bench-conn|*", count=1000):
            client.delete(key)
    finally:
        if server is not None:
            server.stop()
    ratio = r["admissions_per_s"] / ceiling["ops"]
    print(f"ceiling       no-op EVALSHA via redis-benchmark -P 32: {ceiling['ops']:,.0f} calls/s")
    print(f"admissions    {r['admissions_per_s']:,.0f}/s from {PROCESSES} processes, batches of {args.batch} = "
          f"{ratio:.3f} x ceiling (target >= {TARGET}: {'OK' if ratio >= TARGET else 'MISSED'}); "
          f"server {r['server_us']:.2f} us/admission in scripts, client CPU {r['client_cpu_us']:.2f} us; "
          f"{r['accepted']:,} of {r['admissions']:,} accepted")
    if scale is not None:
        scale_ratio = scale["admissions_per_s"] / ceiling["ops"]
        print(f"@{scale_ips} hosts {scale['admissions_per_s']:,.0f}/s = {scale_ratio:.3f} x ceiling; "
              f"server {scale['server_us']:.2f} us/admission (reported, not a target of its own)")
    summary = {
        "admission_ratio": round(ratio, 4),
        "admissions_per_s": round(r["admissions_per_s"]),
        "ceiling_ops": round(ceiling["ops"]),
        "server_us": round(r["server_us"], 3),
        "server_process_us": round(r["server_process_us"], 3),
        "client_cpu_us": round(r["client_cpu_us"], 3),
        "batch": args.batch,
        "ips": args.ips,
        "pinned": pinned,
        "target_met": ratio >= TARGET,
    }
    if scale is not None:
        summary.update(scale_ips=scale_ips, admission_ratio_at_scale=round(scale_ratio, 4))
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
