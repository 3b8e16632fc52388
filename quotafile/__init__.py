"""Quotas as code: a cluster's quota state as a YAML file, read, checked, written and compared (no Django).

One YAML document per cluster::

    apiVersion: quotas/v1
    kind: ClusterQuotas
    cluster: prod
    quotas:                                   # client quotas, in Kafka's precedence order
      - entity: {user: alice, client-id: app-1}    # keys user, client-id, ip; "<default>" for a default
        producer_byte_rate: 1.5 MiB/s
      - entity: {user: bob}
        producer_byte_rate: {value: 30 MiB/s, budgetScope: cluster_wide}   # a budget for the sum over brokers
    brokerConfigs:                            # dynamic broker configs the portal manages
      "<default>": {max.connection.creation.rate: 100}
      1: {leader.replication.throttled.rate: 10485760}
    topicConfigs:                             # topics' throttled-replica lists
      orders: {leader.replication.throttled.replicas: "0:1,1:2"}
    clientMetrics:                            # KIP-714 subscriptions
      - {name: basic, metrics: [org.apache.kafka.producer.], intervalMs: 60000, match: [client_id=app-1]}
    groups:                                   # group quotas (``quotafile.groups``)
      - {name: payments, tenant: payments, members: {tenant: true}, consumer_byte_rate: 8 MiB/s}
    exemptPrincipals:                         # principals no quota applies to
      - {principal: replicator, reason: MirrorMaker 2}

A section left out of the file is not managed by it (a plan leaves that part of the cluster alone, even with
prune); an empty section (``quotas: []``) with prune removes everything of that part the planner may change.
Values take the units of ``engine.units`` (``1.5 MiB/s``); ``write`` picks the form that reads back to the
same number, so exporting and planning an unchanged file changes nothing. Every error names the line and the key
(``FileError``). ``diff`` answers the changes from one state to another in Kafka's precedence order.

A value is per broker (Kafka's meaning) unless written as ``{value: ..., budgetScope: cluster_wide}``: a budget for
the sum over the cluster's brokers (producer_byte_rate, consumer_byte_rate and request_percentage of user/client-id
entities; whether the cluster takes it is the portal's to say). A change of scope alone is a change of the value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor

from engine.budgets import BUDGET_TYPES
from engine.config import CLIENT_ID, IP, USER, EntityRef
from engine.entities import (
    DEFAULT,
    PRECEDENCE,
    QUOTA_KEYS,
    ClientEntity,
    QuotaOverrides,
    QuotaType,
    entity_path,
)
from engine.entities import validate_quota_value as _validate_value
from engine.errors import QuotaEngineError
from engine.units import parse_quota_value
from kip714.subscriptions import INTERVAL_MS_DEFAULT, validate_subscription
from quotafile import groups as _groups
from quotafile.common import (
    ADD,
    BROKER,
    BUDGET_SCOPES,
    CHANGE,
    CLIENT_METRICS,
    CLUSTER_WIDE,
    PER_BROKER,
    QUOTA,
    REMOVE,
    TOPIC,
    VALUE_FIELDS,
    Change,
    _Flow,
    _line,
    _number,
    human_value,
)
from quotafile.groups import EXEMPT as EXEMPT
from quotafile.groups import GROUP as GROUP
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


# ------------------------------------------------------------------ reading


class _Reader:
    """Walks the composed YAML nodes, keeping line numbers, and collects every error."""

    def __init__(self) -> None:
        self.errors: list[FileError] = []
        self.constructor = SafeConstructor()

    def error(self, node: yaml.Node | None, key: str | None, message: str) -> None:
        self.errors.append(FileError(node.start_mark.line + 1 if node is not None else None, key, message))

    def scalar(self, node: yaml.Node, key: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            self.error(node, key, f"{key} takes a single value, not a {'list' if _is_seq(node) else 'mapping'}.")
            return None
        try:
            return self.constructor.construct_object(node, deep=True)
        except (ConstructorError, ValueError) as e:
            self.error(node, key, f"{key}: the value cannot be read ({getattr(e, 'problem', None) or e}).")
            return None

    def mapping(self, node: yaml.Node, key: str) -> list[tuple[str, yaml.Node, yaml.Node]] | None:
        """The mapping's (key text, key node, value node), refusing duplicate keys (YAML would keep the last)."""
        if not isinstance(node, yaml.MappingNode):
            self.error(node, key, f"{key} must be a mapping (key: value).")
            return None
        out, seen = [], set()
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                self.error(k, key, f"A key of {key} must be plain text.")
                continue
            try:
                text = str(self.constructor.construct_object(k))
            except (ConstructorError, ValueError) as e:
                self.error(k, key, f"A key of {key} cannot be read ({getattr(e, 'problem', None) or e}).")
                continue
            if text in seen:
                self.error(k, text, f"{text} is given twice in {key}; give each key once.")
                continue
            seen.add(text)
            out.append((text, k, v))
        return out

    def sequence(self, node: yaml.Node, key: str) -> list[yaml.Node] | None:
        if not _is_seq(node):
            if isinstance(node, yaml.ScalarNode) and node.value in ("", "~", "null") and node.tag.endswith("null"):
                return []
            self.error(node, key, f"{key} must be a list.")
            return None
        return list(node.value)


