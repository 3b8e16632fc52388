"""Write conformance/budget_vectors.json: cluster-wide budget cases, their oracles from the reference model.

    python -m conformance.make_budget_vectors

Kafka has no cluster-wide quota, so these cases are the project's own specification
(docs/internals/cluster-budgets-protocol.md); the replay proves the Redis script gives the model's doubles.
"""

import json
from pathlib import Path

from conformance.budget_replay import budget_case

T0 = 1_700_000_000_000
MIB = 1048576.0


def rep(b, t, budget, d, x):
    return {"op": "report", "t_ms": T0 + t, "args": {"broker": b, "budget": budget, "demand": d, "saturated": x}}


def tg(budget, demands):
    return {"op": "targets", "t_ms": T0, "args": {"budget": budget, "demands": demands}}


B = 2 * MIB
cases = []


def case(id, desc, steps, config=None):
    config = config or {}
    fn = budget_case(None, "gen", config)
    for s in steps:
        s["oracle"] = fn(s)
    cases.append({"id": id, "description": desc, "kind": "cluster_budget", "config": config, "steps": steps})


case(
    "targets.all_demand_on_one_broker",
    "One saturated broker, two idle: the idle ones keep the floor, the busy one takes the rest.",
    [tg(B, [[1, 3 * MIB, True], [2, 0.0, False], [3, 0.0, False]])],
)
case(
    "targets.even_saturated",
    "Three saturated brokers split the budget equally.",
    [tg(B, [[1, 3 * MIB, True], [2, 3 * MIB, True], [3, 3 * MIB, True]])],
)
case(
    "targets.spare_spread_evenly",
    "Needs below the budget: each gets its need plus an equal part of the spare.",
    [tg(B, [[1, 0.5 * MIB, False], [2, 0.25 * MIB, False], [3, 0.0, False]])],
)
case(
    "targets.water_fill_unsaturated",
    "Unsaturated needs above the budget: the small needs are met, the big ones share what is left.",
    [tg(B, [[1, 2 * MIB, False], [2, 0.1 * MIB, False], [3, 1.5 * MIB, False]])],
)
case(
    "targets.saturated_and_modest",
    "A modest unsaturated broker keeps its need with headroom; the saturated ones split the rest.",
    [tg(B, [[1, 0.3 * MIB, False], [2, 5 * MIB, True], [3, 5 * MIB, True], [4, 0.0, False]])],
)
case(
    "targets.request_percentage",
    "A request-time budget in percent behaves like a byte budget.",
    [tg(150.0, [[1, 120.0, True], [2, 10.0, False], [3, 40.0, False]])],
    {"floor_fraction": 0.1, "headroom": 0.5},
)
case(
    "rounds.first_broker_alone",
    "A broker alone takes the whole budget; the second to join starts from budget / brokers.",
    [
        rep(1, 0, B, 0.0, False),
        rep(1, 1000, B, 3 * MIB, True),
        rep(2, 1200, B, 0.0, False),
        rep(1, 2000, B, 3 * MIB, True),
        rep(2, 2200, B, 0.0, False),
    ],
)
case(
    "rounds.shift",
    "Demand moves from broker 1 to broker 2: 1 releases when it reports, 2 takes what was released.",
    [
        rep(b, 1000 * r + 100 * b, B, d, x)
        for r in range(3)
        for b, d, x in [(1, 3 * MIB, True), (2, 0.0, False), (3, 0.0, False)]
    ]
    + [
        rep(b, 3000 + 1000 * r + 100 * b, B, d, x)
        for r in range(3)
        for b, d, x in [(1, 0.0, False), (2, 3 * MIB, True), (3, 0.0, False)]
    ],
)
case(
    "rounds.take_only_free",
    "A broker whose target rose keeps its share and grows only into what the others have released.",
    [
        rep(1, 0, B, 3 * MIB, True),
        rep(2, 10, B, 3 * MIB, True),
        rep(3, 20, B, 3 * MIB, True),
        rep(1, 1000, B, 0.0, False),
        rep(2, 1010, B, 3 * MIB, True),
        rep(3, 1020, B, 3 * MIB, True),
        rep(2, 2010, B, 3 * MIB, True),
    ],
)
case(
    "rounds.lease_expiry",
    "A broker that stops reporting loses its share when its lease ends; the others take it.",
    [
        rep(1, 0, B, 3 * MIB, True),
        rep(2, 10, B, 3 * MIB, True),
        rep(3, 20, B, 3 * MIB, True),
        rep(1, 5000, B, 3 * MIB, True),
        rep(2, 5010, B, 3 * MIB, True),
        rep(1, 10021, B, 3 * MIB, True),
        rep(2, 10031, B, 3 * MIB, True),
        rep(1, 11000, B, 3 * MIB, True),
    ],
    {"lease_ms": 10000},
)
case(
    "rounds.budget_lowered",
    "The budget is lowered between rounds: shares shrink to the new budget as brokers report.",
    [
        rep(1, 0, B, 3 * MIB, True),
        rep(2, 10, B, 3 * MIB, True),
        rep(1, 1000, MIB, 3 * MIB, True),
        rep(2, 1010, MIB, 3 * MIB, True),
        rep(1, 2000, MIB, 3 * MIB, True),
    ],
)
doc = {
    "schema": {
        "description": "Cluster-wide budgets (the project's own semantics, not Kafka's: Kafka has no cluster-wide quota). One budget B shared by brokers by measured demand; docs/internals/cluster-budgets-protocol.md defines the allocation.",  # noqa: E501
        "kind": "cluster_budget: one budget per case, a fresh state per case",
        "config": {
            "lease_ms": "a broker whose last report is older than this (ms) is dead and its share returns (default 10000)",  # noqa: E501
            "floor_fraction": "the floor is B * floor_fraction / live brokers (default 0.05)",
            "headroom": "an unsaturated broker needs demand * (1 + headroom) (default 0.2)",
        },
        "steps": {
            "report": "one broker's round: args broker (int), budget (B, double), demand (double >= 0, units per second), saturated (bool); t_ms the engine's clock. oracle: share (double) the broker enforces until its next round",  # noqa: E501
            "targets": "the allocation alone: args budget and demands [[broker, demand, saturated], ...]. oracle: targets {broker id as string: double}",  # noqa: E501
        },
        "numbers": "doubles in shortest round-trip form; the model and the Redis script must give the same doubles",
    },
    "cases": cases,
}
with open(Path(__file__).with_name("budget_vectors.json"), "w") as f:
    json.dump(doc, f, indent=1)
print(f"{len(cases)} cases")
