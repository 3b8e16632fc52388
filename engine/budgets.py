"""Cluster-wide budgets: one budget's shares handed out to brokers by measured demand.

Kafka enforces a client quota per broker; a cluster-wide budget B is a limit on
the sum over brokers. Each broker reports the demand it sees for a budget, and
one atomic step gives it a share: the same arithmetic here (the reference
model) and in ``lua/budget_share.lua`` (what brokers run against Redis), kept
equal by ``conformance/budget_vectors.json``. The protocol and the reasons are
in ``docs/internals/cluster-budgets-protocol.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

#: The quota types a budget may be cluster-wide for (Kafka's ``ClientQuotaType`` names).
BUDGET_TYPES = ("produce", "fetch", "request")


@dataclass(frozen=True)
class BudgetParams:
    """How shares are handed out: the defaults the broker plugin uses."""

    lease_ms: int = 10_000
    floor_fraction: float = 0.05
    headroom: float = 0.2


@dataclass(frozen=True)
class Demand:
    """What one broker reports for one budget."""

    broker: int
    demand: float
    saturated: bool


def floor_share(budget: float, floor_fraction: float, live: int) -> float:
    """The least share a live broker is ever given: never zero, so a new client is never blocked."""
    return budget * floor_fraction / live


def targets(budget: float, params: BudgetParams, demands: Sequence[Demand]) -> dict[int, float]:
    """Each live broker's target share: needs met, saturated brokers splitting the rest equally."""
    live = sorted(demands, key=lambda d: d.broker)
    n = len(live)
    if n == 0:
        return {}
    floor = floor_share(budget, params.floor_fraction, n)
    need = {d.broker: math.inf if d.saturated else max(floor, d.demand * (1 + params.headroom)) for d in live}
    total = 0.0
    for d in live:
        total = total + need[d.broker]
    if total <= budget:
        # everyone is satisfied: the spare is spread evenly, as room to grow before the next round
        spare = (budget - total) / n
        return {d.broker: need[d.broker] + spare for d in live}
    order = sorted(live, key=lambda d: (need[d.broker], d.broker))
    out: dict[int, float] = {}
    remaining = budget
    left = n
    for i, d in enumerate(order):
        level = remaining / left
        if need[d.broker] <= level:
            out[d.broker] = need[d.broker]
            remaining = remaining - need[d.broker]
            left -= 1
            continue
        for rest in order[i:]:
            out[rest.broker] = level
        break
    return out


def next_share(
    budget: float, params: BudgetParams, live: int, target: float, held: float | None, others: float
) -> float:
    """A broker's new share: down to its target at once, up only as far as the others have released.

    A share is never cut below what the broker holds while its target is higher (a cut below the rate a sensor
    measures makes Kafka throttle for (rate - limit) / limit windows); a broker that holds nothing yet holds what
    it enforced before its first round, budget / live brokers.
    """
    floor = floor_share(budget, params.floor_fraction, live)
    mine = budget / live if held is None else held
    if target <= mine:
        return max(floor, target)
    return max(floor, mine, min(target, budget - others))


@dataclass
class _Entry:
    demand: float
    saturated: bool
    reported_ms: int
    share: float | None = None


@dataclass
class BudgetLedger:
    """The reference model of one budget's state (the hash ``qb:{C}:b:<budget id>``)."""

    budget: float = 0.0
    entries: dict[int, _Entry] = field(default_factory=dict)

    def report(
        self, broker: int, now_ms: int, budget: float, demand: float, saturated: bool, params: BudgetParams
    ) -> float:
        """One broker's round for this budget: record its demand and hand it its share."""
        self.budget = budget
        self.entries.setdefault(broker, _Entry(demand, saturated, now_ms))
        entry = self.entries[broker]
        entry.demand, entry.saturated, entry.reported_ms = demand, saturated, now_ms
        for other in [b for b, e in self.entries.items() if now_ms - e.reported_ms > params.lease_ms]:
            del self.entries[other]  # its lease ran out: its share returns to the pool
        live = [Demand(b, e.demand, e.saturated) for b, e in sorted(self.entries.items())]
        target = targets(budget, params, live)[broker]
        others = 0.0
        for b, e in sorted(self.entries.items()):
            if b != broker and e.share is not None:
                others = others + e.share
        entry.share = next_share(budget, params, len(live), target, entry.share, others)
        return entry.share

    def leave(self, broker: int) -> None:
        """The broker holds the budget no more (its sensor is gone): its share returns to the pool at once."""
        self.entries.pop(broker, None)

    def expire(self, now_ms: int, params: BudgetParams) -> None:
        """Drop the entries of brokers whose last round is older than the lease (what a sweep does to every budget
        of a broker whose lease ran out, without waiting for a report of the budget)."""
        for other in [b for b, e in self.entries.items() if now_ms - e.reported_ms > params.lease_ms]:
            del self.entries[other]

    def quiet(self, now_ms: int) -> None:
        """Every broker reported its sensor idle until ``now_ms`` (what the plugin does while nothing is sent):
        their leases go on and their demand is 0."""
        for e in self.entries.values():
            e.demand, e.saturated, e.reported_ms = 0.0, False, now_ms

    def shares(self) -> dict[int, float]:
        """The share each broker holds now."""
        return {b: e.share for b, e in sorted(self.entries.items()) if e.share is not None}
