#!/usr/bin/env python
"""Impact previews from the request to the figures on the page: warm (the worker's long-lived Spark session)
against cold (a new Spark application per preview, the portal's path before the session was kept), in one run.

    .venv/bin/python benchmarks/preview_bench.py [--previews 10] [--cold 3] [--seconds 600] [--quick] [--check]

Everything is the portal's own, started by the benchmark and stopped on any exit: a private redis-server, a
throw-away SQLite database under ``.run/preview-bench/`` (``migrate``), one engine cluster, a staff user, and a
real Celery worker of the ``pipeline`` queue (``celery -A portal worker -Q pipeline -c 1``, as run_portal.sh
starts it). One entity's produce traffic (``--seconds`` of it, 10 records a second on each of 3 brokers) is logged
and landed as the portal lands it, once, before anything is timed: every preview replays the same landed data, each
with a value of its own (so none is answered from the cache).

A preview is timed from just before ``POST /api/previews/`` to the first poll of its page fragment
(``/previews/<id>/``, what the page swaps in) that holds the figures, polling every 50 ms, in this process through
Django's test client (the page's own script polls every 250 ms during the first 5 s, so a page shows them at most
that much later).

* cold: a worker with ``QUOTAS_SPARK_WARM=0``; each of ``--cold`` previews starts ``python -m pipeline.whatif`` and
  its JVM. Median.
* first: a new worker with the warm session; its first preview starts the session (the cold start a portal pays once
  per worker process).
* warm: ``--previews`` more previews on that worker, each a different value. Median, p90, max.

``warm_cold_ratio`` = warm median / cold median (lower is better); ``warm_median_s`` against the goal of 3 s. Every
preview must finish with figures, and every warm one must report the same Spark application as the first. The last
line of output is one JSON object; ``--check`` exits 1 when the warm median misses the goal.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from the repo root
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from benchmarks.api_bench import remove_database  # noqa: E402
from benchmarks.harness import Cleanups, run_bench  # noqa: E402
from benchmarks.push_bench import Worker, migrate, setup_django  # noqa: E402
from devtools.redis_server import RUN_DIR, RedisServer  # noqa: E402

CLUSTER = "previewbench"
USER, CLIENT_ID = "svc-bench", "bench-app"
KEY = "producer_byte_rate"
BROKERS = 3
GOAL_S = 3.0
POLL_S = 0.05
BENCH_DIR = RUN_DIR / "preview-bench"
T0 = 1_767_225_600_000  # 2026-01-01 00:00:00 UTC: the traffic's start


class PipelineWorker(Worker):
    """The pipeline queue's worker (run_portal.sh's second worker), one process as there."""

    def command(self) -> list[str]:
        return [*super().command(), "-Q", "pipeline"]

    def ready(self, timeout_s: float = 120) -> PipelineWorker:
        deadline = time.monotonic() + timeout_s
        while b"ready." not in self.log_path.read_bytes():
            self.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the pipeline worker did not get ready:\n{self.log_tail()}")
            time.sleep(0.2)
        return self


def land_traffic(redis_url: str, root: Path, seconds: int) -> int:
    """``seconds`` of one client's produce requests (10 a second, ~1.2 KiB/s with bursts) on each broker, landed."""
    import redis

    from pipeline import landing
    from quotas.engine import usage_log

    client = redis.Redis.from_url(redis_url)
    count = 0
    for broker in range(1, BROKERS + 1):
        records = [(USER, CLIENT_ID, 100.0 + 50.0 * (i % 7) + (400.0 if i % 50 < 5 else 0.0), T0 + i * 100)
                   for i in range(seconds * 10)]
        for start in range(0, len(records), 500):
            usage_log.append(client, CLUSTER, broker, "produce", records[start:start + 500])
        count += len(records)
    landing.land_all([(client, CLUSTER)], root)
    client.close()
    return count


def time_preview(client: Any, value: int) -> tuple[float, dict[str, Any]]:
    """Seconds from the POST to the fragment that holds the figures, and the preview's result."""
    from history.models import ImpactPreview

    t0 = time.perf_counter()
    asked = client.post("/api/previews/", {"cluster": CLUSTER, "user": USER, "client_id": CLIENT_ID, "key": KEY,
                                           "value": value}, format="json")
    if asked.status_code != 202:
        raise RuntimeError(f"POST /api/previews/ answered {asked.status_code}: {asked.content[:300]!r}")
    pk = asked.json()["id"]
    while True:
        page = client.get(f"/previews/{pk}/")
        html = page.content.decode()
        if 'data-figure="throttle_events"' in html:
            return time.perf_counter() - t0, ImpactPreview.objects.get(pk=pk).result
        if 'data-state="failed"' in html:
            row = ImpactPreview.objects.get(pk=pk)
            raise RuntimeError(f"preview {pk} failed: {row.error_code}: {row.error_message}")
        if time.perf_counter() - t0 > 600:
            raise RuntimeError(f"preview {pk} did not finish in 600 s")
        time.sleep(POLL_S)


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]


