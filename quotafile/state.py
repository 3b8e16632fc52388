"""The quota file's vocabulary: its keys, its errors, ``QuotaState`` and the order of entities (no Django)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from engine.budgets import BUDGET_TYPES
from engine.config import CLIENT_ID, IP, USER, EntityRef
from engine.entities import (
    DEFAULT,
    QUOTA_KEYS,
    QuotaType,
)
from kip714.subscriptions import INTERVAL_MS_DEFAULT
from quotafile.common import (
    CLUSTER_WIDE,
    PER_BROKER,
)
from quotafile.groups import Group

API_VERSION = "quotas/v1"
KIND = "ClusterQuotas"
TOP_KEYS = ("apiVersion", "kind", "cluster", "quotas", "brokerConfigs", "topicConfigs", "clientMetrics", "groups",
            "exemptPrincipals")
ENTITY_KEYS = (USER, CLIENT_ID, IP)
#: Quota keys in the order files list them.
KEY_ORDER = tuple(QUOTA_KEYS)
METRICS, INTERVAL, MATCH = "metrics", "interval.ms", "match"
SUBSCRIPTION_FIELDS = ("name", "metrics", "intervalMs", "match")
BUDGET_KEYS = tuple(QuotaType(t).config_key for t in BUDGET_TYPES)
#: libyaml's parser when PyYAML was built with it (the nodes keep their lines either way), else PyYAML's own.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: The most text a file may hold (the API's body limit is larger; a state file is far smaller).
MAX_TEXT = 1 << 20


@dataclass(frozen=True)
class FileError:
    """One problem of a file: where (1-based line, the key at fault) and what to change."""

    line: int | None
    key: str | None
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.line, "key": self.key, "message": self.message}


class InvalidQuotaFile(Exception):
    """The file is refused; ``errors`` lists every problem found (each with its line and key)."""

    code = "INVALID_QUOTAS_FILE"

    def __init__(self, errors: list[FileError]) -> None:
        self.errors = errors
        first = errors[0]
        where = f"line {first.line}" if first.line else "the file"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"{where}, {first.key or 'document'}: {first.message}{more}")
        self.message = str(self)


@dataclass
class Subscription:
    """A client-metrics subscription as Kafka stores it: canonical text of its three configs."""

    metrics: str = ""
    interval_ms: int = INTERVAL_MS_DEFAULT
    match: str = ""

    def configs(self) -> dict[str, str]:
        """As Kafka's configs; an empty list is Kafka's default and left out (as the broker holds it)."""
        out = {INTERVAL: str(self.interval_ms)}
        if self.metrics:
            out[METRICS] = self.metrics
        if self.match:
            out[MATCH] = self.match
        return out


@dataclass
class QuotaState:
    """A cluster's quota state (the file's content, or desired state as the portal holds it).

    A section that is None is not part of it (left out of the file). ``lines`` maps a place of the file
    (``("quotas", entity)``, ``("quotas", entity, key)``, ``("brokerConfigs", broker, key)``, ...) to its line.
    ``cluster_wide`` holds the (entity, key) of the quota values that are cluster-wide budgets (the others are per
    broker). ``groups`` and ``exempt`` (principal -> reason) are ``quotafile.groups``'.
    """

    cluster: str
    quotas: dict[EntityRef, dict[str, float]] | None = None
    cluster_wide: set[tuple[EntityRef, str]] = field(default_factory=set)
    broker_configs: dict[str, dict[str, str]] | None = None
    topic_configs: dict[str, dict[str, str]] | None = None
    client_metrics: dict[str, Subscription] | None = None
    groups: dict[str, Group] | None = None
    exempt: dict[str, str] | None = None  # principal -> reason
    lines: dict[tuple[Any, ...], int] = field(default_factory=dict)

    def line(self, *place: Any) -> int | None:
        """The line of the most specific place known (``("quotas", ref, key)`` falls back to the entity's)."""
        for n in range(len(place), 0, -1):
            if place[:n] in self.lines:
                return self.lines[place[:n]]
        return None

    def scope(self, ref: EntityRef, key: str) -> str | None:
        """The budget scope of a quota value, None when there is no such value."""
        if key not in (self.quotas or {}).get(ref, {}):
            return None
        return CLUSTER_WIDE if (ref, key) in self.cluster_wide else PER_BROKER


# ------------------------------------------------------------------ entities and their order


def entity_dict(ref: EntityRef) -> dict[str, str]:
    """The entity as the file and the API name it: ``{"user": ..., "client-id": ...}`` or ``{"ip": ...}``."""
    return {k: v for k, v in ((USER, ref.user), (CLIENT_ID, ref.client_id), (IP, ref.ip)) if v is not None}


def precedence_level(ref: EntityRef) -> int:
    """Kafka's precedence of a client-quota entity (1 = most specific .. 8 = default client-id); ips 9 and 10."""
    if ref.ip is not None:
        return 10 if ref.ip == DEFAULT else 9
    if ref.user is None:
        return 8 if ref.client_id == DEFAULT else 7
    base = 0 if ref.user != DEFAULT else 3
    return base + (3 if ref.client_id is None else 2 if ref.client_id == DEFAULT else 1)


def entity_order(ref: EntityRef) -> tuple[Any, ...]:
    return (precedence_level(ref), ref.user or "", ref.client_id or "", ref.ip or "")


def broker_order(broker: str) -> tuple[int, int]:
    """Per-broker configs first (they win over the default broker's), then ``<default>``."""
    return (1, 0) if broker == DEFAULT else (0, int(broker))
