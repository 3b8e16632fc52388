"""KIP-714 sink throughput: accepted pushes/s of ~10 KB zstd OTLP payloads from many simulated clients, against a
trivial endpoint of the same uvicorn server in the same run.

Builds a throw-away SQLite database (one cluster, one client-metrics subscription of every metric at the
shortest interval, 100 ms), its own redis-server and the portal under uvicorn (``benchmarks.api_bench_settings``:
the portal's URLs plus ``/bench/trivial``). Each simulated client (threads in a few processes, one keep-alive
``http.client`` connection each) asks for its subscription (``POST /telemetry/v1/<cluster>/get-subscriptions``),
then pushes (``POST /telemetry/v1/<cluster>/push``) as often as its push interval allows. The baseline phase has
the same clients GET ``/bench/trivial`` back to back. Reported: accepted pushes/s, trivial requests/s, their ratio
(target >= 0.25), throttled and failed answers, and the server's peak RSS (VmHWM). The last line is one JSON object.

    .venv/bin/python benchmarks/telemetry_bench.py [--quick] [--clients 200] [--seconds 10] [--check]
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
import random  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from benchmarks.api_bench import Portal, remove_database, setup_django  # noqa: E402
from benchmarks.harness import fan_out, rss_max_mb, run_bench  # noqa: E402
from devtools.redis_server import RUN_DIR, free_port  # noqa: E402

CLUSTER = "telbench"
TARGET_RATIO = 0.25
PAYLOAD_BYTES = 10_000
BENCH_DIR = RUN_DIR / "telemetry-bench"


def build_payload(client_id: str, seed: int, target: int = PAYLOAD_BYTES) -> bytes:
    """A zstd-compressed OTLP MetricsData of about ``target`` bytes (noisy gauges: zstd cannot shrink them away)."""
    import zstandard
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

    rng = random.Random(seed)
    now_ns = time.time_ns()
    data = MetricsData()
    rm = data.resource_metrics.add()
    rm.resource.attributes.append(KeyValue(key="client_id", value=AnyValue(string_value=client_id)))
    sm = rm.scope_metrics.add()
    cctx = zstandard.ZstdCompressor(level=3)
    n = 0
    while True:
        for _ in range(20):
            m = sm.metrics.add()
            m.name = f"org.apache.kafka.producer.topic.m{n % 50}.rate"
            dp = m.gauge.data_points.add()
            dp.time_unix_nano = now_ns
            dp.as_double = rng.random() * 1e6
            dp.attributes.append(KeyValue(key="topic", value=AnyValue(string_value=f"t-{rng.getrandbits(40):x}")))
            n += 1
        blob = cctx.compress(data.SerializeToString())
        if len(blob) >= target:
            return blob


def _client_thread(port: int, kind: str, seconds: float, start_at: float, out: list[Any], idx: int,
                   token: str) -> None:
    counts = {"ok": 0, "throttled": 0, "failed": 0, "bytes": 0}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        if kind == "trivial":
            headers = {"Authorization": f"Token {token}"}
            time.sleep(max(0.0, start_at - time.time()))
            end = start_at + seconds
            while time.time() < end:
                conn.request("GET", "/bench/trivial", headers=headers)
                resp = conn.getresponse()
                resp.read()
                counts["ok" if resp.status == 200 else "failed"] += 1
            return
        client_id = f"bench-app-{idx % 20}"
        body = json.dumps({"client_instance_id": None, "client_id": client_id,
                           "client_software_name": "bench", "client_software_version": "1"})
        for attempt in range(10):  # 200 clients at once: an overloaded server may answer an error page
            conn.request("POST", f"/telemetry/v1/{CLUSTER}/get-subscriptions", body=body,
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
            if resp.status == 200:
                break
            if attempt == 9:
                raise RuntimeError(f"get-subscriptions answered {resp.status}: {raw[:200]!r}")
            time.sleep(0.2 * (attempt + 1))
        sub = json.loads(raw)
        if sub.get("error_code") != "NONE":
            raise RuntimeError(f"get-subscriptions: {sub}")
        payload = build_payload(client_id, idx)
        counts["bytes"] = len(payload)
        interval = sub["push_interval_ms"] / 1000
        headers = {"Content-Type": "application/x-protobuf", "Kafka-Client-Instance-Id": sub["client_instance_id"],
                   "Kafka-Subscription-Id": str(sub["subscription_id"]), "Kafka-Compression-Type": "zstd"}
        time.sleep(max(0.0, start_at - time.time()) + random.random() * interval)
        end = start_at + seconds
        last = 0.0
        while time.time() < end:
            wait = last + interval * 1.02 - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            last = time.monotonic()
            conn.request("POST", f"/telemetry/v1/{CLUSTER}/push", body=payload, headers=headers)
            resp = conn.getresponse()
            answer = json.loads(resp.read() or b"{}")
            code = answer.get("error_code")
            if code == "NONE":
                counts["ok"] += 1
            elif code == "THROTTLING_QUOTA_EXCEEDED":
                counts["throttled"] += 1
                last = time.monotonic() + answer.get("retry_after_ms", 0) / 1000 - interval
            else:
                counts["failed"] += 1
                if counts["failed"] <= 1:
                    print(f"push answered {resp.status} {answer}", file=sys.stderr)
    except Exception as e:  # reported, not fatal for the other clients
        counts["failed"] += 1
        print(f"client {idx}: {e!r}", file=sys.stderr)
    finally:
        conn.close()
        out.append(counts)


def measure(port: int, kind: str, clients: int, seconds: float, procs: int, token: str) -> dict[str, Any]:
    start_at = time.time() + 2.0 + clients * 0.005

    def client(idx: int, out: list[Any]) -> None:
        _client_thread(port, kind, seconds, start_at, out, idx, token)

    results = fan_out(client, clients, procs, seconds + 120)
    total = {k: sum(r[k] for r in results) for k in ("ok", "throttled", "failed")}
    sizes = [r["bytes"] for r in results if r["bytes"]]
    return {**total, "per_s": total["ok"] / seconds, "payload_bytes": round(sum(sizes) / len(sizes)) if sizes else 0}


def build_database() -> str:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections
    from rest_framework.authtoken.models import Token

    from quotas.models import ClientMetricsSubscription, Cluster

    call_command("migrate", interactive=False, verbosity=0)
    cluster = Cluster.objects.create(name=CLUSTER, description="telemetry_bench")
    ClientMetricsSubscription.objects.create(cluster=cluster, name="all", metrics="*", interval_ms=100)
    user = get_user_model().objects.create_user("telemetry-bench", is_staff=True)
    token = Token.objects.create(user=user).key
    connections.close_all()
    return token


def run(args: argparse.Namespace, server: Any, stack: list[Callable[[], None]]) -> dict[str, Any]:
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    db_path = BENCH_DIR / "bench.sqlite3"
    remove_database(db_path)
    stack.append(lambda: remove_database(db_path))
    env = setup_django(db_path, server.url)
    env["DJANGO_SETTINGS_MODULE"] = "benchmarks.api_bench_settings"
    token = build_database()
    portal = Portal(free_port(), env, 1, token, BENCH_DIR / "uvicorn.log").start()
    stack.append(portal.stop)
    assert portal.proc is not None
    pid = portal.proc.pid
    print(f"telemetry_bench: {args.clients} clients, {args.seconds:g} s per phase, port {portal.port}", file=sys.stderr)
    trivial = measure(portal.port, "trivial", args.clients, args.seconds, args.procs, token)
    print(f"trivial: {trivial}", file=sys.stderr)
    pushes = measure(portal.port, "push", args.clients, args.seconds, args.procs, token)
    print(f"push: {pushes}", file=sys.stderr)
    rss = rss_max_mb(pid)
    ratio = pushes["per_s"] / trivial["per_s"] if trivial["per_s"] else float("nan")
    ceiling = args.clients / 0.1  # every client at its 100 ms push interval
    return {
        "bench": "telemetry",
        "clients": args.clients,
        "seconds": args.seconds,
        "payload_bytes": pushes["payload_bytes"],
        "pushes_per_s": round(pushes["per_s"], 1),
        "pushes_ok": pushes["ok"],
        "pushes_throttled": pushes["throttled"],
        "pushes_failed": pushes["failed"],
        "client_interval_ceiling_per_s": ceiling,
        "trivial_per_s": round(trivial["per_s"], 1),
        "trivial_failed": trivial["failed"],
        "push_ratio": round(ratio, 3),
        "target": TARGET_RATIO,
        "target_met": bool(ratio >= TARGET_RATIO) and pushes["failed"] == 0,
        "server_rss_max_mb": round(rss, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--procs", type=int, default=4, help="client processes (the clients are threads in them)")
    parser.add_argument("--quick", action="store_true", help="20 clients, 2 s per phase (a smoke run)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the ratio misses its target")
    args = parser.parse_args(argv)
    if args.quick:
        args.clients, args.seconds, args.procs = min(args.clients, 20), min(args.seconds, 2.0), 2
    return run_bench("telemetry-bench", args.check, lambda server, stack: run(args, server, stack))


if __name__ == "__main__":
    sys.exit(main())