def _is_seq(node: yaml.Node) -> bool:
    return isinstance(node, yaml.SequenceNode)


def read(text: str) -> QuotaState:
    """Parse and check a quota file; raises InvalidQuotaFile listing every problem with its line and key."""
    if len(text) > MAX_TEXT:
        raise InvalidQuotaFile([FileError(None, None, f"The file is longer than {MAX_TEXT} characters.")])
    try:
        documents = list(yaml.compose_all(text, Loader=_LOADER))
    except RecursionError:
        raise InvalidQuotaFile([FileError(None, None, "The file nests deeper than a quota file ever does.")]) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise InvalidQuotaFile(
            [FileError(mark.line + 1 if mark else None, None, f"Not valid YAML: {problem}.")]
        ) from None
    documents = [d for d in documents if d is not None]
    if len(documents) != 1:
        line = _line(documents[1]) if len(documents) > 1 else None
        raise InvalidQuotaFile([FileError(line, None, f"A quota file holds one document (one cluster); found "
                                                      f"{len(documents)}. Plan each cluster with its own file.")])
    reader = _Reader()
    state = _read_document(reader, documents[0])
    if reader.errors:
        raise InvalidQuotaFile(sorted(reader.errors, key=lambda e: (e.line or 0)))
    return state


def _read_document(r: _Reader, root: yaml.Node) -> QuotaState:
    top = r.mapping(root, "document")
    state = QuotaState(cluster="")
    if top is None:
        return state
    given = {k: (kn, vn) for k, kn, vn in top}
    for k, kn, _ in top:
        if k not in TOP_KEYS:
            r.error(kn, k, f"Unknown key {k!r}; a quota file has {', '.join(TOP_KEYS)}.")
    for k, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
        if k not in given:
            r.error(root, k, f"{k} is missing; write {k}: {expected}.")
        elif r.scalar(given[k][1], k) != expected:
            r.error(given[k][1], k, f"{k} must be {expected}.")
    if "cluster" not in given:
        r.error(root, "cluster", "cluster is missing; name the cluster this file is for.")
    else:
        name = r.scalar(given["cluster"][1], "cluster")
        if not isinstance(name, str) or not name:
            r.error(given["cluster"][1], "cluster", "cluster must be the cluster's name.")
        else:
            state.cluster = name
            state.lines[("cluster",)] = _line(given["cluster"][1])
    if "quotas" in given:
        state.quotas = _read_quotas(r, given["quotas"][1], state)
    if "brokerConfigs" in given:
        state.broker_configs = _read_configs(r, given["brokerConfigs"][1], state, "brokerConfigs")
    if "topicConfigs" in given:
        state.topic_configs = _read_configs(r, given["topicConfigs"][1], state, "topicConfigs")
    if "clientMetrics" in given:
        state.client_metrics = _read_subscriptions(r, given["clientMetrics"][1], state)
    for section in ("groups", "exemptPrincipals"):
        if section in given:
            state.lines[(section,)] = _line(given[section][0])
    if "groups" in given:
        state.groups = _groups.read_groups(r, given["groups"][1], state)
    if "exemptPrincipals" in given:
        state.exempt = _groups.read_exempt(r, given["exemptPrincipals"][1], state)
    return state


