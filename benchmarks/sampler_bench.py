#!/usr/bin/env python
"""One broker's ``Sampler.publish`` of a whole tick, alone: its time, its CPU, Redis's CPU, and where it goes.

    .venv/bin/python benchmarks/sampler_bench.py [--entities 100000] [--ticks 5] [--profile] [--quick] [--check]

Starts a Redis of its own and publishes, once per tick, one sample per entity (``monitor_bench``'s realistic
samples, a tenth of the entities throttled) through the engine's ``Sampler.publish`` of one broker, ticks a second
apart in the samples' time, one after the other in real time. The first tick (every stream, index entry and
membership new) is printed apart; the others are the steady state of a broker whose entities stay active.
Per tick: the wall time of ``publish``, its CPU (the process's), Redis's CPU (``INFO cpu``) and how long after the
tick's time its firehose entry was written (its stream id, Redis's clock, against the sample time: what the live
stream waits for before the relay sees the tick). ``--profile`` prints cProfile's top functions of the last tick
to stderr. The last line of output is one JSON object; ``--check`` exits 1 when the steady ticks' median wall time
is a second or more (a tick is due every second).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from the repo root: make `engine`, `benchmarks` importable
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import cProfile  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import redis  # noqa: E402

from benchmarks.harness import run_bench  # noqa: E402
from benchmarks.monitor_bench import SampleMaker  # noqa: E402
from devtools.redis_server import RedisServer  # noqa: E402
from engine.monitor import Sampler, firehose_key  # noqa: E402

CLUSTER = "samplerbench"
TARGET_MS = 1000.0  # a broker's tick is due every second


def redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def publish_tick(client: redis.Redis, sampler: Sampler, samples: list[dict[str, Any]], now_ms: int) -> dict[str, float]:
    """One tick published, timed: wall, this process's CPU, Redis's CPU, and the firehose entry's time after t."""
    r0 = redis_cpu_s(client)
    c0, w0 = time.process_time(), time.perf_counter()
    sampler.publish(samples, now_ms)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    r1 = redis_cpu_s(client)
    ((entry_id, _fields),) = client.xrevrange(firehose_key(CLUSTER), count=1)
    fire_ms = int(entry_id.decode().split("-")[0]) - now_ms
    return {"wall_ms": wall * 1000, "cpu_ms": cpu * 1000, "redis_cpu_ms": (r1 - r0) * 1000, "firehose_ms": fire_ms}


def run(args: argparse.Namespace, server: RedisServer) -> dict[str, Any]:
    client = redis.Redis.from_url(server.url)
    maker = SampleMaker(CLUSTER, 1, args.entities, 1)
    sampler = Sampler(client, CLUSTER, 1, managers={})
    ticks = []
    profile_text = ""
    for k in range(args.ticks):
        samples = maker.tick(0)
        now_ms = int(time.time() * 1000)  # the samples' time: now, as a broker's tick stamps its samples
        for s in samples:
            s["t"] = now_ms
        prof = cProfile.Profile() if args.profile and k == args.ticks - 1 else None
        if prof is not None:
            prof.enable()
        ticks.append(publish_tick(client, sampler, samples, now_ms))
        if prof is not None:
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(20)
            profile_text = out.getvalue()
        t = ticks[-1]
        print(f"tick {k}{' (first)' if k == 0 else ''}: {args.entities:,} samples, publish {t['wall_ms']:,.0f} ms "
              f"(CPU {t['cpu_ms']:,.0f} ms), Redis CPU {t['redis_cpu_ms']:,.0f} ms, firehose entry at "
              f"+{t['firehose_ms']:,.0f} ms", flush=True)  # fmt: skip
    if profile_text:
        print(profile_text, file=sys.stderr)
    steady = ticks[1:] or ticks
    first = {k: round(v, 1) for k, v in ticks[0].items()}
    summary: dict[str, Any] = {"entities": args.entities, "ticks": len(ticks), "first": first}
    for key in ("wall_ms", "cpu_ms", "redis_cpu_ms", "firehose_ms"):
        summary[f"{key}_median"] = round(statistics.median(t[key] for t in steady), 1)
    summary["us_per_sample"] = round(summary["wall_ms_median"] * 1000 / args.entities, 2)
    summary["loadavg"] = round(os.getloadavg()[0], 2)
    summary["target_ms"] = TARGET_MS
    summary["target_met"] = summary["wall_ms_median"] < TARGET_MS
    print(f"steady ticks (median of {len(steady)}): publish {summary['wall_ms_median']:,.0f} ms "
          f"({summary['us_per_sample']} us a sample; CPU {summary['cpu_ms_median']:,.0f} ms), Redis CPU "
          f"{summary['redis_cpu_ms_median']:,.0f} ms, firehose entry at +{summary['firehose_ms_median']:,.0f} ms; "
          f"target < {TARGET_MS:,.0f} ms {'met' if summary['target_met'] else 'missed'}; "
          f"load average {summary['loadavg']}", flush=True)  # fmt: skip
    return summary


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entities", type=int, default=None, help="samples per tick (default 100000; --quick 2000)")
    parser.add_argument("--ticks", type=int, default=None, help="ticks published, the first apart (default 5)")
    parser.add_argument("--profile", action="store_true", help="cProfile's top functions of the last tick")
    parser.add_argument("--quick", action="store_true", help="a short small run for a smoke test")
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    args = parser.parse_args(argv)
    args.entities = args.entities if args.entities is not None else (2_000 if args.quick else 100_000)
    args.ticks = args.ticks if args.ticks is not None else (3 if args.quick else 5)
    if args.entities < 1 or args.ticks < 1:
        parser.error("--entities and --ticks must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_bench("sampler-bench", args.check, lambda server, _stack: run(args, server))


if __name__ == "__main__":
    sys.exit(main())
