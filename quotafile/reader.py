"""Reading a quota file: YAML to ``QuotaState``, every error with its line and key (no Django)."""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor

from engine.config import CLIENT_ID, IP, USER, EntityRef
from engine.entities import (
    DEFAULT,
    entity_path,
)
from engine.entities import validate_quota_value as _validate_value
from engine.errors import QuotaEngineError
from engine.units import parse_quota_value
from kip714.subscriptions import INTERVAL_MS_DEFAULT, validate_subscription
from quotafile import groups as _groups
from quotafile.common import (
    BUDGET_SCOPES,
    CLUSTER_WIDE,
    PER_BROKER,
    VALUE_FIELDS,
    _line,
)
from quotafile.state import (
    _LOADER,
    API_VERSION,
    BUDGET_KEYS,
    ENTITY_KEYS,
    INTERVAL,
    KIND,
    MATCH,
    MAX_TEXT,
    METRICS,
    SUBSCRIPTION_FIELDS,
    TOP_KEYS,
    FileError,
    InvalidQuotaFile,
    QuotaState,
    Subscription,
)


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
