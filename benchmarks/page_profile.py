"""Where one page request's time goes, inside a benchmark's world (``scale_bench.py --profile``).

For one request (after ``warm`` untimed ones): its total time; the SQL it runs (count, time, the slowest); the
Redis commands it sends (``INFO commandstats`` before and after: calls and server time per command); the time
in ``page()`` (roles and template render) of the view's module; the time the cyclic garbage collector ran
during it (a process holding a whole world of objects pays for them on every full collection); then
cProfile's top functions by cumulative and by own time.
"""

from __future__ import annotations

import cProfile
import gc
import io
import pstats
import time
from collections.abc import Callable
from typing import Any

import redis


def _commandstats(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """Per command: (calls, server usec) so far."""
    out = {}
    for name, v in client.info("commandstats").items():
        out[name.removeprefix("cmdstat_")] = (int(v["calls"]), int(v["usec"]))
    return out


def profile_request(label: str, request: Callable[[], Any], views: Any, client: redis.Redis, warm: int = 1,
                    top: int = 25) -> dict[str, Any]:  # fmt: skip
    """Print and return where one ``request()`` spends its time (``views``: the module whose ``page`` renders)."""
    from django.db import connection

    for _ in range(warm):
        request()
    rendered: list[float] = []
    real = views.page

    def timed_page(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            rendered.append((time.perf_counter() - t) * 1000)

    gc_ms: list[float] = []
    gc_start: list[float] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_start.append(time.perf_counter())
        elif gc_start:
            gc_ms.append((time.perf_counter() - gc_start.pop()) * 1000)

    queries: list[tuple[float, str]] = []

    def timed_sql(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        t = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            queries.append(((time.perf_counter() - t) * 1000, sql))

    before = _commandstats(client)
    views.page = timed_page
    gc.callbacks.append(on_gc)
    try:
        with connection.execute_wrapper(timed_sql):
            t0 = time.perf_counter()
            request()
            total_ms = (time.perf_counter() - t0) * 1000
    finally:
        gc.callbacks.remove(on_gc)
        views.page = real
    after = _commandstats(client)
    redis_cmds = {k: (v[0] - before.get(k, (0, 0))[0], v[1] - before.get(k, (0, 0))[1]) for k, v in after.items()}
    redis_cmds = {k: v for k, v in redis_cmds.items() if v[0] and k != "info"}
    sql_ms = sum(ms for ms, _sql in queries)
    slow = sorted(queries, key=lambda q: -q[0])[:8]
    prof = cProfile.Profile()
    prof.enable()
    request()
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    print(f"profile       {label}: {total_ms:.1f} ms; SQL {len(queries)} queries, {sql_ms:.1f} ms; page() "
          f"{sum(rendered):.1f} ms; GC {len(gc_ms)} collections, {sum(gc_ms):.1f} ms; Redis "
          f"{sum(c for c, _u in redis_cmds.values())} commands, {sum(u for _c, u in redis_cmds.values()) / 1000:.1f} "
          f"ms in the server: {redis_cmds}", flush=True)  # fmt: skip
    for ms, sql in slow:
        print(f"  sql {ms:7.2f} ms  {sql[:200]}", flush=True)
    print(buf.getvalue(), flush=True)
    return {"total_ms": total_ms, "queries": len(queries), "sql_ms": sql_ms, "page_ms": sum(rendered),
            "gc_ms": sum(gc_ms), "redis": redis_cmds}  # fmt: skip
