"""The shell every service-starting benchmark runs in: its own Redis, cleanups on any exit, one JSON line."""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from devtools.redis_server import RedisServer

Cleanups = list[Callable[[], None]]


def finite(value: Any) -> Any:
    """NaN (a figure of a phase that did not run) as null: the JSON line stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    return value


def run_bench(
    name: str, check: bool, run: Callable[[RedisServer, Cleanups], dict[str, Any]], met_key: str = "target_met"
) -> int:
    """Start a Redis of the benchmark's own, call ``run(server, cleanups)`` and, on any exit (Ctrl-C and SIGTERM
    included), run the cleanups it registered last-in first-out, then Redis's; print the summary as the last
    line. Returns the exit status: 130 when interrupted, 1 when ``check`` and a target was missed."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C even when started with SIGINT ignored
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # SystemExit unwinds through the finally below
    started = time.perf_counter()
    stack: Cleanups = []
    try:
        server = RedisServer(name=name)
        stack.append(server.stop)
        server.start()
        summary = run(server, stack)
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    finally:
        while stack:
            try:
                stack.pop()()
            except Exception as e:  # keep stopping the rest
                print(f"{name}: cleanup failed: {e!r}", file=sys.stderr)
    summary["elapsed_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(finite(summary), separators=(",", ":")), flush=True)
    return 1 if check and not summary[met_key] else 0
