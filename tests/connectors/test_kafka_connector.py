"""The Kafka connector's faults that a real broker cannot be made to show, against a broker double that speaks
Kafka's wire protocol (tests/connectors/kafka_responder): a connection dropped mid-request, a broker that accepts
a request and never answers, an error answer to a describe on demand, brokers of older API versions (ApiVersions
negotiation and fallback, an API the broker lacks), and one kept connection serving many pushes (counted by the
double). Everything a real broker shows (the requests' effects, its error answers, describe) is tested against
the project's real Apache Kafka in tests/connectors/test_kafka_real.py.

No Django database and no Redis here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.config import EntityRef
from kafka_wire import (
    ALTER_CLIENT_QUOTAS,
    API_VERSIONS,
    DESCRIBE_CLIENT_QUOTAS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    AdminClient,
)
from quotas.connectors.base import Delta, Item, PushError, Target
from quotas.connectors.kafka import KafkaConnector
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


# -- errors a broker cannot be made to give -------------------------------------------------------------------------


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
