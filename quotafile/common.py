"""What the quota file's reader, writer and diff share with its groups (``quotafile.groups``): the names of
changes and budget scopes, a value's written form, and ``Change`` (no Django)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import yaml

from engine.entities import QUOTA_KEYS
from engine.units import BINARY_UNITS, BYTE_RATE_KEYS, format_quota_value

#: The file's sections and how a change names them.
QUOTA, BROKER, TOPIC, CLIENT_METRICS = "quota", "broker", "topic", "client-metrics"
ADD, CHANGE, REMOVE = "add", "change", "remove"
#: A value's budget scope: per broker (Kafka's meaning, the default) or a cluster-wide budget; the keys it may be for.
PER_BROKER, CLUSTER_WIDE = "per_broker", "cluster_wide"
BUDGET_SCOPES = (PER_BROKER, CLUSTER_WIDE)
VALUE_FIELDS = ("value", "budgetScope")


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def human_value(key: str, value: float) -> int | float | str:
    """A quota value in the form that reads back to the same number: byte rates in the largest binary unit that
    writes them exactly with at most 2 decimals (else whole bytes), the other keys as numbers."""
    if key in BYTE_RATE_KEYS:
        whole = int(value)
        for unit, size in BINARY_UNITS:
            if size == 1 or whole < size:
                continue
            q = Decimal(whole) / size
            if q == q.quantize(Decimal("0.01")):
                return f"{q.normalize():f} {unit}"
        return whole
    if float(value).is_integer() and math.isfinite(value):
        return int(value)
    return float(value)


class _Flow(dict):
    """A mapping written in flow style (``{user: alice, client-id: app-1}``)."""


@dataclass
class Change:
    """One difference: ``action`` on ``key`` of the entity (``section`` says which part of the state)."""

    action: str
    section: str
    entity: dict[str, str]
    key: str
    old: Any
    new: Any
    path: str
    order: tuple[Any, ...]
    warnings: list[str] = field(default_factory=list)
    old_scope: str | None = None  # quotas: the value's budget scope before and after (None: no value)
    new_scope: str | None = None
    shown: dict[str, Any] = field(default_factory=dict)  # groups and exempt principals: displays, reach

    def as_dict(self) -> dict[str, Any]:
        out = {"action": self.action, "section": self.section, "entity": self.entity, "path": self.path,
               "key": self.key, "old": self.old, "new": self.new}
        if self.section == QUOTA:
            out["old_display"] = None if self.old is None else format_quota_value(self.key, self.old)
            out["new_display"] = None if self.new is None else format_quota_value(self.key, self.new)
            out["old_scope"], out["new_scope"] = self.old_scope, self.new_scope
        out.update(self.shown)
        return out


def _number(key: str, value: float | None) -> int | float | None:
    if value is None:
        return None
    return int(value) if float(value).is_integer() and key in QUOTA_KEYS and QUOTA_KEYS[key][0] != "DOUBLE" \
        else float(value)
