"""Cluster-wide budgets reported as deltas: a broker's round carries only the budgets whose report moved, and the
shares it keeps for the others are the ones it would get by reporting every budget every round (the model)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import pytest
import redis

from engine.budget_store import BudgetReport, BudgetStore, budget_id, scope_field
from engine.budgets import BudgetLedger, BudgetParams

MIB = 1_048_576.0
T0 = 1_700_000_000_000
PARAMS = BudgetParams()
_clusters = itertools.count()
USERS = [f"u{i}" for i in range(6)]
SCOPES = {u: scope_field("produce", f'{{"user":"{u}"}}') for u in USERS}
IDS = {u: budget_id("produce", u, "") for u in USERS}


@pytest.fixture
def store(redis_client: redis.Redis) -> Iterator[BudgetStore]:
    """A budget store for a cluster name no other test uses, with every user's value cluster-wide."""
    s = BudgetStore(redis_client, f"cd{next(_clusters)}-{id(object())}")
    s.set_scope(list(SCOPES.values()))
    yield s
    for key in redis_client.scan_iter(match=f"qb:{{{s.cluster}}}:*", count=1000):
        redis_client.delete(key)


class DeltaBroker:
    """A broker as the plugin runs it: it sends what moved since its last report and keeps the shares it holds;
    it sends everything in its first round, after half a lease without a round, and when the answer asks."""

    def __init__(self, store: BudgetStore, broker: int) -> None:
        self.store, self.broker = store, broker
        self.sent: dict[str, tuple[float, float, bool]] = {}  # user -> (B, demand, saturated) as last sent
        self.held: dict[str, float] = {}
        self.whole = True
        self.last_ok: int | None = None
        self.told = 0  # shares of budgets it did not report that the answers moved

    def round(self, t: int, wants: dict[str, tuple[float, float, bool]]) -> int:
        """Report ``wants`` (user -> B, demand, saturated) at ``t``; returns how many budgets the report carried."""
        if self.last_ok is None or t - self.last_ok > PARAMS.lease_ms // 2:
            self.whole = True
        changed = [u for u, w in wants.items() if self.whole or self.sent.get(u) != w]
        leaving = [u for u in self.sent if u not in wants]
        reports = [BudgetReport(SCOPES[u], IDS[u], *wants[u]) for u in changed]
        answer = self.store.round(self.broker, reports, PARAMS, now_ms=t, leaving=[IDS[u] for u in leaving],
                                  whole=self.whole)
        for u in leaving:
            del self.sent[u]
            self.held.pop(u, None)
        for u, share in zip(changed, answer.shares, strict=True):
            assert share is not None
            self.sent[u], self.held[u] = wants[u], share
        by_id = {IDS[u]: u for u in self.sent}
        self.told += len(answer.moved)
        for bid, share in answer.moved.items():
            assert bid in by_id, f"broker {self.broker} told of {bid}, which it does not hold"
            self.held[by_id[bid]] = share
        self.whole, self.last_ok = answer.resync, t
        return len(reports)


def model_round(ledgers: dict[str, BudgetLedger], last: dict[int, int], broker: int, t: int,
                wants: dict[str, tuple[float, float, bool]], held_before: set[str]) -> dict[str, float]:
    """The same round in the model: every budget reported, every lease that ran out dropped everywhere."""
    for b, when in last.items():
        if b != broker and t - when > PARAMS.lease_ms:
            for ledger in ledgers.values():
                ledger.expire(t, PARAMS)
    last[broker] = t
    for u in held_before - set(wants):
        ledgers[u].leave(broker)
    return {u: ledgers[u].report(broker, t, *wants[u], PARAMS) for u in wants}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_delta_reports_give_the_shares_that_reporting_everything_gives(store: BudgetStore, seed: int) -> None:
    rng = random.Random(seed)
    brokers = {b: DeltaBroker(store, b) for b in range(5)}
    wants: dict[int, dict[str, tuple[float, float, bool]]] = {b: {} for b in brokers}
    ledgers = {u: BudgetLedger() for u in USERS}
    last: dict[int, int] = {}
    quiet_until = {b: 0 for b in brokers}
    t = T0
    carried = total = 0
    for step in range(1500):
        t += rng.choice([0, 60, 200, 350])
        broker = rng.randrange(5)
        if t < quiet_until[broker]:
            continue
        if rng.random() < 0.01:
            quiet_until[broker] = t + rng.choice([5_000, PARAMS.lease_ms + 2_000])  # it dies, or stalls a while
        mine = wants[broker]
        for u in USERS:
            roll = rng.random()
            if roll < 0.04:
                mine.pop(u, None)  # its sensor is gone
            elif roll < 0.25 or (u not in mine and roll < 0.5):
                budget = 2 * MIB if rng.random() < 0.95 else 3 * MIB
                mine[u] = (budget, rng.choice([0.0, 0.1 * MIB, 0.4 * MIB, rng.uniform(0, 2 * MIB)]), rng.random() < 0.2)
        held_before = set(brokers[broker].sent)
        want = model_round(ledgers, last, broker, t, mine, held_before)
        carried += brokers[broker].round(t, dict(mine))
        total += len(mine)
        got = {u: brokers[broker].held[u] for u in mine}
        assert got == want, f"step {step}, broker {broker}: Redis {got}, model {want}"
    assert carried < 0.8 * total, "most budgets were left out of the reports"
    assert sum(b.told for b in brokers.values()) > 100, "shares moved by other brokers' reports were answered"
    for u in USERS:
        state = {b: v["s"] for b, v in store.shares(IDS[u]).items()}
        assert state == ledgers[u].shares()


