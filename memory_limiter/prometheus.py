"""The limiter's figures in Prometheus's text format (Pulsar's metric names)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from memory_limiter.dual import (
    AsyncDualMemoryLimiter,
)
from memory_limiter.semaphore import (
    LimitType,
)


def _fmt(v: float) -> str:
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _labels(labels: Mapping[str, str], extra: tuple[str, str] | None = None) -> str:
    pairs = list(labels.items()) + ([extra] if extra else [])
    if not pairs:
        return ""
    esc = (str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for _, v in pairs)
    return "{" + ",".join(f'{k}="{e}"' for (k, _), e in zip(pairs, esc, strict=True)) + "}"


def render_prometheus(
    limiter: AsyncDualMemoryLimiter,
    *,
    prefix: str = "pulsar_broker_topic_list_",
    labels: Mapping[str, str] | None = None,
) -> str:
    """The PIP-442 metric table (plus rejection and cancellation counters) in Prometheus text format 0.0.4.

    Names are the PIP's (``<prefix>heap_memory_used_bytes``, ``..._wait_time_ms`` summary, ``..._timeout_total``)
    so its dashboards and alerts apply; the proxy uses ``prefix="pulsar_proxy_topic_list_"``. An unbounded limit
    or queue is reported as +Inf.
    """
    base = dict(labels or {})
    lab = _labels(base)
    out: list[str] = []

    def family(name: str, kind: str, help_text: str, value: float) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        out.append(f"{name}{lab} {_fmt(value)}")

    for what, limit_type in (("heap", LimitType.HEAP_MEMORY), ("direct", LimitType.DIRECT_MEMORY)):
        s = limiter.get_limiter(limit_type).stats()
        p = f"{prefix}{what}_"
        limit = s.max_permits if s.max_permits > 0 else math.inf
        qmax = s.max_queue_size if s.max_queue_size > 0 else math.inf
        family(f"{p}memory_used_bytes", "gauge", f"Current {what} memory used by topic listings", s.acquired_permits)
        family(f"{p}memory_limit_bytes", "gauge", f"Configured {what} memory limit", limit)
        family(f"{p}queue_size", "gauge", f"Current {what} memory limiter queue size", s.queue_size)
        family(f"{p}queue_max_size", "gauge", f"Maximum {what} memory limiter queue size", qmax)
        name = f"{p}wait_time_ms"
        out.append(f"# HELP {name} Wait time for {what} memory permits in milliseconds")
        out.append(f"# TYPE {name} summary")
        for q, v in s.wait_quantiles_ms.items():
            out.append(f"{name}{_labels(base, ('quantile', _fmt(q)))} {_fmt(v)}")
        out.append(f"{name}_sum{lab} {_fmt(float(s.wait_sum_ms))}")
        out.append(f"{name}_count{lab} {s.wait_count}")
        family(f"{p}timeout_total", "counter", f"Total {what} memory permit timeouts", s.timeout_total)
        family(
            f"{p}queue_full_total",
            "counter",
            f"Total {what} memory permit requests rejected, queue full",
            s.queue_full_total,
        )
        family(
            f"{p}cancelled_total",
            "counter",
            f"Total {what} memory permit requests cancelled while queued",
            s.cancelled_total,
        )
    return "\n".join(out) + "\n"
