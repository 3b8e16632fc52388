#!/usr/bin/env python
"""What reconcile's read of a real Kafka cluster costs as its client quotas grow (the Kafka connector's describe path).

    .venv/bin/python benchmarks/kafka_describe_bench.py [--bootstrap HOST:PORT,...] [--sizes 1000,10000,30000]
                                                        [--rounds 5] [--quick] [--check]

A fresh 3-node Kafka 4.4 cluster ``bench-describe`` is started under ``.run/kafka/`` and stopped (its files removed)
on any exit; ``--bootstrap`` uses a running cluster instead and removes the quotas it set. For each size N, in
ascending order, the cluster is given client quotas for N ``user`` entities (AlterClientQuotas, 1,000 entries per
request, only the ones it lacks), then, ``--rounds`` times each, alternated:

* ``connector``: ``KafkaConnector.describe`` of the cluster's push target, what each reconcile pass reads: one
  DescribeClientQuotas of every entity, DescribeConfigs of the default broker, and of each broker its own, asked
  itself; parsed into the portal's items. The requests it sends are counted (``requests_per_pass``).
* ``raw`` (the baseline): the bare DescribeClientQuotas of every entity with the same wire client, decoded, not
  parsed: what Kafka and the wire cost before the portal adds anything. ``connector_ratio`` = raw / connector.

Printed per size: the medians, the microseconds per entity, then the growth exponent between consecutive sizes
(``log(t2/t1)/log(n2/n1)``: 1.0 = linear). Goals (issue 33: nothing worse than linear in entities; nothing that
grows with brokers where it need not): ``describe_exponent`` <= 1.15 and ``quota_describes_per_pass`` == 1 (the
quotas of a KRaft cluster are cluster-wide: one describe per cluster, not per broker). ``--check`` exits 1 when one
is missed. The last line of output is one JSON object.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from the repo root: make `quotas`, `devtools` importable
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from benchmarks.harness import run_bench  # noqa: E402
from devtools.kafka import KafkaCluster  # noqa: E402
from devtools.redis_server import RedisServer  # noqa: E402
from kafka_wire import AdminClient, raise_for_errors  # noqa: E402
from quotas.connectors.base import Target  # noqa: E402
from quotas.connectors.kafka import KafkaConnector  # noqa: E402

KAFKA_NAME = "bench-describe"
KEY = "producer_byte_rate"
CHUNK = 1000
USER = "describe-bench-{:06d}"


def fill(admin: AdminClient, have: int, want: int) -> float:
    """Quotas for users ``have`` .. ``want - 1``; the seconds it took."""
    t0 = time.perf_counter()
    for lo in range(have, want, CHUNK):
        entries = [({"user": USER.format(i)}, {KEY: 1_000_000.0 + i}) for i in range(lo, min(want, lo + CHUNK))]
        raise_for_errors(admin.alter_client_quotas(entries).entries)
    return time.perf_counter() - t0


def empty(admin: AdminClient, count: int) -> None:
    """Remove the quotas ``fill`` set (a running cluster is left as found)."""
    for lo in range(0, count, CHUNK):
        entries = [({"user": USER.format(i)}, {KEY: None}) for i in range(lo, min(count, lo + CHUNK))]
        raise_for_errors(admin.alter_client_quotas(entries).entries)


def settled(admin: AdminClient, want: int, timeout: float = 60.0) -> int:
    """Wait until the broker describes every quota set (the metadata log reached it); how many it holds."""
    deadline = time.monotonic() + timeout
    held = 0
    while time.monotonic() < deadline:
        held = sum(1 for e in admin.describe_client_quotas().entries or () if e.entity[0].entity_name.startswith(
            "describe-bench-"))
        if held >= want:
            break
        time.sleep(0.2)
    return held


class Counting:
    """Counts the requests every AdminClient of this process sends, by type (the connector's own clients too)."""

    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()
        self._send = AdminClient.send
        counter = self

        def send(client: AdminClient, request: Any, **kwargs: Any) -> Any:
            counter.sent[type(request).__name__] += 1
            return counter._send(client, request, **kwargs)

        AdminClient.send = send  # type: ignore[method-assign]

    def close(self) -> None:
        AdminClient.send = self._send  # type: ignore[method-assign]


def measure(connector: KafkaConnector, target: Target, raw: AdminClient, rounds: int,
            counting: Counting) -> dict[str, Any]:
    """Medians of ``rounds`` alternated connector and raw reads, and the requests of one connector pass."""
    connector.describe(target, {})  # warm: connections and the broker list
    raw.describe_client_quotas()
    times: dict[str, list[float]] = {"connector": [], "raw": []}
    per_pass: Counter[str] = Counter()
    items = 0
    for r in range(rounds):
        order = ("connector", "raw") if r % 2 == 0 else ("raw", "connector")
        for what in order:
            before = Counter(counting.sent)
            t0 = time.perf_counter()
            if what == "connector":
                _, state = connector.describe(target, {})
                items = len(state)
            else:
                raw.describe_client_quotas()
            times[what].append((time.perf_counter() - t0) * 1000)
            if what == "connector" and r == 0:
                per_pass = counting.sent - before
    return {
        "connector_ms": statistics.median(times["connector"]), "raw_ms": statistics.median(times["raw"]),
        "items": items, "requests": dict(per_pass),
    }


def exponent(c1: float, c2: float, n1: int, n2: int) -> float:
    return math.log(c2 / c1) / math.log(n2 / n1) if c1 > 0 and c2 > 0 and n2 != n1 else float("nan")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="a running cluster's bootstrap servers (default: start a fresh one)")
    parser.add_argument("--sizes", default="1000,10000,30000", help="quota entities per step, ascending")
    parser.add_argument("--rounds", type=int, default=5, help="timed reads of each kind per size")
    parser.add_argument("--quick", action="store_true", help="sizes 1000,5000 and 3 rounds")
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.rounds = "1000,5000", 3
    args.sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    return args


