"""Throttle-time statistics a live chart needs: avg and max per window, and total time throttled."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .javamath import java_round


def applied_throttle_ms(raw: float, max_ms: float) -> float:
    """The delay a client actually waits: the rounded throttle, capped when the quota bounds it."""
    if math.isnan(raw) or raw <= 0:
        return 0.0
    ms = float(java_round(raw))
    return min(ms, max_ms) if max_ms > 0 else ms


@dataclass
class ThrottleStats:
    """Current and previous window of throttle times, plus cumulative totals (same fields as the Redis record)."""

    window_start: int = 0
    count: float = 0.0
    total: float = 0.0
    max: float = 0.0
    prev_count: float = 0.0
    prev_total: float = 0.0
    prev_max: float = 0.0
    throttled_ms: float = 0.0

    def record(self, raw: float, max_ms: float, t: int, window_ms: int) -> None:
        ms = applied_throttle_ms(raw, max_ms)
        if t - self.window_start >= window_ms:
            if t - self.window_start < 2 * window_ms:
                self.prev_count, self.prev_total, self.prev_max = self.count, self.total, self.max
            else:
                self.prev_count = self.prev_total = self.prev_max = 0.0
            self.window_start, self.count, self.total, self.max = t, 0.0, 0.0, 0.0
        self.count += 1
        self.total += ms
        self.max = max(self.max, ms)
        self.throttled_ms += ms
