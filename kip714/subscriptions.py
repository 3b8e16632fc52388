"""Client-metrics subscriptions (KIP-714): validation and the canonical config, as Kafka's ClientMetricsConfigs.

A subscription is a named broker config with three keys:

- ``metrics``: comma-separated metric-name prefixes; ``*`` subscribes to every metric; empty = none.
- ``interval.ms``: the push interval, an int within [100, 3600000], default 300000.
- ``match``: comma-separated ``key=regex`` client selectors (keys below); empty matches every client.
  A regex must match the whole attribute value.

``validate_subscription(name, configs)`` applies Kafka's rules and messages, raising a subclass of
:class:`SubscriptionValidationError` whose ``code`` is the error Kafka answers (``INVALID_REQUEST`` for
an empty name, an unknown key or an interval out of range; ``INVALID_CONFIG`` for a value that is not an
int or a malformed match entry). An empty ``configs`` is Kafka's "delete this subscription".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import InvalidSubscriptionConfig, InvalidSubscriptionRequest, SubscriptionConfigTypeError

METRICS = "metrics"
INTERVAL_MS = "interval.ms"
MATCH = "match"
CONFIG_KEYS = (METRICS, INTERVAL_MS, MATCH)

CLIENT_INSTANCE_ID = "client_instance_id"
CLIENT_ID = "client_id"
CLIENT_SOFTWARE_NAME = "client_software_name"
CLIENT_SOFTWARE_VERSION = "client_software_version"
CLIENT_SOURCE_ADDRESS = "client_source_address"
CLIENT_SOURCE_PORT = "client_source_port"
MATCH_KEYS = (
    CLIENT_INSTANCE_ID,
    CLIENT_ID,
    CLIENT_SOFTWARE_NAME,
    CLIENT_SOFTWARE_VERSION,
    CLIENT_SOURCE_ADDRESS,
    CLIENT_SOURCE_PORT,
)

ALL_SUBSCRIBED_METRICS = "*"
INTERVAL_MS_DEFAULT = 300_000
MIN_INTERVAL_MS = 100
MAX_INTERVAL_MS = 3_600_000
INT_MIN, INT_MAX = -(2**31), 2**31 - 1

_LIST_SPLIT = re.compile(r"\s*,\s*")
_JAVA_INT = re.compile(r"[+-]?[0-9]+")


def parse_list(value: str) -> list[str]:
    """ConfigDef's LIST: trimmed, empty -> [], else split on commas with surrounding blanks (empties kept)."""
    trimmed = value.strip()
    if not trimmed:
        return []
    return _LIST_SPLIT.split(trimmed)


def parse_int(key: str, value: str) -> int:
    """ConfigDef's INT (``Integer.parseInt`` of the trimmed text) with ConfigException's message."""
    trimmed = str(value).strip()
    if _JAVA_INT.fullmatch(trimmed) and INT_MIN <= int(trimmed) <= INT_MAX:
        return int(trimmed)
    raise SubscriptionConfigTypeError(f"Invalid value {value} for configuration {key}: Not a number of type INT", key)


def _java_split_eq(s: str) -> list[str]:
    """``String.split("=")``: trailing empty strings removed."""
    parts = s.split("=")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


@dataclass(frozen=True)
class MatchPattern:
    """One ``key=regex`` selector; matches when the attribute is present and the regex matches it whole."""

    key: str
    regex: str
    pattern: re.Pattern[str] = field(compare=False, repr=False)

    def matches(self, value: str | None) -> bool:
        return value is not None and self.pattern.fullmatch(value) is not None

    def text(self) -> str:
        return f"{self.key}={self.regex}"


def parse_match(entries: list[str]) -> dict[str, MatchPattern]:
    """ClientMetricsConfigs.parseMatchingPatterns: key -> pattern (a repeated key keeps the last one)."""
    patterns: dict[str, MatchPattern] = {}
    for entry in entries:
        parts = _java_split_eq(entry)
        if len(parts) != 2:
            raise InvalidSubscriptionConfig(f"Illegal client matching pattern: {entry}", MATCH)
        key, regex = parts[0].strip(), parts[1].strip()
        if key not in MATCH_KEYS:
            raise InvalidSubscriptionConfig(f"Illegal client matching pattern: {entry}", MATCH)
        try:
            compiled = re.compile(regex)
        except re.error as e:
            raise InvalidSubscriptionConfig(f"Illegal client matching pattern: {entry}", MATCH) from e
        patterns[key] = MatchPattern(key, regex, compiled)
    return patterns