def run(server: RedisServer, cleanups: Cleanups, args: argparse.Namespace) -> dict[str, Any]:
    shutil.rmtree(BENCH_DIR, ignore_errors=True)
    BENCH_DIR.mkdir(parents=True)
    cleanups.append(lambda: shutil.rmtree(BENCH_DIR, ignore_errors=True))
    db = BENCH_DIR / "bench.sqlite3"
    remove_database(db)
    landing_root = BENCH_DIR / "landing"
    env = setup_django(db, server.url)
    env["QUOTAS_LANDING_ROOT"] = str(landing_root)
    os.environ["QUOTAS_LANDING_ROOT"] = str(landing_root)
    migrate()

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    from quotas.models import Cluster

    settings.QUOTAS_LANDING_ROOT = landing_root
    cluster = Cluster.objects.create(name=CLUSTER, description="preview_bench")
    for i in range(1, BROKERS + 1):
        cluster.brokers.create(broker_id=i, host=f"b{i}:9092", engine_url=server.url)
    admin = get_user_model().objects.create_user("bench-admin", password="x", is_staff=True)
    records = land_traffic(server.url, landing_root, args.seconds)
    client = APIClient(SERVER_NAME="127.0.0.1")
    client.force_login(admin)
    values = iter(range(1000, 10**9, 37))  # each preview its own value: never the cache

    def worker(name: str, warm: bool) -> PipelineWorker:
        w = PipelineWorker({**env, "QUOTAS_SPARK_WARM": "1" if warm else "0"}, 1, BENCH_DIR / f"{name}.log")
        cleanups.append(w.stop)
        return w.start().ready()

    print(f"preview_bench: {records} records landed; cold previews (a Spark application each)...", file=sys.stderr)
    cold_worker = worker("cold-worker", warm=False)
    cold = [time_preview(client, next(values))[0] for _ in range(args.cold)]
    cold_worker.stop()
    print(f"preview_bench: cold {[round(c, 2) for c in cold]} s; warm session...", file=sys.stderr)

    warm_worker = worker("warm-worker", warm=True)
    first_s, first = time_preview(client, next(values))
    warm, apps = [], {first["spark"]["application_id"]}
    for _ in range(args.previews):
        seconds, result = time_preview(client, next(values))
        warm.append(seconds)
        apps.add(result["spark"]["application_id"])
        if not result["spark"]["warm"] or result["requests"] != first["requests"]:
            raise RuntimeError(f"a warm preview did not reuse the session or replayed other data: {result}")
    warm_worker.stop()
    if len(apps) != 1:
        raise RuntimeError(f"the warm previews ran in {len(apps)} Spark applications, not one")
    cold_median, warm_median = statistics.median(cold), statistics.median(warm)
    print(f"preview_bench: first (session start) {first_s:.2f} s; warm {[round(w, 2) for w in warm]} s",
          file=sys.stderr)
    return {
        "records": records, "requests_replayed": first["requests"],
        "cold_median_s": round(cold_median, 3), "cold_s": [round(c, 3) for c in cold],
        "first_warm_worker_s": round(first_s, 3),
        "warm_median_s": round(warm_median, 3), "warm_p90_s": round(p90(warm), 3), "warm_max_s": round(max(warm), 3),
        "warm_previews": len(warm), "warm_cold_ratio": round(warm_median / cold_median, 4),
        "goal_warm_median_s": GOAL_S, "target_met": warm_median <= GOAL_S,
        "load_average": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--previews", type=int, default=None, help="warm previews timed (default 10; --quick 3)")
    parser.add_argument("--cold", type=int, default=None, help="cold previews timed (default 3; --quick 1)")
    parser.add_argument("--seconds", type=int, default=None, help="seconds of traffic landed (default 600; --quick 60)")
    parser.add_argument("--quick", action="store_true", help="a small run for a smoke test")
    parser.add_argument("--check", action="store_true", help="exit 1 when the warm median misses 3 s")
    args = parser.parse_args()
    args.previews = args.previews or (3 if args.quick else 10)
    args.cold = args.cold or (1 if args.quick else 3)
    args.seconds = args.seconds or (60 if args.quick else 600)
    return run_bench("preview-bench", args.check, lambda server, cleanups: run(server, cleanups, args))


if __name__ == "__main__":
    raise SystemExit(main())
