#!/usr/bin/env python
"""Cost curves: what the portal's pages, API, sampler, reconcile, live stream and landing cost as a cluster grows.

    .venv/bin/python benchmarks/scale_bench.py [--sizes 1000x3,10000x3,...] [--requests 10] [--warmup 2]
                                               [--sockets 100] [--live-seconds 5] [--landing-seconds 10]
                                               [--no-live] [--whatif] [--pages-only] [--profile]
                                               [--quick] [--check]

Sizes are entities x brokers (default 1000x3, 10000x3, 100000x3, 100000x30, 100000x100; ``--quick`` 1000x3,
10000x3, 1000x30). Each size is a world of ``benchmarks/worlds.py`` (``overview_bench``'s, at that size): one
engine cluster of that many brokers with the entities and their values, 5 tenants each owning ~1% of the users
and client-ids, an admin and a member of one tenant; its latest hash holds ~1.5 sensors per entity, each sampled
on 3 of the brokers (the leaders its clients reach); every broker is pushed to desired state. Then, in this
process (server time through Django's test client, as ``overview_bench``; no network):

* ``trivial`` (the baseline: the base template behind the portal's middleware and login; ratios use it);
* ``overview_admin`` / ``overview_member``: ``GET /monitor/``; ``entities_admin`` / ``entities_member``:
  ``GET /entities/`` (first page); ``api_admin`` / ``api_member``: the first page (50) of
  ``POST /api/clusters/<c>/client-quotas/describe`` (``{}``: every entity);
* ``sampler``: one broker's ``Sampler.tick`` (collect from the engine's sensors, publish; both printed) with usage
  recorded for the clients sampled on that broker (a cycle is due every second);
* ``reconcile``: a ``reconcile_all`` pass (every broker described and compared with desired state; in sync),
  median of 2 (``--quick``: 1);
* ``landing``: ``land_stream`` of the samples firehose after ``--landing-seconds`` seconds of every broker's
  ticks, scaled to seconds per minute of traffic;
* ``live``: ``benchmarks/monitor_bench.py`` in a subprocess (``echo_cluster`` baseline and ``relay_cluster``) with
  as many entities and ``--sockets`` admin sockets (100; ``--quick`` 10): its p99 from sample to socket, once per
  entity count (its own 3 brokers; ``--quick``: at the smallest size only). Its publisher samples every entity on
  each broker every second, so past what one publisher process publishes in a second the figure is the
  publisher's lag as much as the relay's, as the echo baseline shows (``--no-live`` leaves it out).
* ``whatif`` (``--whatif``, once, not per size: Spark takes minutes to start on this machine):
  ``benchmarks/preview_bench.py --quick`` in a subprocess, a what-if preview over an hour of one entity's traffic.

``--pages-only`` measures the pages and the API alone (no sampler, reconcile, landing, live or what-if): the
figures of a change to a page in a few minutes at 100k. ``--profile`` then prints where one request of each
overview spends its time, in that world (``benchmarks/page_profile.py``: SQL, Redis commands, render, GC,
cProfile).

The Kafka connector's describe path is measured apart by ``kafka_describe_bench.py``. Each figure
is printed per size with its ratio to ``trivial`` of the same size, then the growth exponent between sizes that
differ in entities alone (``log(cost2/cost1)/log(size2/size1)``: 1.0 = linear) and in brokers alone. Goals (from
the issue), at the largest entity count: nothing worse than linear in entities (exponent <= 1.15), what a member
sees costs what it shows (member cost / admin cost not above entities shown / entities, x2 + 10%), nothing that
grows with brokers where it need not (pages, API and the sampler's cycle: exponent in brokers <= 0.25), overview
<= 300 ms as admin and <= 100 ms as a member, live p99 <= 500 ms. ``--check`` exits 1 when one is missed. The
last line of output is one JSON object.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from the repo root: make `portal`, `quotas`, `devtools` importable
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import redis  # noqa: E402

from benchmarks.api_bench import remove_database  # noqa: E402
from benchmarks.engine_bench import percentile  # noqa: E402
from benchmarks.harness import run_bench  # noqa: E402
from benchmarks.overview_bench import (  # noqa: E402
    ADMIN,
    CLUSTER,
    MEMBER,
    OVERVIEW,
    TRIVIAL,
    URLCONF,
    context_of,
    setup_django,
)
from benchmarks.worlds import World, Worlds, engine_sensors, firehose_seconds, push_all  # noqa: E402
from devtools.redis_server import RUN_DIR, RedisServer  # noqa: E402

BENCH_DIR = RUN_DIR / "scale-bench"
FULL_SIZES = "1000x3,10000x3,100000x3,100000x30,100000x100"
QUICK_SIZES = "1000x3,10000x3,1000x30"
ENTITIES = "/entities/"
DESCRIBE = f"/api/clusters/{CLUSTER}/client-quotas/describe"
PAGES = ("trivial", "overview_admin", "overview_member", "entities_admin", "entities_member", "api_admin",
         "api_member")  # fmt: skip
FIGURES = (*PAGES[1:], "sampler", "reconcile", "landing_per_min", "live_p99")
#: what need not grow with brokers (reconcile describes every broker and landing reads every broker's ticks)
BROKER_FLAT = (*PAGES[1:], "sampler")
LINEAR_SLACK = 1.15  # an exponent up to this is linear within the noise of a shared machine
BROKER_SLACK = 0.25
OVERVIEW_ADMIN_MS, OVERVIEW_MEMBER_MS, LIVE_P99_MS = 300.0, 100.0, 500.0


# ---- one size -------------------------------------------------------------------------------------------


def page_clients() -> dict[str, tuple[Callable[[], Any], Any]]:
    """Per page: the request to time (a callable returning the response) and the client making it."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    users = get_user_model().objects
    admin, member = Client(), Client()
    admin.force_login(users.get(username=ADMIN))
    member.force_login(users.get(username=MEMBER))

    def api(c: Client) -> Callable[[], Any]:
        return lambda: c.post(DESCRIBE, data="{}", content_type="application/json")

    return {
        "trivial": (lambda: admin.get(TRIVIAL), admin),
        "overview_admin": (lambda: admin.get(OVERVIEW), admin),
        "overview_member": (lambda: member.get(OVERVIEW), member),
        "entities_admin": (lambda: admin.get(ENTITIES), admin),
        "entities_member": (lambda: member.get(ENTITIES), member),
        "api_admin": (api(admin), admin),
        "api_member": (api(member), member),
    }


