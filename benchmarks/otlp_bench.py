"""OTLP receiver throughput: ``POST /v1/metrics`` requests/s against a trivial endpoint of the same uvicorn server in
the same run (``otlp_ratio``, target >= 0.4).

Builds a throw-away SQLite database (one cluster, a token user), its own redis-server and the portal under one
uvicorn worker (``benchmarks.api_bench_settings``: the portal's URLs plus ``/bench/trivial``, a DRF view behind the
API's token authentication), pinned to a CPU of its own when there are two or more. Closed-loop clients (threads in
a few processes, one keep-alive ``http.client`` connection each) then run three phases back to back: GET
``/bench/trivial``, POST ``/v1/metrics``, GET ``/bench/trivial`` again. Each OTLP request is what the KIP-714 broker
plugin forwards for one librdkafka producer push: the client's OTLP ``MetricsData`` (protobuf, ~1 KB, 8 metrics
with node attributes, 12 points, as librdkafka 2.x sends them) with the plugin's ``X-Kafka-*`` and ``X-Quotas-Cluster``
headers, each client a client instance of its own; every accepted request is stored (Redis streams, the instance
record, a landing file). Reported: requests/s of each phase, ``otlp_ratio`` = OTLP requests/s over the mean of the
two trivial phases, failures, points stored per second and the server's peak RSS. The last line is one JSON object.

    .venv/bin/python benchmarks/otlp_bench.py [--quick] [--clients 16] [--seconds 8] [--encoding protobuf|json]
        [--gzip] [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import base64  # noqa: E402
import gzip  # noqa: E402
import http.client  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from benchmarks.api_bench import Portal, pin_server, remove_database, setup_django  # noqa: E402
from benchmarks.harness import fan_out, rss_max_mb, run_bench  # noqa: E402
from devtools.redis_server import RUN_DIR, free_port  # noqa: E402

CLUSTER = "otlpbench"
TARGET_RATIO = 0.4
BENCH_DIR = RUN_DIR / "otlp-bench"
PRODUCER_METRICS = (  # what librdkafka 2.x pushes for a producer subscribed to "*" (node.id per broker)
    ("org.apache.kafka.producer.connection.creation.rate", False),
    ("org.apache.kafka.producer.connection.creation.total", False),
    ("org.apache.kafka.producer.node.request.latency.avg", True),
    ("org.apache.kafka.producer.node.request.latency.max", True),
    ("org.apache.kafka.producer.produce.throttle.time.avg", False),
    ("org.apache.kafka.producer.produce.throttle.time.max", False),
    ("org.apache.kafka.producer.record.queue.time.avg", False),
    ("org.apache.kafka.producer.record.queue.time.max", False),
)


def build_payload(seed: int, encoding: str) -> tuple[bytes, int]:
    """One producer push as the broker hands it to the plugin (OTLP MetricsData), and its number of points."""
    from google.protobuf import json_format
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.metrics.v1.metrics_pb2 import AGGREGATION_TEMPORALITY_DELTA, MetricsData

    rng = random.Random(seed)
    now_ns = time.time_ns()
    data = MetricsData()
    rm = data.resource_metrics.add()
    sm = rm.scope_metrics.add()
    sm.scope.name = "librdkafka"
    points = 0
    for name, per_node in PRODUCER_METRICS:
        m = sm.metrics.add(name=name)
        if name.endswith(".total"):
            m.sum.aggregation_temporality = AGGREGATION_TEMPORALITY_DELTA
            m.sum.is_monotonic = True
            series = m.sum.data_points
        else:
            series = m.gauge.data_points
        for node in (1, 2, 3) if per_node else (None,):
            dp = series.add(time_unix_nano=now_ns, start_time_unix_nano=now_ns - 1_000_000_000)
            dp.as_double = round(rng.random() * 100, 3)
            if node is not None:
                dp.attributes.append(KeyValue(key="node.id", value=AnyValue(int_value=node)))
            points += 1
    if encoding == "json":
        return json.dumps(json_format.MessageToDict(data)).encode(), points
    return data.SerializeToString(), points


def _instance_id(idx: int) -> str:
    return base64.urlsafe_b64encode(idx.to_bytes(16, "big")).decode().rstrip("=")


def _client_thread(port: int, kind: str, seconds: float, start_at: float, out: list[Any], idx: int, token: str,
                   encoding: str, gzipped: bool) -> None:
    counts = {"ok": 0, "failed": 0, "bytes": 0, "points": 0, "partial": 0}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        if kind == "trivial":
            method, path, body, headers = "GET", "/bench/trivial", None, {"Authorization": f"Token {token}"}
        else:
            payload, points = build_payload(idx, encoding)
            body = gzip.compress(payload, 1) if gzipped else payload
            counts["bytes"], counts["points"] = len(body), points
            headers = {
                "Content-Type": "application/json" if encoding == "json" else "application/x-protobuf",
                "X-Quotas-Cluster": CLUSTER, "X-Kafka-Client-Instance-Id": _instance_id(idx),
                "X-Kafka-Client-Id": f"bench-producer-{idx}", "X-Kafka-Principal": "User:ANONYMOUS",
                "X-Kafka-Client-Address": "127.0.0.1", "X-Kafka-Client-Software-Name": "confluent-kafka-python",
                "X-Kafka-Client-Software-Version": "2.16.1-rdkafka-2.16.0", "X-Kafka-Push-Interval-Ms": "1000",
                "X-Kafka-Terminating": "false", "X-Kafka-Cluster-Id": "q1Sh-9_ISia_zwGINzRvyQ",
                "X-Kafka-Broker-Id": str(idx % 3 + 1),
            }
            if gzipped:
                headers["Content-Encoding"] = "gzip"
            method, path = "POST", "/v1/metrics"
        time.sleep(max(0.0, start_at - time.time()))
        end = start_at + seconds
        while time.time() < end:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            answer = resp.read()
            if resp.status == 200:
                counts["ok"] += 1
                counts["partial"] += kind == "otlp" and bool(answer) and answer != b"{}"
            else:
                counts["failed"] += 1
                if counts["failed"] <= 1:
                    print(f"{kind} answered {resp.status} {answer[:200]!r}", file=sys.stderr)
    except Exception as e:  # reported, not fatal for the other clients
        counts["failed"] += 1
        print(f"client {idx}: {e!r}", file=sys.stderr)
    finally:
        conn.close()
        out.append(counts)


def measure(port: int, kind: str, args: argparse.Namespace, token: str) -> dict[str, Any]:
    start_at = time.time() + 1.5

    def client(idx: int, out: list[Any]) -> None:
        _client_thread(port, kind, args.seconds, start_at, out, idx, token, args.encoding, args.gzip)

    results = fan_out(client, args.clients, args.procs, args.seconds + 120)
    total = {k: sum(r[k] for r in results) for k in ("ok", "failed", "partial")}
    sizes = [r["bytes"] for r in results if r["bytes"]]
    points = sum(r["ok"] * r["points"] for r in results)
    return {**total, "per_s": total["ok"] / args.seconds, "points_per_s": points / args.seconds,
            "payload_bytes": round(sum(sizes) / len(sizes)) if sizes else 0}


def build_database() -> str:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections
    from rest_framework.authtoken.models import Token

    from quotas.models import Cluster

    call_command("migrate", interactive=False, verbosity=0)
    Cluster.objects.create(name=CLUSTER, description="otlp_bench")
    user = get_user_model().objects.create_user("otlp-bench", is_staff=True)
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
    env["QUOTAS_LANDING_ROOT"] = str(BENCH_DIR / "landing")
    env["QUOTAS_OTLP_TOKEN"] = ""
    token = build_database()
    pins = pin_server(not args.no_pin, 1)
    portal = Portal(free_port(), env, 1, token, BENCH_DIR / "uvicorn.log")
    stack.append(portal.stop)
    if pins is not None:
        os.sched_setaffinity(0, pins[0])  # uvicorn inherits this
        try:
            portal.start()
        finally:
            os.sched_setaffinity(0, pins[1])  # this process and the clients
    else:
        portal.start()
    assert portal.proc is not None
    pid = portal.proc.pid
    where = f"pinned to CPU {sorted(pins[0])}" if pins else "not pinned"
    print(f"otlp_bench: {args.clients} clients in {args.procs} processes, {args.seconds:g} s per phase, "
          f"{args.encoding}{' + gzip' if args.gzip else ''}, uvicorn 1 worker {where}, port {portal.port}",
          file=sys.stderr)
    trivial = measure(portal.port, "trivial", args, token)
    print(f"trivial: {trivial}", file=sys.stderr)
    otlp = measure(portal.port, "otlp", args, token)
    print(f"otlp: {otlp}", file=sys.stderr)
    trivial_end = measure(portal.port, "trivial", args, token)
    print(f"trivial (again): {trivial_end}", file=sys.stderr)
    baseline = (trivial["per_s"] + trivial_end["per_s"]) / 2
    ratio = otlp["per_s"] / baseline if baseline else float("nan")
    failed = otlp["failed"] + trivial["failed"] + trivial_end["failed"]
    return {
        "bench": "otlp",
        "clients": args.clients,
        "seconds": args.seconds,
        "encoding": args.encoding,
        "gzip": args.gzip,
        "payload_bytes": otlp["payload_bytes"],
        "otlp_per_s": round(otlp["per_s"], 1),
        "otlp_points_per_s": round(otlp["points_per_s"], 1),
        "otlp_ok": otlp["ok"],
        "otlp_partial": otlp["partial"],
        "otlp_failed": otlp["failed"],
        "trivial_per_s": round(trivial["per_s"], 1),
        "trivial_end_per_s": round(trivial_end["per_s"], 1),
        "trivial_failed": trivial["failed"] + trivial_end["failed"],
        "otlp_ratio": round(ratio, 3),
        "target": TARGET_RATIO,
        "target_met": bool(ratio >= TARGET_RATIO) and failed == 0,
        "server_rss_max_mb": round(rss_max_mb(pid), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--procs", type=int, default=2, help="client processes (the clients are threads in them)")
    parser.add_argument("--encoding", choices=("protobuf", "json"), default="protobuf")
    parser.add_argument("--gzip", action="store_true", help="gzip the OTLP bodies (Content-Encoding: gzip)")
    parser.add_argument("--no-pin", action="store_true", help="do not give uvicorn a CPU of its own")
    parser.add_argument("--quick", action="store_true", help="4 clients, 2 s per phase (a smoke run)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the ratio misses its target")
    args = parser.parse_args(argv)
    if args.quick:
        args.clients, args.seconds, args.procs = min(args.clients, 4), min(args.seconds, 2.0), 1
    return run_bench("otlp-bench", args.check, lambda server, stack: run(args, server, stack))


if __name__ == "__main__":
    sys.exit(main())
