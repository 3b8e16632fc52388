"""Cluster-wide budgets on a real 3-broker Kafka: what the cluster delivers against a budget B, per policy.

    .venv/bin/python benchmarks/cluster_budget_bench.py [--budget-kib 1024] [--phase-s 60] [--quick] [--check]

One producer (confluent-kafka, one client-id) writes as fast as Kafka lets it to a topic with one partition led
by each broker, under three workloads: demand even over the three leaders, all demand on one leader, and demand
that moves to the next leader every ``--shift-s`` seconds. Three policies, for the same budget B:

- ``default``: Kafka's default callback with B as the client-id's quota (per broker, Kafka's meaning);
- ``static``: B / brokers leading the entity's partitions per broker (the best-known static split: B / 3 here);
- ``plugin``: the portal's quota callback with B cluster-wide, shares following demand through the engine.

The first two run on a cluster without the callback, the third on one with it (same machine, same run). Per
workload and policy it prints the delivered cluster-wide rate over B in 30 s windows (p50 and worst, the worst
being the one furthest from 1), for the plugin the time from each shift until the new leader's share reaches
80 % of the budget (``shift_follow_s``, the worst shift), and the produce throughput without any quota reached,
with the plugin over without it (``plugin_overhead_ratio``). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import Cleanups, run_bench  # noqa: E402
from devtools.kafka_cluster import KafkaCluster  # noqa: E402
from devtools.redis_server import RedisServer  # noqa: E402
from quotas.connectors.kafka_client import AdminClient  # noqa: E402
from quotas.engine.budget_store import BudgetStore, budget_id, scope_field  # noqa: E402
from quotas.engine.config import EntityRef  # noqa: E402
from quotas.engine.redis_backend import connect  # noqa: E402
from traffic.budget_load import MovingProducer, create_spread_topic  # noqa: E402

NAME = "cluster-budget-bench"
WORKLOADS = ("even", "one", "moving")
WINDOW_S = 30
WARMUP_S = 15  # Kafka's quota window (11 s) and a new sensor's burst settle first
CLIENT_ID = "cb-bench"


def _log(message: str) -> None:
    print(f"{NAME}: {message}", file=sys.stderr, flush=True)


def windows(producer: MovingProducer, start: float, end: float, budget: float) -> list[float]:
    """Delivered rate over B for each 30 s window (sliding by 5 s) of [start, end)."""
    out = []
    t = start
    while t + WINDOW_S <= end:
        out.append(producer.rate(t, t + WINDOW_S) / budget)
        t += 5
    return out or [producer.rate(start, end) / budget]


def summarize(ratios: list[float]) -> dict[str, float]:
    worst = max(ratios, key=lambda r: abs(r - 1.0))
    return {"p50": round(statistics.median(ratios), 3), "worst": round(worst, 3)}


def run_workload(cluster: KafkaCluster, workload: str, budget: float, phase_s: float, shift_s: float) -> list[float]:
    """One workload on a fresh topic and client-id; the delivered/B ratios of its windows after the warm-up."""
    topic = f"cb-{workload}-{uuid.uuid4().hex[:6]}"
    led = create_spread_topic(cluster.client_config(), topic, [1, 2, 3])
    producer = MovingProducer(cluster.client_config(), topic, CLIENT_ID, sorted(led.values()) if workload == "even"
                              else [led[1]])
    producer.start()
    started = int(time.monotonic()) + 1
    try:
        if workload == "moving":
            leader = 1
            while time.monotonic() < started + phase_s:
                time.sleep(shift_s)
                leader = leader % 3 + 1
                producer.move_to([led[leader]])
        else:
            time.sleep(phase_s)
    finally:
        producer.stop()
    return windows(producer, started + WARMUP_S, started + phase_s, budget)


def set_quota(cluster: KafkaCluster, value: float | None) -> None:
    entity = {"client-id": CLIENT_ID}
    answer = AdminClient(cluster.bootstrap()).alter_client_quotas([(entity, {"producer_byte_rate": value})])
    assert [e.error_code for e in answer.entries] == [0], answer


def overhead_rate(cluster: KafkaCluster, seconds: float) -> float:
    """Bytes/s acknowledged with no quota reached (the client-id has none)."""
    set_quota(cluster, None)
    topic = f"cb-free-{uuid.uuid4().hex[:6]}"
    led = create_spread_topic(cluster.client_config(), topic, [1, 2, 3])
    producer = MovingProducer(cluster.client_config(), topic, CLIENT_ID, sorted(led.values())).start()
    start = int(time.monotonic()) + 2
    time.sleep(seconds + 2)
    producer.stop()
    return producer.rate(start, start + seconds)


def run(server: RedisServer, cleanups: Cleanups, args: argparse.Namespace) -> dict[str, Any]:
    budget = float(args.budget_kib * 1024)
    results: dict[str, dict[str, dict[str, float]]] = {w: {} for w in WORKLOADS}

    _log("a cluster with Kafka's default callback")
    stock = KafkaCluster(f"{NAME}-stock", fresh=True, jmx_exporter=False, quota_callback=False)
    cleanups.append(stock.stop)
    stock.start()
    base_rate = overhead_rate(stock, args.overhead_s)
    for policy, value in (("default", budget), ("static", budget / 3)):
        set_quota(stock, value)
        for workload in WORKLOADS:
            ratios = run_workload(stock, workload, budget, args.phase_s, args.shift_s)
            results[workload][policy] = summarize(ratios)
            _log(f"{policy} {workload}: {results[workload][policy]}")
    stock.stop()

    _log("a cluster with the quota callback")
    plugged = KafkaCluster(f"{NAME}-plugin", fresh=True, jmx_exporter=False, budget_redis_url=server.url)
    cleanups.append(plugged.stop)
    plugged.start()
    plugin_rate = overhead_rate(plugged, args.overhead_s)
    store = BudgetStore(connect(server.url), plugged.name)
    set_quota(plugged, budget)
    store.set_scope([scope_field("produce", EntityRef(client_id=CLIENT_ID).field())])
    follows: list[float] = []
    bid = budget_id("produce", "", CLIENT_ID)
    for workload in WORKLOADS:
        if workload != "moving":
            ratios = run_workload(plugged, workload, budget, args.phase_s, args.shift_s)
        else:
            ratios = _moving_with_follow(plugged, store, bid, budget, args, follows)
        results[workload]["plugin"] = summarize(ratios)
        _log(f"plugin {workload}: {results[workload]['plugin']}")

    worst_plugin = max((results[w]["plugin"]["worst"] for w in WORKLOADS), key=lambda r: abs(r - 1.0))
    static_worst = max((results[w]["static"]["worst"] for w in WORKLOADS), key=lambda r: abs(r - 1.0))
    default_overshoot = max(results[w]["default"]["worst"] for w in WORKLOADS)
    shift_follow = max(follows) if follows else float("nan")
    overhead = plugin_rate / base_rate if base_rate else float("nan")
    met = 0.9 <= worst_plugin <= 1.1 and shift_follow <= 5.0 and overhead >= 0.95
    return {
        "bench": NAME,
        "budget_bytes_per_s": budget,
        "workloads": results,
        "shift_follows_s": [round(f, 2) for f in follows],
        "budget_accuracy_worst": worst_plugin,
        "default_overshoot": default_overshoot,
        "static_split_worst": static_worst,
        "shift_follow_s": round(shift_follow, 2),
        "plugin_overhead_ratio": round(overhead, 3),
        "free_rate_default_mib_s": round(base_rate / 1048576, 2),
        "free_rate_plugin_mib_s": round(plugin_rate / 1048576, 2),
        "target_met": met,
    }


def _moving_with_follow(
    cluster: KafkaCluster, store: BudgetStore, bid: str, budget: float, args: argparse.Namespace, follows: list[float]
) -> list[float]:
    """The moving workload on the plugin's cluster, timing how fast the new leader's share follows each shift."""
    topic = f"cb-moving-{uuid.uuid4().hex[:6]}"
    led = create_spread_topic(cluster.client_config(), topic, [1, 2, 3])
    producer = MovingProducer(cluster.client_config(), topic, CLIENT_ID, [led[1]]).start()
    started = int(time.monotonic()) + 1
    leader = 1
    try:
        while time.monotonic() < started + args.phase_s:
            time.sleep(args.shift_s)
            leader = leader % 3 + 1
            producer.move_to([led[leader]])
            shifted = time.monotonic()
            while time.monotonic() - shifted < args.shift_s - 1:
                share = store.shares(bid).get(leader, {}).get("s", 0.0)
                if share >= 0.8 * budget:
                    follows.append(time.monotonic() - shifted)
                    break
                time.sleep(0.1)
            else:
                follows.append(float(args.shift_s))  # never followed within the phase: counted as the whole phase
    finally:
        producer.stop()
    return windows(producer, started + WARMUP_S, started + args.phase_s, budget)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget-kib", type=int, default=1024, help="the budget B, KiB/s (default 1024)")
    parser.add_argument("--phase-s", type=float, default=75.0, help="seconds per workload and policy")
    parser.add_argument("--shift-s", type=float, default=20.0, help="seconds between demand shifts")
    parser.add_argument("--overhead-s", type=float, default=10.0, help="seconds of unthrottled produce per cluster")
    parser.add_argument("--quick", action="store_true", help="short phases (45 s, shifts every 15 s)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    args = parser.parse_args(argv)
    if args.quick:
        args.phase_s, args.shift_s, args.overhead_s = 45.0, 15.0, 5.0
    return run_bench(NAME, args.check, lambda server, cleanups: run(server, cleanups, args))


if __name__ == "__main__":
    sys.exit(main())
