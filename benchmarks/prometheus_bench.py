#!/usr/bin/env python
"""Lag of the Prometheus source: from Prometheus's scrape of a broker's exporter to the sample published in Redis.

    .venv/bin/python benchmarks/prometheus_bench.py [--entities 1000] [--brokers 3] [--seconds 30] [--warmup 5]
                                                    [--scrape 1s] [--interval 1.0] [--throttle] [--quick] [--check]

Everything is started by the benchmark and stopped on any exit (Ctrl-C and SIGTERM included): a private
redis-server, a real Prometheus (``devtools.prometheus``, instance ``bench``, scraping every ``--scrape``) and a
fixture exporter process serving, on one port per broker, what the JMX exporter serves for Kafka's quota sensors:
``kafka_server_produce_byte_rate{user, client_id}`` of ``--entities`` entities, new values on every scrape
(``--throttle`` adds their ``kafka_server_produce_throttle_time``, doubling the series). Default: 1,000 entities x 3
brokers = 3,000 series.

The source under test is what ``manage.py prometheus_source`` runs (``observe.kafka_quotas.SourceLoop``): each
``--interval`` seconds one instant query (``PrometheusSource.poll``), and in a thread of its own (a slow publish does
not hold the next query back) the samples of each broker scraped since its last tick published
(``SamplePublisher.publish_poll``: the engine's ``Sampler.publish`` per broker). A sample's lag = the wall clock when
its publish returned minus the timestamp Prometheus gave its newest value (the scrape's start; same machine, same
clock), counted once per scrape of each series, over ``--seconds`` after ``--warmup``. Printed: lag p50/p99/max
(``prometheus_lag_p99_ms``; target p99 <= 2 s), the query's and the publish's times, samples per poll against the
series served, CPU of Prometheus, the exporter and the source, and the load average (other work on the machine
shows in every figure). The last line is one JSON object; ``--check`` exits 1 when the target is missed.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from the repo root: make `observe`, `quotas`, `devtools` importable
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402
from typing import Any  # noqa: E402

import redis  # noqa: E402

from benchmarks.harness import run_bench, tree_cpu_s  # noqa: E402
from devtools.prometheus import PrometheusServer, Target  # noqa: E402
from devtools.redis_server import RUN_DIR, free_port  # noqa: E402
from observe.kafka_quotas import Poll, PrometheusSource, SamplePublisher, SourceLoop  # noqa: E402
from observe.prometheus import PrometheusClient  # noqa: E402

CLUSTER = "bench"
TARGET_P99_MS = 2000.0


# -- the fixture exporter (its own process: serving must not share a GIL with the source under test) --------------


def serve(ports: list[int], entities: int, throttle: bool) -> None:
    """One HTTP server per broker port; each scrape gets fresh values for every entity."""
    users = [f"tenant-{i % 50}" for i in range(entities)]
    clients = [f"app-{i}" for i in range(entities)]
    rng = random.Random(7)

    def body() -> bytes:
        lines = ["# TYPE kafka_server_produce_byte_rate gauge"]
        lines += [f'kafka_server_produce_byte_rate{{client_id="{c}",user="{u}"}} {rng.uniform(0, 2e6):.1f}'
                  for u, c in zip(users, clients, strict=True)]
        if throttle:
            lines.append("# TYPE kafka_server_produce_throttle_time gauge")
            lines += [f'kafka_server_produce_throttle_time{{client_id="{c}",user="{u}"}} '
                      + (f"{rng.uniform(1, 900):.1f}" if i % 10 == 0 else "NaN")
                      for i, (u, c) in enumerate(zip(users, clients, strict=True))]
        return ("\n".join(lines) + "\n").encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            raw = body()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: Any) -> None:
            pass

    servers = [ThreadingHTTPServer(("127.0.0.1", port), Handler) for port in ports]
    for server in servers[1:]:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print("ready", flush=True)
    servers[0].serve_forever()


# -- the benchmark ---------------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args: argparse.Namespace, server: Any, stack: list[Callable[[], None]]) -> dict[str, Any]:
    ports = [free_port() for _ in range(args.brokers)]
    log_dir = RUN_DIR / "prometheus-bench"
    log_dir.mkdir(parents=True, exist_ok=True)
    exporter_log = open(log_dir / "exporter.log", "w")  # noqa: SIM115 (closed by a cleanup)
    stack.append(exporter_log.close)
    exporter = subprocess.Popen(
        [sys.executable, __file__, "--serve", ",".join(map(str, ports)), "--entities", str(args.entities)]
        + (["--throttle"] if args.throttle else []),
        stdout=subprocess.PIPE, stderr=exporter_log, stdin=subprocess.DEVNULL, cwd=ROOT,
    )

    def stop_exporter() -> None:
        exporter.terminate()
        try:
            exporter.wait(10)
        except subprocess.TimeoutExpired:
            exporter.kill()
            exporter.wait()

    stack.append(stop_exporter)
    assert exporter.stdout is not None
    if exporter.stdout.readline().strip() != b"ready":
        raise RuntimeError(f"the fixture exporter did not start; see {log_dir / 'exporter.log'}")

    targets = [Target("kafka", f"127.0.0.1:{p}", labels={"cluster": CLUSTER, "broker": str(i + 1)})
               for i, p in enumerate(ports)]
    prom = PrometheusServer("bench", clusters=[], targets=targets, scrape_interval=args.scrape, retention="1h")
    shutil.rmtree(prom.data_dir, ignore_errors=True)
    stack.append(lambda: shutil.rmtree(prom.dir, ignore_errors=True))
    stack.append(prom.stop)
    prom.start()
    prom.wait_targets_up(timeout=60)

    series_per_broker = args.entities * (2 if args.throttle else 1)
    expected = args.entities * args.brokers  # samples a complete poll makes (one per entity and broker)
    client = PrometheusClient(prom.url, timeout=10)
    stack.append(client.close)
    source = PrometheusSource(client, CLUSTER, bound=lambda _e: 1048576.0, selector={"cluster": CLUSTER},
                              window_s=3.0, connections=False)
    rclient = redis.Redis.from_url(server.url)

    # warm-up: until every series is in Prometheus, then --warmup seconds of polling
    deadline = time.monotonic() + 60
    while len(source.poll().samples) < expected:
        if time.monotonic() > deadline:
            raise RuntimeError("Prometheus did not get every series of the fixture exporter within 60 s")
        time.sleep(0.5)
    last_seen: dict[tuple[int, str, str], int] = {}
    lags: list[float] = []
    query_ms: list[float] = []
    publish_ms: list[float] = []
    per_poll: list[int] = []
    state = {"measuring": False, "short": 0}

    class TimedPublisher(SamplePublisher):
        def publish_poll(self, poll: Poll) -> list[int]:
            t0 = time.perf_counter()
            try:
                return super().publish_poll(poll)
            finally:
                if state["measuring"]:
                    publish_ms.append((time.perf_counter() - t0) * 1000.0)

    def on_published(poll: Poll, brokers: list[int], at_ms: float) -> None:
        fresh = set(brokers)  # the brokers scraped since their last tick: their samples were published now
        if state["measuring"]:
            query_ms.append(poll.query_ms)
            per_poll.append(len(poll.samples))
            state["short"] += len(poll.samples) < expected
        for sample, scraped in zip(poll.samples, poll.scraped_ms, strict=True):
            key = (sample["b"], sample["q"], sample["e"])
            if sample["b"] in fresh and scraped > last_seen.get(key, 0):
                last_seen[key] = scraped
                if state["measuring"]:
                    lags.append(at_ms - scraped)

    errors: list[str] = []
    loop = SourceLoop(source, TimedPublisher(rclient, CLUSTER), interval_s=args.interval, on_published=on_published,
                      on_error=lambda e: errors.append(str(e)))
    loop.run(lambda: False, duration_s=args.warmup)
    load0 = os.getloadavg()[0]
    cpu0 = {"prometheus": tree_cpu_s(prom.pid or 0), "exporter": tree_cpu_s(exporter.pid),
            "source": time.process_time()}
    polls0, replaced0 = loop.polls, loop.replaced
    state["measuring"] = True
    wall0 = time.monotonic()
    loop.run(lambda: False, duration_s=args.seconds)
    wall = time.monotonic() - wall0
    polls, short_polls = loop.polls - polls0, state["short"]
    cpu = {
        "prometheus": (tree_cpu_s(prom.pid or 0) - cpu0["prometheus"]) / wall,
        "exporter": (tree_cpu_s(exporter.pid) - cpu0["exporter"]) / wall,
        "source": (time.process_time() - cpu0["source"]) / wall,
    }
    scrapes = prom.api("targets?state=active")["activeTargets"]
    scrape_s = max((float(t.get("lastScrapeDuration") or 0) for t in scrapes), default=float("nan"))
    # every scrape of the window should have been published once: scrapes per series ~ seconds / scrape interval
    scrape_every_s = float(args.scrape[:-2]) / 1000 if args.scrape.endswith("ms") else float(args.scrape.rstrip("s"))
    expected_lags = expected * args.seconds / scrape_every_s
    summary = {
        "entities": args.entities, "brokers": args.brokers, "series": series_per_broker * args.brokers,
        "seconds": args.seconds, "scrape_interval": args.scrape, "poll_interval_s": args.interval,
        "prometheus_lag_p50_ms": round(pct(lags, 0.50), 1),
        "prometheus_lag_p99_ms": round(pct(lags, 0.99), 1),
        "prometheus_lag_max_ms": round(max(lags, default=float("nan")), 1),
        "lags_counted": len(lags), "lags_expected": round(expected_lags),
        "query_p50_ms": round(pct(query_ms, 0.5), 1), "query_p99_ms": round(pct(query_ms, 0.99), 1),
        "publish_p50_ms": round(pct(publish_ms, 0.5), 1), "publish_p99_ms": round(pct(publish_ms, 0.99), 1),
        "polls": polls, "polls_replaced": loop.replaced - replaced0, "errors": len(errors),
        "samples_per_poll_min": min(per_poll, default=0), "samples_expected_per_poll": expected,
        "short_polls": short_polls, "last_scrape_duration_max_ms": round(scrape_s * 1000, 1),
        "cpu_cores": {k: round(v, 3) for k, v in cpu.items()},
        "loadavg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }
    summary["target_met"] = (
        bool(lags) and summary["prometheus_lag_p99_ms"] <= TARGET_P99_MS and short_polls == 0 and not errors
    )
    print(
        f"prometheus_lag_p99_ms {summary['prometheus_lag_p99_ms']} (p50 {summary['prometheus_lag_p50_ms']}, max "
        f"{summary['prometheus_lag_max_ms']}; {len(lags)} of ~{round(expected_lags)} scrapes; target <= "
        f"{TARGET_P99_MS:.0f}) query p50/p99 {summary['query_p50_ms']}/{summary['query_p99_ms']} ms, publish "
        f"{summary['publish_p50_ms']}/{summary['publish_p99_ms']} ms, {summary['series']} series, "
        f"short polls {short_polls}/{polls}, CPU cores {summary['cpu_cores']}, load {summary['loadavg_1m']}",
        file=sys.stderr, flush=True,
    )
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=1000)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--scrape", default="1s", help="Prometheus's scrape interval (seconds, e.g. 1s)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between the source's polls")
    parser.add_argument("--throttle", action="store_true", help="serve the throttle-time series too")
    parser.add_argument("--quick", action="store_true", help="a short run (100 entities, 3 s)")
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)  # the fixture exporter's process
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve([int(p) for p in args.serve.split(",")], args.entities, args.throttle)
        return 0
    if args.quick:
        args.entities, args.seconds, args.warmup = min(args.entities, 100), min(args.seconds, 3.0), 1.0
    return run_bench("prometheus-bench", args.check, lambda server, stack: run(args, server, stack))


if __name__ == "__main__":
    sys.exit(main())
