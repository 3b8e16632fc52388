"""PIP-442's ``AsyncSemaphore``: permits from one pool, a bounded FIFO queue with a timeout, and the scopes that
hold permits for a block of code (the semantics are ``memory_limiter.limiter``'s description)."""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from engine.javamath import LONG_MAX
from memory_limiter.clocks import (
    Clock,
    LoopClock,
    TimerHandle,
)
from memory_limiter.errors import (
    IllegalArgumentException,
    PermitAcquireAlreadyClosedException,
    PermitAcquireCancelledException,
    PermitAcquireException,
    PermitAcquireQueueFullException,
    PermitAcquireTimeoutException,
)

T = TypeVar("T")
IsCancelled = Callable[[], bool]

log = logging.getLogger(__name__)

WAIT_QUANTILES = (0.5, 0.95, 0.99, 1.0)
#: wait-time quantiles are computed over this many most recent acquisitions (a bounded, O(1) hot path)
WAIT_WINDOW = 4096


class LimitType(StrEnum):
    HEAP_MEMORY = "HEAP_MEMORY"
    DIRECT_MEMORY = "DIRECT_MEMORY"


class Permit:
    """Permits held from one semaphore; ``permits`` drops to 0 once released or consumed by an update."""

    __slots__ = ("permits", "limit_type", "_owner")

    def __init__(self, permits: int, owner: AsyncSemaphore, limit_type: LimitType | None = None) -> None:
        self.permits = permits
        self.limit_type = limit_type
        self._owner = owner

    def __repr__(self) -> str:
        kind = f"{self.limit_type}, " if self.limit_type is not None else ""
        return f"Permit({kind}permits={self.permits})"


# Pulsar's names for the same object
AsyncSemaphorePermit = Permit
AsyncDualMemoryLimiterPermit = Permit


class _Request:
    __slots__ = ("permits", "previous", "future", "is_cancelled", "enqueued_ms", "deadline_ms")

    def __init__(
        self,
        permits: int,
        previous: Permit | None,
        future: asyncio.Future[Permit],
        is_cancelled: IsCancelled | None,
        enqueued_ms: float,
        deadline_ms: float,
    ) -> None:
        self.permits = permits
        self.previous = previous
        self.future = future
        self.is_cancelled = is_cancelled
        self.enqueued_ms = enqueued_ms
        self.deadline_ms = deadline_ms


