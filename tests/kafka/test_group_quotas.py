"""Group quotas on the project's real 3-broker Kafka (issue 32), set through the portal and enforced by the quota
callback on every broker.

Three principals of one tenant, each producing as fast as it can to partitions led by all three brokers, are held
together to the tenant's cluster-wide group budget B; an exempt principal of the same tenant is never throttled; a
member with its own explicit quota gets that one, not the group's. Kafka's own sensor of the group
(``user=group@<name>``) is what holds them: its MBean is read from each broker's JMX exporter.
"""

from __future__ import annotations

import secrets
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from engine.budget_store import BudgetStore
from kafka_wire import AdminClient
from observe.kafka_quotas import jmx_unquote
from quotas.choices import BudgetScope, ConnectorKind
from quotas.models import (
    Alteration,
    Broker,
    Cluster,
    GroupKind,
    OwnedName,
    QuotaOp,
    Tenant,
    alter_client_quotas,
    create_group,
    set_exempt,
    set_group_values,
)
from quotas.push import target_push
from traffic.budget_load import MovingProducer, create_spread_topic

pytestmark = pytest.mark.django_db
KIB = 1024.0
PBR = "producer_byte_rate"
MECHANISM = "SCRAM-SHA-512"
#: Kafka's quota window (11 samples of 1 s): a throttled client may deliver this many seconds of its limit at once.
KAFKA_WINDOW_S = 11.0


@pytest.fixture
def portal_cluster(kafka_cluster: Any, redis_url: str) -> Iterator[Cluster]:
    """The session's Kafka as a portal cluster of the same name (the name the brokers' callback reads its scope
    hash by); emptied of quotas, groups and exempt principals at the end."""
    if not getattr(kafka_cluster, "budget_redis_url", None):
        pytest.skip(f"the Kafka cluster {kafka_cluster.name!r} runs without a budget Redis (an external cluster)")
    cluster = Cluster.objects.create(name=kafka_cluster.name, connector=ConnectorKind.KAFKA)
    for node in kafka_cluster.nodes:
        Broker.objects.create(cluster=cluster, broker_id=node.node_id, host=node.address("PLAINTEXT"))
    yield cluster
    client = redis.Redis.from_url(redis_url)
    try:
        client.delete(BudgetStore(client, cluster.name).scope_key)
    finally:
        client.close()
    for entity in cluster.quota_entities.all():
        alter_client_quotas(cluster, [Alteration(list(entity.components.items()), [
            QuotaOp(v.key, remove=True) for v in entity.quota_values.all()])])
    target_push.push_target(cluster.pk, None)


def scram_users(kafka_cluster: Any, names: list[str]) -> dict[str, dict[str, str]]:
    """SCRAM credentials for ``names`` on the cluster; each name's librdkafka settings."""
    passwords = {n: secrets.token_hex(8) for n in names}
    with AdminClient(kafka_cluster.bootstrap()) as admin:
        admin.alter_user_scram_credentials([(n, MECHANISM, 4096, p) for n, p in passwords.items()])
    return {
        n: {"bootstrap.servers": kafka_cluster.bootstrap("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": MECHANISM, "sasl.username": n, "sasl.password": p}
        for n, p in passwords.items()
    }


def group_sensor_rates(kafka_cluster: Any, group: str) -> dict[int, float]:
    """Each broker's byte-rate of the group's produce sensor, from its JMX exporter (0 where it has none)."""
    rates: dict[int, float] = {}
    for node in kafka_cluster.nodes:
        if not getattr(node, "metrics_url", None):
            continue
        with urllib.request.urlopen(node.metrics_url, timeout=10) as answer:
            text = answer.read().decode()
        rates[node.node_id] = 0.0
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                user = jmx_unquote(s.labels.get("user", ""))  # JMX quotes a value with '@'
                if s.name == "kafka_server_produce_byte_rate" and user == f"group@{group}":
                    rates[node.node_id] = s.value
    return rates


def test_a_tenants_principals_are_held_together_to_the_group_budget(
    kafka_cluster: Any, portal_cluster: Cluster, redis_url: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    members = [f"grp-{tag}-m{i}" for i in (1, 2, 3)]
    exempt, own = f"grp-{tag}-exempt", f"grp-{tag}-own"
    budget, own_value = 384 * KIB, 64 * KIB
    tenant = Tenant.objects.create(name=f"grp-{tag}")
    OwnedName.objects.create(tenant=tenant, entity_type="user", pattern=f"grp-{tag}-*")
    group = create_group(None, portal_cluster, tenant, f"tenant-{tag}", GroupKind.TENANT)
    set_group_values(None, group, {PBR: (budget, BudgetScope.CLUSTER_WIDE)})
    set_exempt(None, portal_cluster, exempt, True, "a replicator")
    alter_client_quotas(portal_cluster, [Alteration([("user", own)], [QuotaOp(PBR, own_value)])])
    target_push.push_target(portal_cluster.pk, None)
    scope = BudgetStore(redis.Redis.from_url(redis_url), portal_cluster.name).scope()
    assert f"exempt {exempt}" in scope and f'produce {{"group":"{group.name}"}}' in scope
    configs = scram_users(kafka_cluster, [*members, exempt, own])

    topic = f"group-{tag}"
    led = create_spread_topic(kafka_cluster.client_config(), topic, [1, 2, 3])
    everywhere = [led[b] for b in (1, 2, 3)]
    producers = {
        name: MovingProducer(configs[name], topic, f"app-{name}", everywhere).start()
        for name in [*members, exempt, own]
    }
    start = int(time.monotonic()) + 1
    time.sleep(50)
    sensors = group_sensor_rates(kafka_cluster, group.name)
    for p in producers.values():
        p.stop()
    seconds = 30
    window = (start + 14, start + 14 + seconds)  # past the first window: each new sensor starts at B / brokers
    rates = {name: p.rate(*window) for name, p in producers.items()}
    together = sum(rates[m] for m in members) / budget
    print(f"group members together {together:.2f} B ({', '.join(f'{rates[m] / budget:.2f}' for m in members)}); "
          f"exempt {rates[exempt] / budget:.1f} B; own quota {rates[own] / own_value:.2f} x its value; "
          f"group sensor per broker {sensors}")

    slack = KAFKA_WINDOW_S / seconds + 0.05
    assert together <= 1 + slack, f"the group lets {together:.2f} B through, not B"
    assert together >= 0.5, f"the group delivers {together:.2f} B: its members are held far below the budget"
    assert all(rates[m] > 0 for m in members), f"every member gets a part of the budget: {rates}"
    assert producers[exempt].throttled_ms == 0, "no broker ever throttled the exempt principal"
    assert rates[exempt] > 1.5 * budget, f"the exempt principal is not held to the budget: {rates[exempt]:.0f} B/s"
    # its own per-broker value on each of 3 brokers: up to 3 x, never the group's budget
    assert rates[own] <= 3 * own_value * (1 + slack), f"the member with its own quota got {rates[own]:.0f} B/s"
    assert producers[own].throttled_ms > 0, "Kafka throttled the member with its own quota by that quota"
    if sensors:
        assert any(r > 0 for r in sensors.values()), f"Kafka's sensor user=group@{group.name} measured the group"
