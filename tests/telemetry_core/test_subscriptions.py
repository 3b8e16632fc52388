"""Subscriptions are validated as Kafka's ClientMetricsConfigs.validate: same rules, same messages."""

from __future__ import annotations

import pytest

from quotas.engine.errors import QuotaValidationError
from quotas.telemetry import (
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