def run(args: argparse.Namespace, _server: RedisServer, stack: list[Callable[[], None]]) -> dict[str, Any]:
    started = None
    if args.bootstrap:
        bootstrap, where = args.bootstrap, f"the running cluster at {args.bootstrap}"
    else:
        kafka = KafkaCluster(KAFKA_NAME, fresh=True)
        stack.append(lambda: shutil.rmtree(kafka.dir, ignore_errors=True)
                     if not any(n.is_running() for n in kafka.nodes) else None)
        stack.append(kafka.stop)
        t0 = time.perf_counter()
        kafka.start()
        started = time.perf_counter() - t0
        bootstrap, where = kafka.bootstrap(), f"a fresh 3-node cluster {KAFKA_NAME!r} started in {started:.1f} s"
    print(f"kafka-describe-bench: {where}; sizes {args.sizes}, {args.rounds} rounds", flush=True)
    counting = Counting()
    stack.append(counting.close)
    admin = AdminClient(bootstrap)
    stack.append(admin.close)
    have = 0
    stack.append(lambda: empty(admin, have) if args.bootstrap else None)
    connector = KafkaConnector()
    stack.append(connector.close)
    target = Target(KAFKA_NAME, None, bootstrap)
    rows = []
    for n in args.sizes:
        fill_s = fill(admin, have, n)
        have = n
        held = settled(admin, n)
        row = {"entities": n, "held": held, "fill_s": round(fill_s, 2), **measure(connector, target, admin,
                                                                                   args.rounds, counting)}
        row["us_per_entity"] = row["connector_ms"] * 1000 / n
        row["connector_ratio"] = row["raw_ms"] / row["connector_ms"] if row["connector_ms"] else float("nan")
        rows.append(row)
        print(f"  {n:>7,} quotas (held {held:,}; set in {fill_s:.1f} s): connector {row['connector_ms']:8.1f} ms "
              f"({row['us_per_entity']:.1f} us/entity, {row['items']:,} items), raw describe {row['raw_ms']:8.1f} ms "
              f"(ratio {row['connector_ratio']:.2f}); requests per pass {row['requests']}", flush=True)
    grown = [
        {"from": a["entities"], "to": b["entities"],
         "connector": round(exponent(a["connector_ms"], b["connector_ms"], a["entities"], b["entities"]), 2),
         "raw": round(exponent(a["raw_ms"], b["raw_ms"], a["entities"], b["entities"]), 2)}
        for a, b in zip(rows, rows[1:], strict=False)
    ]
    for g in grown:
        print(f"  growth {g['from']:,} -> {g['to']:,}: connector {g['connector']}, raw {g['raw']} (1.0 = linear)")
    worst = max((g["connector"] for g in grown), default=float("nan"))
    describes = max((r["requests"].get("DescribeClientQuotasRequest", 0) for r in rows), default=0)
    last = rows[-1]
    return {
        "benchmark": "kafka_describe", "where": where, "sizes": args.sizes,
        "connector_ms": {str(r["entities"]): round(r["connector_ms"], 1) for r in rows},
        "raw_ms": {str(r["entities"]): round(r["raw_ms"], 1) for r in rows},
        "us_per_entity": round(last["us_per_entity"], 2), "connector_ratio": round(last["connector_ratio"], 3),
        "describe_exponent": worst, "requests_per_pass": last["requests"], "quota_describes_per_pass": describes,
        "target_met": bool(worst <= 1.15 and describes == 1),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_bench("kafka-describe-bench", args.check, lambda server, stack: run(args, server, stack))


if __name__ == "__main__":
    sys.exit(main())
