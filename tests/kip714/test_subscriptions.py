"""Subscriptions are validated as Kafka's ClientMetricsConfigs.validate: same rules, same messages."""

from __future__ import annotations

import pytest

from engine.errors import QuotaValidationError
from kip714 import (
    InvalidSubscriptionConfig,
    InvalidSubscriptionRequest,
    SubscriptionConfigTypeError,
    canonical_configs,
    validate_subscription,
)


def test_a_full_subscription_parses_and_has_a_canonical_text_form() -> None:
    sub = validate_subscription(
        "producers",
        {
            "metrics": " org.apache.kafka.producer. , org.apache.kafka.client.",
            "interval.ms": " 30000 ",
            "match": "client_software_name = apache-kafka-java,client_software_version=3.5.*",
        },
    )
    assert sub.metrics == ("org.apache.kafka.producer.", "org.apache.kafka.client.")
    assert sub.interval_ms == 30000
    assert sub.to_configs() == {
        "metrics": "org.apache.kafka.producer.,org.apache.kafka.client.",
        "interval.ms": "30000",
        "match": "client_software_name=apache-kafka-java,client_software_version=3.5.*",
    }


def test_defaults_no_metrics_five_minutes_every_client() -> None:
    sub = validate_subscription("s", {"metrics": ""})
    assert (sub.metrics, sub.interval_ms, sub.match) == ((), 300000, ())
    assert sub.matches({"client_id": "anything"})
    assert canonical_configs("s", {"metrics": "*"}) == {"metrics": "*", "interval.ms": "300000", "match": ""}


def test_empty_configs_mean_delete() -> None:
    assert validate_subscription("s", {}).deleted
    assert canonical_configs("s", {}) == {}


def test_name_must_not_be_empty() -> None:
    with pytest.raises(InvalidSubscriptionRequest, match="^Subscription name can't be empty$") as e:
        validate_subscription("", {"metrics": "*"})
    assert e.value.code == "INVALID_REQUEST"


def test_unknown_key_is_invalid_request_with_kafkas_message() -> None:
    with pytest.raises(InvalidSubscriptionRequest) as e:
        validate_subscription("sub-1", {"random": "random"})
    assert e.value.message == "Unknown client metrics configuration: random"
    assert e.value.code == "INVALID_REQUEST"
    assert e.value.java_class == "InvalidRequestException"
    assert isinstance(e.value, QuotaValidationError)


@pytest.mark.parametrize("interval", ["100", "3600000", "300000"])
def test_interval_bounds_are_inclusive(interval: str) -> None:
    assert validate_subscription("s", {"interval.ms": interval}).interval_ms == int(interval)


@pytest.mark.parametrize("interval", ["99", "3600001", "0", "-1"])
def test_interval_out_of_range_is_rejected(interval: str) -> None:
    with pytest.raises(InvalidSubscriptionRequest) as e:
        validate_subscription("s", {"interval.ms": interval})
    assert e.value.message == (
        f"Invalid value {interval} for interval.ms, interval must be between 100 and 3600000 (1 hour)"
    )


@pytest.mark.parametrize("interval", ["abc", "1.5", "", "2147483648"])
def test_interval_that_is_not_an_int_is_a_config_error(interval: str) -> None:
    with pytest.raises(SubscriptionConfigTypeError) as e:
        validate_subscription("s", {"interval.ms": interval})
    assert e.value.code == "INVALID_CONFIG"
    assert e.value.message == f"Invalid value {interval} for configuration interval.ms: Not a number of type INT"


@pytest.mark.parametrize(
    "match",
    ["client_id", "client_id=", "client_id=a=b", "=x", "hostname=x", "client_id=[unclosed", "client_id=a,,"],
)
def test_malformed_match_entries_are_rejected(match: str) -> None:
    with pytest.raises(InvalidSubscriptionConfig) as e:
        validate_subscription("s", {"match": match})
    assert e.value.code == "INVALID_CONFIG"
    assert e.value.message.startswith("Illegal client matching pattern: ")


def test_match_regexes_must_match_the_whole_attribute() -> None:
    sub = validate_subscription("s", {"match": "client_id=prod-.*,client_software_version=3\\.5\\..*"})
    assert sub.matches({"client_id": "prod-1", "client_software_version": "3.5.2"})
    assert not sub.matches({"client_id": "x-prod-1", "client_software_version": "3.5.2"})
    assert not sub.matches({"client_id": "prod-1", "client_software_version": None})


# ------------------------------------------------------------------ ClientMetricsInstanceMetadata.isMatch


def _client(**overrides: str | None) -> dict[str, str | None]:
    """The six attributes Kafka's metadata map holds for a client (ClientMetricsTestUtils.requestContext)."""
    attrs: dict[str, str | None] = {
        "client_instance_id": "vLlZ-sdZRAi4qNcYQMvFNw", "client_id": "producer-1",
        "client_software_name": "apache-kafka-java", "client_software_version": "3.5.2",
        "client_source_address": "127.0.0.1", "client_source_port": "56078",
    }
    attrs.update(overrides)
    return attrs