def test_a_broker_whose_lease_ran_out_hands_on_every_budget_it_held(store: BudgetStore) -> None:
    one, two = DeltaBroker(store, 1), DeltaBroker(store, 2)
    busy = {u: (2 * MIB, 3 * MIB, True) for u in USERS}
    for t in (T0, T0 + 1000, T0 + 2000):
        one.round(t, busy)
        two.round(t + 500, busy)
    assert all(one.held[u] == pytest.approx(MIB) for u in USERS)
    # broker 2 stops; broker 1's rounds carry nothing (its reports did not move) until 2's lease runs out
    for t in range(T0 + 3000, T0 + 2500 + PARAMS.lease_ms + 1, 1000):
        assert one.round(t, busy) == 0 and all(one.held[u] == pytest.approx(MIB) for u in USERS)
    assert one.round(T0 + 2500 + PARAMS.lease_ms + 1, busy) == 0
    assert one.held == {u: 2 * MIB for u in USERS}, "its budgets are handed on in the round after its lease"
    assert all(set(store.shares(IDS[u])) == {1} for u in USERS)


def test_a_broker_back_after_its_lease_ran_out_is_told_to_report_everything(store: BudgetStore) -> None:
    one, two = DeltaBroker(store, 1), DeltaBroker(store, 2)
    busy = {u: (2 * MIB, 3 * MIB, True) for u in USERS}
    one.round(T0, busy)
    two.round(T0, busy)
    t = T0 + PARAMS.lease_ms + 1
    one.round(t, busy)  # sweeps broker 2 out of every budget
    assert all(set(store.shares(IDS[u])) == {1} for u in USERS)
    two.last_ok = t  # its clock does not know: its round carries nothing that moved ...
    assert two.round(t + 100, busy) == 0 and two.whole, "... and the answer asks it for everything"
    assert two.round(t + 200, busy) == len(USERS)
    assert all(set(store.shares(IDS[u])) == {1, 2} for u in USERS)
    assert set(m.decode() for m in store.client.smembers(store.prefix + "h:2")) == set(IDS.values())


def test_a_broker_leaving_a_budget_hands_its_share_on_at_once(store: BudgetStore) -> None:
    one, two = DeltaBroker(store, 1), DeltaBroker(store, 2)
    busy = {"u0": (2 * MIB, 3 * MIB, True)}
    for t in (T0, T0 + 1000):
        one.round(t, busy)
        two.round(t, busy)
    assert two.round(T0 + 2000, {}) == 0  # its sensor is gone
    assert set(store.shares(IDS["u0"])) == {1}
    one.round(T0 + 2100, busy)
    assert one.held["u0"] == 2 * MIB
    two.round(T0 + 2200, {})
    one.round(T0 + 2300, {})
    assert not store.client.exists(store.budget_key(IDS["u0"])), "the last broker out deletes the budget"


def test_a_whole_report_leaves_the_budgets_it_left_out(store: BudgetStore) -> None:
    # a restarted broker does not know which budgets it held: those its whole report leaves out are left
    one, two = DeltaBroker(store, 1), DeltaBroker(store, 2)
    busy = {"u0": (2 * MIB, 3 * MIB, True), "u1": (2 * MIB, 3 * MIB, True)}
    for t in (T0, T0 + 1000):
        one.round(t, busy)
        two.round(t, busy)
    restarted = DeltaBroker(store, 2)
    restarted.round(T0 + 2000, {"u1": busy["u1"]})
    assert set(store.shares(IDS["u0"])) == {1} and set(store.shares(IDS["u1"])) == {1, 2}
    one.round(T0 + 2100, busy)
    assert one.held["u0"] == 2 * MIB and one.held["u1"] == pytest.approx(MIB)
