"""The pure-Python engine: executes decisions on the reference model of Kafka's sensors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .decisions import NO_EXPIRY, SAMPLED_KINDS, SENSOR_EXPIRY_MS, TRACK_THROTTLE, Decision, Kind, Op, Outcome
from .quota_utils import rate_throttle_raw, token_bucket_throttle_raw
from .sensor import QuotaViolation, Sensor
from .stats import (
    CumulativeSum,
    MetricConfig,
    Quota,
    Rate,
    SampleCount,
    SimpleRate,
    TokenBucket,
    WindowedCount,
    WindowedSum,
)
from .throttle_stats import ThrottleStats


def _stat_for(kind: Kind) -> Rate | TokenBucket | CumulativeSum:
    if kind == Kind.RATE:
        return Rate(WindowedSum())
    if kind == Kind.RATE_COUNT:
        return Rate(WindowedCount())
    if kind == Kind.SAMPLE_COUNT:
        return Rate(SampleCount())
    if kind == Kind.SIMPLE_RATE:
        return SimpleRate(WindowedSum())
    if kind == Kind.TOKEN_BUCKET:
        return TokenBucket()
    return CumulativeSum()


@dataclass
class _Entry:
    kind: Kind
    sensor: Sensor
    persistent: bool = False
    throttle: ThrottleStats = field(default_factory=ThrottleStats)


class ModelBackend:
    """Sensors held in process memory, expired as Kafka does: a whole ``expiry_ms`` without a record."""

    def __init__(self, expiry_ms: int | None = SENSOR_EXPIRY_MS) -> None:
        self.expiry_ms = expiry_ms
        self.entries: dict[str, _Entry] = {}

    def execute(self, decisions: Sequence[Decision]) -> list[Outcome]:
        return [self.execute_one(d) for d in decisions]

    def record_columns(
        self, op: Op, kind: Kind, flags: int, samples: int, window_ms: int, aux: float | None,
        keys: Sequence[str | bytes], ts: Sequence[float], values: Sequence[float], bounds: Sequence[float],
        slots: Sequence[int] | None = None,
    ) -> tuple[bytes, list[float], list[float]]:
        """The batch hot path of the managers, answered as the Redis engine answers it (``slots`` unused)."""
        bits, vals, throttles = bytearray(), [], []
        for key, t, value, bound in zip(keys, ts, values, bounds, strict=True):
            k = key.decode() if isinstance(key, bytes) else key
            o = self.execute_one(Decision(k, kind, op, value, int(t), bound, samples, window_ms, aux, flags))
            bits.append((1 if o.violated else 0) | (2 if o.recorded else 0))
            vals.append(o.value if o.value is not None else 0.0)
            throttles.append(o.throttle_raw or 0.0)
        return bytes(bits), vals, throttles

    def _entry(self, d: Decision) -> _Entry:
        entry = self.entries.get(d.key)
        if entry is not None and d.flags & NO_EXPIRY:
            entry.persistent = True
        elif (
            entry is not None and not entry.persistent and self.expiry_ms is not None
            and d.t - entry.sensor.last_record_ms > self.expiry_ms
        ):
            entry = None  # Sensor.hasExpired: the next decision starts a fresh sensor
        if entry is None or entry.kind != d.kind:
            sensor = Sensor(d.key, last_record_ms=d.t)
            if d.kind == Kind.CUMULATIVE_SUM:
                sensor.add("upper", CumulativeSum(), MetricConfig(quota=None))
                sensor.add("lower", CumulativeSum(), MetricConfig(quota=None))
            else:
                sensor.add(d.key, _stat_for(d.kind), MetricConfig(d.samples, d.window_ms))
            entry = _Entry(d.kind, sensor, persistent=bool(d.flags & NO_EXPIRY) or d.kind == Kind.CUMULATIVE_SUM)
            self.entries[d.key] = entry
        # the bound travels with each decision: re-setting it never touches usage (updateQuotaMetricConfigs)
        if d.kind == Kind.CUMULATIVE_SUM:
            up, low = entry.sensor.metrics
            up.config = MetricConfig(quota=None if d.bound is None else Quota(d.bound, True))
            low.config = MetricConfig(quota=None if d.aux is None else Quota(d.aux, False))
        else:
            m = entry.sensor.metrics[0]
            m.config = MetricConfig(d.samples, d.window_ms, None if d.bound is None else Quota(d.bound))
        return entry

    def execute_one(self, d: Decision) -> Outcome:
        entry = self._entry(d)
        sensor, t = entry.sensor, d.t
        out = Outcome(now_ms=t)
        try:
            if d.op == Op.RECORD:
                out.recorded = True
                sensor.record(d.value, t, True)
            elif d.op == Op.RECORD_NOCHECK:
                sensor.record(d.value, t, False)
                out.recorded = True
                return out
            elif d.op == Op.STRICT:
                sensor.check_quotas(t)
                sensor.record(d.value, t, False)
                out.recorded = True
            elif d.op == Op.CHECK:
                sensor.check_quotas(t)
        except QuotaViolation as e:
            out.violated = True
            out.violated_metric = e.metric.name if d.kind == Kind.CUMULATIVE_SUM else None
            stat = e.metric.stat
            if isinstance(stat, Rate):
                out.throttle_raw = rate_throttle_raw(e.value, e.bound, stat.window_size(e.metric.config, t))
            elif isinstance(stat, TokenBucket):
                out.throttle_raw = token_bucket_throttle_raw(e.value, e.bound)
            if d.flags & TRACK_THROTTLE and out.throttle_raw is not None:
                entry.throttle.record(out.throttle_raw, d.aux or 0, t, d.window_ms)
        return self._report(entry, d, out)

    @staticmethod
    def _report(entry: _Entry, d: Decision, out: Outcome) -> Outcome:
        """Measure at t after the op (idempotent at the same t, as the oracle's own report was)."""
        m = entry.sensor.metrics[0]
        if d.kind in SAMPLED_KINDS:
            rate: Rate = m.stat  # type: ignore[assignment]
            out.value = m.value(d.t)
            out.window_ms = rate.window_size(m.config, d.t)
            out.sum = rate.stat.combine()
        else:
            out.value = m.value(d.t)
        return out
