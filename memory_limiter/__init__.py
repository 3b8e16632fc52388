"""Pulsar's PIP-442 memory limiter (``AsyncSemaphore``, ``AsyncDualMemoryLimiter``) for asyncio, no Django.

Memory-aware backpressure with Pulsar's semantics, pinned by ``conformance/pulsar_vectors.json``: requests
take permits (bytes) from a heap and a direct pool, wait in a bounded FIFO queue with a timeout when a pool
is empty, and are rejected once the queue is full (Pulsar's ``AsyncSemaphoreImpl`` and
``AsyncDualMemoryLimiterImpl``). Not Kafka quota arithmetic, so not part of ``engine``; it shares only Java's
arithmetic helpers and errors with it (``engine.javamath``, ``engine.errors``)."""
