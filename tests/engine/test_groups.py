"""Group quotas and exempt principals in the engine's resolution (``engine.groups.GroupLayer``), on both engines.

The precedence is ``docs/capabilities/group-quotas.md``'s: an exempt principal has no quota; a value at a level that
names the client wins; else the first group (in order) with a value of the type, on the sensor ``group@<name>:``;
else Kafka's defaults.
"""

from __future__ import annotations

import redis

from engine.budget_store import budget_id, scope_field_of
from engine.config import AlterOp, EntityRef, QuotaEngine
from engine.entities import DEFAULT, QuotaType
from engine.groups import PRINCIPALS, GroupLayer, GroupSpec, order_of
from engine.javamath import LONG_MAX_AS_DOUBLE
from engine.managers import ClientQuotaManager, ControllerMutationQuotaManager, UsageRecord

from .conftest import T0

PBR, CBR = "producer_byte_rate", "consumer_byte_rate"
PAY = GroupSpec("pay", order_of(PRINCIPALS, None), users=("svc-pay-1", "svc-pay-2"), quotas={PBR: 4000.0})
BATCH = GroupSpec("batch", order_of(0, "batch-"), patterns=("svc-*",), prefix="batch-", quotas={PBR: 9000.0})
LAYER = GroupLayer.from_scope([f"group {PAY.to_json()}", f"group {BATCH.to_json()}", "exempt replicator",
                               'produce {"group":"pay"}'])


def produce(backend, namespace: str) -> ClientQuotaManager:
    m = ClientQuotaManager(QuotaType.PRODUCE, backend, samples=11, window_s=1, namespace=namespace)
    m.set_groups(LAYER)
    return m


def test_the_scope_hashs_groups_come_in_order_and_its_exempt_principals_apart() -> None:
    layer = GroupLayer.from_scope(["exempt replicator", f"group {PAY.to_json()}", "group {not json",
                                   f"group {BATCH.to_json()}", 'produce {"user":"alice"}'])
    assert [g.name for g in layer.groups] == ["batch", "pay"], "a prefix under a principal's tier first"
    assert layer.exempt == frozenset({"replicator"})
    assert layer.holds(PBR) and not layer.holds(CBR)
    assert not GroupLayer.from_scope(['produce {"user":"alice"}']), "a scope without groups is an empty layer"


def test_a_member_is_bound_by_its_groups_value_on_the_groups_sensor(backend, namespace) -> None:
    m = produce(backend, namespace)
    m.update_quota(DEFAULT, None, 100_000.0)  # /config/users/<default>: a default, which the group beats
    r = m.resolve("svc-pay-1", "app")
    assert (r.bound, r.level, r.group, r.tags) == (4000.0, None, "pay", "group@pay:")
    assert m.quota("svc-pay-2", "other") == (4000.0, "group@pay:")
    # the members share one sensor: what svc-pay-1 sent throttles svc-pay-2
    first = m.record("svc-pay-1", "app", 45_000.0, T0)
    second = m.record("svc-pay-2", "other", 0.0, T0)
    assert first.tags == second.tags == "group@pay:"
    assert first.throttle_ms == second.throttle_ms > 0
    # a non-member keeps Kafka's answer, on its own sensor
    assert m.quota("svc-orders", "app") == (100_000.0, "svc-orders:")
    assert m.record("svc-orders", "app", 0.0, T0).throttle_ms == 0


def test_a_value_that_names_the_member_wins_over_its_group(backend, namespace) -> None:
    m = produce(backend, namespace)
    for user, client in (("svc-pay-1", "app"), ("svc-pay-1", DEFAULT), ("svc-pay-1", None), (DEFAULT, "app"),
                         (None, "app")):
        m.update_quota(user, client, 77.0)
        r = m.resolve("svc-pay-1", "app")
        assert (r.bound, r.group) == (77.0, None) and r.level in (1, 2, 3, 4, 7)
        m.update_quota(user, client, None)
    for user, client in ((DEFAULT, DEFAULT), (DEFAULT, None), (None, DEFAULT)):  # Kafka's defaults lose
        m.update_quota(user, client, 77.0)
        assert m.resolve("svc-pay-1", "app").group == "pay"
        m.update_quota(user, client, None)


def test_the_first_group_in_order_holding_the_type_applies(backend, namespace) -> None:
    m = produce(backend, namespace)
    assert m.quota("svc-pay-1", "batch-7") == (9000.0, "group@batch:"), "a prefix under a principal comes first"
    fetch = ClientQuotaManager(QuotaType.FETCH, backend, namespace=namespace)
    fetch.set_groups(LAYER)
    fetch.update_quota(None, DEFAULT, 500.0)
    r = fetch.resolve("svc-pay-1", "app")
    assert (r.bound, r.level, r.group) == (500.0, 8, None), "no group holds a fetch value: Kafka's default"