@dataclass(frozen=True)
class SemaphoreConfig:
    """One pool: ``max_permits`` (bytes; <= 0 unbounded), ``max_queue_size`` (<= 0 unbounded), ``timeout_ms``."""

    max_permits: int
    max_queue_size: int
    timeout_ms: float

    def __post_init__(self) -> None:
        for name in ("max_permits", "max_queue_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise IllegalArgumentException(f"{name} must be an integer, got {value!r}")
        t = self.timeout_ms
        if isinstance(t, bool) or not isinstance(t, (int, float)) or t != t or t in (float("inf"), float("-inf")):
            raise IllegalArgumentException(f"timeout_ms must be a finite number of milliseconds, got {t!r}")


@dataclass(frozen=True)
class SemaphoreStats:
    """A snapshot for metrics; ``wait_quantiles_ms`` maps each of WAIT_QUANTILES to ms (NaN when no data)."""

    max_permits: int
    max_queue_size: int
    available_permits: int
    acquired_permits: int
    queue_size: int
    granted_total: int
    timeout_total: int
    queue_full_total: int
    cancelled_total: int
    wait_count: int
    wait_sum_ms: float
    wait_quantiles_ms: dict[float, float]


class AsyncSemaphore:
    """Pulsar's AsyncSemaphoreImpl on asyncio: FIFO, bounded queue, per-request timeout, cancellation.

    All methods run on the loop's thread; grants are made synchronously inside acquire/update/release and the
    timers, so the state is settled as soon as a call returns.
    """

    def __init__(
        self,
        max_permits: int,
        max_queue_size: int,
        timeout_ms: float,
        *,
        clock: Clock | None = None,
        limit_type: LimitType | None = None,
    ) -> None:
        self._max = max_permits
        self._bounded = max_permits > 0
        self._available = max_permits
        self._max_queue = max_queue_size
        self._timeout = timeout_ms
        self._clock: Clock = clock if clock is not None else LoopClock()
        self._new_future = self._clock.create_future
        self._limit_type = limit_type
        self._queue: deque[_Request] = deque()
        self._closed = False
        self._timer: TimerHandle | None = None
        self._processing = False
        self._again = False
        # Pulsar runs one extra queue pass timeout/2 after construction (for a cancelled head); it only matters
        # once something is queued, so it is armed by the first enqueue that happens before it is due.
        self._oneshot_due: float | None = self._clock.now_ms() + int(timeout_ms / 2) if self._bounded else None
        self._oneshot: TimerHandle | None = None
        self.granted_total = 0
        self.timeout_total = 0
        self.queue_full_total = 0
        self.cancelled_total = 0
        self.wait_count = 0
        self.wait_sum_ms = 0.0
        self._waits: deque[float] = deque(maxlen=WAIT_WINDOW)

    # ------------------------------------------------------------ state

    @property
    def max_permits(self) -> int:
        return self._max

    @property
    def max_queue_size(self) -> int:
        return self._max_queue

    @property
    def timeout_ms(self) -> float:
        return self._timeout

    @property
    def available_permits(self) -> int:
        """Long.MAX_VALUE when unbounded, as Pulsar reports it."""
        return self._available if self._bounded else LONG_MAX

    @property
    def acquired_permits(self) -> int:
        """``max - available``; 0 when unbounded (nothing is tracked then)."""
        return self._max - self._available if self._bounded else 0

    @property
    def queue_size(self) -> int:
        """Requests in the queue, including cancelled ones not yet noticed by a queue pass."""
        return len(self._queue)

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------ Pulsar's API

    def acquire(self, permits: int, is_cancelled: IsCancelled | None = None) -> asyncio.Future[Permit]:
        """A future of ``permits`` permits; raises IllegalArgumentException for a negative or too large count."""
        self._validate(permits)
        return self._acquire(permits, None, is_cancelled)

    def update(
        self, permit: Permit, new_permits: int, is_cancelled: IsCancelled | None = None
    ) -> asyncio.Future[Permit]:
        """A future of a permit for ``new_permits`` that replaces ``permit`` (consumed on success)."""
        self._validate(new_permits)
        if not self._bounded:
            return self._completed(Permit(new_permits, self, self._limit_type))
        old = self._own(permit)
        if new_permits > old.permits:
            return self._acquire(new_permits, old, is_cancelled)
        leftover = old.permits - new_permits
        old.permits = 0
        if leftover > 0:
            self._available += leftover
            if self._queue:
                self._process()
        return self._completed(Permit(new_permits, self, self._limit_type))

    def release(self, permit: Permit) -> None:
        """Give the permits back; a no-op for a permit already released or consumed by an update."""
        if not self._bounded:
            return
        p = self._own(permit)
        n = p.permits
        if n > 0:
            p.permits = 0
            self._available += n
            if self._queue:
                self._process()

    def close(self) -> None:
        """Fail every queued request with PermitAcquireAlreadyClosedException; later acquisitions fail too."""
        if self._closed:
            return
        self._closed = True
        for handle in (self._oneshot, self._timer):
            if handle is not None:
                handle.cancel()
        self._oneshot = self._timer = None
        self._oneshot_due = None
        queue = self._queue
        while queue:
            fut = queue.popleft().future
            if not fut.done():
                fut.set_exception(PermitAcquireAlreadyClosedException("Semaphore is closed"))

    # ------------------------------------------------------------ helpers

    def acquired(self, permits: int, is_cancelled: IsCancelled | None = None) -> _PermitScope:
        """``async with sem.acquired(n) as permit:`` - the permit is released on exit, error or not."""
        return _PermitScope(self.acquire, (permits, is_cancelled), self.release)

    def updated(self, permit: Permit, new_permits: int, is_cancelled: IsCancelled | None = None) -> _PermitScope:
        """``async with sem.updated(p, n) as permit:`` - releases the updated permit on exit."""
        return _PermitScope(self.update, (permit, new_permits, is_cancelled), self.release)

    def stats(self) -> SemaphoreStats:
        waits = sorted(self._waits)
        return SemaphoreStats(
            max_permits=self._max,
            max_queue_size=self._max_queue,
            available_permits=self.available_permits,
            acquired_permits=self.acquired_permits,
            queue_size=len(self._queue),
            granted_total=self.granted_total,
            timeout_total=self.timeout_total,
            queue_full_total=self.queue_full_total,
            cancelled_total=self.cancelled_total,
            wait_count=self.wait_count,
            wait_sum_ms=self.wait_sum_ms,
            wait_quantiles_ms={q: _nearest_rank(waits, q) for q in WAIT_QUANTILES},
        )

    # ------------------------------------------------------------ internals

    def _validate(self, permits: int) -> None:
        if isinstance(permits, bool) or not isinstance(permits, int):
            raise IllegalArgumentException(f"Permits must be an integer number of bytes, got {permits!r}")
        if permits < 0:
            raise IllegalArgumentException(f"Invalid negative permits value: {permits}")
        if self._bounded and permits > self._max:
            raise IllegalArgumentException(f"Requested permits={permits} is larger than maxPermits={self._max}")

    def _own(self, permit: Any) -> Permit:
        if not isinstance(permit, Permit):
            raise IllegalArgumentException("Invalid permit type")
        if permit._owner is not self:
            raise IllegalArgumentException("Invalid permit type: the permit was issued by another semaphore")
        return permit

    def _completed(self, permit: Permit) -> asyncio.Future[Permit]:
        fut = self._new_future()
        fut.set_result(permit)
        return fut

    def _acquire(
        self, permits: int, previous: Permit | None, is_cancelled: IsCancelled | None
    ) -> asyncio.Future[Permit]:
        fut: asyncio.Future[Permit] = self._new_future()
        if not self._bounded:
            fut.set_result(Permit(permits, self, self._limit_type))
            return fut
        if self._closed:
            fut.set_exception(PermitAcquireAlreadyClosedException("Semaphore is closed"))
            return fut
        queue = self._queue
        if not queue:
            # the queue pass Pulsar would run for this lone request, inline
            current = self._available
            if current > 0 and (permits if previous is None else permits - previous.permits) <= current:
                if is_cancelled is not None and self._is_cancelled(is_cancelled):
                    self.cancelled_total += 1
                    fut.set_exception(PermitAcquireCancelledException("Permit acquisition was cancelled"))
                    return fut
                if previous is None:
                    self._available -= permits
                else:
                    self._available -= permits - previous.permits
                    previous.permits = 0
                self.granted_total += 1
                self.wait_count += 1
                self._waits.append(0.0)
                fut.set_result(Permit(permits, self, self._limit_type))
                return fut
        elif 0 < self._max_queue <= len(queue):
            self.queue_full_total += 1
            fut.set_exception(PermitAcquireQueueFullException("Semaphore queue is full"))
            return fut
        now = self._clock.now_ms()
        queue.append(_Request(permits, previous, fut, is_cancelled, now, now + self._timeout))
        if self._timer is None:
            # deadlines grow with enqueue order, so one timer at the oldest deadline covers the whole queue
            self._timer = self._clock.call_at(now + self._timeout, self._on_timer)
        if self._oneshot_due is not None:
            due, self._oneshot_due = self._oneshot_due, None
            if now < due:
                self._oneshot = self._clock.call_at(due, self._oneshot_pass)
        self._process()
        return fut

    def _is_cancelled(self, is_cancelled: IsCancelled) -> bool:
        try:
            return bool(is_cancelled())
        except Exception:  # a broken callback must not wedge the queue: treat the request as cancelled
            log.exception("is_cancelled callback failed; cancelling the permit request")
            return True

    def _process(self) -> None:
        if self._processing:  # re-entered from an is_cancelled callback: the running pass goes round again
            self._again = True
            return
        self._processing = True
        try:
            self._again = True
            while self._again:
                self._again = False
                self._drain()
        finally:
            self._processing = False
        if not self._queue and self._timer is not None:
            # nothing left to time out; also keeps a timer from pinning a loop that may be gone by the next wait
            self._timer.cancel()
            self._timer = None

    def _drain(self) -> None:
        queue = self._queue
        while queue and not self._closed:
            current = self._available
            if current <= 0:
                return
            req = queue[0]
            fut = req.future
            if req.is_cancelled is not None and self._is_cancelled(req.is_cancelled):
                queue.popleft()
                if not fut.done():
                    self.cancelled_total += 1
                    fut.set_exception(PermitAcquireCancelledException("Permit acquisition was cancelled"))
                continue
            if fut.done():  # its future was cancelled by the caller
                queue.popleft()
                continue
            previous = req.previous
            if previous is None:
                if req.permits > current:
                    return
                self._available = current - req.permits
            else:
                if req.permits - previous.permits > current:
                    return
                self._available = current - (req.permits - previous.permits)
                previous.permits = 0
            queue.popleft()
            self.granted_total += 1
            self._record_wait(self._clock.now_ms() - req.enqueued_ms)
            fut.set_result(Permit(req.permits, self, self._limit_type))

    def _record_wait(self, ms: float) -> None:
        self.wait_count += 1
        self.wait_sum_ms += ms
        self._waits.append(ms)

    def _on_timer(self) -> None:
        """Time out, oldest first, every live request whose deadline has come; re-process after each."""
        self._timer = None
        if self._closed:
            return
        now = self._clock.now_ms()
        queue = self._queue
        while True:
            req = next((r for r in queue if not r.future.done()), None)
            if req is None:
                return
            if req.deadline_ms > now:
                self._timer = self._clock.call_at(req.deadline_ms, self._on_timer)
                return
            queue.remove(req)
            self.timeout_total += 1
            self._record_wait(now - req.enqueued_ms)  # Pulsar records a timed-out request's age too
            req.future.set_exception(PermitAcquireTimeoutException("Permit acquisition timed out"))
            if queue:
                self._process()

    def _oneshot_pass(self) -> None:
        self._oneshot = None
        if self._queue and not self._closed:
            self._process()


def _nearest_rank(ordered: list[float], q: float) -> float:
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


# ---------------------------------------------------------------- run with permits


def _give_back_if_granted(fut: asyncio.Future[Permit], release: Callable[[Permit], None]) -> None:
    """Our task was cancelled: a permit granted just before that would otherwise never be released."""
    if fut.done() and not fut.cancelled() and fut.exception() is None:
        release(fut.result())


async def _await_permit(fut: asyncio.Future[Permit], release: Callable[[Permit], None]) -> Permit:
    try:
        return await fut
    except asyncio.CancelledError:
        _give_back_if_granted(fut, release)
        raise


class _PermitScope:
    """Async context manager: await the permit on entry, release it on exit whatever happened inside."""

    __slots__ = ("_start", "_args", "_release", "permit")

    def __init__(
        self, start: Callable[..., asyncio.Future[Permit]], args: tuple[Any, ...], release: Callable[[Permit], None]
    ) -> None:
        self._start = start
        self._args = args
        self._release = release
        self.permit: Permit | None = None

    async def __aenter__(self) -> Permit:
        fut = self._start(*self._args)
        try:
            permit = await fut  # inlined _await_permit: one coroutine less on the hot path
        except asyncio.CancelledError:
            _give_back_if_granted(fut, self._release)
            raise
        self.permit = permit
        return permit

    async def __aexit__(self, *exc_info: object) -> None:
        if self.permit is not None:
            self._release(self.permit)


async def with_permits(
    permit_future: asyncio.Future[Permit],
    fn: Callable[[Permit], Awaitable[T]],
    on_acquire_error: Callable[[PermitAcquireException], Awaitable[T]] | None,
    release: Callable[[Permit], None],
) -> T:
    """AsyncDualMemoryLimiterUtil.withPermitsFuture: run ``fn(permit)`` and always release the permit after it.

    An acquisition failure goes to ``on_acquire_error`` (re-raised without one); ``fn``'s errors propagate after
    the release.
    """
    try:
        permit = await _await_permit(permit_future, release)
    except PermitAcquireException as e:
        if on_acquire_error is None:
            raise
        return await on_acquire_error(e)
    try:
        return await fn(permit)
    finally:
        release(permit)