def timed(request: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    resp = request()
    ms = (time.perf_counter() - t0) * 1000
    if resp.status_code != 200:
        raise RuntimeError(f"answered {resp.status_code}: {resp.content[:300]!r}")
    return ms


def shown(world: World, clients: dict[str, Any]) -> dict[str, int]:
    """What each page shows (entities), checked once, untimed: a fast page that shows nothing fails loudly."""
    from frontend import views

    out = {}
    for who in ("admin", "member"):
        _resp, ctx = context_of(clients[f"overview_{who}"][1], OVERVIEW)
        if ctx.get("unavailable") or not ctx.get("sampled"):
            raise RuntimeError(f"overview as {who}: {ctx.get('unavailable')!r}, {ctx.get('sampled')} sampled")
        out[f"overview_{who}"] = sum(c.entity_count for c in ctx["clusters"])
        _resp, ctx = context_of(clients[f"entities_{who}"][1], ENTITIES, views)
        out[f"entities_{who}"] = ctx["page_obj"].paginator.count
        body = json.loads(clients[f"api_{who}"][0]().content)
        out[f"api_{who}"] = len(body["results"])
    if out["overview_admin"] == 0 or out["api_member"] == 0:
        raise RuntimeError(f"{world.label}: pages show nothing: {out}")
    return out


def measure_pages(world: World, rounds: int, warmup: int) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """Interleaved rounds of every page (drift affects each alike); the latest hash refreshed between, untimed."""
    clients = page_clients()
    world.latest.refresh()
    seen = shown(world, clients)
    times: dict[str, list[float]] = {p: [] for p in PAGES}
    for i in range(warmup + rounds):
        world.latest.refresh()
        for p in PAGES:
            ms = timed(clients[p][0])
            if i >= warmup:
                times[p].append(ms)
    figures = {p: {"median_ms": statistics.median(xs), "p95_ms": percentile(sorted(xs), 95)} for p, xs in times.items()}
    return figures, seen


def profile_overviews(world: World, client: redis.Redis) -> None:
    """Where one request of each overview spends its time (``page_profile``), the latest hash fresh before each."""
    from benchmarks.page_profile import profile_request
    from frontend import monitor_views

    clients = page_clients()
    for p in ("overview_admin", "overview_member"):
        world.latest.refresh()
        profile_request(f"{p} at {world.label}", clients[p][0], monitor_views, client)


def measure_sampler(client: redis.Redis, world: World, ticks: int = 3) -> dict[str, float]:
    """Broker 1's sampler cycle (collect + publish), median of ``ticks`` after one untimed."""
    from engine.monitor import Sampler

    managers, active = engine_sensors(client, world, 1)
    sampler = Sampler(client, CLUSTER, 1, managers)

    def traffic() -> None:  # the clients keep producing: touched before each tick, untimed (a cycle can take
        now = int(time.time() * 1000)  # longer than ACTIVE_FOR_MS at 100k, which would leave none active)
        for user, client_id in active:
            sampler.touch(user, client_id, now)

    traffic()
    sampler.tick()
    xs, collect, published = [], [], 0
    for _ in range(ticks):  # tick() = publish(collect()), timed in its two parts
        traffic()
        t0 = time.perf_counter()
        now = int(time.time() * 1000)
        samples = sampler.collect(now)
        t1 = time.perf_counter()
        published = sampler.publish(samples, now)
        xs.append((time.perf_counter() - t0) * 1000)
        collect.append((t1 - t0) * 1000)
    if published == 0:
        raise RuntimeError(f"{world.label}: the sampler published nothing")
    return {"median_ms": statistics.median(xs), "collect_ms": statistics.median(collect), "samples": published}


def measure_reconcile(passes: int = 2) -> dict[str, Any]:
    from quotas.push.reconcile import reconcile_all

    xs, outcomes = [], []
    for _ in range(passes):
        t0 = time.perf_counter()
        outcomes = reconcile_all()
        xs.append((time.perf_counter() - t0) * 1000)
    states = sorted({o.status for o in outcomes})
    if states != ["in-sync"]:
        raise RuntimeError(f"reconcile found {states}, expected every broker in sync")
    return {"median_ms": statistics.median(xs), "targets": len(outcomes)}


def measure_landing(client: redis.Redis, world: World, seconds: int, root: Path) -> dict[str, float]:
    """Land ``seconds`` of every broker's firehose ticks as Parquet; ms per minute of such traffic."""
    from pipeline.landing import SAMPLES, land_stream

    land_stream(client, CLUSTER, SAMPLES, root)  # untimed: what the world's publish left, and pyarrow's imports
    appended = firehose_seconds(client, world, seconds)
    t0 = time.perf_counter()
    landed = land_stream(client, CLUSTER, SAMPLES, root)
    ms = (time.perf_counter() - t0) * 1000
    if landed.rows[SAMPLES] < appended:
        raise RuntimeError(f"landed {landed.rows[SAMPLES]} samples of {appended}")
    shutil.rmtree(root, ignore_errors=True)
    return {"median_ms": ms * 60 / seconds, "rows": landed.rows[SAMPLES]}


def measure_live(entities: int, sockets: int, seconds: float) -> dict[str, Any]:
    """``monitor_bench`` in a subprocess (a Redis, a database, uvicorn and the relay of its own)."""
    argv = [sys.executable, str(ROOT / "benchmarks" / "monitor_bench.py"), "--entities", str(entities),
            "--clients", str(sockets), "--client-procs", "2", "--phases", "echo_cluster,relay_cluster",
            "--seconds", str(seconds), "--warmup", "2"]  # fmt: skip
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"monitor_bench failed ({proc.returncode}): {proc.stderr[-1500:]}")
    s = json.loads(lines[-1])
    rc = s.get("relay_cluster", {})
    return {"median_ms": s["p99_ms"], "baseline_ms": s["baseline_p99_ms"], "missing": rc.get("missing", 0),
            "received": rc.get("received", 0)}  # fmt: skip


