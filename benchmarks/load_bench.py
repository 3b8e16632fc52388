#!/usr/bin/env python
"""Load held (issue 30): how many simulated people the portal serves with every p99 under 500 ms and no error, on
1, 2 and 4 uvicorn replicas sharing one PostgreSQL and one Redis.

    .venv/bin/python benchmarks/load_bench.py [--replicas 1,2,4] [--users 5,10,20,40,80,160,320] [--seconds 20]
                                              [--warmup 5] [--think 1.0] [--p99-ms 500] [--idle 5] [--quick]
                                              [--check]

Everything is started by the script and stopped on any exit: a Redis of its own, a project-local PostgreSQL with
fsync on (``devtools.postgres``, ``.run/postgres-load-bench/``; a fresh database copied from a migrated template),
the demo's world on it (``demo_data``: engine clusters prod and staging), beside it what the demo runs
(``soak.demo_services``: a Celery worker with its beat, the relay of live samples, the load generator), and the
replicas (``harness.Replica``, one uvicorn process each), started as the run needs them.

The people (``benchmarks/load_users.py``, one asyncio loop in this process), person i on replica i % n:

* members (70 %) of the three tenants, signed in: ``GET /monitor/`` (which opens the page's live socket
  ``/ws/monitor/``, subscribed to staging's samples and read to the end; the page before's socket is closed),
  ``/entities/``, ``/requests/`` and ``/previews/<pk>/`` (an impact preview of their tenant's; queued: no Spark
  preview worker runs);
* tenants (15 %): ``POST /api/requests/`` for one of 200 principals of their tenant, with a token;
* admins (10 %): ``GET /approvals/`` (the queue page), then ``POST /api/requests/<id>/approve/`` of the oldest
  request waiting, if any;
* planners (5 %): ``quotactl plan --cluster staging -f FILE`` (``quotactl.cli.main`` called in a thread of this
  process, over HTTP with a personal access token) of the cluster's exported state with one value changed.

Each acts, then pauses ``--think`` s (members and admins; tenants 2x, planners 5x) +-50 %; a probe per replica reads
``GET /healthz`` every 0.25 s (``health``: the same-run baseline of a request that does no page's work). For
each replica count the number of people steps through ``--users`` for ``--warmup`` + ``--seconds`` each (latencies
of the last ``--seconds``) until a kind's p99 passes ``--p99-ms`` or an error occurs, then once halfway between
the last count held and the first not held. ``max_users_p99_500ms`` is the largest count held, per replica count;
the headline is 2 replicas' (one per core here); ``scaling`` is each count's over 1 replica's, same run. On this
2-core machine 4 replicas, PostgreSQL, Redis, the worker, the relay, the load generator and this client all share
the two cores: 4 replicas cannot be faster than 2 here, and the output says so (``cpu_note``).

Each step also reports the share of their runnable time the replicas waited for a CPU (``/proc`` schedstat: near 1
when other work holds the cores, and then the p99s measure that work more than the portal) and, against the
replicas' idle CPU measured first (``--idle`` s with the probes alone), what the people cost them:
``replica_cpu_ms_per_action`` and ``people_per_replica_core`` (by CPU alone), which do not depend on that wait.

``--quick``: 6 people on 1 and 2 replicas, 6 s each, no stepping (what the tests run). The last line is one JSON
object.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from benchmarks.fault_bench import setup_portal  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    Replica,
    fresh_postgres,
    keep_template,
    run_bench,
    tree_cpu_s,
    tree_sched_s,
    wait_answers,
)
from benchmarks.load_users import KINDS, Crowd, World  # noqa: E402
from benchmarks.push_bench import migrate  # noqa: E402
from benchmarks.soak import ERROR_LINE, demo_services  # noqa: E402
from devtools.postgres import PostgresServer  # noqa: E402
from devtools.redis_server import RUN_DIR, RedisServer  # noqa: E402

NAME = "load-bench"
DATABASE = "loadbench"
CLUSTER = "staging"
TENANTS = {"payments": "demo-payments", "analytics": "demo-analytics", "search": "demo-search"}
HEADLINE_REPLICAS = 2
CPU_NOTE = ("{cpus} CPUs: the replicas, PostgreSQL, Redis, the worker, the relay, the load generator and this "
            "client share them; from 3 replicas on, replicas compete for CPU and more of them cannot serve more")


def build_world(ports: list[int], run_dir: Path) -> World:
    """Logins, tokens, previews and quota files for the people (in-process, on the benchmark's database)."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client
    from rest_framework.authtoken.models import Token

    from access_tokens.models import AccessToken
    from history.services import ensure_preview
    from plans.services import export
    from quotas.models import Cluster, OwnedName

    users = get_user_model().objects
    cluster = Cluster.objects.get(name=CLUSTER)

    def cookie(user: Any) -> str:
        client = Client()
        client.force_login(user)
        return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"

    members, previews, tenants = [], [], []
    for tenant, username in TENANTS.items():
        member = users.get(username=username)
        prefix = OwnedName.objects.get(tenant__name=tenant, entity_type="user").pattern.rstrip("*")
        members.append(cookie(member))
        tenants.append((Token.objects.get_or_create(user=member)[0].key, prefix))
        previews.append([ensure_preview(member, cluster, f"{prefix}load-{k}", None, "producer_byte_rate",
                                        float(1024 * 1024 * (k + 1))).pk for k in range(3)])
    admin = users.get(username="demo-admin")
    _, plan_token = AccessToken.issue(admin, "load-bench", None, admin)
    state = export(admin, cluster)
    plan_files = []
    for k in range(5):  # the same file with one quota changed, five ways
        path = run_dir / f"plan-{k}.yaml"
        path.write_text(change_rate(state, 640 + 128 * k))
        plan_files.append(path)
    return World(ports=ports, cluster=CLUSTER, members=members, previews=previews, tenants=tenants,
                 admin_token=Token.objects.get_or_create(user=admin)[0].key, admin_cookie=cookie(admin),
                 plan_token=plan_token, plan_files=plan_files)


def change_rate(state: str, kib: int) -> str:
    """The exported quota file with ``svc-payments-api``'s producer_byte_rate (a demo quota) set to ``kib`` KiB/s."""
    entity = "- entity: {user: svc-payments-api}\n  producer_byte_rate: "
    at = state.find(entity)
    if at < 0:
        raise RuntimeError(f"svc-payments-api's producer_byte_rate is not in the exported state:\n{state[:2000]}")
    end = state.index("\n", at + len(entity))
    return state[: at + len(entity)] + f"{kib} KiB/s" + state[end:]


class Cpu:
    """CPU seconds of the replicas, the demo's services, PostgreSQL, Redis and this client, between two reads; and
    how long the replicas waited for a CPU while they had work."""

    def __init__(self, parts: dict[str, list[int]]) -> None:
        self.parts = parts
        self.t0, self.own0 = time.perf_counter(), time.process_time()
        self.start = {name: sum(tree_cpu_s(p) for p in pids) for name, pids in parts.items()}
        self.sched0 = self.replicas_sched()

    def replicas_sched(self) -> tuple[float, float]:
        both = [tree_sched_s(p) for p in self.parts["replicas"]]
        return sum(r for r, _ in both), sum(w for _, w in both)

    def seconds(self) -> dict[str, float]:
        """CPU seconds of each part since the start, and ``wall``: the seconds elapsed."""
        out = {name: sum(tree_cpu_s(p) for p in pids) - self.start[name] for name, pids in self.parts.items()}
        out["client"] = time.process_time() - self.own0
        out["wall"] = time.perf_counter() - self.t0
        return out

    def replicas_waiting(self) -> float | None:
        """Of the time the replicas were runnable, the share spent waiting for a CPU (0: a CPU was always free)."""
        (run0, wait0), (run1, wait1) = self.sched0, self.replicas_sched()
        busy = (run1 - run0) + (wait1 - wait0)
        return round((wait1 - wait0) / busy, 2) if busy > 0 else None


def postgres_pid(pg: PostgresServer) -> list[int]:
    try:
        return [int((pg.data / "postmaster.pid").read_text().split()[0])]
    except (OSError, ValueError, IndexError):
        return []


def idle_cores(world: World, args: argparse.Namespace, cpu_parts: dict[str, list[int]]) -> float:
    """The cores the replicas use with no one on them (the probes, the relay's frames, the channel layer): what
    each step's CPU is counted above."""
    cpu = Cpu(cpu_parts)
    asyncio.run(Crowd(world, 0, args.think, seed=0).run(0.0, args.idle))
    used = cpu.seconds()
    return used["replicas"] / used["wall"]


def run_step(world: World, users: int, args: argparse.Namespace, cpu_parts: dict[str, list[int]],
             idle: float) -> dict[str, Any]:
    """``users`` people on ``world``'s replicas for one step; its figures and verdict. ``idle``: the replicas'
    cores with no one on them."""
    cpu = Cpu(cpu_parts)
    crowd = Crowd(world, users, args.think, seed=users)
    rec = asyncio.run(crowd.run(args.warmup, args.seconds))
    used = cpu.seconds()
    wall = used.pop("wall")
    actions = sum(n for kind, n in rec.actions.items() if kind != "health")  # the people's, not the probes'
    people_cores = used["replicas"] / wall - idle  # what the people cost the replicas, whatever the waiting
    figures = rec.figures()
    slow = [f"{k} p99 {f['p99_ms']} ms" for k, f in figures.items() if f["p99_ms"] is not None
            and f["p99_ms"] >= args.p99_ms]
    errors = sum(rec.errors.values())
    step = {
        "users": users, "held": not slow and errors == 0, "slow": slow, "errors": errors,
        "errors_by_kind": dict(rec.errors), "error_examples": rec.examples, "ws_frames": rec.frames,
        "kinds": figures, "cpu_cores": {name: round(v / wall, 2) for name, v in used.items()},
        "actions_per_s": round(actions / wall, 1),
        # what the people cost the replicas in CPU (above their idle use) does not depend on how long they waited
        # for a CPU: a capacity estimate for a machine of the portal's own, by CPU alone
        "replica_cpu_ms_per_action": round(people_cores * wall * 1000 / actions, 1) if actions else None,
        "people_per_replica_core": round(users / people_cores, 1) if people_cores > 0.01 else None,
        "replicas_waiting_for_cpu": cpu.replicas_waiting(),
        "load_avg": round(os.getloadavg()[0], 2),
    }
    p = {k: f"{f['p50_ms']}/{f['p99_ms']}" for k, f in figures.items() if f["n"]}
    print(f"  {users:4d} people on {len(world.ports)} replica(s): {'held' if step['held'] else 'NOT held'}"
          f"{' (' + ', '.join(slow) + ')' if slow else ''}{f', {errors} errors' if errors else ''}; "
          f"p50/p99 ms {p}; cpu {step['cpu_cores']}, {step['actions_per_s']} actions/s at "
          f"{step['replica_cpu_ms_per_action']} ms of replica CPU each ({step['people_per_replica_core']} people per "
          f"replica core), replicas waiting for a CPU "
          f"{step['replicas_waiting_for_cpu']} of their runnable time, load {step['load_avg']}", flush=True)
    for example in rec.examples[:3]:
        print(f"    error: {example}", flush=True)
    return step


def search(world: World, args: argparse.Namespace, cpu_parts: dict[str, list[int]]) -> dict[str, Any]:
    """Step the people up until a step is not held, then try once halfway; the largest count held."""
    idle = idle_cores(world, args, cpu_parts)
    steps: list[dict[str, Any]] = []
    held, failed = 0, None
    for users in args.users:
        step = run_step(world, users, args, cpu_parts, idle)
        steps.append(step)
        if not step["held"]:
            failed = users
            break
        held = users
    if failed is not None and held and not args.quick and (held + failed) // 2 not in (held, failed):
        step = run_step(world, (held + failed) // 2, args, cpu_parts, idle)
        steps.append(step)
        if step["held"]:
            held = step["users"]
        else:
            failed = step["users"]
    at_max = next((s for s in steps if s["users"] == held), None)
    first_not_held = next((s for s in steps if s["users"] == failed), None)
    return {
        "max_users": held, "first_not_held": failed,
        "not_held_because": (first_not_held["slow"] + [f"{first_not_held['errors']} errors"] * bool(
            first_not_held["errors"])) if first_not_held else [],
        "at_max": {k: [f["p50_ms"], f["p99_ms"]] for k, f in at_max["kinds"].items()} if at_max else None,
        "replicas_waiting_for_cpu": [s["replicas_waiting_for_cpu"] for s in steps],
        "replica_idle_cores": round(idle, 3),
        "replica_cpu_ms_per_action": [s["replica_cpu_ms_per_action"] for s in steps],
        "people_per_replica_core": [s["people_per_replica_core"] for s in steps],
        "load_avg": [s["load_avg"] for s in steps],
        "steps": steps,
    }


def log_errors(replicas: list[Replica], services: list[Any]) -> dict[str, int]:
    out = {}
    for name, path in [(r.log_path.stem, r.log_path) for r in replicas] + [(s.name, s.log_path) for s in services]:
        try:
            out[name] = sum(1 for line in path.read_text(errors="replace").splitlines() if ERROR_LINE.search(line))
        except OSError:
            continue
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", default="1,2,4", help="replica counts, in order (comma-separated)")
    parser.add_argument("--users", default="5,10,20,40,80,160,320", help="people per step, increasing")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per step")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds per step before measuring")
    parser.add_argument("--think", type=float, default=1.0, help="a member's mean pause between two actions, s")
    parser.add_argument("--p99-ms", type=float, default=500.0)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of the replicas' idle CPU, per count")
    parser.add_argument("--quick", action="store_true", help="6 people on 1 and 2 replicas, 6 s each")
    parser.add_argument("--check", action="store_true", help="exit 1 unless some count was held without error")
    args = parser.parse_args(argv)
    if args.quick:
        args.replicas, args.users, args.seconds, args.warmup, args.idle = "1,2", "6", 6.0, 2.0, 2.0
    args.replicas = [int(n) for n in args.replicas.split(",")]
    args.users = [int(n) for n in args.users.split(",")]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    name = NAME + ("-quick" if args.quick else "")  # a quick run never shares a full run's servers

    def run(server: RedisServer, cleanups: list[Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        run_dir = RUN_DIR / name
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        postgres, migrated = fresh_postgres(name, DATABASE, durable=True)
        cleanups.append(postgres.stop)
        os.environ.update({"QUOTAS_DEMO_KAFKA": "", "QUOTAS_LANDING_ROOT": str(run_dir / "landing")})
        env = {**setup_portal(postgres.url, server.url), "QUOTAS_DEMO_KAFKA": "",
               "QUOTAS_LANDING_ROOT": str(run_dir / "landing")}
        if not migrated:
            migrate()
            keep_template(postgres, DATABASE)
        from django.core.management import call_command

        call_command("demo_data", stdout=io.StringIO())
        services = demo_services(env, run_dir)
        for s in services:
            s.start()
            cleanups.append(s.stop)
        replicas: list[Replica] = []
        world: World | None = None
        results: dict[str, Any] = {}
        setup_s = 0.0
        for count in args.replicas:
            while len(replicas) < count:
                replica = Replica(len(replicas) + 1, env, run_dir).start()
                cleanups.append(replica.stop)
                replicas.append(replica)
                wait_answers(replica)
            for s in services:
                s.check()
            ports = [r.port for r in replicas[:count]]
            if world is None:
                world = build_world(ports, run_dir)
                setup_s = time.perf_counter() - t0
            world.ports = ports
            print(f"{count} replica(s):", flush=True)
            cpu_parts = {"replicas": [r.proc.pid for r in replicas[:count] if r.proc is not None],
                         "postgres": postgres_pid(postgres),
                         "redis": [server.proc.pid] if server.proc is not None else [],
                         **{s.name: s.pids()[:1] for s in services}}
            results[str(count)] = search(world, args, cpu_parts)

        counts = [str(c) for c in args.replicas]
        best = {c: results[c]["max_users"] for c in counts}
        headline = str(HEADLINE_REPLICAS) if str(HEADLINE_REPLICAS) in best else counts[-1]
        base = best.get("1")
        errors_by_kind: dict[str, int] = {}
        for r in results.values():
            for step in r["steps"]:
                for kind, n in step["errors_by_kind"].items():
                    errors_by_kind[kind] = errors_by_kind.get(kind, 0) + n
        summary: dict[str, Any] = {
            "bench": "load_bench", "database": "postgresql (fsync on)", "cpus": os.cpu_count(),
            "replica_counts": args.replicas, "users_steps": args.users, "seconds": args.seconds,
            "warmup_s": args.warmup, "think_s": args.think, "p99_limit_ms": args.p99_ms, "kinds": list(KINDS),
            "max_users_p99_500ms": {**best, "headline": best[headline]}, "headline_replicas": int(headline),
            "scaling": {c: round(best[c] / base, 2) if base else None for c in counts if c != "1"},
            "scaling_baseline": "people held on 1 replica, same run",
            "people_per_replica_core": {c: next((v for v in reversed(results[c]["people_per_replica_core"])
                                                 if v is not None), None) for c in counts},
            "people_per_replica_core_is": "people one core of replica CPU serves above the replicas' idle use, by CPU "
                                          "alone (no latency criterion), from each count's last step",
            "health_p99_ms_at_max": {c: (results[c]["at_max"] or {}).get("health", [None, None])[1] for c in counts},
            "errors": sum(errors_by_kind.values()), "errors_by_kind": errors_by_kind,
            "log_errors": log_errors(replicas, services),
            "cpu_note": CPU_NOTE.format(cpus=os.cpu_count()),
            "setup_s": round(setup_s, 1), "template_database": migrated,
            "by_replicas": results,
        }
        summary["target_met"] = summary["errors"] == 0 and best[headline] > 0
        for c in counts:
            r = results[c]
            print(f"{c} replica(s): {r['max_users']} people held (p99 < {args.p99_ms:g} ms, no error); first not "
                  f"held: {r['first_not_held']} {r['not_held_because']}; replicas waiting for a CPU "
                  f"{r['replicas_waiting_for_cpu']} of their runnable time at load {r['load_avg']}", flush=True)
        print(f"scaling over 1 replica: {summary['scaling']}; {summary['cpu_note']}", flush=True)
        return summary

    return run_bench(name, args.check, run)


if __name__ == "__main__":
    sys.exit(main())
