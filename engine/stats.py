"""The reference model of Kafka's metric primitives (clients/.../metrics/stats).

Plain Python with Java's order of operations, so every double equals Kafka's.
The Redis scripts in ``lua/`` implement the same math; the conformance traces
keep the two equal.
"""

from __future__ import annotations

from dataclasses import dataclass

from .javamath import LONG_MAX_AS_DOUBLE, java_min, long_div


@dataclass(frozen=True)
class Quota:
    """``Quota``: a bound and a direction; equality with the bound is acceptable."""

    bound: float
    upper: bool = True

    def acceptable(self, value: float) -> bool:
        return value <= self.bound if self.upper else value >= self.bound


@dataclass(frozen=True)
class MetricConfig:
    """``MetricConfig``: ``samples`` windows of ``window_ms`` each, and an optional quota."""

    samples: int = 2
    window_ms: int = 30_000
    quota: Quota | None = None

    def with_quota(self, quota: Quota | None) -> MetricConfig:
        return MetricConfig(self.samples, self.window_ms, quota)


class Sample:
    __slots__ = ("initial", "event_count", "start_ms", "last_event_ms", "value")

    def __init__(self, initial: float, now: int) -> None:
        self.initial = initial
        self.reset(now)

    def reset(self, now: int) -> None:
        self.event_count = 0
        self.start_ms = now
        self.last_event_ms = now
        self.value = self.initial

    def is_complete(self, t: int, config: MetricConfig) -> bool:
        # eventWindow is Long.MAX_VALUE for every quota sensor, so only time completes a sample
        return t - self.start_ms >= config.window_ms


class SampledStat:
    """N windows in a ring of N+1 slots; slots are summed in ring order, as Kafka does."""

    initial = 0.0

    def __init__(self) -> None:
        self.current = 0
        self.samples: list[Sample] = []

    def record(self, config: MetricConfig, value: float, t: int) -> None:
        sample = self.current_sample(t)
        if sample.is_complete(t, config):
            sample = self._advance(config, t)
        self.update(sample, value)
        sample.event_count += 1
        sample.last_event_ms = t

    def _advance(self, config: MetricConfig, t: int) -> Sample:
        self.current = (self.current + 1) % (config.samples + 1)
        if self.current >= len(self.samples):
            sample = Sample(self.initial, t)
            self.samples.append(sample)
            return sample
        sample = self.samples[self.current]
        sample.reset(t)
        return sample

    def current_sample(self, t: int) -> Sample:
        if not self.samples:
            self.samples.append(Sample(self.initial, t))
        return self.samples[self.current]

    def oldest(self, now: int) -> Sample:
        if not self.samples:
            self.samples.append(Sample(self.initial, now))
        oldest = self.samples[0]
        for s in self.samples[1:]:
            if s.start_ms < oldest.start_ms:
                oldest = s
        return oldest

    def purge(self, config: MetricConfig, now: int) -> None:
        expire_age = config.samples * config.window_ms
        for s in self.samples:
            if now - s.last_event_ms >= expire_age:
                s.reset(now)

    def measure(self, config: MetricConfig, now: int) -> float:
        self.purge(config, now)
        return self.combine()

    def combine(self) -> float:
        total = 0.0
        for s in self.samples:
            total += s.value
        return total

    def update(self, sample: Sample, value: float) -> None:
        raise NotImplementedError


class WindowedSum(SampledStat):
    def update(self, sample: Sample, value: float) -> None:
        sample.value += value


class WindowedCount(WindowedSum):
    def update(self, sample: Sample, value: float) -> None:
        sample.value += 1.0


class SampleCount(SampledStat):
    """Kafka's test helper: measures how many samples hold an event."""

    def update(self, sample: Sample, value: float) -> None:
        sample.value = 1.0


class Rate:
    """``Rate(SECONDS, stat)``: the windowed total over the padded elapsed time."""

    def __init__(self, stat: SampledStat | None = None) -> None:
        self.stat = stat or WindowedSum()

    def record(self, config: MetricConfig, value: float, t: int) -> None:
        self.stat.record(config, value, t)

    def measure(self, config: MetricConfig, now: int) -> float:
        value = self.stat.measure(config, now)
        return value / (self.window_size(config, now) / 1000.0)

    def window_size(self, config: MetricConfig, now: int) -> int:
        """Elapsed time since the oldest live sample, padded to ``samples - 1`` whole windows, at least 1 ms."""
        self.stat.purge(config, now)
        elapsed = now - self.stat.oldest(now).start_ms
        full_windows = long_div(elapsed, config.window_ms)
        min_full_windows = config.samples - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * config.window_ms
        return max(elapsed, 1)


class SimpleRate(Rate):
    """``SimpleRate``: no padding, the window is the elapsed time but at least one sample window."""

    def window_size(self, config: MetricConfig, now: int) -> int:
        self.stat.purge(config, now)
        return max(now - self.stat.oldest(now).start_ms, config.window_ms)


class TokenBucket:
    """KIP-599's bucket: refill ``min(B, K + Q*dt)``, spend ``min(B, K - v)``, B = samples*window*Q.

    Starts with 0 tokens at time 0, so a bucket first touched at an epoch time is full.
    """

    def __init__(self) -> None:
        self.tokens = 0.0
        self.last_update_ms = 0

    @staticmethod
    def burst(config: MetricConfig) -> float:
        assert config.quota is not None
        return (config.samples * (config.window_ms / 1000.0)) * config.quota.bound

    def _refill(self, quota: float, burst: float, t: int) -> None:
        self.tokens = java_min(burst, self.tokens + quota * ((t - self.last_update_ms) / 1000.0))
        self.last_update_ms = t

    def measure(self, config: MetricConfig, t: int) -> float:
        if config.quota is None:
            return LONG_MAX_AS_DOUBLE
        self._refill(config.quota.bound, self.burst(config), t)
        return self.tokens

    def record(self, config: MetricConfig, value: float, t: int) -> None:
        if config.quota is None:
            return
        burst = self.burst(config)
        self._refill(config.quota.bound, burst, t)
        self.tokens = java_min(burst, self.tokens - value)


class CumulativeSum:
    def __init__(self) -> None:
        self.total = 0.0

    def record(self, config: MetricConfig, value: float, t: int) -> None:
        self.total += value

    def measure(self, config: MetricConfig, t: int) -> float:
        return self.total