def _read_quotas(r: _Reader, node: yaml.Node, state: QuotaState) -> dict[EntityRef, dict[str, float]]:
    out: dict[EntityRef, dict[str, float]] = {}
    for i, item in enumerate(r.sequence(node, "quotas") or []):
        where = f"quotas[{i}]"
        pairs = r.mapping(item, where)
        if pairs is None:
            continue
        fields = {k: (kn, vn) for k, kn, vn in pairs}
        if "entity" not in fields:
            r.error(item, "entity", f"{where} has no entity; write entity: {{user: ..., client-id: ...}}.")
            continue
        ref = _read_entity(r, fields["entity"][1])
        if ref is None:
            continue
        if ref in out:
            r.error(fields["entity"][1], "entity", f"{where}: {entity_path(ref.user, ref.client_id, ref.ip)} is "
                                                   f"listed twice; give each entity once (line "
                                                   f"{state.lines[('quotas', ref)]}).")
            continue
        state.lines[("quotas", ref)] = _line(item)
        values: dict[str, float] = {}
        for key, kn, vn in pairs:
            if key == "entity":
                continue
            state.lines[("quotas", ref, key)] = _line(kn)
            if isinstance(vn, yaml.MappingNode):
                vn, scope = _read_scoped(r, vn, ref, key)
                if vn is None:
                    continue
                if scope == CLUSTER_WIDE:
                    state.cluster_wide.add((ref, key))
            raw = r.scalar(vn, key)
            if raw is None:
                if isinstance(vn, yaml.ScalarNode):
                    r.error(vn, key, f"{key} has no value; to remove the quota leave the key out (and plan with "
                                     "prune when it is the entity's last one).")
                continue
            try:
                values[key] = _validate_value(key, parse_quota_value(key, raw), ref.kind)
            except QuotaEngineError as e:
                r.error(vn, key, e.message)
        if not values and len(pairs) == 1:
            r.error(item, "entity", f"{where}: {entity_path(ref.user, ref.client_id, ref.ip)} has no quota key; "
                                    "give at least one (an entity exists only while it holds a value).")
        out[ref] = values
    return out


def budget_scope_error(ref: EntityRef, key: str, scope: object) -> str | None:
    """Why a value of ``key`` of ``ref`` cannot have ``scope`` (None: it can), as the portal's API says it."""
    if scope not in BUDGET_SCOPES:
        return f"budgetScope is per_broker or cluster_wide, not {scope!r}; leave it out for per_broker."
    if scope == PER_BROKER:
        return None
    allowed = ", ".join(BUDGET_KEYS[:-1]) + f" and {BUDGET_KEYS[-1]}"
    if ref.ip is not None:
        return (f"An ip quota ({key}) cannot be cluster-wide: Kafka counts connections per broker and ip. Only "
                f"{allowed} values of user and client-id entities can be cluster_wide.")
    if key not in BUDGET_KEYS:
        return f"A {key} value cannot be cluster-wide: only {allowed} values can be cluster_wide."
    return None


def _read_scoped(r: _Reader, node: yaml.MappingNode, ref: EntityRef, key: str) -> tuple[yaml.Node | None, str]:
    """``{value: ..., budgetScope: per_broker|cluster_wide}``: the value's node and its scope."""
    fields = {k: (kn, vn) for k, kn, vn in r.mapping(node, key) or []}
    for name, (kn, _) in fields.items():
        if name not in VALUE_FIELDS:
            r.error(kn, key, f"Unknown key {name!r} in {key}; a value with a scope is {{value: ..., budgetScope: "
                             "per_broker|cluster_wide}.")
    if "value" not in fields:
        r.error(node, key, f"{key} has no value; write {{value: ..., budgetScope: cluster_wide}}.")
        return None, PER_BROKER
    scope: object = PER_BROKER
    if "budgetScope" in fields:
        scope_node = fields["budgetScope"][1]
        scope = r.scalar(scope_node, "budgetScope")
        why = budget_scope_error(ref, key, scope)
        if why is not None:
            r.error(scope_node, key, why)
            scope = PER_BROKER
    return fields["value"][1], str(scope)


