"""The limiter's clocks: the event loop's, and a virtual one the tests and the conformance replay advance."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Time, timers and futures for a semaphore; swapped for :class:`VirtualClock` to make tests deterministic."""

    def now_ms(self) -> float: ...

    def call_at(self, when_ms: float, callback: Callable[[], None]) -> TimerHandle: ...

    def create_future(self) -> asyncio.Future[Any]: ...


class LoopClock:
    """Production clock: monotonic time; timers and futures on the running event loop."""

    __slots__ = ()

    def now_ms(self) -> float:
        return time.monotonic() * 1000.0

    def call_at(self, when_ms: float, callback: Callable[[], None]) -> TimerHandle:
        delay = (when_ms - time.monotonic() * 1000.0) / 1000.0
        return asyncio.get_running_loop().call_later(delay if delay > 0.0 else 0.0, callback)

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()


class _VirtualTimer:
    __slots__ = ("when", "callback", "cancelled")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualClock:
    """Virtual milliseconds: timers run only inside :meth:`advance_to`, in (due time, creation) order.

    Futures belong to the running loop if there is one, else to a private loop that never runs (their state is
    still inspectable), so the replay needs no event loop at all. Call :meth:`close` to dispose of that loop.
    """

    def __init__(self, start_ms: float = 0.0) -> None:
        self._now = start_ms
        self._timers: list[tuple[float, int, _VirtualTimer]] = []
        self._seq = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None

    def now_ms(self) -> float:
        return self._now

    def call_at(self, when_ms: float, callback: Callable[[], None]) -> TimerHandle:
        timer = _VirtualTimer(when_ms, callback)
        heapq.heappush(self._timers, (when_ms, next(self._seq), timer))
        return timer

    def advance_to(self, t_ms: float) -> None:
        """Run every timer due at or before ``t_ms`` (the clock reads each one's due time while it runs)."""
        timers = self._timers
        while timers and timers[0][0] <= t_ms:
            when, _, timer = heapq.heappop(timers)
            if timer.cancelled:
                continue
            if when > self._now:
                self._now = when
            timer.callback()
        if t_ms > self._now:
            self._now = t_ms

    def advance(self, delta_ms: float) -> None:
        self.advance_to(self._now + delta_ms)

    def pending_timers(self) -> int:
        return sum(1 for _, _, t in self._timers if not t.cancelled)

    def create_future(self) -> asyncio.Future[Any]:
        try:
            return asyncio.get_running_loop().create_future()
        except RuntimeError:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            return self._loop.create_future()

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None