def measure_whatif() -> dict[str, Any]:
    argv = [sys.executable, str(ROOT / "benchmarks" / "preview_bench.py"), "--quick"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"preview_bench failed ({proc.returncode}): {proc.stderr[-1500:]}")
    s = json.loads(lines[-1])
    return {"warm_median_s": s["warm_median_s"], "first_preview_s": s["first_preview_s"]}


# ---- curves and goals -----------------------------------------------------------------------------------


def exponent(c1: float, c2: float, n1: int, n2: int) -> float:
    """log(c2/c1) / log(n2/n1): 1.0 = linear, 0 = flat."""
    if not (c1 > 0 and c2 > 0) or n1 == n2:
        return math.nan
    return math.log(c2 / c1) / math.log(n2 / n1)


def curves(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Growth exponents of every figure between consecutive sizes that differ in one dimension only."""
    out: dict[str, list[dict[str, Any]]] = {"entities": [], "brokers": []}
    for axis, fixed in (("entities", "brokers"), ("brokers", "entities")):
        pairs = [(a, b) for i, a in enumerate(rows) for b in rows[i + 1 :]
                 if a[fixed] == b[fixed] and a[axis] < b[axis]]  # fmt: skip
        pairs = [(a, b) for a, b in pairs if not any(  # consecutive: no size in between on that line
            c[fixed] == a[fixed] and a[axis] < c[axis] < b[axis] for c in rows)]  # fmt: skip
        for a, b in pairs:
            exps = {f: exponent(a["ms"].get(f, math.nan), b["ms"].get(f, math.nan), a[axis], b[axis])
                    for f in FIGURES}  # fmt: skip
            out[axis].append({"from": a["size"], "to": b["size"], "exponents": {k: round(v, 2) for k, v in exps.items()
                              if math.isfinite(v)}})  # fmt: skip
    return out


def goals(rows: list[dict[str, Any]], grown: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each goal met or missed, with the figure that decided it."""
    top = max(r["entities"] for r in rows)
    at = [r for r in rows if r["entities"] == top]
    first = min(at, key=lambda r: r["brokers"])
    out: dict[str, dict[str, Any]] = {}
    worst = {f: max((e["exponents"].get(f, -math.inf) for e in grown["entities"]), default=math.nan) for f in FIGURES}
    bad = {f: v for f, v in worst.items() if math.isfinite(v) and v > LINEAR_SLACK}
    finite_worst = {f: v for f, v in worst.items() if math.isfinite(v)}
    # one size alone shows no growth: not met
    out["linear_in_entities"] = {"met": not bad and bool(grown["entities"]), "worst": finite_worst, "over": bad}
    member = {}
    for page in ("overview", "entities", "api"):
        ms, sh = first["ms"], first["shown"]
        cost_share = ms[f"{page}_member"] / ms[f"{page}_admin"]
        show_share = sh[f"{page}_member"] / max(1, sh[f"{page}_admin"])
        member[page] = {"cost_share": round(cost_share, 3), "shown_share": round(show_share, 3),
                        "met": cost_share <= 2 * show_share + 0.1}  # fmt: skip
    out["member_costs_what_it_shows"] = {"met": all(m["met"] for m in member.values()), "pages": member}
    bworst = {f: max((e["exponents"].get(f, -math.inf) for e in grown["brokers"]), default=math.nan)
              for f in BROKER_FLAT}  # fmt: skip
    bbad = {f: v for f, v in bworst.items() if math.isfinite(v) and v > BROKER_SLACK}
    out["flat_in_brokers"] = {"met": not bbad and bool(grown["brokers"]),
                              "worst": {f: v for f, v in bworst.items() if math.isfinite(v)}, "over": bbad}  # fmt: skip
    out["overview_admin_ms"] = {"met": first["ms"]["overview_admin"] <= OVERVIEW_ADMIN_MS,
                                "ms": round(first["ms"]["overview_admin"], 1), "goal": OVERVIEW_ADMIN_MS}  # fmt: skip
    member_ms = first["ms"]["overview_member"]
    out["overview_member_ms"] = {"met": member_ms <= OVERVIEW_MEMBER_MS, "ms": round(member_ms, 1),
                                 "goal": OVERVIEW_MEMBER_MS}  # fmt: skip
    for g in out.values():
        g["at"] = first["size"]
    lived = [r for r in rows if "live" in r]  # --quick measures it at the smallest size only
    last = max(lived, key=lambda r: r["entities"]) if lived else first
    live = last["ms"].get("live_p99", math.nan)
    out["live_p99_ms"] = {"met": live <= LIVE_P99_MS, "ms": live, "goal": LIVE_P99_MS, "at": last["size"],
                          "echo_baseline_ms": last.get("live", {}).get("baseline_ms")}  # fmt: skip
    return out


# ---- main -----------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=None, help=f"entities x brokers, comma-separated (default {FULL_SIZES}; "
                        f"--quick {QUICK_SIZES})")  # fmt: skip
    parser.add_argument("--requests", type=int, default=None, help="measured rounds per page (default 10; --quick 2)")
    parser.add_argument("--warmup", type=int, default=None, help="rounds before measuring (default 2; --quick 1)")
    parser.add_argument("--sockets", type=int, default=None, help="live sockets (default 100; --quick 10)")
    parser.add_argument("--live-seconds", type=float, default=None, help="live window (default 5; --quick 2)")
    parser.add_argument("--landing-seconds", type=int, default=None, help="traffic landed (default 10; --quick 1)")
    parser.add_argument("--no-live", dest="live", action="store_false", help="leave the live stream out")
    parser.add_argument("--whatif", action="store_true", help="also time a what-if preview (Spark), once")
    parser.add_argument("--pages-only", action="store_true", help="the pages and the API alone (no sampler, "
                        "reconcile, landing, live or what-if)")  # fmt: skip
    parser.add_argument("--profile", action="store_true", help="then profile one request of each overview")
    parser.add_argument("--quick", action="store_true", help="small sizes, few rounds: a smoke test")
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is missed")
    args = parser.parse_args(argv)
    q = args.quick
    args.sizes = [tuple(int(x) for x in s.lower().split("x")) for s in (args.sizes or (QUICK_SIZES if q else
                  FULL_SIZES)).split(",")]  # fmt: skip
    args.requests = args.requests or (2 if q else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if q else 2)
    args.sockets = args.sockets or (10 if q else 100)
    args.live_seconds = args.live_seconds or (2.0 if q else 5.0)
    args.landing_seconds = args.landing_seconds or (1 if q else 10)
    # the live stream at every entity count (--quick: the smallest; each run starts a portal of its own)
    counts = sorted({e for e, _ in args.sizes})
    args.live_at = set(counts[:1] if q else counts)
    if any(e < 500 or b < 1 for e, b in args.sizes):
        parser.error("--sizes: at least 500 entities and 1 broker each")
    return args


