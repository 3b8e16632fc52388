"""Entities in words (``engine.entities.display_name``): one form for Kafka's eight (user, client-id) levels,
the ip levels, a sensor's tags and a config path, so the pages, the heat map, the mails and the API agree."""

from __future__ import annotations

import pytest

from engine.entities import (
    DEFAULT,
    PRECEDENCE,
    display_name,
    display_path,
    display_tags,
    entity_path,
    level_entity,
    path_entity,
    tags_entity,
)

#: Kafka's precedence levels for the principal svc-a and the client-id app, in words.
LEVELS = {
    1: "svc-a, client-id app",
    2: "svc-a, <default> client-id",
    3: "svc-a (all client-ids)",
    4: "<default> principal, client-id app",
    5: "<default> principal, <default> client-id",
    6: "<default> principal",
    7: "client-id app (any principal)",
    8: "<default> client-id",
}


@pytest.mark.parametrize("level", range(1, len(PRECEDENCE) + 1))
def test_every_level_has_its_words_and_a_path_says_the_same(level: int) -> None:
    e = level_entity(level, "svc-a", "app")
    assert display_name(e.user, e.client_id) == LEVELS[level]
    path = entity_path(e.user, e.client_id)
    assert path_entity(path) == (e.user, e.client_id, None)
    assert display_path(path) == LEVELS[level]  # what an audit entry or a drift row names reads the same


def test_every_level_reads_differently() -> None:
    assert len(set(LEVELS.values())) == len(PRECEDENCE)


@pytest.mark.parametrize(
    ("tags", "words"),
    [
        ("svc-payments-api:", "svc-payments-api (all client-ids)"),
        (":search-admin", "client-id search-admin (any principal)"),
        (":1", "client-id 1 (any principal)"),  # a numeric client-id is a client-id, not a number
        (":2", "client-id 2 (any principal)"),
        ("ANONYMOUS:", "anonymous (PLAINTEXT listener)"),  # Kafka's principal of an unauthenticated connection
        ("ANONYMOUS:legacy-reporting", "anonymous (PLAINTEXT listener), client-id legacy-reporting"),
        ("svc%40corp:app,1", "svc@corp, client-id app,1"),  # the user part of tags is sanitized
        (":", "empty client-id (any principal)"),
        ("ip:10.0.0.9", "ip 10.0.0.9"),  # the monitor's connection sensors
        ("listener:PLAINTEXT", "listener PLAINTEXT"),
        ("group@payments:", "group payments"),  # the sensor a quota group's members share
        ("group@payments:app", "group@payments, client-id app"),  # not a group's: it names a client-id
    ],
)
def test_a_sensors_tags_read_as_the_entity_they_are_named_for(tags: str, words: str) -> None:
    assert display_tags(tags) == words


def test_tags_name_an_entity_and_ips_and_other_paths() -> None:
    assert tags_entity("svc%40corp:") == ("svc@corp", None) and tags_entity(":") == (None, "")
    assert display_name(ip="10.0.0.1") == "ip 10.0.0.1" and display_name(ip=DEFAULT) == "<default> ip"
    assert display_path("/config/ips/<default>") == "<default> ip"
    assert display_path("/config/brokers/1") == "/config/brokers/1"  # not an entity: the path as it is
    assert display_name(DEFAULT, None) == "<default> principal"
