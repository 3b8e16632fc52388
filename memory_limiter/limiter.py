"""PIP-442's AsyncSemaphore and AsyncDualMemoryLimiter for asyncio: memory-aware backpressure, Pulsar's semantics.

Why: a handler that assembles a large response (a topic list, an export) allocates in proportion to data it
does not control; many at once exhaust the process. Each request first takes *permits* (bytes) from a pool and
gives them back when done; when the pool is empty requests wait in a bounded FIFO queue with a timeout instead
of allocating, and are rejected once the queue is full. The dual limiter keeps two independent pools, HEAP_MEMORY
(assembling the data) and DIRECT_MEMORY (the serialized response), as Pulsar's broker and proxy do.

Semantics (Pulsar's ``AsyncSemaphoreImpl`` as pinned by ``conformance/pulsar_vectors.json``):

* ``acquire(n)`` returns a future. Requests are granted strictly FIFO: the head of the queue blocks everything
  behind it until it is granted, times out (``timeout_ms`` after it was queued), is cancelled or the semaphore
  is closed. A queue pass stops as soon as no permit is available, so a cancelled head (its ``is_cancelled``
  returns true, or its future was cancelled) is noticed only when permits are available, by its timeout, or by
  the one queue pass Pulsar schedules ``timeout_ms / 2`` after construction.
* ``update(p, n)``: growing acquires only the difference, queued like an acquire; shrinking is immediate and
  returns the difference to the pool. On success the old permit is consumed (releasing it later is a no-op);
  a failed grow leaves it valid.
* Bad arguments (negative permits, more than ``max_permits``, a permit this limiter did not issue) raise
  :class:`IllegalArgumentException` at once, never through the future: a caller bug must not become a wait.
* ``max_permits <= 0`` is unbounded (granted at once, nothing tracked); ``max_queue_size <= 0`` an unbounded queue.

Usage from an async Django view (ASGI: one event loop; the limiter is per process, created at import time,
and like ``asyncio.Semaphore`` it is not thread-safe)::

    from django.http import HttpResponse, JsonResponse
    from memory_limiter.limiter import (
        AsyncDualMemoryLimiter, LimitType, PermitAcquireException, SemaphoreConfig, render_prometheus)

    LIMITER = AsyncDualMemoryLimiter(
        heap=SemaphoreConfig(max_permits=100 << 20, max_queue_size=10_000, timeout_ms=25_000),
        direct=SemaphoreConfig(max_permits=100 << 20, max_queue_size=10_000, timeout_ms=25_000))

    async def topics(request):
        try:
            async with LIMITER.acquired(1024, LimitType.HEAP_MEMORY) as estimate:   # a fixed first guess
                names = await list_topics()
                async with LIMITER.updated(estimate, sum(map(len, names))):         # the real size
                    return JsonResponse({"topics": names})
        except PermitAcquireException:                       # queue full, timed out, cancelled, closed
            return HttpResponse("memory limit exceeded", status=429)

    async def metrics(request):
        return HttpResponse(render_prometheus(LIMITER, labels={"cluster": "prod"}),
                            content_type="text/plain; version=0.0.4")

Tests and the conformance replay drive the limiter in virtual time by passing ``clock=VirtualClock()``.
"""

from __future__ import annotations

from memory_limiter.clocks import (
    Clock,
    LoopClock,
    VirtualClock,
)
from memory_limiter.dual import (
    AsyncDualMemoryLimiter,
)
from memory_limiter.errors import (
    IllegalArgumentException,
    PermitAcquireAlreadyClosedException,
    PermitAcquireCancelledException,
    PermitAcquireException,
    PermitAcquireQueueFullException,
    PermitAcquireTimeoutException,
)
from memory_limiter.prometheus import (
    render_prometheus,
)
from memory_limiter.semaphore import (
    AsyncSemaphore,
    LimitType,
    Permit,
    SemaphoreConfig,
    SemaphoreStats,
    with_permits,
)

__all__ = [
    "AsyncDualMemoryLimiter",
    "AsyncSemaphore",
    "Clock",
    "IllegalArgumentException",
    "LimitType",
    "LoopClock",
    "Permit",
    "PermitAcquireAlreadyClosedException",
    "PermitAcquireCancelledException",
    "PermitAcquireException",
    "PermitAcquireQueueFullException",
    "PermitAcquireTimeoutException",
    "SemaphoreConfig",
    "SemaphoreStats",
    "VirtualClock",
    "render_prometheus",
    "with_permits",
]
