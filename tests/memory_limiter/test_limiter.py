"""PIP-442's AsyncSemaphore / AsyncDualMemoryLimiter: the conformance vectors, then the behaviour as a specification.

Almost everything runs in virtual time (``VirtualClock``): timeouts and Pulsar's one-shot queue pass happen
exactly when ``advance_to`` says, so no test sleeps. One smoke test uses the real event loop.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from conformance.pulsar_replay import check_expect, replay_pulsar_case
from engine.javamath import LONG_MAX
from memory_limiter.limiter import (
    AsyncDualMemoryLimiter,
    AsyncSemaphore,
    IllegalArgumentException,
    LimitType,
    LoopClock,
    Permit,
    PermitAcquireAlreadyClosedException,
    PermitAcquireCancelledException,
    PermitAcquireException,
    PermitAcquireQueueFullException,
    PermitAcquireTimeoutException,
    SemaphoreConfig,
    VirtualClock,
    render_prometheus,
)

ROOT = Path(__file__).resolve().parents[2]
VECTORS = json.loads((ROOT / "conformance" / "pulsar_vectors.json").read_text())
HEAP, DIRECT = LimitType.HEAP_MEMORY, LimitType.DIRECT_MEMORY


def mismatches(case: dict[str, Any]) -> list[str]:
    out = replay_pulsar_case(case)
    assert isinstance(out, list), out
    assert len(out) == len(case["steps"])
    return [
        f"step {i} ({s['op']}): {m}"
        for i, (s, o) in enumerate(zip(case["steps"], out, strict=True))
        if "expect" in s
        for m in check_expect(s["expect"], o)
    ]


# ---------------------------------------------------------------- conformance vectors


@pytest.mark.parametrize("case", VECTORS["cases"], ids=[c["id"] for c in VECTORS["cases"]])
def test_published_vector(case: dict[str, Any]) -> None:
    assert mismatches(case) == []


def step(op: str, t: int = 0, expect: dict[str, Any] | None = None, **args: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"op": op, "t_ms": t, "args": args}
    if expect is not None:
        s["expect"] = expect
    return s


def sem_case(cid: str, config: tuple[int, int, int], *steps: dict[str, Any]) -> dict[str, Any]:
    m, q, t = config
    return {
        "id": cid,
        "kind": "async_semaphore",
        "config": {"max_permits": m, "max_queue_size": q, "timeout_ms": t},
        "steps": list(steps),
    }


GRANTED, PENDING = {"state": "granted"}, {"state": "pending"}
H, D = "HEAP_MEMORY", "DIRECT_MEMORY"


def failed(error: str) -> dict[str, Any]:
    return {"state": "failed", "error": error}


# The rest of Pulsar's AsyncSemaphoreImplTest / AsyncDualMemoryLimiterImplTest, and the rules they imply, in the
# vectors' own schema: the unpublished cases are of this shape.
EXTRA_CASES = [
    sem_case(
        "timeout_fires_exactly_at_enqueue_plus_timeout",
        (1, 10, 100),
        step("acquire", 0, GRANTED, permits=1, handle="p1"),
        step("acquire", 0, PENDING, permits=1, handle="p2"),
        step("observe", 99, PENDING, handle="p2"),
        step("observe", 100, failed("PermitAcquireTimeoutException"), handle="p2"),
        step("stats", 100, {"queue_size": 0, "acquired_permits": 1}),
    ),
    sem_case(
        "cancel_flag_is_noticed_only_when_permits_are_available",
        (1, 10, 5000),
        step("acquire", 0, GRANTED, permits=1, handle="p1"),
        step("acquire", 0, PENDING, permits=1, handle="p2", cancel_flag="c"),
        step("set_flag", 0, flag="c", value=True),
        step("acquire", 10, PENDING, permits=1, handle="p3"),  # a queue pass runs, but with no permit free
        step("observe", 1000, PENDING, handle="p2"),
        step("stats", 1000, {"queue_size": 2}),
        step("release", 1000, handle="p1"),
        step("observe", 1000, failed("PermitAcquireCancelledException"), handle="p2"),
        step("observe", 1000, GRANTED, handle="p3"),
        step("stats", 1000, {"queue_size": 0, "acquired_permits": 1, "available_permits": 0}),
    ),
    sem_case(
        "acquire_more_than_max_throws",
        (10, 10, 5000),
        step(
            "acquire",
            0,
            {"throws": "IllegalArgumentException", "message": "Requested permits=11 is larger than maxPermits=10"},
            permits=11,
            handle="p1",
        ),
        step("stats", 0, {"queue_size": 0, "available_permits": 10}),
    ),
    sem_case(
        "update_to_negative_throws",
        (10, 10, 5000),
        step("acquire", 0, GRANTED, permits=5, handle="p1"),
        step(
            "update",
            0,
            {"throws": "IllegalArgumentException", "message_contains": "negative permits value: -1"},
            handle="p1",
            new_permits=-1,
            new_handle="p2",
        ),
        step("stats", 0, {"acquired_permits": 5}),
    ),
    sem_case(
        "close_fails_queued_and_later_requests",
        (5, 10, 5000),
        step("acquire", 0, GRANTED, permits=3, handle="p1"),
        step("acquire", 0, PENDING, permits=5, handle="p2"),
        step("close", 0),
        step("observe", 0, failed("PermitAcquireAlreadyClosedException"), handle="p2"),
        step("acquire", 0, failed("PermitAcquireAlreadyClosedException"), permits=1, handle="p3"),
        step("stats", 0, {"queue_size": 0}),
    ),
    sem_case(
        "update_decrease_is_immediate_and_consumes_the_old_permit",
        (10, 10, 5000),
        step("acquire", 0, GRANTED, permits=8, handle="p1"),
        step("acquire", 0, PENDING, permits=5, handle="w"),
        step("update", 0, {"state": "granted", "permits": 5}, handle="p1", new_permits=5, new_handle="p2"),
        step("observe", 0, {"state": "granted", "permits": 5, "acquired_permits": 10}, handle="w"),
        step("release", 0, handle="p1"),
        step("stats", 0, {"acquired_permits": 10}),
        step("observe", 0, {"permits": 0}, handle="p1"),
    ),
    sem_case(
        "update_to_zero_gives_everything_back",
        (10, 10, 5000),
        step("acquire", 0, GRANTED, permits=5, handle="p1"),
        step("update", 0, {"state": "granted", "permits": 0}, handle="p1", new_permits=0, new_handle="p2"),
        step("acquire", 0, {"state": "granted", "permits": 10}, permits=10, handle="p3"),
    ),
    sem_case(
        "timeout_reprocesses_the_queue",
        (5, 10, 250),
        step("acquire", 0, GRANTED, permits=5, handle="p1"),
        step("acquire", 0, PENDING, permits=5, handle="p2"),
        step("acquire", 250, PENDING, permits=3, handle="p3"),
        step("observe", 250, failed("PermitAcquireTimeoutException"), handle="p2"),
        step("release", 250, handle="p1"),
        step("observe", 250, {"state": "granted", "permits": 3}, handle="p3"),
    ),
    sem_case(
        "a_timed_out_head_unblocks_the_requests_behind_it",
        (10, 10, 5000),
        step("acquire", 0, GRANTED, permits=5, handle="p1"),
        step("acquire", 0, PENDING, permits=10, handle="big"),
        step("acquire", 10, PENDING, permits=5, handle="small"),
        step("observe", 4999, PENDING, handle="small"),
        step("observe", 5000, failed("PermitAcquireTimeoutException"), handle="big"),
        step("observe", 5000, {"state": "granted", "permits": 5}, handle="small"),
    ),
    sem_case(
        "cancelled_future_lingers_until_the_one_shot_pass_at_half_the_timeout",
        (10, 10, 200),
        step("acquire", 0, GRANTED, permits=5, handle="p1"),
        step("acquire", 0, PENDING, permits=10, handle="p2"),
        step("acquire", 0, PENDING, permits=5, handle="p3"),
        step("cancel_future", 0, {"state": "cancelled", "queue_size": 2}, handle="p2"),
        step("observe", 99, PENDING, handle="p3"),
        step("observe", 100, {"state": "granted", "permits": 5}, handle="p3"),
        step("stats", 100, {"acquired_permits": 10, "queue_size": 0}),
    ),
    sem_case(
        "a_lingering_cancelled_request_still_takes_a_queue_slot",
        (1, 1, 5000),
        step("acquire", 0, GRANTED, permits=1, handle="p1"),
        step("acquire", 0, PENDING, permits=1, handle="p2"),
        step("cancel_future", 0, {"state": "cancelled"}, handle="p2"),
        step("acquire", 0, failed("PermitAcquireQueueFullException"), permits=1, handle="p3"),
        step("release", 0, {"queue_size": 0, "available_permits": 1}, handle="p1"),
    ),
    sem_case(
        "head_of_line_blocking",
        (10, 10, 5000),
        step("acquire", 0, GRANTED, permits=8, handle="a"),
        step("acquire", 0, PENDING, permits=5, handle="b"),
        step("acquire", 0, PENDING, permits=2, handle="c"),
        step("stats", 0, {"available_permits": 2, "queue_size": 2}),
        step("release", 0, handle="a"),
        step("observe", 0, GRANTED, handle="b"),
        step("observe", 0, GRANTED, handle="c"),
        step("stats", 0, {"available_permits": 3, "queue_size": 0}),
    ),
    sem_case(
        "update_grow_waits_its_turn_behind_earlier_requests",
        (10, 10, 5000),
        step("acquire", 0, GRANTED, permits=4, handle="p1"),
        step("acquire", 0, GRANTED, permits=2, handle="p2"),
        step("acquire", 0, PENDING, permits=5, handle="q"),
        step("update", 0, PENDING, handle="p1", new_permits=6, new_handle="p1b"),
        step("observe", 0, {"permits": 4}, handle="p1"),
        step("release", 0, handle="p2"),
        step("observe", 0, GRANTED, handle="q"),
        step("observe", 0, PENDING, handle="p1b"),
        step("release", 0, handle="q"),
        step("observe", 0, {"state": "granted", "permits": 6}, handle="p1b"),
        step("observe", 0, {"permits": 0}, handle="p1"),
        step("stats", 0, {"acquired_permits": 6}),
    ),
    sem_case(
        "cancel_flag_on_a_blocked_head_is_noticed_by_the_one_shot_pass",
        (10, 10, 1000),
        step("acquire", 0, GRANTED, permits=5, handle="p1"),
        step("acquire", 0, PENDING, permits=10, handle="q1", cancel_flag="c"),
        step("acquire", 0, PENDING, permits=5, handle="q2"),
        step("set_flag", 100, flag="c", value=True),
        step("observe", 499, PENDING, handle="q2"),
        step("observe", 500, failed("PermitAcquireCancelledException"), handle="q1"),
        step("observe", 500, {"state": "granted", "permits": 5}, handle="q2"),
    ),
    sem_case(
        "unbounded_semaphore_ignores_limits_flags_and_timeouts",
        (0, 10, 100),
        step("stats", 0, {"available_permits": LONG_MAX, "acquired_permits": 0, "queue_size": 0}),
        step("acquire", 0, {"state": "granted", "permits": 1000}, permits=1000, handle="p1", cancel_flag="c"),
        step("set_flag", 0, flag="c", value=True),
        step("acquire", 0, {"state": "granted", "permits": 10}, permits=10, handle="p2", cancel_flag="c"),
        step("update", 0, {"state": "granted", "permits": 50}, handle="p2", new_permits=50, new_handle="p3"),
        step("observe", 1000, {"state": "granted", "permits": 1000}, handle="p1"),
        step("release", 1000, {"available_permits": LONG_MAX}, handle="p1"),
        step("acquire", 1000, {"throws": "IllegalArgumentException"}, permits=-1, handle="p4"),
    ),
    {
        "id": "dual_pools_are_independent",
        "kind": "async_dual_memory_limiter",
        "config": {
            "heap": {"max_permits": 1000, "max_queue_size": 10, "timeout_ms": 100},
            "direct": {"max_permits": 1000, "max_queue_size": 10, "timeout_ms": 5000},
        },
        "steps": [
            step("acquire", 0, {"state": "granted", "limit_type": H}, permits=1000, limit_type=H, handle="h1"),
            step("acquire", 0, {"state": "granted", "limit_type": D}, permits=500, limit_type=D, handle="d1"),
            step("acquire", 0, PENDING, permits=1, limit_type=H, handle="h2"),
            step("acquire", 0, PENDING, permits=600, limit_type=D, handle="d2"),
            step("stats", 0, {"acquired_permits": 1000, "queue_size": 1}, limit_type=H),
            step("stats", 0, {"acquired_permits": 500, "queue_size": 1}, limit_type=D),
            step("observe", 100, failed("PermitAcquireTimeoutException"), handle="h2"),
            step("observe", 100, PENDING, handle="d2"),
            step("update", 100, {"permits": 100, "limit_type": D}, handle="d1", new_permits=100, new_handle="d1b"),
            step("observe", 100, {"state": "granted", "limit_type": D}, handle="d2"),
            step("stats", 100, {"acquired_permits": 700}, limit_type=D),
            step("close", 100),
            step("acquire", 100, failed("PermitAcquireAlreadyClosedException"), permits=1, limit_type=D, handle="d3"),
        ],
    },
]


@pytest.mark.parametrize("case", EXTRA_CASES, ids=[c["id"] for c in EXTRA_CASES])
def test_pulsar_rule_as_vector(case: dict[str, Any]) -> None:
    assert mismatches(case) == []


def test_a_wrong_expectation_is_reported() -> None:
    case = json.loads(json.dumps(VECTORS["cases"][5]))  # sem.multiple_releases
    case["steps"][10]["expect"] = {"state": "pending"}  # q1 is in fact granted at t=100
    case["steps"][15]["expect"]["permits"] = 3
    assert mismatches(case) == [
        "step 10 (observe): state: expected 'pending', got 'granted'",
        "step 15 (observe): permits: expected 3, got 4",
    ]


def test_steps_without_expect_give_empty_outputs_and_unknown_ops_are_unsupported() -> None:
    case = sem_case(
        "x", (1, 1, 100), step("acquire", 0, permits=1, handle="p"), step("observe", 0, GRANTED, handle="p")
    )
    assert replay_pulsar_case(case) == [{}, {"state": "granted", "permits": 1, **available(0, 1, 0)}]
    assert replay_pulsar_case(case, full=True)[0]["state"] == "granted"  # type: ignore[index]
    assert "unsupported" in replay_pulsar_case({**case, "steps": [step("resize", 0, n=1)]})
    assert "unsupported" in replay_pulsar_case({**case, "kind": "connection_quotas"})
    assert "unsupported" in replay_pulsar_case({**case, "steps": [step("release", 0, handle="nope")]})


def available(avail: int, acquired: int, queued: int) -> dict[str, int]:
    return {"available_permits": avail, "acquired_permits": acquired, "queue_size": queued}


@pytest.mark.parametrize(
    ("expect", "got", "ok"),
    [
        ({"x": 1}, {"x": 1.0}, True),
        ({"x": LONG_MAX}, {"x": LONG_MAX - 1}, False),
        ({"x": True}, {"x": 1}, False),
        ({"x": {"approx": 2.0, "tol": 0.1}}, {"x": 2.05}, True),
        ({"x": {"approx": 2.0, "tol": 0.1}}, {"x": 2.2}, False),
        ({"x": {"gt": 0}}, {"x": 0}, False),
        ({"x": {"ge": 0}}, {"x": 0}, True),
        ({"x": {"lt": 0}}, {"x": -1}, True),
        ({"x": {"le": -2}}, {"x": -1}, False),
        ({"x": {"between": [38, 42]}}, {"x": 42}, True),
        ({"x": {"between": [38, 42]}}, {"x": 43}, False),
        ({"x": {"ne": 0}}, {"x": 0}, False),
        ({"x": {"ne": 0}}, {"x": 7}, True),
        ({"x": {"gt": 0}}, {"x": "1"}, False),
        ({"x": 1}, {}, False),
        ({"throws": "IAE", "message": "a b"}, {"throws": "IAE", "message": "a b"}, True),
        ({"message": "a"}, {"message": "a b"}, False),
        ({"message_contains": "Invalid permit"}, {"message": "Invalid permit type"}, True),
        ({"message_contains": "Invalid permit"}, {"state": "granted"}, False),
    ],
)  # fmt: skip
def test_check_expect_forms(expect: dict[str, Any], got: dict[str, Any], ok: bool) -> None:
    problems = check_expect(expect, got)
    assert (problems == []) is ok, problems


# ---------------------------------------------------------------- behaviour, in virtual time


@pytest.fixture
def clock() -> Any:
    c = VirtualClock()
    yield c
    c.close()


def sem(clock: VirtualClock, max_permits: int = 10, max_queue: int = 10, timeout_ms: int = 5000) -> AsyncSemaphore:
    return AsyncSemaphore(max_permits, max_queue, timeout_ms, clock=clock)


def granted(fut: asyncio.Future[Permit]) -> int | None:
    """The permits of a granted future, None while pending (raises for a failure)."""
    return fut.result().permits if fut.done() else None


def error_of(fut: asyncio.Future[Permit]) -> type[BaseException] | None:
    return type(fut.exception()) if fut.done() and not fut.cancelled() and fut.exception() else None


def test_requests_are_granted_in_arrival_order(clock: VirtualClock) -> None:
    s = sem(clock, max_permits=3, max_queue=0)
    holders = [s.acquire(1) for _ in range(3)]
    waiters = [s.acquire(1) for _ in range(50)]
    assert all(granted(f) == 1 for f in holders) and not any(f.done() for f in waiters)
    order = []
    for i in range(50):
        s.release((holders + waiters)[i].result())
        order += [j for j, f in enumerate(waiters) if f.done() and j not in order]
    assert order == list(range(50))
    assert s.queue_size == 0 and s.acquired_permits == 3


def test_the_head_blocks_smaller_requests_behind_it(clock: VirtualClock) -> None:
    s = sem(clock)
    a = s.acquire(8)
    big, small = s.acquire(5), s.acquire(1)
    assert s.available_permits == 2 and granted(big) is None and granted(small) is None
    s.release(a.result())
    assert (granted(big), granted(small), s.available_permits) == (5, 1, 4)


def test_update_grows_by_the_difference_and_shrinks_at_once(clock: VirtualClock) -> None:
    s = sem(clock)
    p1 = s.acquire(5).result()
    p2 = s.update(p1, 8).result()
    assert (p1.permits, p2.permits, s.acquired_permits) == (0, 8, 8)  # the old permit was consumed
    s.release(p1)  # no-op
    assert s.acquired_permits == 8
    waiter = s.acquire(4)
    assert granted(waiter) is None
    p3 = s.update(p2, 6).result()  # shrink: immediate, the 2 returned permits go to the waiter
    assert (p3.permits, granted(waiter), s.acquired_permits) == (6, 4, 10)
    s.release(p3)
    s.release(waiter.result())
    assert s.acquired_permits == 0


def test_a_failed_grow_leaves_the_old_permit_held(clock: VirtualClock) -> None:
    s = sem(clock, max_permits=10, timeout_ms=100)
    p1 = s.acquire(5).result()
    other = s.acquire(5).result()
    grow = s.update(p1, 10)
    clock.advance_to(100)
    assert error_of(grow) is PermitAcquireTimeoutException
    assert (p1.permits, s.acquired_permits) == (5, 10)
    s.release(other)
    s.release(p1)
    assert s.acquired_permits == 0


def test_timeout_fires_at_the_deadline_and_is_counted(clock: VirtualClock) -> None:
    s = sem(clock, max_permits=1, timeout_ms=300)
    s.acquire(1)
    clock.advance_to(50)
    late = s.acquire(1)
    clock.advance_to(349)
    assert not late.done()
    clock.advance_to(350)
    assert error_of(late) is PermitAcquireTimeoutException
    st = s.stats()
    assert (st.timeout_total, st.queue_size, st.wait_count) == (1, 0, 2)  # the immediate grant + the timeout
    assert st.wait_sum_ms == 300.0 and st.wait_quantiles_ms[1.0] == 300.0


def test_a_full_queue_rejects_immediately(clock: VirtualClock) -> None:
    s = sem(clock, max_permits=1, max_queue=2)
    s.acquire(1)
    queued = [s.acquire(1), s.acquire(1)]
    rejected = s.acquire(1)
    assert error_of(rejected) is PermitAcquireQueueFullException
    assert [f.done() for f in queued] == [False, False]
    assert (s.queue_size, s.queue_full_total) == (2, 1)


def test_cancel_flag_fails_the_request_without_taking_permits(clock: VirtualClock) -> None:
    s = sem(clock, max_permits=2)
    holder = s.acquire(2).result()
    gone = {"flag": False}
    fut = s.acquire(1, lambda: gone["flag"])
    behind = s.acquire(1)
    gone["flag"] = True
    assert not fut.done()  # nothing is available, so nobody looks at the flag yet
    s.release(holder)
    assert error_of(fut) is PermitAcquireCancelledException
    assert granted(behind) == 1 and s.acquired_permits == 1 and s.cancelled_total == 1


def test_cancelling_the_future_frees_its_place_at_the_next_queue_pass(clock: VirtualClock) -> None:
    s = sem(clock, max_permits=2, timeout_ms=5000)
    holder = s.acquire(2).result()
    fut = s.acquire(2)
    behind = s.acquire(1)
    fut.cancel()
    assert fut.cancelled() and s.queue_size == 2  # still queued, as in Pulsar, until a pass reaches it
    s.release(holder)
    assert s.queue_size == 0 and granted(behind) == 1 and s.acquired_permits == 1


def test_close_fails_waiters_and_later_acquisitions(clock: VirtualClock) -> None:
    s = sem(clock, max_permits=5)
    held = s.acquire(3).result()
    waiting = s.acquire(5)
    s.close()
    assert error_of(waiting) is PermitAcquireAlreadyClosedException
    assert error_of(s.acquire(1)) is PermitAcquireAlreadyClosedException
    s.release(held)  # still accepted after close
    assert s.acquired_permits == 0 and clock.pending_timers() == 0


def test_validation_errors_are_raised_at_once_not_through_the_future(clock: VirtualClock) -> None:
    s = sem(clock)
    with pytest.raises(IllegalArgumentException, match=r"^Invalid negative permits value: -1$") as e:
        s.acquire(-1)
    assert isinstance(e.value, ValueError)
    with pytest.raises(IllegalArgumentException, match=r"^Requested permits=11 is larger than maxPermits=10$"):
        s.acquire(11)
    p = s.acquire(5).result()
    with pytest.raises(IllegalArgumentException, match="larger than maxPermits=10"):
        s.update(p, 11)
    assert (s.queue_size, s.acquired_permits, p.permits) == (0, 5, 5)


def test_foreign_permits_are_rejected(clock: VirtualClock) -> None:
    s, other = sem(clock), sem(clock)
    mine, theirs = s.acquire(1).result(), other.acquire(1).result()
    for bad in (object(), theirs):
        with pytest.raises(IllegalArgumentException, match="Invalid permit type"):
            s.release(bad)  # type: ignore[arg-type]
        with pytest.raises(IllegalArgumentException, match="Invalid permit type"):
            s.update(bad, 2)  # type: ignore[arg-type]
    limiter = AsyncDualMemoryLimiter(SemaphoreConfig(10, 1, 100), SemaphoreConfig(10, 1, 100), clock=clock)
    with pytest.raises(IllegalArgumentException, match="Invalid permit type"):
        limiter.release(mine)
    assert s.acquired_permits == 1 and other.acquired_permits == 1


def test_dual_limiter_pools_are_independent(clock: VirtualClock) -> None:
    limiter = AsyncDualMemoryLimiter(SemaphoreConfig(1000, 10, 100), SemaphoreConfig(500, 10, 100), clock=clock)
    heap = limiter.acquire(1000, HEAP).result()
    heap_waiter = limiter.acquire(1, HEAP)
    direct = limiter.acquire(500, DIRECT).result()
    assert (heap.limit_type, direct.limit_type) == (HEAP, DIRECT)
    assert not heap_waiter.done()
    grown = limiter.update(direct, 200)  # shrinks in its own pool: heap unaffected
    assert granted(grown) == 200 and grown.result().limit_type is DIRECT
    assert limiter.get_limiter(DIRECT).acquired_permits == 200
    assert limiter.get_limiter(HEAP).acquired_permits == 1000 and not heap_waiter.done()
    limiter.release(heap)
    assert granted(heap_waiter) == 1
    with pytest.raises(IllegalArgumentException, match="Unsupported limit type"):
        limiter.acquire(1, "STACK_MEMORY")


# ---------------------------------------------------------------- helpers that always release


def test_acquired_releases_on_error_and_on_success() -> None:
    async def main() -> None:
        clock = VirtualClock()
        s = sem(clock)
        with pytest.raises(RuntimeError):
            async with s.acquired(4) as p:
                assert p.permits == 4 and s.acquired_permits == 4
                raise RuntimeError("boom")
        assert s.acquired_permits == 0
        async with s.acquired(2) as p:
            async with s.updated(p, 7) as bigger:
                assert (p.permits, bigger.permits, s.acquired_permits) == (0, 7, 7)
        assert s.acquired_permits == 0

    asyncio.run(main())


def test_with_acquired_and_updated_permits() -> None:
    async def main() -> None:
        clock = VirtualClock()
        limiter = AsyncDualMemoryLimiter(SemaphoreConfig(100, 1, 1000), SemaphoreConfig(100, 1, 1000), clock=clock)
        heap = limiter.get_limiter(HEAP)

        async def body(permit: Permit) -> str:
            async def inner(bigger: Permit) -> str:
                assert heap.acquired_permits == 60
                return f"{permit.permits}->{bigger.permits}"

            return await limiter.with_updated_permits(permit, 60, inner)

        assert await limiter.with_acquired_permits(10, HEAP, body) == "0->60"
        assert heap.acquired_permits == 0

        async def fail(permit: Permit) -> str:
            raise KeyError("x")

        with pytest.raises(KeyError):
            await limiter.with_acquired_permits(10, HEAP, fail)
        assert heap.acquired_permits == 0

        # a failed acquisition goes to the error handler; the function never runs
        hog = limiter.acquire(100, HEAP).result()
        limiter.acquire(1, HEAP)  # fills the one-slot queue

        async def handler(exc: PermitAcquireException) -> str:
            return type(exc).__name__

        assert await limiter.with_acquired_permits(1, HEAP, fail, handler) == "PermitAcquireQueueFullException"
        with pytest.raises(PermitAcquireQueueFullException):
            await limiter.with_acquired_permits(1, HEAP, fail)

        # a failed update keeps the initial permit for its owner to release
        limiter.release(hog)
        initial = limiter.acquire(50, DIRECT).result()
        blocker = limiter.acquire(50, DIRECT).result()
        task = asyncio.ensure_future(limiter.with_updated_permits(initial, 100, fail, handler))
        await asyncio.sleep(0)
        clock.advance(1000)
        assert await task == "PermitAcquireTimeoutException"
        assert initial.permits == 50 and limiter.get_limiter(DIRECT).acquired_permits == 100
        limiter.release(initial)
        limiter.release(blocker)
        clock.close()

    asyncio.run(main())


def test_a_cancelled_waiting_task_leaks_nothing() -> None:
    async def main() -> None:
        clock = VirtualClock()
        s = sem(clock, max_permits=1)
        holder = s.acquire(1).result()

        async def use() -> None:
            async with s.acquired(1):
                await asyncio.sleep(0)

        waiting = asyncio.ensure_future(use())
        await asyncio.sleep(0)
        assert s.queue_size == 1
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        s.release(holder)
        assert (s.queue_size, s.acquired_permits) == (0, 0)

        # granted, then cancelled before the task could resume: the scope gives the permit back
        holder = s.acquire(1).result()
        racing = asyncio.ensure_future(use())
        await asyncio.sleep(0)
        s.release(holder)  # grants racing's future...
        racing.cancel()  # ...but the task is cancelled before it runs again
        with pytest.raises(asyncio.CancelledError):
            await racing
        assert s.acquired_permits == 0

    asyncio.run(main())


# ---------------------------------------------------------------- metrics


def parse_prometheus(text: str) -> tuple[dict[str, str], dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    """A minimal text-format 0.0.4 parser: TYPE per family, value per (name, labels)."""
    types: dict[str, str] = {}
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    sample = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line.startswith("#") or not line:
            continue
        else:
            m = sample.match(line)
            assert m, f"unparseable line {line!r}"
            labels = frozenset(re.findall(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            samples[(m.group(1), labels)] = float(m.group(3))
    return types, samples


def test_prometheus_text_has_the_pip_metric_table(clock: VirtualClock) -> None:
    limiter = AsyncDualMemoryLimiter(SemaphoreConfig(1000, 2, 100), SemaphoreConfig(0, 0, 100), clock=clock)
    limiter.acquire(600, HEAP)
    clock.advance_to(10)
    waiters = [limiter.acquire(500, HEAP), limiter.acquire(500, HEAP)]
    assert error_of(limiter.acquire(500, HEAP)) is PermitAcquireQueueFullException
    clock.advance_to(110)  # both waiters time out, after 100 ms
    assert [error_of(w) for w in waiters] == [PermitAcquireTimeoutException] * 2
    limiter.acquire(123, DIRECT)

    text = render_prometheus(limiter, labels={"cluster": 'c"1'})
    types, samples = parse_prometheus(text)
    lab = frozenset({("cluster", 'c\\"1')})
    p = "pulsar_broker_topic_list_"

    def value(name: str, **extra: str) -> float:
        return samples[(p + name, lab | frozenset(extra.items()))]

    assert value("heap_memory_used_bytes") == 600
    assert value("heap_memory_limit_bytes") == 1000
    assert value("heap_queue_size") == 0 and value("heap_queue_max_size") == 2
    assert value("heap_timeout_total") == 2 and value("heap_queue_full_total") == 1
    assert value("heap_wait_time_ms_count") == 3 and value("heap_wait_time_ms_sum") == 200.0
    assert value("heap_wait_time_ms", quantile="0.5") == 100.0 and value("heap_wait_time_ms", quantile="1.0") == 100.0
    assert value("direct_memory_used_bytes") == 0  # unbounded pools track nothing, as in Pulsar
    assert math.isinf(value("direct_memory_limit_bytes")) and math.isinf(value("direct_queue_max_size"))
    assert math.isnan(value("direct_wait_time_ms", quantile="0.99"))
    for pool in ("heap", "direct"):
        assert types[f"{p}{pool}_memory_used_bytes"] == "gauge"
        assert types[f"{p}{pool}_wait_time_ms"] == "summary"
        assert types[f"{p}{pool}_timeout_total"] == "counter"
    assert all(re.fullmatch(r"[a-z_]+", name[len(p) :]) for name in types)
    assert text.endswith("\n") and render_prometheus(limiter, prefix="x_").startswith("# HELP x_heap_memory_used_bytes")


# ---------------------------------------------------------------- the real event loop


def test_real_loop_smoke() -> None:
    async def main() -> None:
        s = AsyncSemaphore(3, 0, 60, clock=LoopClock())
        assert isinstance(s.acquire(0), asyncio.Future)
        inside, peak, order = 0, 0, []

        async def worker(i: int) -> None:
            nonlocal inside, peak
            async with s.acquired(1):
                inside += 1
                peak = max(peak, inside)
                order.append(i)
                await asyncio.sleep(0)
                inside -= 1

        await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(200))), timeout=5)
        assert peak == 3 and order == list(range(200)) and s.acquired_permits == 0

        hog = await s.acquire(3)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(PermitAcquireTimeoutException):
            await s.acquire(1)
        waited = loop.time() - started
        assert 0.055 <= waited < 1.0, waited
        s.release(hog)
        s.close()

    asyncio.run(main())


def test_a_limiter_outlives_an_event_loop() -> None:
    """A module-level limiter sees one loop per asyncio.run (tests, management commands): timeouts still fire."""
    s = AsyncSemaphore(1, 0, 50)

    async def queue_briefly() -> None:
        hog = await s.acquire(1)
        waiter = s.acquire(1)
        s.release(hog)
        s.release(await waiter)

    async def time_out() -> None:
        hog = await s.acquire(1)
        with pytest.raises(PermitAcquireTimeoutException):
            await asyncio.wait_for(s.acquire(1), 1.0)
        s.release(hog)

    asyncio.run(queue_briefly())
    asyncio.run(time_out())
    assert s.acquired_permits == 0 and s.timeout_total == 1


def test_benchmark_runs_and_reports_json(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import limiter_bench

    assert limiter_bench.main(["--waiters", "20", "--permits", "2", "--pairs", "5", "--rounds", "1"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    figures = json.loads(last)
    assert figures["pairs_per_s"] > 0 and figures["baseline_pairs_per_s"] > 0 and figures["overhead_ratio"] > 0


@pytest.mark.parametrize("permits", [float("nan"), 1.5, True, None, "10"])
def test_permits_that_are_not_whole_bytes_are_refused(permits: object) -> None:
    sem = AsyncSemaphore(max_permits=10, max_queue_size=10, timeout_ms=1000)
    with pytest.raises(IllegalArgumentException):
        sem.acquire(permits)  # type: ignore[arg-type]
    assert sem.available_permits == 10


@pytest.mark.parametrize("config", [dict(timeout_ms=float("nan")), dict(timeout_ms=None), dict(max_permits=2.5)])
def test_pool_configs_are_checked(config: dict) -> None:
    with pytest.raises(IllegalArgumentException):
        SemaphoreConfig(**{"max_permits": 10, "max_queue_size": 10, "timeout_ms": 1000, **config})