def _read_entity(r: _Reader, node: yaml.Node) -> EntityRef | None:
    pairs = r.mapping(node, "entity")
    if pairs is None:
        return None
    parts: dict[str, str | None] = {}
    bad = False
    for k, kn, vn in pairs:
        if k not in ENTITY_KEYS:
            r.error(kn, k, f"Unknown entity type {k!r}; use user, client-id or ip ('<default>' for a default).")
            bad = True
            continue
        name = r.scalar(vn, k)
        if not isinstance(name, str) or not name:
            r.error(vn, k, f"The {k} name must be text; write '<default>' for the default {k}.")
            bad = True
            continue
        parts[k] = name
    if bad:
        return None
    try:
        return EntityRef(parts.get(USER), parts.get(CLIENT_ID), parts.get(IP))
    except QuotaEngineError as e:
        r.error(node, "entity", e.message)
        return None


def _config_text(value: Any) -> str:
    """A config value as Kafka keeps it: text (booleans as Java writes them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value.strip() if isinstance(value, str) else str(value)


def _read_configs(r: _Reader, node: yaml.Node, state: QuotaState, section: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    if isinstance(node, yaml.ScalarNode) and node.tag.endswith("null"):
        return out
    for name, kn, vn in r.mapping(node, section) or []:
        if section == "brokerConfigs":
            if name != DEFAULT and not (name.isdigit() and int(name) <= 2**31 - 1):
                r.error(kn, name, f"brokerConfigs are keyed by broker id or '<default>', not {name!r}.")
                continue
            name = name if name == DEFAULT else str(int(name))
        elif not name:
            r.error(kn, name, "A topic name must not be empty.")
            continue
        state.lines[(section, name)] = _line(kn)
        configs: dict[str, str] = {}
        for key, ckn, cvn in r.mapping(vn, f"{section}.{name}") or []:
            state.lines[(section, name, key)] = _line(ckn)
            value = r.scalar(cvn, key)
            if value is None:
                if isinstance(cvn, yaml.ScalarNode):
                    r.error(cvn, key, f"{key} has no value; leave the key out to use Kafka's default.")
                continue
            configs[key] = _config_text(value)
        out[name] = configs
    return out


def _list_or_text(r: _Reader, node: yaml.Node, key: str) -> str | None:
    if _is_seq(node):
        items = [r.scalar(n, key) for n in node.value]
        if any(not isinstance(i, str | int | float) or isinstance(i, bool) for i in items):
            r.error(node, key, f"{key} is a list of text entries.")
            return None
        return ",".join(str(i) for i in items)
    value = r.scalar(node, key)
    return "" if value is None else str(value)


def _read_subscriptions(r: _Reader, node: yaml.Node, state: QuotaState) -> dict[str, Subscription]:
    out: dict[str, Subscription] = {}
    for i, item in enumerate(r.sequence(node, "clientMetrics") or []):
        where = f"clientMetrics[{i}]"
        pairs = r.mapping(item, where)
        if pairs is None:
            continue
        fields = {k: (kn, vn) for k, kn, vn in pairs}
        for k, kn, _ in pairs:
            if k not in SUBSCRIPTION_FIELDS:
                r.error(kn, k, f"Unknown key {k!r} in {where}; a subscription has {', '.join(SUBSCRIPTION_FIELDS)}.")
        if "name" not in fields:
            r.error(item, "name", f"{where} has no name.")
            continue
        name = r.scalar(fields["name"][1], "name")
        if not isinstance(name, str) or not name or "|" in name or len(name) > 255:
            r.error(fields["name"][1], "name", "A subscription name is text of 1 to 255 characters without '|'.")
            continue
        if name in out:
            r.error(fields["name"][1], "name", f"Subscription {name!r} is listed twice; give each once.")
            continue
        state.lines[("clientMetrics", name)] = _line(item)
        configs: dict[str, str] = {}
        for k, config in (("metrics", METRICS), ("intervalMs", INTERVAL), ("match", MATCH)):
            if k in fields:
                state.lines[("clientMetrics", name, config)] = _line(fields[k][0])
                text = _list_or_text(r, fields[k][1], k)
                if text is None:
                    continue
                configs[config] = text
        configs.setdefault(INTERVAL, str(INTERVAL_MS_DEFAULT))
        try:
            canonical = validate_subscription(name, configs).to_configs()
        except QuotaEngineError as e:
            bad = getattr(e, "key", None) or next((c for c in (MATCH, INTERVAL, METRICS) if c in e.message), None)
            file_key = {INTERVAL: "intervalMs"}.get(bad or "", bad)
            line_node = fields.get(file_key or "", (None, item))[1] if file_key in fields else item
            r.error(line_node, file_key or "clientMetrics", e.message)
            continue
        out[name] = Subscription(canonical[METRICS], int(canonical[INTERVAL]), canonical[MATCH])
    return out


# ------------------------------------------------------------------ writing


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # libyaml's emitter when PyYAML has it
    pass


_Dumper.add_representer(_Flow, lambda d, data: d.represent_mapping("tag:yaml.org,2002:map", data.items(),
                                                                    flow_style=True))
_Dumper.add_representer(dict, lambda d, data: d.represent_mapping("tag:yaml.org,2002:map", data.items()))


def _config_value(text: str) -> int | str:
    try:
        number = int(text)
    except ValueError:
        return text
    return number if str(number) == text else text


def write(state: QuotaState) -> str:
    """The state as a quota file, in a stable order (precedence for quotas, broker ids, names)."""
    doc: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND, "cluster": state.cluster}
    if state.quotas is not None:
        items = []
        for ref in sorted(state.quotas, key=entity_order):
            item: dict[str, Any] = {"entity": _Flow(entity_dict(ref))}
            for key in sorted(state.quotas[ref], key=_key_rank):
                value = human_value(key, state.quotas[ref][key])
                if (ref, key) in state.cluster_wide:
                    item[key] = _Flow({"value": value, "budgetScope": CLUSTER_WIDE})
                else:
                    item[key] = value
            items.append(item)
        doc["quotas"] = items
    if state.broker_configs is not None:
        doc["brokerConfigs"] = {
            b: {k: _config_value(v) for k, v in sorted(state.broker_configs[b].items())}
            for b in sorted(state.broker_configs, key=broker_order)
        }
    if state.topic_configs is not None:
        doc["topicConfigs"] = {
            t: {k: _config_value(v) for k, v in sorted(state.topic_configs[t].items())}
            for t in sorted(state.topic_configs)
        }
    if state.client_metrics is not None:
        doc["clientMetrics"] = [
            {
                "name": name,
                "metrics": [m for m in sub.metrics.split(",") if m],
                "intervalMs": sub.interval_ms,
                "match": [m for m in sub.match.split(",") if m],
            }
            for name, sub in sorted(state.client_metrics.items())
        ]
    if state.groups is not None:
        doc["groups"] = [_groups.group_doc(state.groups[name]) for name in sorted(state.groups)]
    if state.exempt is not None:
        doc["exemptPrincipals"] = _groups.exempt_doc(state.exempt)
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


def _key_rank(key: str) -> int:
    return KEY_ORDER.index(key) if key in KEY_ORDER else len(KEY_ORDER)


# ------------------------------------------------------------------ comparing


def _keyed_diff(
    old: Mapping[str, Any], new: Mapping[str, Any] | None, prune_entity: bool
) -> list[tuple[str, str, Any, Any]]:
    """(action, key, old, new) of one entity. ``new`` None: the entity is not in the file (removed only when
    ``prune_entity``). Keys the file's entity leaves out are removed: the entry describes the whole entity."""
    out = []
    if new is None:
        return [(REMOVE, k, v, None) for k, v in old.items()] if prune_entity else []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        action = ADD if before is None else REMOVE if after is None else CHANGE
        out.append((action, key, before, after))
    return out