def report_size(row: dict[str, Any]) -> None:
    ms, base = row["ms"], row["ms"]["trivial"]
    print(f"size {row['size']:<11} built in {row['build_s']:.1f} s ({row['values']:,} values, {row['fields']:,} "
          f"latest fields, pushed to {row['brokers']} brokers in {row['push_s']:.1f} s, "
          f"{row['push_retried']} retried); load {os.getloadavg()[0]:.1f}",
          flush=True)  # fmt: skip
    for f in ("trivial", *FIGURES):
        if f not in ms:
            continue
        extra = f"  shows {row['shown'][f]:,}" if f in row["shown"] else ""
        if f == "sampler":
            sam = row["sampler"]
            extra = (f"  (broker 1: {sam['samples']:,} samples a tick; collect {sam['collect_ms']:.1f} ms, publish "
                     f"{sam['median_ms'] - sam['collect_ms']:.1f} ms)")  # fmt: skip
        if f == "live_p99":
            live = row["live"]
            extra = (f"  (echo baseline p99 {live['baseline_ms']:.0f} ms: {ms[f] / live['baseline_ms']:.2f} x; "
                     f"{live['received']:,} samples received, {live['missing']:,} missing)")  # fmt: skip
        print(f"  {f:<16} {ms[f]:10.1f} ms  {ms[f] / base:8.1f} x trivial{extra}", flush=True)


