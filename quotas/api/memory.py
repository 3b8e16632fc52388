"""Memory-bounded list endpoints: one process-wide PIP-442 dual memory limiter for the sync DRF views.

Why: a list page is loaded and serialized whole, in proportion to ``page_size`` (up to 500 rows), so
many large listings at once could exhaust the process. Each listing first takes permits (bytes, its
estimated size) from the limiter's HEAP_MEMORY pool and gives them back when its page is built; when
the pool is spent, listings wait their turn in a bounded FIFO queue, and when the queue is full or the
wait times out the client gets 503 RESOURCE_EXHAUSTED with ``Retry-After`` instead of the process an
out-of-memory.

The limiter (``memory_limiter.limiter.AsyncDualMemoryLimiter``) is an asyncio object and not
thread-safe, while the views are sync (one thread under ASGI, several under a threaded WSGI server). So
it lives on its own event loop in a daemon thread, started on first use (and again in a forked child),
and every call reaches it through ``asyncio.run_coroutine_threadsafe``: only that loop ever touches it.

Settings (read on each use, so a change - or ``override_settings`` in tests - builds a new limiter):
``QUOTAS_LIST_HEAP_BYTES`` (64 MiB; <= 0 unbounded), ``QUOTAS_LIST_DIRECT_BYTES`` (as heap; the pool is
reported but listings take heap only: the response is rendered after the view returns),
``QUOTAS_LIST_QUEUE_SIZE`` (1000 waiting listings) and ``QUOTAS_LIST_TIMEOUT_MS`` (10 s).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings

from memory_limiter.limiter import (
    AsyncDualMemoryLimiter,
    IllegalArgumentException,
    LimitType,
    Permit,
    PermitAcquireException,
    PermitAcquireQueueFullException,
    SemaphoreConfig,
    render_prometheus,
)
from portal.api.errors import ResourceExhausted

DEFAULT_HEAP_BYTES = 64 << 20
DEFAULT_QUEUE_SIZE = 1000
DEFAULT_TIMEOUT_MS = 10_000
#: Metric names: ``quotas_api_list_heap_memory_used_bytes`` etc. (PIP-442's table under our prefix).
METRICS_PREFIX = "quotas_api_list_"
#: How long a caller waits beyond the limiter's own timeout before giving up on the loop thread itself.
_GRACE_S = 5.0


@dataclass(frozen=True)
class LimiterSettings:
    heap_bytes: int
    direct_bytes: int
    queue_size: int
    timeout_ms: int

    @classmethod
    def from_settings(cls) -> LimiterSettings:
        heap = int(getattr(settings, "QUOTAS_LIST_HEAP_BYTES", DEFAULT_HEAP_BYTES))
        return cls(
            heap_bytes=heap,
            direct_bytes=int(getattr(settings, "QUOTAS_LIST_DIRECT_BYTES", heap)),
            queue_size=int(getattr(settings, "QUOTAS_LIST_QUEUE_SIZE", DEFAULT_QUEUE_SIZE)),
            timeout_ms=int(getattr(settings, "QUOTAS_LIST_TIMEOUT_MS", DEFAULT_TIMEOUT_MS)),
        )


class _LoopThread:
    """An event loop running forever in a daemon thread: the only place the limiter is touched."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._run, name="quotas-memory-limiter", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()


_lock = threading.Lock()
_loop: _LoopThread | None = None
_limiter: tuple[LimiterSettings, AsyncDualMemoryLimiter] | None = None


def _current() -> tuple[_LoopThread, LimiterSettings, AsyncDualMemoryLimiter]:
    """The loop thread and the limiter for the current settings, created on first use (or after a fork)."""
    global _loop, _limiter
    wanted = LimiterSettings.from_settings()
    with _lock:
        if _loop is None or _loop.pid != os.getpid():
            _loop, _limiter = _LoopThread(), None  # a forked child has the parent's loop object but not its thread
        if _limiter is None or _limiter[0] != wanted:
            # Permits of a replaced limiter are still released to it (the scope keeps its limiter).
            _limiter = (
                wanted,
                AsyncDualMemoryLimiter(
                    heap=SemaphoreConfig(wanted.heap_bytes, wanted.queue_size, wanted.timeout_ms),
                    direct=SemaphoreConfig(wanted.direct_bytes, wanted.queue_size, wanted.timeout_ms),
                ),
            )
        return _loop, _limiter[0], _limiter[1]