Removable = Callable[[str, Any], bool]


def diff(current: QuotaState, desired: QuotaState, prune: bool = False,
         removable: Removable | None = None) -> list[Change]:
    """The changes that make ``current`` what ``desired`` says, in Kafka's precedence order.

    Only the sections present in ``desired`` are compared. An entity listed in the file is its whole state (keys it
    leaves out are removed); an entity missing from the file is removed only with ``prune`` and when
    ``removable(section, identity)`` allows it (a tenant member's prune reaches only what its tenant owns).
    """
    allowed = removable or (lambda _section, _ident: True)
    changes: list[Change] = []
    if desired.quotas is not None:
        old_q = current.quotas or {}
        for ref in set(old_q) | set(desired.quotas):
            new = desired.quotas.get(ref)
            found = _keyed_diff(old_q.get(ref, {}), new, prune and allowed(QUOTA, ref))
            differing = {key for _, key, _, _ in found}
            for key in sorted(set(old_q.get(ref, {})) & set(new or {}), key=_key_rank):
                if key not in differing and current.scope(ref, key) != desired.scope(ref, key):
                    value = old_q[ref][key]
                    found.append((CHANGE, key, value, value))  # the same number with another scope: a change
            for action, key, before, after in found:
                changes.append(Change(action, QUOTA, entity_dict(ref), key, _number(key, before),
                                      _number(key, after), entity_path(ref.user, ref.client_id, ref.ip),
                                      (0, *entity_order(ref), _key_rank(key), key),
                                      old_scope=current.scope(ref, key),
                                      new_scope=desired.scope(ref, key) if after is not None else None))
    for section, attr, rank in ((BROKER, "broker_configs", 1), (TOPIC, "topic_configs", 2)):
        wanted = getattr(desired, attr)
        if wanted is None:
            continue
        have = getattr(current, attr) or {}
        for name in set(have) | set(wanted):
            order = broker_order(name) if section == BROKER else (0, name)
            path = f"/config/brokers/{name}" if section == BROKER else f"/config/topics/{name}"
            for action, key, before, after in _keyed_diff(have.get(name, {}), wanted.get(name),
                                                         prune and allowed(section, name)):
                changes.append(Change(action, section, {section: name}, key, before, after, path,
                                      (rank, *order, key)))
    if desired.client_metrics is not None:
        have_s = current.client_metrics or {}
        for name in set(have_s) | set(desired.client_metrics):
            old_c = have_s[name].configs() if name in have_s else {}
            new_c = desired.client_metrics[name].configs() if name in desired.client_metrics else None
            for action, key, before, after in _keyed_diff(old_c, new_c, prune and allowed(CLIENT_METRICS, name)):
                changes.append(Change(action, CLIENT_METRICS, {CLIENT_METRICS: name}, key, before, after,
                                      f"/config/client-metrics/{name}", (3, name, key)))
    changes.extend(_groups.diff_groups(current, desired, prune, allowed))
    changes.sort(key=lambda c: c.order)
    return changes


