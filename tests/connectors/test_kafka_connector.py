"""The Kafka connector, against a broker double that speaks Kafka's wire protocol (tests/connectors/kafka_responder).

What the connector sends is asserted on the requests as the double decoded them, i.e. as a broker reads them.
No Django database and no Redis here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from quotas.connectors.base import Applied, Delta, Item, PushError, Target
from quotas.connectors.kafka import KafkaConnector
from quotas.connectors.kafka_client import (
    ALTER_CLIENT_QUOTAS,
    API_VERSIONS,
    BROKER_RESOURCE,
    CLIENT_METRICS_RESOURCE,
    DESCRIBE_CLIENT_QUOTAS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    OP_DELETE,
    OP_SET,
    TOPIC_RESOURCE,
    AdminClient,
)
from quotas.engine.config import EntityRef
from tests.connectors.kafka_responder import KafkaResponder

BROKER_ID = 1
POLICY_VIOLATION, REQUEST_TIMED_OUT, INVALID_REQUEST = 44, 7, 42


def quota(key: str, **entity: str) -> Item:
    """A quota item the way the portal names it: ``quota("producer_byte_rate", user="alice", client_id="app")``."""
    return Item("quota", EntityRef(**entity).field(), key)


def broker(key: str, broker_id: int | None = None) -> Item:
    return Item("broker", "" if broker_id is None else str(broker_id), key)


def delta(changes: dict[Item, str | None], *, version: int = 2, full: bool = False) -> Delta:
    return Delta(version=version, base=-1 if full else version - 1, full=full, changes=changes)


def entries(request: object) -> list[tuple[dict[str, str | None], dict[str, float | None]]]:
    """An AlterClientQuotas request as (entity type -> name, key -> value or None for remove) pairs."""
    return [
        (
            {e.entity_type: e.entity_name for e in entry.entity},
            {op.key: None if op.remove else op.value for op in entry.ops},
        )
        for entry in request.entries  # type: ignore[attr-defined]
    ]


def resources(request: object) -> dict[tuple[int, str], list[tuple[str, int, str | None]]]:
    """An IncrementalAlterConfigs request as (resource type, name) -> [(config, op, value)]."""
    return {
        (r.resource_type, r.resource_name): [(c.name, c.config_operation, c.value) for c in r.configs]
        for r in request.resources  # type: ignore[attr-defined]
    }


@pytest.fixture
def responder() -> Iterator[KafkaResponder]:
    with KafkaResponder(broker_id=BROKER_ID, topics={"orders", "payments"}) as r:
        yield r
    assert r.errors == []


@pytest.fixture
def connector() -> Iterator[KafkaConnector]:
    c = KafkaConnector(connect_timeout=1.0, request_timeout=1.0, client_id="portal-test")
    yield c
    c.close()


@pytest.fixture
def target(responder: KafkaResponder) -> Target:
    return Target("main", BROKER_ID, responder.address)


# -- the Connector contract ---------------------------------------------------------------------------------------


def test_kafka_needs_the_portal_lock_and_does_not_store_our_version(connector: KafkaConnector, target: Target) -> None:
    assert connector.needs_lock is True
    assert connector.applied_version(target) is None


# -- quotas -------------------------------------------------------------------------------------------------------


def test_quotas_go_as_alter_client_quotas_entries(
    responder: KafkaResponder, connector: KafkaConnector, target: Target
) -> None:
    applied = connector.apply(
        target,
        delta(
            {
                quota("producer_byte_rate", user="alice", client_id="app"): "1048576.0",
                quota("consumer_byte_rate", user="alice", client_id="app"): "2097152.0",
                quota("request_percentage", user="<default>"): "25.5",
                quota("controller_mutation_rate", user="bob", client_id="<default>"): "10.0",
                quota("connection_creation_rate", ip="10.0.0.7"): "20.0",
                quota("connection_creation_rate", ip="<default>"): "100.0",
            },
            version=7,
        ),
    )

    assert applied == Applied(changed=True, version=7)
    [request] = responder.requests_of(ALTER_CLIENT_QUOTAS)
    assert request.validate_only is False
    assert sorted(entries(request), key=repr) == sorted(
        [
            ({"client-id": "app", "user": "alice"}, {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0}),
            ({"user": None}, {"request_percentage": 25.5}),  # Kafka's default entity: a null name
            ({"client-id": None, "user": "bob"}, {"controller_mutation_rate": 10.0}),
            ({"ip": "10.0.0.7"}, {"connection_creation_rate": 20.0}),
            ({"ip": None}, {"connection_creation_rate": 100.0}),
        ],
        key=repr,
    )
    assert responder.quota({"user": "alice", "client-id": "app"}) == {
        "producer_byte_rate": 1048576.0,
        "consumer_byte_rate": 2097152.0,
    }
    assert responder.quota({"user": None}) == {"request_percentage": 25.5}


def test_a_deleted_quota_goes_as_a_remove_op(
    responder: KafkaResponder, connector: KafkaConnector, target: Target
) -> None:
    responder.set_quota({"user": "alice"}, "producer_byte_rate", 1000)
    responder.set_quota({"user": "alice"}, "consumer_byte_rate", 2000)

    connector.apply(target, delta({quota("producer_byte_rate", user="alice"): None}))

    [request] = responder.requests_of(ALTER_CLIENT_QUOTAS)
    [(entity, ops)] = entries(request)
    assert entity == {"user": "alice"}
    assert ops == {"producer_byte_rate": None}
    assert request.entries[0].ops[0].remove is True
    assert responder.quota({"user": "alice"}) == {"consumer_byte_rate": 2000.0}


def test_nothing_to_change_sends_nothing(responder: KafkaResponder, connector: KafkaConnector, target: Target) -> None:
    assert connector.apply(target, delta({}, version=4)) == Applied(changed=False, version=4)
    assert responder.requests == []


# -- configs ------------------------------------------------------------------------------------------------------


def test_configs_go_as_incremental_alter_configs_with_kafka_resource_types(
    responder: KafkaResponder, connector: KafkaConnector, target: Target
) -> None:
    responder.set_config(BROKER_RESOURCE, "1", "follower.replication.throttled.rate", "5000")

    connector.apply(
        target,
        delta(
            {
                broker("max.connections"): "500",  # the default broker: resource name ""
                broker("listener.name.internal.max.connections", BROKER_ID): "50",
                broker("follower.replication.throttled.rate", BROKER_ID): None,
                Item("topic", "orders", "leader.replication.throttled.replicas"): "0:1,1:2",
                Item("client-metrics", "producers", "metrics"): "org.apache.kafka.producer.",
                Item("client-metrics", "producers", "interval.ms"): "30000",
            }
        ),
    )

    [request] = responder.requests_of(INCREMENTAL_ALTER_CONFIGS)
    assert request.validate_only is False
    assert resources(request) == {
        (BROKER_RESOURCE, ""): [("max.connections", OP_SET, "500")],
        (BROKER_RESOURCE, "1"): [
            ("follower.replication.throttled.rate", OP_DELETE, None),
            ("listener.name.internal.max.connections", OP_SET, "50"),
        ],
        (TOPIC_RESOURCE, "orders"): [("leader.replication.throttled.replicas", OP_SET, "0:1,1:2")],
        (CLIENT_METRICS_RESOURCE, "producers"): [
            ("interval.ms", OP_SET, "30000"),
            ("metrics", OP_SET, "org.apache.kafka.producer."),
        ],
    }
    assert (BROKER_RESOURCE, TOPIC_RESOURCE, CLIENT_METRICS_RESOURCE) == (4, 2, 16)  # Kafka's resource types
    assert responder.config(BROKER_RESOURCE, "1") == {"listener.name.internal.max.connections": "50"}
    assert responder.config(CLIENT_METRICS_RESOURCE, "producers") == {
        "metrics": "org.apache.kafka.producer.",
        "interval.ms": "30000",
    }
    assert responder.requests_of(ALTER_CLIENT_QUOTAS) == []  # no quota in the delta: no AlterClientQuotas


# -- full pushes --------------------------------------------------------------------------------------------------


def test_a_full_push_removes_every_quota_and_managed_config_not_desired(
    responder: KafkaResponder, connector: KafkaConnector, target: Target
) -> None:
    responder.set_quota({"user": "alice"}, "producer_byte_rate", 1000)
    responder.set_quota({"user": "alice"}, "consumer_byte_rate", 2000)  # not desired
    responder.set_quota({"user": "mallory", "client-id": "x"}, "request_percentage", 50)  # not desired
    responder.set_quota({"ip": None}, "connection_creation_rate", 10)  # not desired
    responder.set_config(BROKER_RESOURCE, "", "max.connections", "100")  # not desired
    responder.set_config(BROKER_RESOURCE, "", "log.cleaner.threads", "2")  # not the portal's: kept
    responder.set_config(BROKER_RESOURCE, "1", "leader.replication.throttled.rate", "1000")
    responder.set_config(TOPIC_RESOURCE, "orders", "follower.replication.throttled.replicas", "*")  # not desired
    responder.set_config(TOPIC_RESOURCE, "orders", "retention.ms", "1000")  # not the portal's: kept
    desired = {
        quota("producer_byte_rate", user="alice"): "4000.0",
        broker("leader.replication.throttled.rate", BROKER_ID): "1000",
        broker("max.connections.per.ip"): "20",
        Item("topic", "orders", "leader.replication.throttled.replicas"): "*",
    }

    connector.apply(target, delta(desired, version=9, full=True))

    # The target was read first (what it holds), then altered once per API.
    kinds = [r.API_KEY for r in responder.requests if r.API_KEY != API_VERSIONS]
    assert kinds == [DESCRIBE_CLIENT_QUOTAS, DESCRIBE_CONFIGS, ALTER_CLIENT_QUOTAS, INCREMENTAL_ALTER_CONFIGS]
    [alter] = responder.requests_of(ALTER_CLIENT_QUOTAS)
    assert sorted(entries(alter), key=repr) == sorted(
        [
            ({"ip": None}, {"connection_creation_rate": None}),
            ({"user": "alice"}, {"consumer_byte_rate": None, "producer_byte_rate": 4000.0}),
            ({"client-id": "x", "user": "mallory"}, {"request_percentage": None}),
        ],
        key=repr,
    )
    assert responder.quotas == {(("user", "alice"),): {"producer_byte_rate": 4000.0}}
    assert responder.config(BROKER_RESOURCE, "") == {"max.connections.per.ip": "20", "log.cleaner.threads": "2"}
    assert responder.config(BROKER_RESOURCE, "1") == {"leader.replication.throttled.rate": "1000"}
    assert responder.config(TOPIC_RESOURCE, "orders") == {
        "leader.replication.throttled.replicas": "*",
        "retention.ms": "1000",
    }
    assert connector.describe(target, desired) == (None, desired)


def test_a_full_push_of_nothing_empties_the_target(
    responder: KafkaResponder, connector: KafkaConnector, target: Target
) -> None:
    responder.set_quota({"client-id": "app"}, "producer_byte_rate", 1000)
    responder.set_config(BROKER_RESOURCE, "1", "max.connection.creation.rate", "30")

    assert connector.apply(target, delta({}, version=3, full=True)) == Applied(changed=True, version=3)

    assert responder.quotas == {}
    assert responder.configs == {}


# -- describe -----------------------------------------------------------------------------------------------------


def test_describe_returns_the_quotas_and_dynamic_configs_the_broker_holds(
    responder: KafkaResponder, connector: KafkaConnector, target: Target
) -> None:
    responder.set_quota({"user": "alice", "client-id": "app"}, "producer_byte_rate", 1024)
    responder.set_quota({"user": None}, "request_percentage", 12.5)
    responder.set_quota({"ip": "10.0.0.7"}, "connection_creation_rate", 3)
    responder.set_config(BROKER_RESOURCE, "", "max.connections.per.ip", "20")
    responder.set_config(BROKER_RESOURCE, "1", "listener.name.EXTERNAL.max.connection.creation.rate", "7")
    responder.set_config(TOPIC_RESOURCE, "orders", "leader.replication.throttled.replicas", "0:1")
    responder.set_config(TOPIC_RESOURCE, "payments", "leader.replication.throttled.replicas", "0:2")  # not asked
    responder.set_config(CLIENT_METRICS_RESOURCE, "producers", "interval.ms", "60000")
    desired = {
        Item("topic", "orders", "follower.replication.throttled.replicas"): "*",
        Item("client-metrics", "producers", "metrics"): "org.apache.kafka.",
    }

    version, state = connector.describe(target, desired)

    assert version is None
    # The broker also reports its static max.connections (1000) and Kafka's defaults: they are not dynamic.
    assert state == {
        quota("producer_byte_rate", user="alice", client_id="app"): "1024.0",
        quota("request_percentage", user="<default>"): "12.5",
        quota("connection_creation_rate", ip="10.0.0.7"): "3.0",
        broker("max.connections.per.ip"): "20",
        broker("listener.name.EXTERNAL.max.connection.creation.rate", BROKER_ID): "7",
        Item("topic", "orders", "leader.replication.throttled.replicas"): "0:1",
        Item("client-metrics", "producers", "interval.ms"): "60000",
    }
    [quotas_request] = responder.requests_of(DESCRIBE_CLIENT_QUOTAS)
    assert quotas_request.components == [] and quotas_request.strict is False  # every entity
    [configs_request] = responder.requests_of(DESCRIBE_CONFIGS)
    assert [(r.resource_type, r.resource_name, r.configuration_keys) for r in configs_request.resources] == [
        (BROKER_RESOURCE, "", None),
        (BROKER_RESOURCE, "1", None),
        (TOPIC_RESOURCE, "orders", None),
        (CLIENT_METRICS_RESOURCE, "producers", None),
    ]


def test_describe_reports_only_the_configs_the_portal_manages(
    responder: KafkaResponder, connector: KafkaConnector, target: Target
) -> None:
    responder.set_config(BROKER_RESOURCE, "", "log.cleaner.threads", "2")
    responder.set_config(BROKER_RESOURCE, "1", "max.connections", "300")
    responder.set_config(TOPIC_RESOURCE, "orders", "retention.ms", "1000")

    _, state = connector.describe(target, {Item("topic", "orders", "leader.replication.throttled.replicas"): "*"})

    assert state == {broker("max.connections", BROKER_ID): "300"}


def test_describe_all_dynamic_configs_when_the_connector_manages_every_key(
    responder: KafkaResponder, target: Target
) -> None:
    responder.set_config(BROKER_RESOURCE, "", "log.cleaner.threads", "2")
    with_all = KafkaConnector(connect_timeout=1.0, request_timeout=1.0, managed=lambda item: True)
    try:
        _, state = with_all.describe(target, {})
    finally:
        with_all.close()
    assert state == {broker("log.cleaner.threads"): "2"}  # the static max.connections is still not reported


def test_describe_of_a_topic_that_does_not_exist_is_empty(connector: KafkaConnector, target: Target) -> None:
    assert connector.describe(target, {Item("topic", "not-yet", "leader.replication.throttled.replicas"): "*"}) == (
        None,
        {},
    )


# -- errors the broker answers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "error_code", "message", "code", "expected_message", "retriable"),
    [
        (
            ALTER_CLIENT_QUOTAS,
            INVALID_REQUEST,
            "Unknown quota entity",
            "INVALID_REQUEST",
            "Unknown quota entity",
            False,
        ),
        (
            INCREMENTAL_ALTER_CONFIGS,
            POLICY_VIOLATION,
            None,
            "POLICY_VIOLATION",
            "Request parameters do not satisfy the configured policy.",  # no broker message: the error's description
            False,
        ),
        (ALTER_CLIENT_QUOTAS, REQUEST_TIMED_OUT, "controller busy", "REQUEST_TIMED_OUT", "controller busy", True),
        (INCREMENTAL_ALTER_CONFIGS, REQUEST_TIMED_OUT, None, "REQUEST_TIMED_OUT", None, True),
    ],
)
def test_an_error_code_becomes_a_push_error_with_kafkas_name(
    responder: KafkaResponder,
    connector: KafkaConnector,
    target: Target,
    api_key: int,
    error_code: int,
    message: str | None,
    code: str,
    expected_message: str | None,
    retriable: bool,
) -> None:
    responder.fail_next(api_key, error_code, message)

    with pytest.raises(PushError) as raised:
        connector.apply(target, delta({quota("producer_byte_rate", user="a"): "10.0", broker("max.connections"): "9"}))

    assert raised.value.code == code
    assert raised.value.retriable is retriable
    assert raised.value.needs_full is False
    if expected_message is not None:
        assert raised.value.message == expected_message
    else:
        assert raised.value.message  # the error's description
    # The fault is spent: the same push goes through on retry.
    connector.apply(target, delta({quota("producer_byte_rate", user="a"): "10.0", broker("max.connections"): "9"}))
    assert responder.quota({"user": "a"}) == {"producer_byte_rate": 10.0}


def test_the_first_refused_entry_is_the_error_and_the_others_are_applied(
    responder: KafkaResponder, connector: KafkaConnector, target: Target
) -> None:
    with pytest.raises(PushError) as raised:
        connector.apply(
            target,
            delta(
                {
                    quota("producer_byte_rate", user="alice"): "1000.5",  # a LONG: Kafka refuses a fraction
                    quota("producer_byte_rate", user="bob"): "1000.0",
                }
            ),
        )

    assert raised.value.code == "INVALID_REQUEST"
    assert "producer_byte_rate" in raised.value.message
    assert raised.value.retriable is False
    assert responder.quota({"user": "bob"}) == {"producer_byte_rate": 1000.0}  # an idempotent part was applied
    assert responder.quota({"user": "alice"}) == {}


def test_a_config_of_another_broker_is_refused_by_this_one(
    responder: KafkaResponder, connector: KafkaConnector, target: Target
) -> None:
    with pytest.raises(PushError) as raised:
        connector.apply(target, delta({broker("max.connections", broker_id=2): "10"}))

    assert raised.value.code == "INVALID_REQUEST"
    assert "Unexpected broker id" in raised.value.message
    assert responder.configs == {}


def test_a_describe_error_becomes_a_push_error(
    responder: KafkaResponder, connector: KafkaConnector, target: Target
) -> None:
    responder.fail_next(DESCRIBE_CLIENT_QUOTAS, REQUEST_TIMED_OUT, "slow")

    with pytest.raises(PushError) as raised:
        connector.describe(target, {})

    assert (raised.value.code, raised.value.message, raised.value.retriable) == ("REQUEST_TIMED_OUT", "slow", True)


def test_a_malformed_item_is_refused_before_anything_is_sent(
    responder: KafkaResponder, connector: KafkaConnector, target: Target
) -> None:
    for bad in (
        {quota("producer_byte_rate", user="a"): "fast"},
        {Item("quota", "not json", "producer_byte_rate"): "1.0"},
        {Item("broker", "leader", "max.connections"): "1"},
        {Item("acl", "x", "y"): "1"},
    ):
        with pytest.raises(PushError) as raised:
            connector.apply(target, delta(bad))
        assert (raised.value.code, raised.value.retriable) == ("INVALID_REQUEST", False)
    assert responder.requests == []


# -- the connection -----------------------------------------------------------------------------------------------


def test_a_dropped_connection_is_retriable_and_the_next_push_reconnects(
    responder: KafkaResponder, connector: KafkaConnector, target: Target
) -> None:
    responder.drop_next(ALTER_CLIENT_QUOTAS)
    change = delta({quota("consumer_byte_rate", client_id="app"): "5000.0"})

    with pytest.raises(PushError) as raised:
        connector.apply(target, change)

    assert (raised.value.code, raised.value.retriable) == ("NETWORK_EXCEPTION", True)
    assert responder.quota({"client-id": "app"}) == {}
    connector.apply(target, change)
    assert responder.quota({"client-id": "app"}) == {"consumer_byte_rate": 5000.0}
    assert responder.connections_accepted == 2


def test_a_refused_connection_is_retriable(
    responder: KafkaResponder, connector: KafkaConnector, target: Target
) -> None:
    responder.refuse_connections()
    change = delta({quota("consumer_byte_rate", client_id="app"): "5000.0"})

    with pytest.raises(PushError) as raised:
        connector.apply(target, change)
    assert (raised.value.code, raised.value.retriable) == ("NETWORK_EXCEPTION", True)

    responder.accept_connections()  # the broker is back
    connector.apply(target, change)
    assert responder.quota({"client-id": "app"}) == {"consumer_byte_rate": 5000.0}


def test_a_broker_going_down_between_pushes_is_retriable(
    responder: KafkaResponder, connector: KafkaConnector, target: Target
) -> None:
    connector.apply(target, delta({quota("consumer_byte_rate", client_id="app"): "1.0"}))
    responder.refuse_connections()  # drops the connection the connector keeps, too

    with pytest.raises(PushError) as raised:
        connector.apply(target, delta({quota("consumer_byte_rate", client_id="app"): "2.0"}))
    assert (raised.value.code, raised.value.retriable) == ("NETWORK_EXCEPTION", True)


def test_no_answer_within_the_request_timeout_is_retriable(responder: KafkaResponder, target: Target) -> None:
    responder.hang_next(INCREMENTAL_ALTER_CONFIGS)
    impatient = KafkaConnector(connect_timeout=1.0, request_timeout=0.2)
    try:
        with pytest.raises(PushError) as raised:
            impatient.apply(target, delta({broker("max.connections"): "10"}))
    finally:
        impatient.close()

    assert (raised.value.code, raised.value.retriable) == ("REQUEST_TIMED_OUT", True)


def test_one_connection_serves_many_pushes(
    responder: KafkaResponder, connector: KafkaConnector, target: Target
) -> None:
    for version in range(2, 5):
        connector.apply(target, delta({quota("producer_byte_rate", user="a"): f"{version}000.0"}, version=version))
    connector.describe(target, {})

    assert responder.connections_accepted == 1
    assert len(responder.requests_of(API_VERSIONS)) == 1
    assert [r.header.client_id for r in responder.requests] == ["portal-test"] * len(responder.requests)


# -- version negotiation ------------------------------------------------------------------------------------------


def test_each_api_is_spoken_at_the_highest_version_both_sides_support(target: Target) -> None:
    older = {
        ALTER_CLIENT_QUOTAS: (0, 0),
        DESCRIBE_CLIENT_QUOTAS: (0, 0),
        INCREMENTAL_ALTER_CONFIGS: (0, 0),
        DESCRIBE_CONFIGS: (0, 2),
    }
    with KafkaResponder(broker_id=BROKER_ID, api_versions=older) as responder:
        connector = KafkaConnector(connect_timeout=1.0, request_timeout=1.0)
        try:
            old_target = Target("old", BROKER_ID, responder.address)
            connector.apply(
                old_target, delta({quota("producer_byte_rate", user="a"): "1.0", broker("max.connections"): "5"})
            )
            connector.describe(old_target, {})
        finally:
            connector.close()
        versions = {r.API_KEY: r.header.request_api_version for r in responder.requests}
        assert versions == {
            API_VERSIONS: 4,
            ALTER_CLIENT_QUOTAS: 0,
            INCREMENTAL_ALTER_CONFIGS: 0,
            DESCRIBE_CLIENT_QUOTAS: 0,
            DESCRIBE_CONFIGS: 2,
        }
        assert responder.quota({"user": "a"}) == {"producer_byte_rate": 1.0}
        assert responder.errors == []

    with KafkaResponder(broker_id=BROKER_ID) as responder:  # a current broker: the newest versions we know
        with AdminClient(responder.address, connect_timeout=1.0, request_timeout=1.0) as client:
            assert [client.api_version(k) for k in (49, 48, 44, 32)] == [1, 1, 1, 4]


def test_an_older_api_versions_is_retried_at_the_version_the_broker_names() -> None:
    with KafkaResponder(api_versions={API_VERSIONS: (0, 2)}) as responder:
        with AdminClient(responder.address, connect_timeout=1.0, request_timeout=1.0) as client:
            assert client.api_version(ALTER_CLIENT_QUOTAS) == 1
        assert responder.unsupported == [(API_VERSIONS, 4)]  # answered UNSUPPORTED_VERSION with its range
        assert [r.header.request_api_version for r in responder.requests_of(API_VERSIONS)] == [2]


@pytest.mark.parametrize("versions", [None, (2, 3)], ids=["not-supported", "no-common-version"])
def test_an_api_the_broker_cannot_speak_fails_clearly(versions: tuple[int, int] | None) -> None:
    with KafkaResponder(api_versions={ALTER_CLIENT_QUOTAS: versions}) as responder:
        connector = KafkaConnector(connect_timeout=1.0, request_timeout=1.0)
        try:
            with pytest.raises(PushError) as raised:
                connector.apply(Target("c", 1, responder.address), delta({quota("producer_byte_rate", user="a"): "1"}))
        finally:
            connector.close()
        assert (raised.value.code, raised.value.retriable) == ("UNSUPPORTED_VERSION", False)
        assert "AlterClientQuotas" in raised.value.message
        assert responder.requests_of(ALTER_CLIENT_QUOTAS) == []


# -- the double's DescribeClientQuotas filter, as Kafka matches --------------------------------------------------


def test_describe_client_quotas_filters_like_kafka(responder: KafkaResponder) -> None:
    responder.set_quota({"user": "alice"}, "producer_byte_rate", 1)
    responder.set_quota({"user": "alice", "client-id": "app"}, "producer_byte_rate", 2)
    responder.set_quota({"user": None}, "producer_byte_rate", 3)
    responder.set_quota({"user": None, "client-id": "app"}, "producer_byte_rate", 4)
    responder.set_quota({"ip": "10.0.0.1"}, "connection_creation_rate", 5)

    def values(components: list[tuple[str, int, str | None]], strict: bool = False) -> list[float]:
        with AdminClient(responder.address, connect_timeout=1.0, request_timeout=1.0) as client:
            response = client.describe_client_quotas(components, strict=strict)
        assert response.error_code == 0, response.error_message
        return sorted(v.value for entry in response.entries for v in entry.values)

    assert values([]) == [1, 2, 3, 4, 5]
    assert values([("user", MATCH_EXACT, "alice")]) == [1, 2]
    assert values([("user", MATCH_EXACT, "alice")], strict=True) == [1]
    assert values([("user", MATCH_DEFAULT, None)]) == [3, 4]
    assert values([("user", MATCH_SPECIFIED, None), ("client-id", MATCH_EXACT, "app")]) == [2, 4]
    assert values([("user", MATCH_SPECIFIED, None)], strict=True) == [1, 3]
    assert values([("ip", MATCH_SPECIFIED, None)]) == [5]
    with AdminClient(responder.address, connect_timeout=1.0, request_timeout=1.0) as client:
        refused = client.describe_client_quotas([("ip", MATCH_DEFAULT, None), ("user", MATCH_DEFAULT, None)])
    assert refused.error_code == INVALID_REQUEST and refused.entries is None
