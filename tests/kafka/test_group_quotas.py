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
from kafka_wire import CREATE_TOPICS, AdminClient, NewTopic
from observe.kafka_quotas import PrometheusSource, jmx_unquote
from observe.prometheus import PrometheusClient
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


def group_members_seen(prometheus_url: str, cluster: str, group: str, seconds: float) -> list[dict[str, Any]]:
    """The group's produce samples that the Prometheus source makes of a real Prometheus scraping the brokers,
    polled for ``seconds``: the newest of each broker that has ``members``."""
    newest: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + seconds
    with PrometheusClient(prometheus_url) as client:
        source = PrometheusSource(client, cluster, bound=lambda _entity: None, selector={"cluster": cluster},
                                  members_window_s=10.0)
        while time.monotonic() < deadline:
            for s in source.poll().samples:
                if s["q"] == "produce" and s["e"] == f"group@{group}:" and s.get("members"):
                    newest[s["b"]] = s
            time.sleep(1.0)
    return list(newest.values())


def test_a_tenants_principals_are_held_together_to_the_group_budget(
    kafka_cluster: Any, portal_cluster: Cluster, redis_url: str, fast_prometheus: Any
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
    time.sleep(30)
    # meanwhile, end to end: the plugin's member counters -> the exporter -> Prometheus -> the monitor's source
    seen = group_members_seen(fast_prometheus.url, kafka_cluster.name, group.name, 20)
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
    # the members' parts the monitor shows: every member on some broker, nobody else, parts adding up to the rate
    named = {(m.get("u"), m.get("c")) for s in seen for m in s["members"] if "others" not in m}
    assert named == {(m, f"app-{m}") for m in members}, seen
    for s in seen:
        assert sum(m["part"] for m in s["members"]) == pytest.approx(s["rate"], rel=1e-6), s
        assert sum(m["share"] for m in s["members"]) == pytest.approx(1.0), s


def _burst(kafka_cluster: Any, user: str, password: str, prefix: str, count: int) -> int:
    """Create ``count`` one-partition topics in one CreateTopics request as ``user``; how many Kafka refused with
    THROTTLING_QUOTA_EXCEEDED. The project's wire client speaks CreateTopics v6 or later, where a controller
    mutation quota is strict (KIP-599: the topics past the bucket's tokens are refused); librdkafka's older version
    is only throttled after the fact, which refuses nothing."""
    with AdminClient(kafka_cluster.bootstrap("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                     sasl_mechanism=MECHANISM, sasl_username=user, sasl_password=password) as admin:
        assert admin.api_version(CREATE_TOPICS) >= 6, "strict controller mutation quotas need CreateTopics v6"
        results = admin.create_topics([NewTopic(f"{prefix}-{i}", 1, 1) for i in range(count)])
    codes = [r.code for r in results.topics.values()]
    assert set(codes) <= {"NONE", "THROTTLING_QUOTA_EXCEEDED"}, codes
    return codes.count("THROTTLING_QUOTA_EXCEEDED")


def test_a_groups_members_share_one_controller_mutation_bucket(kafka_cluster: Any, portal_cluster: Cluster) -> None:
    """Kafka's controller enforces controller_mutation_rate (KIP-599, a token bucket of rate x 11 s); its own quota
    callback reads the groups too, so two members draw on one bucket, where two clients with the same value each
    have their own (measured beside them in the same run)."""
    tag = uuid.uuid4().hex[:6]
    a, b, solo_a, solo_b = (f"cmr-{tag}-{n}" for n in ("a", "b", "solo-a", "solo-b"))
    tenant = Tenant.objects.create(name=f"cmr-{tag}")
    OwnedName.objects.create(tenant=tenant, entity_type="user", pattern=f"cmr-{tag}-*")
    group = create_group(None, portal_cluster, tenant, f"cmr-{tag}", GroupKind.PRINCIPALS, principals=[a, b])
    set_group_values(None, group, {"controller_mutation_rate": (1.0, None)})  # 11 tokens for the two together
    alter_client_quotas(portal_cluster, [Alteration([("user", u)], [QuotaOp("controller_mutation_rate", 1.0)])
                                         for u in (solo_a, solo_b)])  # Kafka's own: 11 tokens each
    target_push.push_target(portal_cluster.pk, None)
    configs = scram_users(kafka_cluster, [a, b, solo_a, solo_b])
    time.sleep(3)  # the controller's callback reads the scope every second

    def burst(user: str, side: str) -> int:
        return _burst(kafka_cluster, user, configs[user]["sasl.password"], f"cmr-{tag}-{side}", 8)

    grouped = burst(a, "ga") + burst(b, "gb")
    alone = burst(solo_a, "sa") + burst(solo_b, "sb")
    again = burst(solo_a, "sa2")  # the same client's own bucket, about 3 tokens left
    print(f"16 topics created at once by two clients: the group's members refused {grouped}, two clients with "
          f"their own quota {alone}, one of them again {again}")
    assert again >= 3, f"Kafka's own bucket refuses past its tokens (strict mode reached): {again} of 8 refused"
    assert alone == 0, "each of Kafka's own buckets holds 8 topics"
    assert grouped >= 3, f"the members share one bucket of about 11 tokens: {grouped} of 16 refused"
