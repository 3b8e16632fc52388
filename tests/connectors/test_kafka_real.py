"""The Kafka connector against the project's real Apache Kafka 4.4 cluster (3 KRaft brokers, ``kafka_cluster``).

In KRaft, client quotas and dynamic configs live in the cluster's metadata log: one write through any broker
reaches every broker, except a broker's own configs, which only that broker takes. A push to a cluster target
(``broker_id`` None) is applied when every broker answers the new values from its own metadata; these tests ask
each broker themselves. Error answers are the ones Kafka really gives. Names are unique per test: the cluster is
shared by the whole test session. No Django database and no Redis here.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic

from engine.config import EntityRef
from kafka_wire import BROKER_RESOURCE, MATCH_EXACT, OP_SET, AdminClient
from quotas.connectors.base import Applied, Delta, Item, PushError, Target
from quotas.connectors.kafka import KafkaConnector
from tests.waiting import wait_for


def quota(key: str, **entity: str) -> Item:
    return Item("quota", EntityRef(**entity).field(), key)


def broker(key: str, broker_id: int | None = None) -> Item:
    return Item("broker", "" if broker_id is None else str(broker_id), key)


def delta(changes: dict[Item, str | None], *, version: int = 2, full: bool = False) -> Delta:
    return Delta(version=version, base=-1 if full else version - 1, full=full, changes=changes)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def connector() -> Iterator[KafkaConnector]:
    c = KafkaConnector(connect_timeout=5.0, request_timeout=15.0, client_id="portal-test", verify_timeout=20.0)
    yield c
    c.close()


@pytest.fixture
def cluster(kafka_cluster) -> Target:  # type: ignore[no-untyped-def]
    """The whole cluster, through its bootstrap servers."""
    return Target("real", None, kafka_cluster.bootstrap())


@pytest.fixture
def each_broker(kafka_cluster) -> list[Target]:  # type: ignore[no-untyped-def]
    """One target per broker, at its own address: what that broker answers from its own metadata."""
    return [Target("real", node.node_id, node.address("PLAINTEXT")) for node in kafka_cluster.nodes]


def held_by_each(connector: KafkaConnector, brokers: list[Target], items: list[Item]) -> list[dict[Item, str]]:
    """What each broker answers for ``items`` (absent = not held)."""
    wanted = {i: "" for i in items}
    out = []
    for target in brokers:
        _, state = connector.describe(target, wanted)
        out.append({i: state[i] for i in items if i in state})
    return out


def test_quotas_at_every_entity_level_reach_every_broker(
    connector: KafkaConnector, cluster: Target, each_broker: list[Target]
) -> None:
    u, c, ip = unique("user"), unique("client"), "10.77.0.7"
    levels = {
        quota("producer_byte_rate", user=u, client_id=c): "1048576.0",  # 1: user and client-id
        quota("consumer_byte_rate", user=u, client_id="<default>"): "2097152.0",  # 2: user, default client-id
        quota("request_percentage", user=u): "250.0",  # 3: user
        quota("producer_byte_rate", user="<default>", client_id=c): "524288.0",  # 4: default user, client-id
        quota("controller_mutation_rate", client_id=c): "10.0",  # 7: client-id
        quota("connection_creation_rate", ip=ip): "20.0",
    }

    applied = connector.apply(cluster, delta(levels, version=7))

    assert applied.changed is True and applied.version == 7
    assert applied.answers == {str(t.broker_id): "holds version 7" for t in each_broker}
    for held in held_by_each(connector, each_broker, list(levels)):
        assert held == levels
    # Kafka's own view of one entity, the default client-id named by a null name
    with AdminClient(each_broker[0].address) as client:
        response = client.describe_client_quotas([("user", MATCH_EXACT, u)], strict=False)
    found = {
        tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {v.key: v.value for v in entry.values}
        for entry in response.entries
    }
    assert found == {
        (("client-id", c), ("user", u)): {"producer_byte_rate": 1048576.0},
        (("client-id", None), ("user", u)): {"consumer_byte_rate": 2097152.0},
        (("user", u),): {"request_percentage": 250.0},
    }

    connector.apply(cluster, delta({item: None for item in levels}, version=8))
    for held in held_by_each(connector, each_broker, list(levels)):
        assert held == {}


def test_default_entities_and_the_default_ip_are_kafkas_null_names(
    connector: KafkaConnector, cluster: Target, each_broker: list[Target]
) -> None:
    """Values harmless to the other tests' clients, removed at the end."""
    defaults = {
        quota("request_percentage", user="<default>", client_id="<default>"): "100000.0",
        quota("controller_mutation_rate", client_id="<default>"): "100000.0",
        quota("connection_creation_rate", ip="<default>"): "100000.0",
    }
    try:
        connector.apply(cluster, delta(defaults, version=3))
        for held in held_by_each(connector, each_broker, list(defaults)):
            assert held == defaults
    finally:
        connector.apply(cluster, delta({item: None for item in defaults}, version=4))
    for held in held_by_each(connector, each_broker, list(defaults)):
        assert held == {}


