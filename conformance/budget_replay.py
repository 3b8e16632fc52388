"""Replay cluster-wide budget cases (``kind: cluster_budget``) on the model or on Redis.

A case is one budget shared by brokers: each ``report`` step is one broker's
round (its demand, whether it is saturated, the time) and answers the share it
was handed; a ``targets`` step asks the allocation alone for a demand vector.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.budgets import BudgetLedger, BudgetParams, Demand, targets

KIND = "cluster_budget"

_SCOPE = 'produce {"user":"conformance"}'
_BUDGET = 'produce {"client-id":"","user":"conformance"}'


def _params(config: dict[str, Any]) -> BudgetParams:
    defaults = BudgetParams()
    return BudgetParams(
        lease_ms=int(config.get("lease_ms", defaults.lease_ms)),
        floor_fraction=float(config.get("floor_fraction", defaults.floor_fraction)),
        headroom=float(config.get("headroom", defaults.headroom)),
    )


def budget_case(client: Any, ns: str, config: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A step function for one case: on the model when ``client`` is None, else through the Redis script."""
    params = _params(config)
    ledger = BudgetLedger()
    store = None
    if client is not None:
        from engine.budget_store import BudgetReport, BudgetStore

        store = BudgetStore(client, ns)
        store.set_scope([_SCOPE])

    def step(s: dict[str, Any]) -> dict[str, Any]:
        a = s["args"]
        if s["op"] == "targets":
            demands = [Demand(int(b), float(d), bool(x)) for b, d, x in a["demands"]]
            return {"targets": {str(b): v for b, v in targets(float(a["budget"]), params, demands).items()}}
        broker, t, budget = int(a["broker"]), int(s["t_ms"]), float(a["budget"])
        demand, saturated = float(a["demand"]), bool(a["saturated"])
        if store is None:
            return {"share": ledger.report(broker, t, budget, demand, saturated, params)}
        report = BudgetReport(_SCOPE, _BUDGET, budget, demand, saturated)
        return {"share": store.round(broker, [report], params, now_ms=t).shares[0]}

    return step


def cleanup(client: Any, ns: str) -> None:
    """Drop a Redis case's keys."""
    keys = list(client.scan_iter(match=f"qb:{{{ns}}}:*", count=1000))
    if keys:
        client.delete(*keys)
