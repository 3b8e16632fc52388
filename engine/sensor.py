"""``Sensor``: stats recorded together and checked against their quotas (reference model)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from .stats import MetricConfig, TokenBucket


class Stat(Protocol):
    def record(self, config: MetricConfig, value: float, t: int) -> None: ...

    def measure(self, config: MetricConfig, t: int) -> float: ...


@dataclass
class Metric:
    name: str
    stat: Stat
    config: MetricConfig

    def value(self, t: int) -> float:
        return self.stat.measure(self.config, t)


class QuotaViolation(Exception):
    """``QuotaViolationException``: the observed value, the bound, and the metric that crossed it."""

    def __init__(self, metric: Metric, value: float, bound: float) -> None:
        super().__init__(f"{metric.name} is {value}, which is above the allowed {bound}")
        self.metric = metric
        self.value = value
        self.bound = bound


@dataclass
class Sensor:
    name: str
    metrics: list[Metric] = field(default_factory=list)
    last_record_ms: int = 0

    def add(self, name: str, stat: Stat, config: MetricConfig) -> Metric:
        metric = Metric(name, stat, config)
        self.metrics.append(metric)
        return metric

    def record(self, value: float, t: int, check_quotas: bool = True) -> None:
        """Record into every stat first, then check: a violating value stays recorded."""
        self.last_record_ms = t
        for m in self.metrics:
            m.stat.record(m.config, value, t)
        if check_quotas:
            self.check_quotas(t)

    def check_quotas(self, t: int) -> None:
        for m in self.metrics:
            quota = m.config.quota
            if quota is None:
                continue
            value = m.value(t)
            if isinstance(m.stat, TokenBucket):
                if value < 0:
                    raise QuotaViolation(m, value, quota.bound)
            elif not quota.acceptable(value):
                raise QuotaViolation(m, value, quota.bound)