def apply_changes(current: QuotaState, changes: Iterable[Change]) -> dict[EntityRef, dict[str, float]]:
    """The client quotas after the changes (for resolving which level applies afterwards)."""
    after = {ref: dict(values) for ref, values in (current.quotas or {}).items()}
    for c in changes:
        if c.section != QUOTA:
            continue
        ref = EntityRef.parse(c.entity)
        values = after.setdefault(ref, {})
        if c.new is None:
            values.pop(c.key, None)
        else:
            values[c.key] = float(c.new)
        if not values:
            after.pop(ref, None)
    return after


#: Stand-ins for a principal / client-id no quota names (they resolve as any such name would).
OTHER_USER, OTHER_CLIENT = "\x00another principal", "\x00another client-id"


def _applies(ref: EntityRef, user: str, client_id: str) -> bool:
    """Whether the entity's quota is a candidate for this client (its parts name it or are defaults/absent)."""
    return ref.user in (None, DEFAULT, user) and ref.client_id in (None, DEFAULT, client_id)


#: How many entities a warning names before it counts the rest.
NAMED_WINNERS = 5


def _who(user: str, client_id: str) -> str:
    if user == OTHER_USER and client_id == OTHER_CLIENT:
        return "any other client"
    if client_id == OTHER_CLIENT:
        return f"the clients of user {user!r}"
    if user == OTHER_USER:
        return f"client-id {client_id!r}"
    return f"user {user!r} with client-id {client_id!r}"