@dataclass(frozen=True)
class Subscription:
    """A validated subscription. ``metrics`` keeps the configured order; ``deleted`` = empty configs."""

    name: str
    metrics: tuple[str, ...] = ()
    interval_ms: int = INTERVAL_MS_DEFAULT
    match: tuple[MatchPattern, ...] = ()
    deleted: bool = False

    @property
    def match_patterns(self) -> dict[str, MatchPattern]:
        return {p.key: p for p in self.match}

    @property
    def all_metrics(self) -> bool:
        return ALL_SUBSCRIBED_METRICS in self.metrics

    def to_configs(self) -> dict[str, str]:
        """The canonical text form (what is stored and pushed to brokers): all three keys."""
        return {
            METRICS: ",".join(self.metrics),
            INTERVAL_MS: str(self.interval_ms),
            MATCH: ",".join(p.text() for p in self.match),
        }

    def matches(self, attributes: Mapping[str, str | None]) -> bool:
        """ClientMetricsInstanceMetadata.isMatch: every selector matches (no selector: every client)."""
        return is_match(attributes, self.match_patterns)


def is_match(
    attributes: Mapping[str, str | None], patterns: Mapping[str, MatchPattern | re.Pattern[str] | str]
) -> bool:
    """Kafka's ``ClientMetricsInstanceMetadata.isMatch(patterns)``, exactly.

    The client's attributes are the six of ``MATCH_KEYS`` only (what Kafka's metadata map holds; any other entry
    of ``attributes`` is ignored), each ``None`` when the client did not send it. No pattern: every client
    matches. Otherwise every pattern must match its attribute whole; a pattern on a key that is not one of the
    six, or on an attribute the client did not send, matches nothing (not even ``.*``), so the subscription
    selects no client. Nothing is raised here: unknown keys are refused earlier, by validation.
    """
    for key, pattern in patterns.items():
        value = attributes.get(key) if key in MATCH_KEYS else None
        if value is None:
            return False
        if isinstance(pattern, MatchPattern):
            compiled = pattern.pattern
        elif isinstance(pattern, str):
            compiled = re.compile(pattern)
        else:
            compiled = pattern
        if compiled.fullmatch(value) is None:
            return False
    return True


def validate_subscription(name: str, configs: Mapping[str, str]) -> Subscription:
    """Validate one subscription as Kafka's ``ClientMetricsConfigs.validate`` and parse it.

    Checks, in Kafka's order: the name is not empty; every key is one of ``metrics``,
    ``interval.ms``, ``match``; ``interval.ms`` is an int within [100, 3600000]; every ``match``
    entry is ``key=regex`` with a known key and a regex that compiles. An empty ``configs`` gives a
    Subscription with ``deleted=True`` (Kafka removes the subscription).
    """
    if name is None or name == "":
        raise InvalidSubscriptionRequest("Subscription name can't be empty")
    for key in configs:
        if key not in CONFIG_KEYS:
            raise InvalidSubscriptionRequest(f"Unknown client metrics configuration: {key}", key)
    if not configs:
        return Subscription(name, deleted=True)
    metrics = parse_list(str(configs.get(METRICS, "")))
    interval = INTERVAL_MS_DEFAULT
    if INTERVAL_MS in configs:
        interval = parse_int(INTERVAL_MS, configs[INTERVAL_MS])
    match_entries = parse_list(str(configs.get(MATCH, "")))
    if INTERVAL_MS in configs and not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
        raise InvalidSubscriptionRequest(
            f"Invalid value {interval} for {INTERVAL_MS}, interval must be between 100 and 3600000 (1 hour)",
            INTERVAL_MS,
        )
    patterns = parse_match(match_entries)
    # keep the configured order of entries (the last of a repeated key wins, as in Kafka's map)
    keys = dict.fromkeys(_java_split_eq(e)[0].strip() for e in match_entries)
    ordered = tuple(patterns[k] for k in keys)
    return Subscription(name, tuple(metrics), interval, ordered)


def canonical_configs(name: str, configs: Mapping[str, str]) -> dict[str, str]:
    """``validate_subscription(name, configs).to_configs()``; ``{}`` for a deletion."""
    sub = validate_subscription(name, configs)
    return {} if sub.deleted else sub.to_configs()