def test_nothing_to_change_sends_nothing_and_still_holds_the_version(
    connector: KafkaConnector, cluster: Target
) -> None:
    applied = connector.apply(cluster, delta({}, version=4))
    assert applied.changed is False and applied.version == 4


def test_broker_configs_go_to_the_default_and_to_each_broker_itself(
    connector: KafkaConnector, cluster: Target, each_broker: list[Target]
) -> None:
    first, second = each_broker[0].broker_id, each_broker[1].broker_id
    changes = {
        broker("max.connections.per.ip"): "5000",  # the <default> broker: every broker inherits it
        broker("listener.name.plaintext.max.connection.creation.rate", first): "4000",
        broker("follower.replication.throttled.rate", second): "10485760",
    }
    try:
        applied = connector.apply(cluster, delta(changes, version=5))
        assert set(applied.answers) == {str(t.broker_id) for t in each_broker}
        for target, held in zip(each_broker, held_by_each(connector, each_broker, list(changes)), strict=True):
            own = {i: v for i, v in changes.items() if i.resource in ("", str(target.broker_id))}
            assert held == own  # a broker answers the default's configs and its own, not another broker's
    finally:
        connector.apply(cluster, delta({item: None for item in changes}, version=6))
    for held in held_by_each(connector, each_broker, list(changes)):
        assert held == {}


def test_a_broker_id_the_cluster_does_not_have_is_refused_before_anything_is_sent(
    connector: KafkaConnector, cluster: Target
) -> None:
    with pytest.raises(PushError) as raised:
        connector.apply(cluster, delta({broker("max.connections", 99): "10"}))
    assert (raised.value.code, raised.value.retriable) == ("INVALID_REQUEST", False)
    assert "no broker 99" in raised.value.message


def test_a_broker_refuses_another_brokers_config_sent_to_it(
    connector: KafkaConnector, each_broker: list[Target]
) -> None:
    """Why the connector sends a broker's own configs to that broker: KRaft refuses them elsewhere."""
    one, other = each_broker[0], each_broker[1]
    with pytest.raises(PushError) as raised:
        connector.apply(one, delta({broker("max.connections", other.broker_id): "10"}))
    assert raised.value.code == "INVALID_REQUEST"
    assert f"Unexpected broker id, expected {one.broker_id}, but received {other.broker_id}" in raised.value.message


def test_topic_and_client_metrics_configs(
    kafka_cluster,
    connector: KafkaConnector,
    cluster: Target,
    each_broker: list[Target],  # type: ignore[no-untyped-def]
) -> None:
    topic, subscription = unique("orders"), unique("producers")
    admin = ConfluentAdmin({"bootstrap.servers": kafka_cluster.bootstrap()})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=3)])[topic].result(30)
    changes = {
        Item("topic", topic, "leader.replication.throttled.replicas"): "*",
        Item("client-metrics", subscription, "metrics"): "org.apache.kafka.producer.",
        Item("client-metrics", subscription, "interval.ms"): "30000",
    }

    connector.apply(cluster, delta(changes, version=9))

    for held in held_by_each(connector, each_broker, list(changes)):
        assert held == changes
    connector.apply(cluster, delta({item: None for item in changes}, version=10))
    for held in held_by_each(connector, each_broker, list(changes)):
        assert held == {}
    admin.delete_topics([topic])[topic].result(30)


def test_describe_reports_only_the_configs_the_portal_manages(
    connector: KafkaConnector, cluster: Target, each_broker: list[Target]
) -> None:
    with AdminClient(each_broker[0].address) as client:
        client.incremental_alter_configs({(BROKER_RESOURCE, ""): [("log.cleaner.threads", OP_SET, "2")]})
    try:
        _, state = connector.describe(cluster, {})
        assert broker("log.cleaner.threads") not in state  # an operator's config: not the portal's business
        everything = KafkaConnector(managed=lambda item: True)
        try:
            _, all_configs = everything.describe(cluster, {})
        finally:
            everything.close()
        assert all_configs[broker("log.cleaner.threads")] == "2"
    finally:
        with AdminClient(each_broker[0].address) as client:
            client.incremental_alter_configs({(BROKER_RESOURCE, ""): [("log.cleaner.threads", 1, None)]})


def test_describe_of_a_topic_that_does_not_exist_is_empty(connector: KafkaConnector, cluster: Target) -> None:
    _, state = connector.describe(
        cluster, {Item("topic", unique("not-yet"), "leader.replication.throttled.replicas"): "*"}
    )
    assert not [i for i in state if i.kind == "topic"]


