#!/usr/bin/env python
"""Soak (issue 20): the demo's traffic, 20 live browser sockets and a steady stream of requests and approvals for a
while; the memory of every process, the errors in every log, and every approval on every broker at the end.

    .venv/bin/python benchmarks/soak.py [--seconds 1800] [--sockets 20] [--every 0.5] [--check]

Everything is started by the script and stopped on any exit (bounded: it stops itself after ``--seconds``): a
private redis-server, a throw-away SQLite database under ``.run/soak/`` with the demo's world (``manage.py migrate``,
``manage.py demo_data``: engine clusters prod and staging of 3 brokers each), the portal under uvicorn, a Celery
worker with its beat (reconcile every 10 s, landing into ``.run/soak/landing``), the live-monitoring relay and the
demo's load generator (``manage.py loadgen``). Then, for ``--seconds``:

* ``--sockets`` WebSockets on ``/ws/monitor/`` signed in as the demo admin, each subscribed to staging's live samples
  (``subscribe_cluster``), reading every frame;
* every ``--every`` s a member of payments asks for a quota (``POST /api/requests/``) and the demo admin approves it
  (``POST /api/requests/<id>/approve/``), for 200 principals ``svc-payments-soak-<n % 200>`` in turn (a new value each
  time; ``lost`` checks the last one of each);
* every 5 s the RSS of every process (the portal, the worker and its pool and beat, the relay, the load generator,
  Redis) from ``/proc``.

It reports each process's RSS after the warm-up (the first 5 minutes, or the first third of a shorter run) and at
the end, its growth in % and its slope in MiB per hour (least squares over the samples after the warm-up), the
ERROR and Traceback lines of every log, answers >= 500, frames and disconnects of the sockets, and, once every
broker holds the newest version: ``lost`` (approved values missing on a broker) and ``double_applied`` (a push log
applying a version it already held). Goals: no process growing more than 5 % after the warm-up, no error in any log,
0 lost, 0 double. The last line of output is one JSON object.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import http.client  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import redis  # noqa: E402

from benchmarks.api_bench import remove_database  # noqa: E402
from benchmarks.harness import Service, run_bench  # noqa: E402
from benchmarks.push_bench import config_key, setup_django, states_of  # noqa: E402
from devtools.redis_server import RUN_DIR, RedisServer, free_port  # noqa: E402

NAME = "soak"
DIR = RUN_DIR / NAME
CLUSTER = "staging"
TARGET_GROWTH_PCT = 5.0
ERROR_LINE = re.compile(r"\bERROR\b|Traceback \(most recent call last\)|CRITICAL")


def demo_services(env: dict[str, str], run_dir: Path) -> list[Service]:
    """What runs beside the portal in the demo: a Celery worker of the default queue with its beat, the relay of
    live samples and the load generator of prod's and staging's traffic (not started)."""
    celery = [sys.executable, "-m", "celery", "-A", "portal"]
    manage = [sys.executable, "manage.py"]
    return [
        Service("worker", [*celery, "worker", "-B", "-s", str(run_dir / "celerybeat-schedule"), "--pool", "prefork",
                           "-c", "1", "-Q", "celery", "-n", f"{run_dir.name}-{os.getpid()}@%h", "-l", "warning",
                           "--without-heartbeat", "--without-gossip", "--without-mingle"], env, run_dir),
        Service("relay", [*manage, "relay"], env, run_dir),
        Service("loadgen", [*manage, "loadgen", "--cluster", "prod", "staging"], env, run_dir),
    ]


def rss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total


def slope_per_hour(samples: list[tuple[float, int]]) -> float:
    """MiB per hour, least squares over (seconds, KiB) samples."""
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mx = sum(t for t, _ in samples) / n
    my = sum(v for _, v in samples) / n
    den = sum((t - mx) ** 2 for t, _ in samples)
    return 0.0 if den == 0 else sum((t - mx) * (v - my) for t, v in samples) / den * 3600 / 1024


class Api:
    """The portal's API over HTTP with a token."""

    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json"}
            conn.request(method, path, json.dumps(body) if body is not None else None, headers)
            resp = conn.getresponse()
            raw = resp.read()
            try:
                return resp.status, json.loads(raw)
            except ValueError:
                return resp.status, raw[:200]
        finally:
            conn.close()