def test_an_exempt_principal_has_no_quota_of_any_type(backend, namespace) -> None:
    m = produce(backend, namespace)
    m.update_quota("replicator", None, 10.0)  # even a value that names it
    r = m.resolve("replicator", "mirror")
    assert (r.bound, r.exempt, r.tags) == (None, True, "replicator:mirror")
    assert m.record("replicator", "mirror", 10_000_000.0, T0).throttle_ms == 0
    mutations = ControllerMutationQuotaManager(backend, namespace=namespace)
    mutations.update_quota(DEFAULT, None, 1.0)
    mutations.set_groups(LAYER)
    assert mutations.quota("replicator", "mirror") == (LONG_MAX_AS_DOUBLE, "replicator:mirror")
    assert mutations.record("replicator", "mirror", 1000.0, T0).throttle_ms == 0


def test_a_group_alone_enables_the_quota_type(backend, namespace) -> None:
    m = ClientQuotaManager(QuotaType.PRODUCE, backend, namespace=namespace)
    assert not m.quotas_enabled
    m.set_groups(GroupLayer.from_scope(["exempt replicator"]))
    assert not m.quotas_enabled, "an exempt principal alone enables nothing"
    m.set_groups(LAYER)
    assert m.quotas_enabled and m.record("svc-pay-1", "app", 45_000.0, T0).throttle_ms > 0
    m.set_groups(GroupLayer())  # as Kafka's mask, once enabled a type stays enabled
    assert m.quotas_enabled and m.groups is None


def test_no_groups_resolve_exactly_as_kafka(backend, namespace) -> None:
    plain = ClientQuotaManager(QuotaType.PRODUCE, backend, namespace=namespace)
    emptied = ClientQuotaManager(QuotaType.PRODUCE, backend, namespace=namespace)
    emptied.set_groups(GroupLayer())
    for m in (plain, emptied):
        m.update_quota(DEFAULT, DEFAULT, 300.0)
        m.update_quota(None, "x", 1.0)
    for user, client in (("svc-pay-1", "app"), ("replicator", "x"), ("", "")):
        assert emptied.resolve(user, client) == plain.resolve(user, client)


def test_a_cluster_wide_group_value_is_budgeted_by_the_groups_scope_field(backend, namespace) -> None:
    r = produce(backend, namespace).configured("svc-pay-2", "app")
    assert scope_field_of("produce", r) == 'produce {"group":"pay"}'
    assert budget_id("produce", *r.tags.split(":", 1)) == 'produce {"client-id":"","user":"group@pay"}'
    m = produce(backend, namespace)
    m.set_shares({"group@pay:": 1500.0})
    assert m.quota("svc-pay-1", "app") == (1500.0, "group@pay:") and m.configured("svc-pay-1", "app").bound == 4000.0


def test_the_engines_groups_outlive_a_config_reload(redis_client: redis.Redis, namespace) -> None:
    engine = QuotaEngine(redis_client, namespace)
    for m in engine.managers.values():
        m.set_groups(LAYER)
    engine.store.alter([AlterOp(EntityRef(user=DEFAULT), PBR, 100_000)])
    assert engine.refresh()
    eff = engine.effective("svc-pay-1", "app")[PBR]
    assert (eff["value"], eff["tags"]) == (4000.0, "group@pay:")
    assert engine.manager("produce").record_many([UsageRecord("replicator", "m", 1e9, T0)])[0].throttle_ms == 0


def test_a_groups_controller_mutation_rate_bounds_its_members_token_bucket(backend, namespace) -> None:
    strict = GroupSpec("ops", order_of(PRINCIPALS, None), users=("svc-ops",), quotas={"controller_mutation_rate": 2.0})
    mutations = ControllerMutationQuotaManager(backend, namespace=namespace)
    mutations.update_quota(DEFAULT, None, 100.0)  # a default, which the group beats
    mutations.update_quota("svc-own", None, 50.0)
    mutations.set_groups(GroupLayer.from_scope([f"group {strict.to_json()}"]))
    r = mutations.resolve("svc-ops", "admin")
    assert (r.bound, r.group, r.tags) == (2.0, "ops", "group@ops:")
    assert mutations.quota("svc-own", "admin") == (50.0, "svc-own:"), "a value that names the client wins"
    # one member overdraws the group's bucket (strict: the overdraft is recorded, not throttled) ...
    assert mutations.record("svc-ops", "admin", 30.0, T0).measured < 0
    # ... and the next mutation of any member is throttled: one bucket for the group's members
    assert mutations.record("svc-ops", "other", 1.0, T0).throttle_ms > 0
    assert mutations.record("svc-own", "admin", 1.0, T0).throttle_ms == 0
