#!/usr/bin/env python
"""Impact previews in the demo's own setting: its traffic landing every 20 s and its rollups running, against the
same previews on one shared lane (the portal's setup before previews had a worker of their own), in one run.

    .venv/bin/python benchmarks/preview_bench.py [--first-after 60] [--previews 10] [--baseline 3] [--quick]
        [--check]

Everything is the portal's own, started by the benchmark and stopped on any exit, as ``scripts/run_portal.sh``
starts the demo without Kafka (``KAFKA=0``): a private redis-server, a throw-away SQLite database under
``.run/preview-bench/`` (``migrate``, ``manage.py demo_data``: prod and staging are engine clusters of 3 brokers), the
Celery worker of the default queue with beat (landing every 20 s, rollups every 120 s: the demo's settings), the
rollups' worker (``-Q pipeline``), the previews' worker (``-Q previews``, its Spark session started at once:
``QUOTAS_SPARK_PREWARM=1``) and the demo's load generator (``manage.py loadgen``). While previews are timed, a
thread keeps a rollups run going back to back (one more is sent whenever none runs), harder than the demo's one
every 2 minutes.

A preview is timed from just before ``POST /api/previews/`` (``svc-payments-api`` on prod, ``producer_byte_rate``) to
the first poll of its page fragment (``/previews/<id>/``, what the page swaps in) that holds the figures, polling
every 50 ms through Django's test client in this process.

* first: the first preview after start, asked ``--first-after`` seconds after the workers and the load were started
  (a minute, as a person who started the demo and opened the form; later if no usage has landed by then).
  Goal: at most 10 s.
* warm: ``--previews`` more, each with a value of its own (never the cache), while rollups run. Median, p90, max.
  Goal: median at most 2 s. ``warm_during_rollup`` counts those that overlapped a rollups run.
* baseline: ``--baseline`` previews on one worker that takes both queues (``-Q pipeline,previews``, one job at a
  time, as before), with the same rollups going: each waits behind the rollup in progress. ``lane_ratio`` = warm
  median / baseline median (lower is better).

The machine is shared: figures include waiting for a CPU (``load_average`` says how busy it was). The last line of
output is one JSON object; ``--check`` exits 1 when a goal is missed.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from the repo root
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import secrets  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from benchmarks.api_bench import remove_database  # noqa: E402
from benchmarks.harness import Cleanups, SessionProcess, run_bench  # noqa: E402
from benchmarks.push_bench import migrate, setup_django  # noqa: E402
from devtools.redis_server import RUN_DIR, RedisServer  # noqa: E402

CLUSTER, USER, KEY = "prod", "svc-payments-api", "producer_byte_rate"
FIRST_GOAL_S, WARM_GOAL_S = 10.0, 2.0
POLL_S = 0.05
BENCH_DIR = RUN_DIR / "preview-bench"
MIB = 1024 * 1024
#: the demo's cadences (scripts/run_portal.sh)
DEMO_ENV = {"QUOTAS_LANDING_SECONDS": "20", "QUOTAS_ROLLUPS_SECONDS": "120"}


class Service(SessionProcess):
    """A process of the portal (a Celery worker, the load generator) in a session of its own, logging to a file."""

    grace_s = 20.0

    def __init__(self, name: str, args: list[str], env: dict[str, str]) -> None:
        super().__init__(BENCH_DIR / f"{name}.log")
        self.name, self.args, self.env = name, args, env

    def start(self) -> Service:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, cwd=ROOT, env={**os.environ, **self.env}, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with code {self.proc.returncode}:\n{self.log_tail()}")

    def ready(self, timeout_s: float = 180) -> Service:
        deadline = time.monotonic() + timeout_s
        while b"ready." not in self.log_path.read_bytes():
            self.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not get ready:\n{self.log_tail()}")
            time.sleep(0.2)
        return self


def celery(name: str, queues: str, env: dict[str, str], *extra: str) -> Service:
    exe = Path(sys.executable).parent / "celery"
    base = [str(exe)] if exe.exists() else [sys.executable, "-m", "celery"]
    return Service(name, [*base, "-A", "portal", "worker", "-Q", queues, "-c", "1", "-n", f"bench-{name}@%h",
                          "-l", "info", "--without-gossip", "--without-mingle", "--without-heartbeat", *extra], env)


class Rollups:
    """Keeps a rollups run going: sends ``history.tasks.rollups`` whenever none holds its lock and none waits."""

    def __init__(self, redis_url: str) -> None:
        import redis

        self.client = redis.Redis.from_url(redis_url)
        self.stop_event = threading.Event()
        self.sent = 0
        self.runs_s: list[float] = []  # how long each run held the lock, as seen every 0.5 s
        self.thread = threading.Thread(target=self._run, name="rollups-busy", daemon=True)

    def running(self) -> bool:
        from history.services import ROLLUPS_LOCK

        return bool(self.client.exists(ROLLUPS_LOCK))

    def _run(self) -> None:
        from celery import current_app

        began = None
        while not self.stop_event.wait(0.5):
            running = self.running()
            if running and began is None:
                began = time.monotonic()
            elif not running and began is not None:
                self.runs_s.append(time.monotonic() - began)
                began = None
            if not running and not self.client.llen("pipeline"):
                current_app.send_task("history.tasks.rollups")
                self.sent += 1
                time.sleep(2.0)  # its worker takes it and the lock

    def forget(self) -> None:
        """Drop the lock of a run whose worker was stopped (it would stand until it expires)."""
        from history.services import ROLLUPS_LOCK

        self.client.delete(ROLLUPS_LOCK)

    def start(self) -> Rollups:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(5)
        self.client.close()


def time_preview(client: Any, value: int, rollups: Rollups | None = None) -> tuple[float, dict[str, Any], bool]:
    """Seconds from the POST to the fragment that holds the figures, the preview's result, and whether a rollups
    run was going while it ran."""
    from history.models import ImpactPreview

    t0 = time.perf_counter()
    asked = client.post("/api/previews/", {"cluster": CLUSTER, "user": USER, "key": KEY, "value": value},
                        format="json")
    if asked.status_code not in (200, 202):
        raise RuntimeError(f"POST /api/previews/ answered {asked.status_code}: {asked.content[:300]!r}")
    pk = asked.json()["id"]
    overlapped = False
    while True:
        overlapped = overlapped or (rollups is not None and rollups.running())
        html = client.get(f"/previews/{pk}/").content.decode()
        if 'data-figure="throttle_events"' in html:
            return time.perf_counter() - t0, ImpactPreview.objects.get(pk=pk).result, overlapped
        if 'data-state="failed"' in html:
            row = ImpactPreview.objects.get(pk=pk)
            raise RuntimeError(f"preview {pk} failed: {row.error_code}: {row.error_message}")
        if time.perf_counter() - t0 > 600:
            raise RuntimeError(f"preview {pk} did not finish in 600 s")
        time.sleep(POLL_S)


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]


def setup(server: RedisServer, cleanups: Cleanups, keep: bool) -> dict[str, str]:
    """The database, the demo's data and the environment every process of the portal gets."""
    shutil.rmtree(BENCH_DIR, ignore_errors=True)
    BENCH_DIR.mkdir(parents=True)
    if not keep:
        cleanups.append(lambda: shutil.rmtree(BENCH_DIR, ignore_errors=True))
    db = BENCH_DIR / "bench.sqlite3"
    remove_database(db)
    from cryptography.fernet import Fernet

    env = {
        **DEMO_ENV, "QUOTAS_LANDING_ROOT": str(BENCH_DIR / "landing"),
        "QUOTAS_ROLLUPS_ROOT": str(BENCH_DIR / "rollups"),
        # keys of this run only: the portal refuses to start on public ones
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50), "QUOTAS_SECRETS_KEYS": Fernet.generate_key().decode(),
    }
    os.environ.pop("QUOTAS_DEMO_KAFKA", None)  # the demo without Kafka: prod is an engine cluster
    os.environ.update(env)
    env.update(setup_django(db, server.url))
    migrate()
    from django.core.management import call_command

    call_command("demo_data", stdout=io.StringIO(), stderr=io.StringIO())
    return env