def run(args: argparse.Namespace, server: RedisServer, stack: list[Callable[[], None]]) -> dict[str, Any]:
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=BENCH_DIR))
    stack.append(lambda: shutil.rmtree(work, ignore_errors=True))
    db_path = work / "scale-bench.sqlite3"
    stack.append(lambda: remove_database(db_path))
    os.environ["QUOTAS_LANDING_ROOT"] = str(work / "landing")
    setup_django(db_path, server.url)
    from django.test.utils import override_settings

    # a world's first publish is one pipeline of hundreds of thousands of commands: more than redis-py's default
    # 5 s to write on a loaded machine
    client = redis.Redis.from_url(server.url, socket_timeout=120)
    stack.append(client.close)
    worlds = Worlds(db_path, client, server.url)
    print(f"setup         redis {client.info('server')['redis_version']}, SQLite; sizes "
          f"{', '.join(f'{e}x{b}' for e, b in args.sizes)}; {args.warmup} warm-up + {args.requests} rounds per page; "
          f"the Kafka connector's describe path is left out (engine brokers only); {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    rows: list[dict[str, Any]] = []
    for entities, brokers in args.sizes:
        world = worlds.build(entities, brokers)
        push_s, retried = push_all(attempts=6)  # a loaded machine times the engine out more than once
        with override_settings(ROOT_URLCONF=URLCONF, ALLOWED_HOSTS=["*"]):
            pages, seen = measure_pages(world, args.requests, args.warmup)
            if args.profile:
                profile_overviews(world, client)
        ms = {p: r["median_ms"] for p, r in pages.items()}
        print(f"pages         {entities}x{brokers}: " + ", ".join(f"{p} {v:.1f} ms" for p, v in ms.items()), flush=True)
        sampler = None if args.pages_only else measure_sampler(client, world)
        if sampler is not None:
            ms["sampler"] = sampler["median_ms"]
            ms["reconcile"] = measure_reconcile(1 if args.quick else 2)["median_ms"]
            ms["landing_per_min"] = measure_landing(client, world, args.landing_seconds, work / "landing")["median_ms"]
        row: dict[str, Any] = {"size": f"{entities}x{brokers}", "entities": entities, "brokers": brokers,
                               "ms": ms, "shown": seen, "build_s": world.build_s, "push_s": push_s,
                               "values": world.values, "fields": client.hlen(f"mon:{{{CLUSTER}}}:latest"),
                               "sampler": sampler, "push_retried": retried}  # fmt: skip
        if args.live and not args.pages_only and entities in args.live_at:
            args.live_at.discard(entities)  # once per entity count: monitor_bench has 3 brokers of its own
            live = measure_live(entities, args.sockets, args.live_seconds)
            ms["live_p99"] = live["median_ms"]
            row["live"] = live
        rows.append(row)
        report_size(row)
    grown = curves(rows)
    for axis, steps in grown.items():
        for step in steps:
            exps = "  ".join(f"{k} {v:.2f}" for k, v in step["exponents"].items())
            print(f"growth in {axis:<8} {step['from']} -> {step['to']}: {exps}", flush=True)
    whatif = measure_whatif() if args.whatif and not args.pages_only else None
    if whatif:
        print(f"whatif        preview_bench --quick (once, Spark): warm median {whatif['warm_median_s']:.1f} s, "
              f"first {whatif['first_preview_s']:.1f} s", flush=True)  # fmt: skip
    else:
        print("whatif        left out (--whatif: Spark, measured once, not per size)", flush=True)
    met = goals(rows, grown)
    for name, g in met.items():
        detail = {k: v for k, v in g.items() if k not in ("met", "at")}
        print(f"goal {name:<26} {'met' if g['met'] else 'MISSED'} at {g['at']}: {json.dumps(detail)}", flush=True)
    return {
        "sizes": [r["size"] for r in rows],
        "ms": {r["size"]: {k: round(v, 2) for k, v in r["ms"].items()} for r in rows},
        "ratios": {r["size"]: {k: round(v / r["ms"]["trivial"], 2) for k, v in r["ms"].items() if k != "trivial"}
                   for r in rows},  # fmt: skip
        "shown": {r["size"]: r["shown"] for r in rows},
        "live": {r["size"]: r["live"] for r in rows if "live" in r},
        "growth": grown,
        "goals": {k: v["met"] for k, v in met.items()},
        "goal_details": met,
        "whatif": whatif,
        "kafka_describe": "left out",
        "quick": args.quick,
        "loadavg": round(os.getloadavg()[0], 2),
        "target_met": all(v["met"] for v in met.values()),
    }


def main(argv: list[str] | None = None) -> int:
    """Build each size, measure, report; Redis and the files go on any exit (Ctrl-C and SIGTERM included)."""
    args = parse_args(argv)
    return run_bench("scale-bench", args.check, lambda server, stack: run(args, server, stack))


if __name__ == "__main__":
    sys.exit(main())
