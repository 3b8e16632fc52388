"""PIP-442's ``AsyncDualMemoryLimiter``: two independent pools, heap and direct memory, as Pulsar's broker keeps."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from memory_limiter.clocks import (
    Clock,
    LoopClock,
)
from memory_limiter.errors import (
    IllegalArgumentException,
    PermitAcquireException,
)
from memory_limiter.semaphore import (
    AsyncSemaphore,
    IsCancelled,
    LimitType,
    Permit,
    SemaphoreConfig,
    T,
    _PermitScope,
    with_permits,
)


class AsyncDualMemoryLimiter:
    """Two independent semaphores, HEAP_MEMORY and DIRECT_MEMORY; a permit goes back to the pool it came from."""

    def __init__(self, heap: SemaphoreConfig, direct: SemaphoreConfig, *, clock: Clock | None = None) -> None:
        clock = clock if clock is not None else LoopClock()
        self.clock = clock
        self._heap = AsyncSemaphore(
            heap.max_permits, heap.max_queue_size, heap.timeout_ms, clock=clock, limit_type=LimitType.HEAP_MEMORY
        )
        self._direct = AsyncSemaphore(
            direct.max_permits,
            direct.max_queue_size,
            direct.timeout_ms,
            clock=clock,
            limit_type=LimitType.DIRECT_MEMORY,
        )
        self._pools: dict[str, AsyncSemaphore] = {
            LimitType.HEAP_MEMORY: self._heap,
            LimitType.DIRECT_MEMORY: self._direct,
        }

    def get_limiter(self, limit_type: LimitType | str) -> AsyncSemaphore:
        pool = self._pools.get(limit_type)
        if pool is None:
            raise IllegalArgumentException(f"Unsupported limit type: {limit_type}")
        return pool

    def acquire(
        self, memory_size: int, limit_type: LimitType | str, is_cancelled: IsCancelled | None = None
    ) -> asyncio.Future[Permit]:
        return self.get_limiter(limit_type).acquire(memory_size, is_cancelled)

    def update(
        self, permit: Permit, new_memory_size: int, is_cancelled: IsCancelled | None = None
    ) -> asyncio.Future[Permit]:
        """Grow (queued) or shrink (immediate) in the permit's own pool; the old permit is consumed on success."""
        return self._pool_of(permit).update(permit, new_memory_size, is_cancelled)

    def release(self, permit: Permit) -> None:
        self._pool_of(permit).release(permit)

    def close(self) -> None:
        self._heap.close()
        self._direct.close()

    def acquired(
        self, memory_size: int, limit_type: LimitType | str, is_cancelled: IsCancelled | None = None
    ) -> _PermitScope:
        """``async with limiter.acquired(size, LimitType.HEAP_MEMORY) as permit:`` - released on exit."""
        return _PermitScope(self.acquire, (memory_size, limit_type, is_cancelled), self.release)

    def updated(self, permit: Permit, new_memory_size: int, is_cancelled: IsCancelled | None = None) -> _PermitScope:
        """``async with limiter.updated(p, size) as permit:`` - the updated permit is released on exit."""
        return _PermitScope(self.update, (permit, new_memory_size, is_cancelled), self.release)

    async def with_acquired_permits(
        self,
        memory_size: int,
        limit_type: LimitType | str,
        fn: Callable[[Permit], Awaitable[T]],
        on_acquire_error: Callable[[PermitAcquireException], Awaitable[T]] | None = None,
        is_cancelled: IsCancelled | None = None,
    ) -> T:
        """Pulsar's withAcquiredPermits: ``fn(permit)`` with the permits held, released after it, error or not."""
        return await with_permits(
            self.acquire(memory_size, limit_type, is_cancelled), fn, on_acquire_error, self.release
        )

    async def with_updated_permits(
        self,
        initial: Permit,
        new_memory_size: int,
        fn: Callable[[Permit], Awaitable[T]],
        on_acquire_error: Callable[[PermitAcquireException], Awaitable[T]] | None = None,
        is_cancelled: IsCancelled | None = None,
    ) -> T:
        """Pulsar's withUpdatedPermits: if the update fails, ``initial`` stays held (its owner releases it)."""
        return await with_permits(
            self.update(initial, new_memory_size, is_cancelled), fn, on_acquire_error, self.release
        )

    def _pool_of(self, permit: Any) -> AsyncSemaphore:
        if isinstance(permit, Permit) and (permit._owner is self._heap or permit._owner is self._direct):
            return permit._owner
        raise IllegalArgumentException("Invalid permit type")
