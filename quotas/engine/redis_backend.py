"""The Redis engine: decisions executed by one Lua script call per batch.

The script (``lua/decide.lua``) holds the same math as the reference model in
``stats.py``; the conformance traces keep the two equal bit for bit.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

import redis

from .decisions import SAMPLED_KINDS, SENSOR_EXPIRY_MS, SERVER_TIME, Decision, Kind, Op, Outcome
from .errors import EngineUnavailable, QuotaEngineError
from .stats import MetricConfig, Quota, Rate, Sample, SampleCount, TokenBucket, WindowedCount, WindowedSum
from .throttle_stats import ThrottleStats

DECIDE_LUA = (Path(__file__).parent / "lua" / "decide.lua").read_text()

_DECISION = struct.Struct("<BBHHidddd")
_OUTCOME = struct.Struct("<Biddd")
_CLOCK = struct.Struct("<d")
_SAMPLED_HEADER = struct.Struct("<qdBBi")
_SLOT = struct.Struct("<iid")
_TOKEN_BUCKET = struct.Struct("<dqdq")
_THROTTLE = struct.Struct("<qddddddd")

#: The exceptions that mean "Redis did not answer": mapped to EngineUnavailable, never a hang.
UNAVAILABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def connect(url: str, timeout_s: float = 0.5) -> redis.Redis:
    """A client whose every call gives up after ``timeout_s``: a decision never hangs on a dead Redis."""
    return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry_on_timeout=False)


def pack_batch(decisions: Sequence[Decision]) -> tuple[list[str], bytes]:
    """KEYS (each sensor once) and the packed decisions of one script call."""
    index: dict[str, int] = {}
    parts = []
    pack = _DECISION.pack
    for d in decisions:
        ki = index.get(d.key)
        if ki is None:
            ki = index[d.key] = len(index) + 1
        parts.append(
            pack(
                d.op * 16 + d.kind,
                d.packed_flags(),
                ki,
                d.samples,
                d.window_ms,
                float(d.t),
                d.value,
                0.0 if d.bound is None else d.bound,
                0.0 if d.aux is None else d.aux,
            )
        )
    return list(index), b"".join(parts)


def unpack_outcomes(raw: bytes, decisions: Sequence[Decision]) -> list[Outcome]:
    """Decode the script's reply; a trailing double is the engine clock used by SERVER_TIME decisions."""
    body = len(decisions) * _OUTCOME.size
    server_now = int(_CLOCK.unpack_from(raw, body)[0]) if len(raw) > body else None
    outcomes = []
    for d, (bits, ws, value, total, throttle) in zip(decisions, _OUTCOME.iter_unpack(raw[:body]), strict=True):
        violated = bool(bits & 1)
        outcomes.append(
            Outcome(
                violated=violated,
                recorded=bool(bits & 2),
                value=value,
                window_ms=ws,
                sum=total,
                throttle_raw=throttle if violated else None,
                violated_metric="upper" if bits & 4 else ("lower" if bits & 8 else None),
                now_ms=server_now if d.flags & SERVER_TIME else d.t,
            )
        )
    return outcomes


class RedisBackend:
    """Executes decisions in Redis. Connection failures raise :class:`EngineUnavailable`."""

    def __init__(self, client: redis.Redis, expiry_ms: int = SENSOR_EXPIRY_MS) -> None:
        self.client = client
        self.expiry_ms = expiry_ms
        self.script = client.register_script(DECIDE_LUA)

    def execute(self, decisions: Sequence[Decision]) -> list[Outcome]:
        if not decisions:
            return []
        keys, packed = pack_batch(decisions)
        try:
            raw = self.script(keys=keys, args=[packed, self.expiry_ms])
        except UNAVAILABLE as e:
            raise EngineUnavailable(f"Redis is unreachable for quota decisions: {e}") from e
        except redis.exceptions.ResponseError as e:
            raise QuotaEngineError(f"The quota script failed: {e}") from e
        outcomes = unpack_outcomes(raw, decisions)
        for d, o in zip(decisions, outcomes, strict=True):
            if d.op == Op.RECORD_NOCHECK:
                o.value = o.window_ms = o.sum = None
            elif d.kind not in SAMPLED_KINDS:
                o.window_ms = o.sum = None
        return outcomes

    def execute_one(self, d: Decision) -> Outcome:
        return self.execute([d])[0]

    # ---- read-only views for live charts (no Lua: decode and measure a copy) ----

    def peek(self, key: str, kind: Kind, samples: int, window_ms: int, t: int) -> dict[str, float | None]:
        """What a sensor holds at ``t``, measured on a copy so that looking never changes a decision."""
        try:
            raw, thr = self.client.get(key), self.client.get(key + ":t")
        except UNAVAILABLE as e:
            raise EngineUnavailable(f"Redis is unreachable: {e}") from e
        view: dict[str, float | None] = {"value": None, "bound": None}
        if raw:
            view.update(decode_state(kind, raw, samples, window_ms, t))
        stats = decode_throttle(thr) if thr else ThrottleStats()
        view.update(
            throttle_avg_ms=(stats.total / stats.count) if stats.count else 0.0,
            throttle_max_ms=stats.max,
            throttle_prev_avg_ms=(stats.prev_total / stats.prev_count) if stats.prev_count else 0.0,
            throttle_prev_max_ms=stats.prev_max,
            throttled_ms_total=stats.throttled_ms,
        )
        return view


def decode_state(kind: Kind, raw: bytes, samples: int, window_ms: int, t: int) -> dict[str, float | None]:
    """Rebuild the model's stat from the stored bytes and measure it at ``t``."""
    if kind == Kind.TOKEN_BUCKET:
        tokens, last, bound, _ttl = _TOKEN_BUCKET.unpack(raw)
        tb = TokenBucket()
        tb.tokens, tb.last_update_ms = tokens, last
        value = tb.measure(MetricConfig(samples, window_ms, Quota(bound)), t)
        return {"value": value, "tokens": value, "bound": bound}
    base, bound, cur, n, _ttl = _SAMPLED_HEADER.unpack_from(raw)
    stat = {Kind.RATE: WindowedSum, Kind.RATE_COUNT: WindowedCount}.get(kind, SampleCount)()
    stat.current = cur
    for i in range(n):
        start, last, value = _SLOT.unpack_from(raw, _SAMPLED_HEADER.size + i * _SLOT.size)
        s = Sample(0.0, base + start)
        s.last_event_ms, s.value = base + last, value
        stat.samples.append(s)
    rate = Rate(stat)
    config = MetricConfig(samples, window_ms)
    value = rate.measure(config, t)
    return {"value": value, "rate": value, "bound": bound, "window_ms": rate.window_size(config, t)}


def decode_throttle(raw: bytes) -> ThrottleStats:
    ws, c, tot, mx, pc, pt, pm, total = _THROTTLE.unpack(raw)
    return ThrottleStats(ws, c, tot, mx, pc, pt, pm, total)
