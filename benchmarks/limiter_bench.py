#!/usr/bin/env python
"""Acquire+release pairs/s of the PIP-442 AsyncSemaphore under contention, against a bare asyncio.Semaphore.

    .venv/bin/python benchmarks/limiter_bench.py [--quick] [--waiters 1000] [--permits 10] [--pairs 100]
                                                 [--rounds 5] [--check]

Workload, the same for every variant, in one process and one event loop: ``--waiters`` tasks contend for a pool
of ``--permits`` permits; each does ``--pairs`` times: acquire 1 permit, yield once to the loop while holding it
(``await asyncio.sleep(0)``, so the others really queue), release. Variants, interleaved over ``--rounds`` rounds
(the median time of each is reported):

* baseline: ``asyncio.Semaphore`` (``await sem.acquire()`` / ``sem.release()``);
* limiter: ``AsyncSemaphore.acquire(1)`` / ``release(permit)`` (FIFO, queue bound, timeouts, metrics);
* context manager: ``async with sem.acquired(1)``;
* dual: ``AsyncDualMemoryLimiter.acquire(1, HEAP_MEMORY)`` / ``release``.

The overhead ratio is the limiter's time per pair over the baseline's (target: <= 5). The last line of output is
one JSON object with the figures and their ratios; ``--check`` exits 1 when a ratio misses the target.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from the repo root: make `quotas` importable
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402

from memory_limiter.limiter import (  # noqa: E402
    AsyncDualMemoryLimiter,
    AsyncSemaphore,
    LimitType,
    SemaphoreConfig,
)

TARGET_RATIO = 5.0
TIMEOUT_MS = 60_000  # never reached: the benchmark measures the grant path, not timeouts

Variant = Callable[[int, int, int], Awaitable[float]]


async def _timed(waiters: int, worker: Callable[[], Awaitable[None]]) -> float:
    gc.collect()
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(waiters)))
    return time.perf_counter() - start


async def baseline(waiters: int, permits: int, pairs: int) -> float:
    sem = asyncio.Semaphore(permits)

    async def worker() -> None:
        for _ in range(pairs):
            await sem.acquire()
            await asyncio.sleep(0)
            sem.release()

    return await _timed(waiters, worker)


async def limiter(waiters: int, permits: int, pairs: int) -> float:
    sem = AsyncSemaphore(permits, 0, TIMEOUT_MS)
    acquire, release = sem.acquire, sem.release

    async def worker() -> None:
        for _ in range(pairs):
            permit = await acquire(1)
            await asyncio.sleep(0)
            release(permit)

    elapsed = await _timed(waiters, worker)
    _settled(sem, waiters * pairs)
    return elapsed


async def context_manager(waiters: int, permits: int, pairs: int) -> float:
    sem = AsyncSemaphore(permits, 0, TIMEOUT_MS)

    async def worker() -> None:
        for _ in range(pairs):
            async with sem.acquired(1):
                await asyncio.sleep(0)

    elapsed = await _timed(waiters, worker)
    _settled(sem, waiters * pairs)
    return elapsed


async def dual(waiters: int, permits: int, pairs: int) -> float:
    lim = AsyncDualMemoryLimiter(SemaphoreConfig(permits, 0, TIMEOUT_MS), SemaphoreConfig(permits, 0, TIMEOUT_MS))
    acquire, release, heap = lim.acquire, lim.release, LimitType.HEAP_MEMORY

    async def worker() -> None:
        for _ in range(pairs):
            permit = await acquire(1, heap)
            await asyncio.sleep(0)
            release(permit)

    elapsed = await _timed(waiters, worker)
    _settled(lim.get_limiter(heap), waiters * pairs)
    return elapsed


def _settled(sem: AsyncSemaphore, pairs: int) -> None:
    """Every permit came back and every request was granted: the figures are for a correct run."""
    if sem.acquired_permits or sem.queue_size or sem.granted_total != pairs:
        raise AssertionError(f"limiter not settled: {sem.stats()}")


VARIANTS: dict[str, Variant] = {
    "baseline": baseline,
    "limiter": limiter,
    "context_manager": context_manager,
    "dual": dual,
}


async def measure(waiters: int, permits: int, pairs: int, rounds: int) -> dict[str, float]:
    """Median seconds per variant; variants are interleaved in every round so drift hits them alike."""
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    await baseline(min(waiters, 50), permits, 2)  # warm-up
    await limiter(min(waiters, 50), permits, 2)
    for _ in range(rounds):
        for name, variant in VARIANTS.items():
            times[name].append(await variant(waiters, permits, pairs))
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waiters", type=int, default=1000, help="concurrent tasks (default 1000)")
    parser.add_argument("--permits", type=int, default=10, help="pool size they contend for (default 10)")
    parser.add_argument("--pairs", type=int, default=100, help="acquire+release pairs per task (default 100)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per variant, median reported (default 5)")
    parser.add_argument("--quick", action="store_true", help="20 pairs per task, 3 rounds")
    parser.add_argument("--check", action="store_true", help="exit 1 when an overhead ratio exceeds the target")
    args = parser.parse_args(argv)
    if args.quick:
        args.pairs, args.rounds = 20, 3

    total = args.waiters * args.pairs
    secs = asyncio.run(measure(args.waiters, args.permits, args.pairs, args.rounds))
    rate = {name: total / s for name, s in secs.items()}
    base = rate["baseline"]
    print(
        f"{args.waiters} tasks contending for {args.permits} permits, {args.pairs} acquire+release pairs each "
        f"({total:,} pairs), median of {args.rounds} rounds"
    )
    print(f"  {'asyncio.Semaphore (baseline)':32} {base:>12,.0f} pairs/s {1e6 / base:8.2f} us/pair")
    labels = {
        "limiter": "AsyncSemaphore acquire/release",
        "context_manager": "AsyncSemaphore async with",
        "dual": "AsyncDualMemoryLimiter (heap)",
    }
    figures: dict[str, object] = {
        "waiters": args.waiters,
        "permits": args.permits,
        "pairs": total,
        "rounds": args.rounds,
        "pairs_per_s": round(rate["limiter"]),
        "baseline_pairs_per_s": round(base),
        "overhead_ratio": round(base / rate["limiter"], 3),
    }
    for name, label in labels.items():
        ratio = base / rate[name]
        print(
            f"  {label:32} {rate[name]:>12,.0f} pairs/s {1e6 / rate[name]:8.2f} us/pair"
            f"  baseline {base:,.0f} pairs/s, overhead {ratio:.2f}x (target <= {TARGET_RATIO:g}x)"
        )
        if name != "limiter":
            figures[f"{name}_pairs_per_s"] = round(rate[name])
            figures[f"{name}_overhead_ratio"] = round(ratio, 3)
    worst = max(base / rate[name] for name in labels)
    figures["target_overhead_ratio"] = TARGET_RATIO
    figures["within_target"] = worst <= TARGET_RATIO
    print(json.dumps(figures))
    return 1 if args.check and worst > TARGET_RATIO else 0


if __name__ == "__main__":
    sys.exit(main())
