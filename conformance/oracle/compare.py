"""The engine's replay of what the broker saw, and the comparison of their throttles."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.oracle.admin import QuotaEntry
from conformance.oracle.base import MIN_AGREEMENT, SAMPLES, THROTTLING_QUOTA_EXCEEDED, WINDOW_S
from conformance.oracle.scenarios import Exchange, Scenario
from conformance.replay import CASE_KINDS, EngineFactory


@dataclass
class Replay:
    """An engine's answer to a scenario: per response the throttle, per decision unit throttled or not."""

    throttles: list[int]
    decisions: list[bool]
    resolved_bound: float


def replay(
    s: Scenario,
    factory: EngineFactory,
    config: Sequence[QuotaEntry],
    *,
    samples: int = SAMPLES,
    size: Callable[[Exchange], float] | None = None,
    permits: Callable[[int], float] | None = None,
    conditioned: bool = True,
) -> Replay:
    """The scenario through one engine, as a ``client_quota_manager`` case of ``conformance.replay``: the
    cluster's config, one record per request (per topic for CreateTopics) at the estimated broker time, the
    resolved bound. ``conditioned`` CreateTopics replays then record what the broker recorded (module doc)."""
    user = {"user": s.user, "client": s.client_id}
    case_config = {"type": "produce" if s.kind == "produce" else "controller_mutation",
                   "samples": samples, "window_s": WINDOW_S}
    throttles: list[int] = []
    decisions: list[bool] = []
    with factory.scope() as (backend, ns):
        step = CASE_KINDS["client_quota_manager"](backend, ns, case_config)
        for e in config:
            if e.key == s.key:
                entity = {"user": e.user, "client": e.client_id, "quota": e.value}
                step({"op": "update_quota", "t_ms": 0, "args": entity})
        for ex in s.exchanges:
            t = ex.broker_time(s.kind)[0]
            if s.kind == "produce":
                out = step({"op": "record", "t_ms": t, "args": {**user, "v": size(ex) if size else ex.size}})
                throttles.append(int(out["throttle_ms"]))
                decisions.append(throttles[-1] > 0)
                continue
            last = 0
            for _name, p, error in ex.topics:
                if error not in (0, THROTTLING_QUOTA_EXCEEDED):
                    continue  # refused before the quota check (validation): the controller recorded nothing
                v = permits(p) if permits else float(p)
                out = step({"op": "record", "t_ms": t, "args": {**user, "v": v}})
                refused = "throttle_ms_long" in out  # violated: refused even when the throttle rounds to 0 ms
                decisions.append(refused)
                last = int(out["throttle_ms"]) if refused else last
                if conditioned and refused != (error == THROTTLING_QUOTA_EXCEEDED):
                    # follow the broker: record unchecked what it admitted, give back what it refused
                    step({"op": "unrecord", "t_ms": t, "args": {**user, "v": -v if refused else v}})
            # the quota's last throttle, decayed to the response time (``AbstractControllerMutationQuota``)
            throttles.append(max(0, last - (math.floor(ex.recv_ms) - t)))
        resolved = float(step({"op": "quota", "t_ms": 0, "args": user})["bound"])
    return Replay(throttles, decisions, resolved)


def broker_view(s: Scenario) -> Replay:
    """What the broker answered, in the same shape."""
    throttles = [ex.throttle_ms for ex in s.exchanges]
    if s.kind == "produce":
        return Replay(throttles, [t > 0 for t in throttles], s.bound)
    refused = [e == THROTTLING_QUOTA_EXCEEDED for ex in s.exchanges for _, _, e in ex.topics
               if e in (0, THROTTLING_QUOTA_EXCEEDED)]
    return Replay(throttles, refused, s.bound)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)])


def bound_ms(s: Scenario) -> int:
    """Twice the p99 uncertainty of the broker's record time, plus Math.round's 1 ms (see the module doc)."""
    return 2 * math.ceil(percentile([ex.broker_time(s.kind)[1] for ex in s.exchanges], 99)) + 1


@dataclass
class Comparison:
    """One engine's replay of one or more scenarios against the broker."""

    decisions: int = 0
    agree: int = 0
    unexplained: int = 0  # disagreements whose response's throttles differ by more than the bound
    diffs: list[int] = field(default_factory=list)  # |engine - broker| where either throttled
    beyond: int = 0  # of those, beyond their scenario's bound
    bound_ms: int = 0  # the largest scenario bound
    resolved_ok: bool = True

    def add(self, s: Scenario, engine: Replay) -> Comparison:
        broker = broker_view(s)
        bound = bound_ms(s)
        self.decisions += len(broker.decisions)
        self.agree += sum(a == b for a, b in zip(engine.decisions, broker.decisions, strict=True))
        per_unit = [abs(a - b) for ex, a, b in zip(s.exchanges, engine.throttles, broker.throttles, strict=True)
                    for _ in ([t for t in ex.topics if t[2] in (0, THROTTLING_QUOTA_EXCEEDED)] or [None])]
        self.unexplained += sum(
            a != b and d > bound for a, b, d in zip(engine.decisions, broker.decisions, per_unit, strict=True)
        )
        diffs = [abs(a - b) for a, b in zip(engine.throttles, broker.throttles, strict=True) if a > 0 or b > 0]
        self.diffs.extend(diffs)
        self.beyond += sum(d > bound for d in diffs)
        self.bound_ms = max(self.bound_ms, bound)
        self.resolved_ok = self.resolved_ok and engine.resolved_bound == s.bound
        return self

    @property
    def agreement(self) -> float:
        return self.agree / self.decisions if self.decisions else 0.0

    @property
    def within_bound(self) -> float:
        return 1 - self.beyond / len(self.diffs) if self.diffs else 1.0

    @property
    def passed(self) -> bool:
        """Decisions agree on 99%, 99% of the throttles are within their scenario's bound (the p99 of the
        difference measured against the bound), and the expected precedence level supplied the bound."""
        return (
            self.decisions > 0
            and self.agreement >= MIN_AGREEMENT
            and self.within_bound >= MIN_AGREEMENT
            and percentile(self.diffs, 99) <= self.bound_ms
            and self.resolved_ok
        )

    def summary(self) -> dict[str, Any]:
        return {
            "decisions": self.decisions,
            "agree": self.agree,
            "decision_agreement": round(self.agreement, 5),
            "disagreements_beyond_bound": self.unexplained,
            "throttled_responses_compared": len(self.diffs),
            "throttle_diff_p50_ms": percentile(self.diffs, 50),
            "throttle_diff_p99_ms": percentile(self.diffs, 99),
            "throttle_diff_max_ms": max(self.diffs, default=0),
            "beyond_bound": self.beyond,
            "within_bound": round(self.within_bound, 5),
            "passed": self.passed,
        }
