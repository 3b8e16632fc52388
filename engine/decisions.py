"""One decision against one sensor: the unit both engines execute, alone or in batches."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Op(IntEnum):
    RECORD = 1  # Sensor.record(v, t, checkQuotas=true): record, then measure and check
    RECORD_NOCHECK = 2  # Sensor.record(v, t, false): no measurement (v < 0 un-records)
    STRICT = 3  # checkQuotas(t), then record(v, t, false) only if that passed
    CHECK = 4  # checkQuotas(t) only
    MEASURE = 5  # measure only


class Kind(IntEnum):
    RATE = 0  # Rate(SECONDS, WindowedSum)
    RATE_COUNT = 1  # Rate(SECONDS, WindowedCount)
    SAMPLE_COUNT = 2  # SampledStat counting samples that hold an event (Kafka's test helper)
    TOKEN_BUCKET = 3  # KIP-599 TokenBucket
    CUMULATIVE_SUM = 4  # CumulativeSum with an upper bound (``bound``) and a lower bound (``aux``)
    SIMPLE_RATE = 5  # SimpleRate(WindowedSum): the window is max(elapsed, one window) (replication quotas)


SAMPLED_KINDS = frozenset({Kind.RATE, Kind.RATE_COUNT, Kind.SAMPLE_COUNT, Kind.SIMPLE_RATE})

# flags
HAS_BOUND = 1
HAS_AUX = 2
SERVER_TIME = 4  # use the engine's clock (Redis TIME) instead of ``t``: one clock for a cluster-wide namespace
TRACK_THROTTLE = 8  # keep throttle-time statistics for live charts when violated
NO_EXPIRY = 16  # the sensor never expires (the exempt request sensor)

RAW_STAT = 32  # SampledStat.measure (purge + combine) without the Rate's window (the sampled_stat replay kind)
FULL_ANSWER = 64  # the Redis script answers window sizes and sums too

#: Sensors expire after one hour without a record, as Kafka's INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS.
SENSOR_EXPIRY_MS = 3_600_000

#: What the stored sample ring can hold: a slot count in 7 bits, int32 offsets within 2^30 ms.
MAX_SAMPLES = 126
MAX_WINDOW_MS = 2**31 - 1


def check_sampling(samples: int, window_ms: int) -> None:
    """Refuse sample counts and windows the engine cannot store exactly (a typed error, not a corrupt sensor)."""
    from .errors import QuotaValidationError

    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_SAMPLES:
        raise QuotaValidationError(f"samples must be an integer from 1 to {MAX_SAMPLES}, got {samples!r}.")
    if isinstance(window_ms, bool) or not isinstance(window_ms, int) or not 1 <= window_ms <= MAX_WINDOW_MS:
        raise QuotaValidationError(f"the sample window must be 1 to {MAX_WINDOW_MS} ms, got {window_ms!r}.")
    if samples * window_ms > 2**30:
        raise QuotaValidationError(f"samples x window ({samples} x {window_ms} ms) must stay within 2^30 ms (12 days).")


@dataclass(slots=True)
class Decision:
    key: str
    kind: Kind
    op: Op
    value: float = 0.0
    t: int = 0
    bound: float | None = None
    samples: int = 11
    window_ms: int = 1000
    aux: float | None = None  # max throttle ms for sampled kinds (0 = unbounded); lower bound for CUMULATIVE_SUM
    flags: int = 0

    def packed_flags(self) -> int:
        f = self.flags
        if self.bound is not None:
            f |= HAS_BOUND
        if self.aux is not None:
            f |= HAS_AUX
        return f


@dataclass(slots=True)
class Outcome:
    """What a decision observed. ``value`` is the rate, token count or total measured after the op."""

    violated: bool = False
    recorded: bool = False
    value: float | None = None
    window_ms: int | None = None
    sum: float | None = None
    throttle_raw: float | None = None  # the unrounded throttle of the violation (Java double)
    violated_metric: str | None = None  # CUMULATIVE_SUM: "upper" or "lower"
    now_ms: int | None = None  # the clock the decision ran at (the engine's when SERVER_TIME)