def test_is_match_as_kafkas_client_metrics_instance_metadata_test() -> None:
    """ClientMetricsInstanceMetadataTest: valid, multiple, mismatch."""
    import re

    from kip714.subscriptions import is_match

    client = _client()
    assert is_match(client, {})
    for key, regex in [("client_id", ".*"), ("client_id", "producer-1"), ("client_id", "producer.*"),
                       ("client_instance_id", "vLlZ-sdZRAi4qNcYQMvFNw"),
                       ("client_software_name", "apache-kafka-java"), ("client_software_version", "3.5.2"),
                       ("client_source_address", "127.0.0.1"), ("client_source_port", "56078")]:
        assert is_match(client, {key: re.compile(regex)}), (key, regex)
    every = {"client_id": "producer-1", "client_software_name": "apache-kafka-.*", "client_software_version": "3.5.2",
             "client_source_address": "127.0.0.1", "client_source_port": "56078"}
    assert is_match(client, every)
    for key, wrong in [("client_id", "producer-2"), ("client_software_name", "apache-kafka-java-1"),
                       ("client_software_version", "3.5.x"), ("client_source_address", "1.2.3.4"),
                       ("client_source_port", "8080")]:
        assert not is_match(client, {**every, key: wrong}), key


def test_a_pattern_on_a_key_that_is_no_client_attribute_matches_no_client_and_raises_nothing() -> None:
    """testIsMatchWithInvalidKeyFail: 'unknown' and '*' keys match nothing, even with '.*'; even when the caller's
    mapping happens to hold such a key (Kafka's metadata holds the six attributes only)."""
    from kip714.subscriptions import MatchPattern, Subscription, is_match

    assert not is_match(_client(), {"unknown": ".*"})
    assert not is_match(_client(), {"*": ".*"})
    assert not is_match({**_client(), "hostname": "h1"}, {"hostname": ".*"})
    assert not is_match(_client(), {"client_id": ".*", "unknown": ".*"})
    import re

    odd = Subscription("odd", ("*",), 1000, (MatchPattern("hostname", ".*", re.compile(".*")),))
    assert not odd.matches({**_client(), "hostname": "h1"})


def test_an_attribute_the_client_did_not_send_matches_no_pattern_not_even_dot_star() -> None:
    """testIsMatchWithNullValueFail: no client information, so software name and version are null."""
    from kip714.subscriptions import is_match

    client = _client(client_software_name=None, client_software_version=None)
    assert not is_match(client, {"client_software_name": ".*"})
    assert not is_match(client, {"client_software_version": ".*"})
    assert not is_match({"client_id": "producer-1"}, {"client_source_port": ".*"})  # absent = not sent
    assert is_match(_client(client_id=""), {"client_id": ".*"})  # an empty client id was sent: '.*' matches it
    assert not is_match(_client(client_id=""), {"client_id": ".+"})
    sub = validate_subscription("s", {"metrics": "*", "match": "client_software_name=.*"})
    assert not sub.matches(client) and sub.matches(_client())


def test_the_manager_gives_a_client_only_the_subscriptions_whose_patterns_all_match() -> None:
    from kip714 import ClientMetricsManager, RequestContext

    m = ClientMetricsManager()
    m.update_subscription("by-name", {"metrics": "org.a.", "interval.ms": "1000", "match": "client_software_name=.*"})
    m.update_subscription("by-id", {"metrics": "org.b.", "interval.ms": "2000", "match": "client_id=app-.*"})
    bare = RequestContext(client_id="app-1", source_address="127.0.0.1", source_port=5000, connection_id="c1")
    r = m.get_telemetry_subscriptions(None, bare, 1_000_000)
    assert r.error == "NONE" and r.requested_metrics == ["org.b."] and r.push_interval_ms == 2000
    full = RequestContext(client_id="app-2", software_name="librdkafka", software_version="2.16.0",
                          source_address="127.0.0.1", source_port=5001, connection_id="c2")
    r = m.get_telemetry_subscriptions(None, full, 1_000_000)
    assert sorted(r.requested_metrics) == ["org.a.", "org.b."] and r.push_interval_ms == 1000


def test_the_conformance_is_match_op_takes_any_key_as_kafka_does() -> None:
    from kip714.vectors import client_metrics_case

    step = client_metrics_case({})

    def match(**args: str) -> object:
        return step({"op": "is_match", "t_ms": 0, "args": {k.replace("__", "."): v for k, v in args.items()}})["match"]

    assert match(attr__client_id="a", pat__client_id=".*") is True
    assert match(attr__client_id="a", pat__unknown=".*") is False
    assert match(attr__unknown="a", pat__unknown=".*") is False
    assert match(attr__client_id="a", pat__client_software_name=".*") is False
    assert match() is True


def test_the_replay_reads_a_json_null_attribute_as_one_the_client_did_not_send() -> None:
    """Conformance cases write Java's null as JSON null (conformance/README.md): the is_match replay must pass it on as
    an absent attribute, which no pattern matches, never as the text 'None', which '.*' would."""
    from kip714.vectors import client_metrics_case

    step = client_metrics_case({})

    def match(**args: str | None) -> bool:
        out = step({"op": "is_match", "t_ms": 1_700_000_000_000, "args": args})
        return bool(out["match"])

    no_info = {"attr.client_id": "producer-1", "attr.client_software_name": None, "attr.client_software_version": None}
    assert not match(**no_info, **{"pat.client_software_name": ".*"})
    assert not match(**no_info, **{"pat.client_software_version": "None"})
    assert match(**no_info, **{"pat.client_id": ".*"})  # what was sent still matches
    assert match(**no_info)  # no pattern: every client
    # an empty string was sent: '.*' matches it, as Kafka's Matcher.matches() does
    assert match(**{"attr.client_software_name": "", "pat.client_software_name": ".*"})