class Sockets(threading.Thread):
    """``n`` monitor WebSockets in one event loop, each subscribed to the cluster's live samples."""

    def __init__(self, port: int, session: str, n: int) -> None:
        super().__init__(daemon=True)
        self.port, self.session, self.n = port, session, n
        self.frames = 0
        self.disconnects = 0
        self.connected = 0
        self.stopping = threading.Event()

    async def one(self) -> None:
        import websockets

        url = f"ws://127.0.0.1:{self.port}/ws/monitor/"
        headers = {"Cookie": f"sessionid={self.session}"}
        while not self.stopping.is_set():
            try:
                async with websockets.connect(url, additional_headers=headers,
                                              origin=f"http://127.0.0.1:{self.port}") as ws:
                    self.connected += 1
                    await ws.send(json.dumps({"action": "subscribe_cluster", "cluster": CLUSTER}))
                    while not self.stopping.is_set():
                        try:
                            await asyncio.wait_for(ws.recv(), timeout=1.0)
                            self.frames += 1
                        except TimeoutError:
                            continue
            except Exception:  # a dropped socket is counted and opened again, as the page's script does
                if not self.stopping.is_set():
                    self.disconnects += 1
                    await asyncio.sleep(1.0)

    async def all(self) -> None:
        await asyncio.gather(*(self.one() for _ in range(self.n)))

    def run(self) -> None:
        asyncio.run(self.all())