def test_a_full_push_removes_every_quota_and_managed_config_not_desired(
    connector: KafkaConnector, cluster: Target, each_broker: list[Target]
) -> None:
    """The cluster ends holding exactly the desired state (of what the portal manages), on every broker."""
    stale, kept = unique("stale"), unique("kept")
    connector.apply(
        cluster,
        delta(
            {quota("producer_byte_rate", user=stale): "1000.0", broker("max.connections.per.ip"): "3000"}, version=11
        ),
    )
    desired = {
        quota("producer_byte_rate", user=kept): "4000.0",
        broker("follower.replication.throttled.rate", each_broker[2].broker_id): "1000000",
    }

    applied = connector.apply(cluster, delta(desired, version=12, full=True))

    assert applied == Applied(True, 12, {str(t.broker_id): "holds version 12" for t in each_broker})
    for target in each_broker:
        _, state = connector.describe(target, {})
        own = {i: v for i, v in desired.items() if i.resource in ("", str(target.broker_id)) or i.kind == "quota"}
        assert state == own
    connector.apply(cluster, delta({}, version=13, full=True))
    assert connector.describe(cluster, {}) == (None, {})


# -- the errors Kafka answers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "code", "message", "retriable"),
    [
        (
            {quota("producer_byte_rate", user="u-fraction"): "1000.5"},
            "INVALID_REQUEST",
            "producer_byte_rate cannot be a fractional value.",
            False,
        ),
        (
            {quota("producer_byte_rate", user="u-zero"): "0.0"},
            "INVALID_REQUEST",
            "Quota producer_byte_rate must be greater than 0",
            False,
        ),
        ({quota("bogus_rate", user="u-key"): "10.0"}, "INVALID_REQUEST", "Invalid configuration key bogus_rate", False),
        (
            {broker("max.connections"): "many"},
            "INVALID_REQUEST",
            "Invalid value many for configuration max.connections: Not a number of type INT",
            False,
        ),
        (
            {Item("client-metrics", "too-often", "interval.ms"): "10"},
            "INVALID_REQUEST",
            "Invalid value 10 for interval.ms, interval must be between 100 and 3600000 (1 hour)",
            False,
        ),
        (  # the topic may yet be created: trying again can help
            {Item("topic", "no-such-topic-x", "leader.replication.throttled.replicas"): "*"},
            "UNKNOWN_TOPIC_OR_PARTITION",
            "The topic 'no-such-topic-x' does not exist.",
            True,
        ),
    ],
    ids=["fractional-long", "zero", "unknown-key", "not-an-int", "interval-out-of-range", "unknown-topic"],
)
def test_kafkas_error_answer_becomes_the_push_error(
    connector: KafkaConnector,
    cluster: Target,
    changes: dict[Item, str | None],
    code: str,
    message: str,
    retriable: bool,
) -> None:
    with pytest.raises(PushError) as raised:
        connector.apply(cluster, delta(changes))
    assert (raised.value.code, raised.value.message, raised.value.retriable) == (code, message, retriable)


def test_the_refused_entry_is_the_error_and_the_valid_ones_are_applied(
    connector: KafkaConnector, cluster: Target, each_broker: list[Target]
) -> None:
    good, bad = unique("good"), unique("bad")
    with pytest.raises(PushError) as raised:
        connector.apply(
            cluster,
            delta({quota("producer_byte_rate", user=bad): "10.5", quota("producer_byte_rate", user=good): "1000.0"}),
        )
    assert raised.value.code == "INVALID_REQUEST"
    # Kafka applies each entry on its own: the valid one arrives (an idempotent part; the retry re-sends it), on
    # each broker as soon as its metadata has the write
    item = quota("producer_byte_rate", user=good)
    wait_for(
        "the valid entry on every broker",
        lambda: held_by_each(connector, each_broker, [item]) == [{item: "1000.0"}] * 3,
        timeout=20,
    )
    connector.apply(cluster, delta({quota("producer_byte_rate", user=good): None}))


def test_validate_only_checks_without_changing_anything(each_broker: list[Target]) -> None:
    user = unique("validate")
    with AdminClient(each_broker[0].address) as client:
        fine = client.alter_client_quotas([({"user": user}, {"producer_byte_rate": 1000.0})], validate_only=True)
        refused = client.alter_client_quotas([({"user": user}, {"producer_byte_rate": 0.5})], validate_only=True)
        held = client.describe_client_quotas([("user", MATCH_EXACT, user)], strict=True)
    assert [e.error_code for e in fine.entries] == [0]
    assert [e.error_code for e in refused.entries] == [42]  # INVALID_REQUEST
    assert held.entries == []