def reset() -> None:
    """Forget the current limiter (the next use builds a fresh one, counters at zero); for tests."""
    global _limiter
    with _lock:
        _limiter = None


async def _acquire(limiter: AsyncDualMemoryLimiter, n_bytes: int, limit_type: LimitType) -> Permit:
    fut = limiter.acquire(n_bytes, limit_type)
    try:
        return await fut
    except asyncio.CancelledError:  # the caller gave up: a permit granted meanwhile must not leak
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            limiter.release(fut.result())
        raise


async def _release(limiter: AsyncDualMemoryLimiter, permit: Permit) -> None:
    limiter.release(permit)


async def _render(limiter: AsyncDualMemoryLimiter) -> str:
    return render_prometheus(limiter, prefix=METRICS_PREFIX)


def _retry_after_s(timeout_ms: int) -> int:
    return max(1, math.ceil(timeout_ms / 1000))


@contextmanager
def memory_permits(n_bytes: int, limit_type: LimitType = LimitType.HEAP_MEMORY) -> Iterator[Permit]:
    """Hold ``n_bytes`` of the list pool for the ``with`` body; wait in the queue for them if they are in use.

    Raises ResourceExhausted (503): with ``Retry-After`` when the queue is full or the wait timed out, and
    without it when ``n_bytes`` exceeds the whole pool (asking again cannot help; a smaller page can).
    The permits go back when the body ends, whatever happens inside it.
    """
    worker, config, limiter = _current()
    try:
        future = asyncio.run_coroutine_threadsafe(_acquire(limiter, n_bytes, limit_type), worker.loop)
    except RuntimeError as e:  # the loop is gone (interpreter shutdown)
        raise ResourceExhausted("The list memory limiter is not running; try again.", retry_after=1) from e
    try:
        permit = future.result(timeout=config.timeout_ms / 1000 + _GRACE_S)
    except IllegalArgumentException as e:
        limit = limiter.get_limiter(limit_type).max_permits
        raise ResourceExhausted(
            f"This page needs about {n_bytes} bytes, more than the {limit} bytes all listings may hold at once; "
            "ask for a smaller page_size.",
            details={"reason": "larger_than_limit", "requested_bytes": n_bytes, "limit_bytes": limit},
        ) from e
    except PermitAcquireException as e:
        reason = "queue_full" if isinstance(e, PermitAcquireQueueFullException) else "timeout"
        retry = _retry_after_s(config.timeout_ms)
        raise ResourceExhausted(
            f"Too many large listings are being served right now ({reason.replace('_', ' ')}); "
            f"retry in {retry} s or ask for a smaller page_size.",
            details={"reason": reason, "requested_bytes": n_bytes},
            retry_after=retry,
        ) from e
    except concurrent.futures.TimeoutError as e:
        future.cancel()
        raise ResourceExhausted(
            "The list memory limiter did not answer in time; try again.",
            details={"reason": "timeout", "requested_bytes": n_bytes},
            retry_after=_retry_after_s(config.timeout_ms),
        ) from e
    try:
        yield permit
    finally:
        asyncio.run_coroutine_threadsafe(_release(limiter, permit), worker.loop).result(timeout=_GRACE_S)


def metrics_text() -> str:
    """The limiter's PIP-442 metrics in Prometheus text format 0.0.4, rendered on the limiter's own loop."""
    worker, _config, limiter = _current()
    return asyncio.run_coroutine_threadsafe(_render(limiter), worker.loop).result(timeout=_GRACE_S)


def page_bytes(rows: int, row_bytes: int) -> int:
    """A page's estimated footprint: rows x per-row estimate (the views document theirs)."""
    return max(0, rows) * row_bytes
