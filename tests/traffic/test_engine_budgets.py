"""Cluster-wide budgets on the engine's own brokers (traffic.engine_budgets), on the real test Redis."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import redis

from engine.budget_store import BudgetStore, budget_id, scope_field
from engine.budgets import BudgetParams
from engine.config import AlterOp, EntityRef, QuotaEngine, namespace_for_broker
from engine.entities import DEFAULT, QuotaType
from engine.groups import PRINCIPALS, GroupSpec, entity_field, order_of
from engine.managers import UsageRecord
from engine.redis_backend import connect
from traffic.engine_budgets import BrokerBudgets

BUDGET = 100_000.0
PBR = "producer_byte_rate"
T0 = 1_700_000_000_000
_clusters = itertools.count()


@pytest.fixture
def cluster(redis_url: str) -> Iterator[tuple[str, redis.Redis]]:
    """A cluster name of this test alone, its keys deleted afterwards."""
    client = connect(redis_url, timeout_s=5.0)
    name = f"eb{next(_clusters)}-{id(object())}"
    yield name, client
    for pattern in (f"qb:{{{name}}}:*", f"qe:{{{name}.*"):
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)


def _brokers(name: str, client: redis.Redis, wide: bool) -> list[tuple[QuotaEngine, BrokerBudgets]]:
    out = []
    for broker in (1, 2, 3):
        engine = QuotaEngine(client, namespace_for_broker(name, broker))
        engine.store.alter([AlterOp(EntityRef(client_id="app"), "producer_byte_rate", BUDGET)])
        engine.refresh()
        out.append((engine, BrokerBudgets(BudgetStore(client, name), broker, engine.managers, 3)))
    BudgetStore(client, name).set_scope([scope_field("produce", EntityRef(client_id="app").field())] if wide else [])
    return out


def _run(brokers: list, busy: int, seconds: int, start: int = 0) -> list[float]:
    """A producer asking 300 KB/s of broker ``busy`` (10 KB every 33 ms, waiting out its throttles); bytes per
    second the broker took."""
    engine, budgets = brokers[busy - 1]
    produce = engine.managers[QuotaType.PRODUCE]
    taken, ready = [], 0
    for s in range(start, start + seconds):
        took = 0.0
        for ms in range(0, 1000, 33):
            t = T0 + s * 1000 + ms
            if t < ready:
                continue
            r = produce.record_many([UsageRecord("", "app", 10_000.0, t)])[0]
            budgets.note(QuotaType.PRODUCE, "", "app", 10_000.0, r.throttle_ms, t)
            took += 10_000.0
            ready = t + r.throttle_ms
        taken.append(took)
        for _engine, b in brokers:
            b.round(T0 + (s + 1) * 1000)
    return taken


def test_an_engine_broker_is_bounded_by_its_share_of_the_budget(cluster: tuple[str, redis.Redis]) -> None:
    name, client = cluster
    brokers = _brokers(name, client, wide=True)
    taken = _run(brokers, busy=1, seconds=40)
    assert all(b.state == "coordinated" for _e, b in brokers)
    # the only broker whose sensor saw the client holds the whole budget, and Kafka's math holds it there
    assert brokers[0][0].managers[QuotaType.PRODUCE].quota("", "app")[0] == BUDGET
    assert sum(taken[20:]) / 20 == pytest.approx(BUDGET, rel=0.15)
    # a broker that has not seen the client yet bounds it by budget / brokers until its first round with it
    assert [e.managers[QuotaType.PRODUCE].quota("", "app")[0] for e, _b in brokers[1:]] == [BUDGET / 3] * 2


def test_shares_move_with_the_demand(cluster: tuple[str, redis.Redis]) -> None:
    name, client = cluster
    brokers = _brokers(name, client, wide=True)
    _run(brokers, busy=1, seconds=15)
    _run(brokers, busy=2, seconds=5, start=15)
    second = brokers[1][0].managers[QuotaType.PRODUCE].quota("", "app")[0]
    first = brokers[0][0].managers[QuotaType.PRODUCE].quota("", "app")[0]
    assert second > 0.8 * BUDGET > first


def test_a_per_broker_value_is_kafkas_meaning(cluster: tuple[str, redis.Redis]) -> None:
    name, client = cluster
    brokers = _brokers(name, client, wide=False)
    _run(brokers, busy=1, seconds=5)
    assert [e.managers[QuotaType.PRODUCE].quota("", "app")[0] for e, _b in brokers] == [BUDGET] * 3


def test_redis_away_keeps_the_last_shares_for_the_lease_then_budget_over_brokers(
    cluster: tuple[str, redis.Redis],
) -> None:
    name, client = cluster
    brokers = _brokers(name, client, wide=True)
    _run(brokers, busy=1, seconds=5)
    engine, budgets = brokers[0]
    held = engine.managers[QuotaType.PRODUCE].quota("", "app")[0]
    budgets.store = BudgetStore(connect("redis://127.0.0.1:1/0", timeout_s=0.2), name)  # nothing listens there
    t = T0 + 5000 + BudgetParams().lease_ms
    budgets.round(t)
    assert engine.managers[QuotaType.PRODUCE].quota("", "app")[0] == held and budgets.state == "coordinated"
    budgets.round(t + 1001)
    assert budgets.state == "fallback"
    assert engine.managers[QuotaType.PRODUCE].quota("", "app")[0] == pytest.approx(BUDGET / 3)


def test_unthrottled_brokers_get_shares_by_their_demand_not_equal_halves(cluster: tuple[str, redis.Redis]) -> None:
    name, client = cluster
    brokers = _brokers(name, client, wide=True)
    for s in range(3):  # 60 KB/s on broker 1 and 5 KB/s on broker 2, nothing throttled: nobody is saturated
        t = T0 + s * 1000
        brokers[0][1].note(QuotaType.PRODUCE, "", "app", 60_000.0, 0, t)
        brokers[1][1].note(QuotaType.PRODUCE, "", "app", 5_000.0, 0, t)
        for _e, b in brokers:
            b.round(t + 1000)
    first, second = (e.managers[QuotaType.PRODUCE].quota("", "app")[0] for e, _b in brokers[:2])
    assert first >= 60_000.0 * 1.2 and second >= 5_000.0 * 1.2 and first > 2 * second


def test_before_any_round_told_the_scope_a_failing_round_changes_no_limit(cluster: tuple[str, redis.Redis]) -> None:
    name, client = cluster
    engine, budgets = _brokers(name, client, wide=True)[0]
    budgets.store = BudgetStore(connect("redis://127.0.0.1:1/0", timeout_s=0.2), name)  # nothing listens there
    budgets.note(QuotaType.PRODUCE, "", "app", 1_000.0, 0, T0)
    budgets.round(T0 + 60_000)
    assert engine.managers[QuotaType.PRODUCE].quota("", "app")[0] == BUDGET and budgets.state == "off"


GROUP = GroupSpec("pay", order_of(PRINCIPALS, None), users=("svc-pay-1", "svc-pay-2"), quotas={PBR: BUDGET})


def _group_brokers(name: str, client: redis.Redis, wide: bool) -> list[tuple[QuotaEngine, BrokerBudgets]]:
    """Two engine brokers whose scope hash holds the group ``pay`` (cluster-wide or not) and an exempt principal."""
    out = []
    for broker in (1, 2):
        engine = QuotaEngine(client, namespace_for_broker(name, broker))
        engine.store.alter([AlterOp(EntityRef(user=DEFAULT), PBR, 1000)])  # a default, which the group beats
        engine.refresh()
        out.append((engine, BrokerBudgets(BudgetStore(client, name), broker, engine.managers, 2)))
    fields = [f"group {GROUP.to_json()}", "exempt replicator"]
    BudgetStore(client, name).set_scope(fields + ([scope_field("produce", entity_field("pay"))] if wide else []))
    return out


def _members(brokers: list, seconds: int) -> list[float]:
    """svc-pay-1 on broker 1 and svc-pay-2 on broker 2, each asking 300 KB/s and waiting out its throttles; bytes per
    second the two brokers took together."""
    ready, taken = [0, 0], []
    for s in range(seconds):
        took = 0.0
        for ms in range(0, 1000, 33):
            t = T0 + s * 1000 + ms
            for i, (engine, budgets) in enumerate(brokers):
                if t < ready[i]:
                    continue
                user = f"svc-pay-{i + 1}"
                r = engine.managers[QuotaType.PRODUCE].record_many([UsageRecord(user, "app", 10_000.0, t)])[0]
                budgets.note(QuotaType.PRODUCE, user, "app", 10_000.0, r.throttle_ms, t)
                took += 10_000.0
                ready[i] = t + r.throttle_ms
        taken.append(took)
        for _engine, b in brokers:
            b.round(T0 + (s + 1) * 1000)
    return taken


def test_a_cluster_wide_group_budget_is_shared_between_the_engine_brokers(cluster: tuple[str, redis.Redis]) -> None:
    name, client = cluster
    brokers = _group_brokers(name, client, wide=True)
    taken = _members(brokers, seconds=40)
    shares = [e.managers[QuotaType.PRODUCE].quota(f"svc-pay-{i + 1}", "app") for i, (e, _b) in enumerate(brokers)]
    assert [tags for _share, tags in shares] == ["group@pay:", "group@pay:"]
    assert sum(share for share, _tags in shares) == pytest.approx(BUDGET, rel=0.01), "the shares add up to the budget"
    # both members of both brokers are held together to the group's budget, not to one each per broker
    assert sum(taken[20:]) / 20 == pytest.approx(BUDGET, rel=0.15)
    assert BudgetStore(client, name).shares(budget_id("produce", "group@pay", "")).keys() == {1, 2}


def test_the_rounds_give_every_manager_the_groups_and_exempt_principals(cluster: tuple[str, redis.Redis]) -> None:
    name, client = cluster
    brokers = _group_brokers(name, client, wide=False)
    engine = brokers[0][0]
    assert engine.managers[QuotaType.PRODUCE].quota("svc-pay-1", "app") == (1000.0, "svc-pay-1:"), "no round yet"
    for _e, b in brokers:
        b.round(T0)
    assert engine.managers[QuotaType.PRODUCE].quota("svc-pay-1", "app") == (BUDGET, "group@pay:"), "per broker"
    taken = _members(brokers, seconds=20)
    assert sum(taken[10:]) / 10 == pytest.approx(2 * BUDGET, rel=0.15), "a per-broker value holds on each broker"
    for q in QuotaType:  # an exempt principal has no quota of any type, the mutation quota included
        assert engine.managers[q].resolve("replicator", "mirror").exempt
    assert engine.managers[QuotaType.PRODUCE].record("replicator", "mirror", 1e9, T0).throttle_ms == 0