def _named(part: str | None, fallback: str | None, other: str) -> str:
    """A name a client can have for this part: the entity's own, else the other entity's, else a stand-in."""
    if part not in (None, DEFAULT):
        return part
    return fallback if fallback not in (None, DEFAULT) else other


class Shadows:
    """Which level wins for the clients an entity's quota is meant for, after a plan (built once per plan).

    For each key it keeps the engine's resolver (``QuotaOverrides``, Kafka's 8 levels) over the state after the plan
    and the entities holding the key, so each change costs one pass over the more specific entities, not over every
    principal x client-id pair.
    """

    def __init__(self, after: Mapping[EntityRef, Mapping[str, float]]) -> None:
        self.after = after
        self._keys: dict[str, tuple[QuotaOverrides, list[tuple[int, EntityRef]]]] = {}

    def resolver(self, key: str) -> tuple[QuotaOverrides, list[tuple[int, EntityRef]]]:
        if key not in self._keys:
            overrides, holders = QuotaOverrides(), []
            for ref, values in self.after.items():
                if ref.ip is None and key in values:
                    overrides.update(ClientEntity(ref.user, ref.client_id), values[key])
                    holders.append((precedence_level(ref), ref))
            self._keys[key] = (overrides, sorted(holders, key=lambda lr: entity_order(lr[1])))
        return self._keys[key]

    def warnings(self, ref: EntityRef, key: str) -> list[str]:
        """Where a more specific level still wins over ``ref``'s ``key`` for some client it applies to: each entity
        of an earlier level that can name the same client, checked with the resolver on a client both name."""
        if ref.ip is not None or key not in QUOTA_KEYS or key == "connection_creation_rate":
            return []
        overrides, holders = self.resolver(key)
        mine = precedence_level(ref)
        winners: dict[str, list[str]] = {}
        for level, other in holders:
            if level >= mine:
                continue
            user = _named(other.user, ref.user, OTHER_USER)
            client_id = _named(other.client_id, ref.client_id, OTHER_CLIENT)
            if not _applies(ref, user, client_id) or not _applies(other, user, client_id):
                continue
            resolved = overrides.resolve(user, client_id)
            if resolved.level is None or resolved.level >= mine:
                continue
            winners.setdefault(_winner(resolved.level, user, client_id), []).append(_who(user, client_id))
        path = entity_path(ref.user, ref.client_id, ref.ip)
        out = [
            f"{path} {key} does not apply to {', '.join(sorted(set(who)))}: {winner} (a more specific level in "
            "Kafka's precedence) still wins."
            for winner, who in list(winners.items())[:NAMED_WINNERS]
        ]
        if len(winners) > NAMED_WINNERS:
            out.append(f"... and {len(winners) - NAMED_WINNERS} more entities of more specific levels win over "
                       f"{path} {key} for their clients.")
        return out

    def fallback(self, ref: EntityRef, key: str) -> str | None:
        """After ``ref``'s ``key`` is removed, the entity its clients get the key from (None: no quota applies)."""
        overrides, _ = self.resolver(key)
        user = ref.user if ref.user not in (None, DEFAULT) else OTHER_USER
        client_id = ref.client_id if ref.client_id not in (None, DEFAULT) else OTHER_CLIENT
        resolved = overrides.resolve(user, client_id)
        if resolved.level is None:
            return None
        return _winner(resolved.level, user, client_id).replace(OTHER_USER, "<user>").replace(OTHER_CLIENT,
                                                                                             "<client-id>")