def run(server: RedisServer, cleanups: Cleanups, args: argparse.Namespace) -> dict[str, Any]:
    env = setup(server, cleanups, args.keep)
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    client = APIClient(SERVER_NAME="127.0.0.1")
    client.force_login(get_user_model().objects.get(username="demo-admin"))
    values = iter(range(2 * MIB, 10**9, 37 * 1024 + 1))  # each preview its own value: never the cache
    load_start = os.getloadavg()[0]

    def started(service: Service) -> Service:
        cleanups.append(service.stop)
        return service.start()

    beat = ["-B", "-s", str(BENCH_DIR / "celerybeat-schedule")]
    t0 = time.monotonic()
    started(celery("default", "celery", env, *beat))
    rollup_worker = started(celery("pipeline", "pipeline", env))
    preview_worker = started(celery("previews", "previews", {**env, "QUOTAS_SPARK_PREWARM": "1"}))
    started(Service("loadgen", [sys.executable, "manage.py", "loadgen"], env))
    print(f"preview_bench: the demo started; first preview in {args.first_after:g} s", file=sys.stderr)
    for service in (rollup_worker, preview_worker):
        service.ready()
    time.sleep(max(0.0, args.first_after - (time.monotonic() - t0)))
    landed = BENCH_DIR / "landing" / "usage"
    while not any(landed.glob("date=*/hour=*/*.parquet")):  # a machine slower than the demo's first landing
        if time.monotonic() - t0 > 300:
            raise RuntimeError("no usage landed in 300 s")
        time.sleep(0.5)
    asked_after = time.monotonic() - t0
    first_s, first, _ = time_preview(client, next(values))
    print(f"preview_bench: first preview {first_s:.2f} s, asked {asked_after:.0f} s after start; warm previews while "
          "rollups run...", file=sys.stderr)

    rollups = Rollups(server.url).start()
    cleanups.append(rollups.stop)
    deadline = time.monotonic() + 60
    while not rollups.running() and time.monotonic() < deadline:  # the first of them has begun
        time.sleep(0.2)
    warm, during, stages = [], 0, []
    for _ in range(args.previews):
        seconds, result, overlapped = time_preview(client, next(values), rollups)
        warm.append(seconds)
        during += overlapped
        stages.append(result.get("stages_s") or {})
        if not result["spark"]["warm"]:
            raise RuntimeError(f"a preview after the first did not find the Spark session warm: {result['spark']}")
    print(f"preview_bench: warm {[round(w, 2) for w in warm]} s ({during} during a rollup)", file=sys.stderr)

    shared: list[float] = []
    if args.baseline:
        preview_worker.stop()
        rollup_worker.stop()
        rollups.forget()
        started(celery("shared", "pipeline,previews", {**env, "QUOTAS_SPARK_PREWARM": "1"})).ready()
        time_preview(client, next(values))  # its session warm, as the dedicated worker's was
        for _ in range(args.baseline):
            while not rollups.running():  # asked while a rollup runs, as a person clicking meanwhile would
                time.sleep(0.2)
            shared.append(time_preview(client, next(values), rollups)[0])
        print(f"preview_bench: one shared lane {[round(s, 2) for s in shared]} s", file=sys.stderr)
    rollups.stop()

    warm_median = statistics.median(warm)
    shared_median = statistics.median(shared) if shared else float("nan")
    return {
        "first_preview_s": round(first_s, 3), "first_asked_after_s": round(asked_after, 1),
        "warm_median_s": round(warm_median, 3), "warm_p90_s": round(p90(warm), 3), "warm_max_s": round(max(warm), 3),
        "warm_s": [round(w, 3) for w in warm], "warm_previews": len(warm), "warm_during_rollup": during,
        "shared_lane_median_s": round(shared_median, 3), "shared_lane_s": [round(s, 3) for s in shared],
        "lane_ratio": round(warm_median / shared_median, 4) if shared else float("nan"),
        "rollups_sent": rollups.sent, "rollup_runs_s": [round(r, 1) for r in rollups.runs_s],
        "requests_replayed": first["requests"],
        "replayed_on": first.get("replayed_on"), "first_stages_s": first.get("stages_s"),
        # where a warm preview's time goes in the job (the rest: queueing, Celery, the database, the page's poll)
        "warm_stages_median_s": {name: round(statistics.median(st.get(name, 0.0) for st in stages), 3)
                                 for name in sorted({n for st in stages for n in st})},
        "warm_job_median_s": round(statistics.median(sum(st.values()) for st in stages), 3) if stages else None,
        "goal_first_s": FIRST_GOAL_S, "goal_warm_median_s": WARM_GOAL_S,
        "target_met": first_s <= FIRST_GOAL_S and warm_median <= WARM_GOAL_S,
        "load_average_start": round(load_start, 2), "load_average_end": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--first-after", type=float, default=None,
                        help="seconds from start to the first preview (default 60; --quick 25)")
    parser.add_argument("--previews", type=int, default=None, help="warm previews timed (default 10; --quick 2)")
    parser.add_argument("--baseline", type=int, default=None,
                        help="previews timed on one shared lane (default 3; --quick 0: none)")
    parser.add_argument("--quick", action="store_true", help="a small run for a smoke test")
    parser.add_argument("--keep", action="store_true", help=f"keep {BENCH_DIR} (the processes' logs) at the end")
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    args = parser.parse_args()
    args.first_after = args.first_after if args.first_after is not None else (25.0 if args.quick else 60.0)
    args.previews = args.previews or (2 if args.quick else 10)
    args.baseline = args.baseline if args.baseline is not None else (0 if args.quick else 3)
    return run_bench("preview-bench", args.check, lambda server, cleanups: run(server, cleanups, args))


if __name__ == "__main__":
    raise SystemExit(main())