def log_errors(services: list[Service]) -> dict[str, int]:
    out = {}
    for s in services:
        try:
            text = s.log_path.read_text(errors="replace")
        except OSError:
            continue
        out[s.name] = sum(1 for line in text.splitlines() if ERROR_LINE.search(line))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1800.0)
    parser.add_argument("--sockets", type=int, default=20)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between two request + approval pairs")
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    parser.add_argument("--run-dir", type=Path, default=RUN_DIR / NAME, help="logs, database, landing (emptied first)")
    args = parser.parse_args(argv)
    global DIR
    DIR = args.run_dir

    def run(server: RedisServer, cleanups: list[Any]) -> dict[str, Any]:
        shutil.rmtree(DIR, ignore_errors=True)
        DIR.mkdir(parents=True)
        db = DIR / "db.sqlite3"
        remove_database(db)
        port = free_port()
        env = {
            **setup_django(f"sqlite:///{db}", server.url),  # setup_django takes a DATABASE_URL now
            "QUOTAS_RECONCILE_SECONDS": "10", "QUOTAS_LANDING_ROOT": str(DIR / "landing"),
            "ALLOWED_HOSTS": "127.0.0.1,localhost", "PORTAL_BASE_URL": f"http://127.0.0.1:{port}",
            "QUOTAS_DEMO_KAFKA": "", "DJANGO_LOG_LEVEL": "WARNING",
        }
        manage = [sys.executable, "manage.py"]
        for step in (["migrate", "--no-input", "-v", "0"], ["demo_data"]):
            subprocess.run([*manage, *step], cwd=ROOT, env={**os.environ, **env}, check=True,
                           stdout=subprocess.DEVNULL)
        services = [
            Service("portal", [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1",
                               "--port", str(port), "--workers", "1", "--lifespan", "off", "--no-access-log",
                               "--log-level", "warning"], env, DIR),
            *demo_services(env, DIR),
        ]
        for s in services:
            s.start()
            cleanups.append(s.stop)

        from django.contrib.auth import get_user_model
        from django.test import Client
        from django.test.utils import setup_test_environment
        from rest_framework.authtoken.models import Token

        setup_test_environment()  # only for the session cookie made below (the test client's host)
        users = get_user_model().objects
        admin_user = users.get(username="demo-admin")
        admin = Api(port, Token.objects.get_or_create(user=admin_user)[0].key)
        member = Api(port, Token.objects.get_or_create(user=users.get(username="demo-payments"))[0].key)
        browser = Client()
        browser.force_login(admin_user)
        session = browser.cookies["sessionid"].value

        deadline = time.monotonic() + 120
        while True:
            try:
                if admin.call("GET", "/api/me/")[0] == 200:
                    break
            except OSError:
                pass
            for s in services:
                s.check()
            if time.monotonic() > deadline:
                raise RuntimeError("the portal did not answer within 120 s:\n" + services[0].log_tail())
            time.sleep(0.5)

        sockets = Sockets(port, session, args.sockets)
        sockets.start()
        warmup = min(300.0, args.seconds / 3)
        rss: dict[str, list[tuple[float, int]]] = {s.name: [] for s in services}
        rss["redis"] = []
        redis_pid = server.proc.pid if server.proc is not None else None
        statuses: dict[int, int] = {}
        approved: dict[str, float] = {}  # principal -> its newest approved value
        approvals = 0
        t0 = time.perf_counter()
        next_sample = next_pair = t0
        n = 0
        while (now := time.perf_counter()) - t0 < args.seconds:
            if now >= next_sample:
                for s in services:
                    s.check()
                    rss[s.name].append((now - t0, rss_kib(s.pids())))
                if redis_pid:
                    rss["redis"].append((now - t0, rss_kib([redis_pid])))
                next_sample += 5.0
            if now >= next_pair:
                # 200 principals in turn: after the warm-up the data set stays the same size, so Redis's memory is
                # about the portal, not about a workload that adds an entity per approval (the first 30 min run did)
                user, value = f"svc-payments-soak-{n % 200}", float(1024 * (n % 997 + 1))
                code, body = member.call("POST", "/api/requests/", {"cluster": CLUSTER, "user": user,
                                                                     "key": "producer_byte_rate", "value": value})
                statuses[code] = statuses.get(code, 0) + 1
                if code == 201:
                    code, _ = admin.call("POST", f"/api/requests/{body['id']}/approve/", {"comment": "soak"})
                    statuses[code] = statuses.get(code, 0) + 1
                    if code == 200:
                        approved[user] = value
                        approvals += 1
                n += 1
                next_pair += args.every
            time.sleep(0.05)
        sockets.stopping.set()
        sockets.join(timeout=10)

        # every broker at the newest version, then every approval on every broker
        from engine.config import KEY_SEP, EntityRef
        from quotas.models import Cluster, DesiredStateVersion

        cluster = Cluster.objects.get(name=CLUSTER)
        client = redis.Redis.from_url(server.url)
        states = states_of(client, cluster)
        final = DesiredStateVersion.objects.get(cluster=cluster).version
        c0 = time.perf_counter()
        while min(st.applied_version() for st in states) < final and time.perf_counter() - c0 < 120:
            time.sleep(0.2)
        converge_s = time.perf_counter() - c0
        lost = double = 0
        for b, st in zip((1, 2, 3), states, strict=True):
            held = {f.decode(): v.decode() for f, v in client.hgetall(config_key(CLUSTER, b)).items()}
            lost += sum(1 for u, v in approved.items()
                        if held.get(EntityRef(user=u).field() + KEY_SEP + "producer_byte_rate") != repr(v))
            history = st.history()
            double += sum(1 for p, r in zip(history, history[1:], strict=False) if r.version <= p.version)

        report: dict[str, Any] = {}
        for name, samples in rss.items():
            after = [(t, v) for t, v in samples if t >= warmup] or samples[-1:]
            if not after:
                continue
            start_kib, end_kib = after[0][1], after[-1][1]
            report[name] = {
                "rss_start_mib": round(start_kib / 1024, 1), "rss_end_mib": round(end_kib / 1024, 1),
                "growth_pct": round(100 * (end_kib - start_kib) / start_kib, 2) if start_kib else 0.0,
                "slope_mib_per_h": round(slope_per_hour(after), 2),
            }
        errors = log_errors(services)
        summary: dict[str, Any] = {
            "bench": NAME, "seconds": args.seconds, "warmup_s": round(warmup, 1), "sockets": args.sockets,
            "ws_connected": sockets.connected, "ws_frames": sockets.frames, "ws_disconnects": sockets.disconnects,
            "pairs": n, "approvals": approvals, "approved": len(approved),
            "http_statuses": {str(k): v for k, v in sorted(statuses.items())},
            "http_5xx": sum(v for k, v in statuses.items() if k >= 500), "converge_s": round(converge_s, 2),
            "lost": lost, "double_applied": double, "log_errors": errors, "log_error_lines": sum(errors.values()),
            "rss": report, "max_growth_pct": max((r["growth_pct"] for r in report.values()), default=0.0),
        }
        summary["target_met"] = (
            summary["max_growth_pct"] <= TARGET_GROWTH_PCT and summary["log_error_lines"] == 0
            and lost == 0 and double == 0 and summary["http_5xx"] == 0
        )
        for name, r in report.items():
            print(f"{name}: {r}", flush=True)
        return summary

    return run_bench(DIR.name, args.check, run)


if __name__ == "__main__":
    sys.exit(main())