def shadow_warnings(after: Mapping[EntityRef, Mapping[str, float]], ref: EntityRef, key: str) -> list[str]:
    """``Shadows(after).warnings(ref, key)`` for one change."""
    return Shadows(after).warnings(ref, key)


def _winner(level: int, user: str, client_id: str) -> str:
    """Kafka's config path of the entity supplying ``level`` for this client."""
    u, c = PRECEDENCE[level - 1]
    return entity_path(user if u == "u" else u, client_id if c == "c" else c)


# ------------------------------------------------------------------ JSON Schema


def json_schema() -> dict[str, Any]:
    """The file's JSON Schema (draft 2020-12), published at ``/api/schema/quotas-file.json``."""
    name = {"type": "string", "minLength": 1, "description": "A name, or '<default>' for Kafka's default entity."}
    byte_rate = {
        "oneOf": [{"type": "integer", "minimum": 1},
                  {"type": "string", "pattern": r"^\s*[0-9]*\.?[0-9]+\s*([KkMmGg][Ii])?[Bb]?(/[Ss])?\s*$"}],
        "description": "Bytes per second: a whole number, or with a binary unit (1536 KiB/s, 1.5 MiB/s).",
    }
    number = {"oneOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "string"}]}

    def scoped(value: dict[str, Any]) -> dict[str, Any]:
        """A value, or ``{value, budgetScope}``: per_broker (Kafka's meaning) or a cluster-wide budget."""
        return {"oneOf": [value, {
            "type": "object", "required": ["value"], "additionalProperties": False,
            "properties": {"value": value, "budgetScope": {"enum": list(BUDGET_SCOPES)}},
            "description": "budgetScope cluster_wide: a budget for the sum over the cluster's brokers.",
        }]}

    config_value = {"type": ["string", "integer", "number", "boolean"]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "quotas-file.json",
        "title": "Cluster quotas file (quotas/v1)",
        "description": "One cluster's client quotas, managed broker and topic configs and KIP-714 client-metrics "
        "subscriptions. A section left out is not managed by the file.",
        "type": "object",
        "required": ["apiVersion", "kind", "cluster"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": API_VERSION},
            "kind": {"const": KIND},
            "cluster": {"type": "string", "minLength": 1},
            "quotas": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["entity"],
                    "minProperties": 2,
                    "additionalProperties": False,
                    "properties": {
                        "entity": {
                            "type": "object",
                            "minProperties": 1,
                            "additionalProperties": False,
                            "properties": {USER: name, CLIENT_ID: name, IP: name},
                            "description": "user and/or client-id, or ip alone.",
                        },
                        "producer_byte_rate": scoped(byte_rate),
                        "consumer_byte_rate": scoped(byte_rate),
                        "request_percentage": scoped(number),
                        "controller_mutation_rate": number,
                        "connection_creation_rate": number,
                    },
                },
            },
            "brokerConfigs": {
                "type": ["object", "null"],
                "propertyNames": {"pattern": r"^([0-9]+|<default>)$"},
                "additionalProperties": {"type": "object", "additionalProperties": config_value},
            },
            "topicConfigs": {
                "type": ["object", "null"],
                "additionalProperties": {"type": "object", "additionalProperties": config_value},
            },
            "clientMetrics": {
                "type": ["array", "null"],
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": False,
                    "properties": {
                        "name": {"type": "string", "minLength": 1, "maxLength": 255},
                        "metrics": {"type": "array", "items": {"type": "string"}},
                        "intervalMs": {"type": "integer", "minimum": 100, "maximum": 3_600_000},
                        "match": {"type": "array", "items": {"type": "string", "pattern": "^[a-z_]+=.*$"}},
                    },
                },
            },
            **_groups.schema(lambda key: number if key == "controller_mutation_rate"  # per broker only
                             else scoped(number if key == "request_percentage" else byte_rate)),
        },
    }
