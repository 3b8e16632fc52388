"""The Kafka connector: pushes the portal's desired state to a broker with Kafka's own admin APIs.

Quotas go through AlterClientQuotas, broker / topic / client-metrics configs through
IncrementalAlterConfigs; ``describe`` reads them back with DescribeClientQuotas and DescribeConfigs.
Kafka stores no version of ours and has no conditional write, so ``applied_version`` is None (the
portal knows what it pushed) and ``needs_lock`` is True (the portal serializes pushes per target).

Only the configs the portal manages are reported by ``describe`` and removed by a full push: a broker
or topic has many dynamic configs set by its operators (``log.cleaner.threads``, ``retention.ms``)
that the portal must neither report as drift nor delete. ``managed`` decides which ones those are.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping

from quotas.engine.config import EntityRef
from quotas.engine.entities import DEFAULT
from quotas.engine.errors import QuotaValidationError

from .base import (
    BROKER,
    CLIENT_METRICS,
    DEFAULT_BROKER_RESOURCE,
    QUOTA,
    TOPIC,
    Applied,
    Delta,
    Item,
    PushError,
    State,
    Target,
    portal_managed,
)
from .kafka_client import (
    BROKER_RESOURCE,
    CLIENT_METRICS_RESOURCE,
    DEFAULT_CLIENT_ID,
    OP_DELETE,
    OP_SET,
    SOURCE_CLIENT_METRICS,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_DYNAMIC_TOPIC,
    TOPIC_RESOURCE,
    AdminClient,
    KafkaBrokerError,
    KafkaClientError,
    raise_for_errors,
)

RESOURCE_TYPE_OF_KIND = {BROKER: BROKER_RESOURCE, TOPIC: TOPIC_RESOURCE, CLIENT_METRICS: CLIENT_METRICS_RESOURCE}
KIND_OF_RESOURCE_TYPE = {v: k for k, v in RESOURCE_TYPE_OF_KIND.items()}
UNKNOWN_TOPIC_OR_PARTITION = 3

class KafkaConnector:
    """Applies and describes the desired state of Kafka brokers (``Target.address`` is ``host:port``).

    One connection per broker address, opened on first use and kept; a failed one is reopened on the next call.
    """

    needs_lock = True

    def __init__(
        self,
        *,
        connect_timeout: float = 5.0,
        request_timeout: float = 30.0,
        client_id: str | None = None,
        managed: Callable[[Item], bool] = portal_managed,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.client_id = client_id or DEFAULT_CLIENT_ID
        self.managed = managed
        self._clients: dict[str, AdminClient] = {}
        self._lock = threading.Lock()

    def applied_version(self, target: Target) -> int | None:
        """Kafka does not store the portal's version; only the portal knows what it pushed."""
        return None

    def apply(self, target: Target, delta: Delta) -> Applied:
        """Send ``delta``: quotas as one AlterClientQuotas, configs as one IncrementalAlterConfigs.

        A ``full`` delta first describes the target and also removes what it holds beyond ``delta.changes``
        (every quota, every managed config). Both requests are idempotent, so a retry after a partial failure
        is safe. Raises PushError with Kafka's error name for the first entry or resource the broker refused.
        """
        changes: dict[Item, str | None] = dict(delta.changes)
        _plan(changes)  # refuse a malformed delta before touching the broker
        client = self._client(target)
        try:
            if delta.full:
                desired = {item: value for item, value in changes.items() if value is not None}
                for item in self._describe(client, target, desired):
                    changes.setdefault(item, None)
            quotas, configs = _plan(changes)
            if quotas:
                raise_for_errors(client.alter_client_quotas(quotas).entries)
            if configs:
                raise_for_errors(client.incremental_alter_configs(configs).responses)
        except KafkaClientError as e:
            raise _push_error(e) from e
        return Applied(changed=bool(quotas or configs), version=delta.version)

    def describe(self, target: Target, desired: Mapping[Item, str]) -> tuple[int | None, State]:
        """What the broker holds: every client quota, and the managed dynamic configs of the default broker, the
        target's broker and every topic and client-metrics subscription named in ``desired``. Version: None."""
        client = self._client(target)
        try:
            return None, self._describe(client, target, desired)
        except KafkaClientError as e:
            raise _push_error(e) from e

    def close(self) -> None:
        """Close every broker connection."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()

    def _client(self, target: Target) -> AdminClient:
        with self._lock:
            client = self._clients.get(target.address)
            if client is None:
                try:
                    client = AdminClient(
                        target.address,
                        connect_timeout=self.connect_timeout,
                        request_timeout=self.request_timeout,
                        client_id=self.client_id,
                    )
                except ValueError as e:
                    raise PushError("INVALID_REQUEST", f"{target.label}: {e}", retriable=False) from e
                self._clients[target.address] = client
            return client

    def _describe(self, client: AdminClient, target: Target, desired: Mapping[Item, str]) -> State:
        state: State = {}
        response = client.describe_client_quotas((), strict=False)
        if response.error_code:
            raise KafkaBrokerError(response.error_code, response.error_message)
        for entry in response.entries or ():
            resource = _entity_field({e.entity_type: e.entity_name for e in entry.entity})
            for value in entry.values:
                state[Item(QUOTA, resource, value.key)] = repr(float(value.value))

        resources = [(BROKER_RESOURCE, DEFAULT_BROKER_RESOURCE)]
        if target.broker_id is not None:
            resources.append((BROKER_RESOURCE, str(target.broker_id)))
        named = {(RESOURCE_TYPE_OF_KIND[i.kind], i.resource) for i in desired if i.kind in (TOPIC, CLIENT_METRICS)}
        resources += sorted(named)
        response = client.describe_configs([(rtype, name, None) for rtype, name in resources])
        for result in response.results:
            if result.error_code == UNKNOWN_TOPIC_OR_PARTITION and result.resource_type == TOPIC_RESOURCE:
                continue  # the topic does not exist (yet): it holds nothing
            if result.error_code:
                raise KafkaBrokerError(result.error_code, result.error_message)
            kind = KIND_OF_RESOURCE_TYPE.get(result.resource_type)
            if kind is None:
                continue
            source = _dynamic_source(result.resource_type, result.resource_name)
            for config in result.configs:
                if config.config_source != source or config.value is None:
                    continue
                item = Item(kind, result.resource_name, config.name)
                if self.managed(item):
                    state[item] = config.value
        return state


def _dynamic_source(resource_type: int, name: str) -> int:
    """The config_source of a config set dynamically on this very resource (the rest are inherited)."""
    if resource_type == BROKER_RESOURCE:
        return SOURCE_DYNAMIC_DEFAULT_BROKER if name == DEFAULT_BROKER_RESOURCE else SOURCE_DYNAMIC_BROKER
    return SOURCE_DYNAMIC_TOPIC if resource_type == TOPIC_RESOURCE else SOURCE_CLIENT_METRICS


def _entity_field(components: Mapping[str, str | None]) -> str:
    """The ``EntityRef.field()`` of an entity as Kafka names it (null name = ``<default>``)."""
    try:
        return EntityRef.parse(components).field()
    except QuotaValidationError:  # an entity the portal cannot name: keep it visible (and removable) as is
        parts = {k: DEFAULT if v is None else v for k, v in components.items()}
        return json.dumps(parts, sort_keys=True, separators=(",", ":"))


def _entity_components(resource: str) -> dict[str, str | None]:
    """Inverse of ``_entity_field``: entity type -> name, None for Kafka's default entity."""
    try:
        parts = json.loads(resource)
    except ValueError:
        parts = None
    if not isinstance(parts, dict) or not parts or not all(isinstance(v, str) and v for v in parts.values()):
        raise PushError("INVALID_REQUEST", f"Quota resource {resource!r} is not an entity's JSON.", retriable=False)
    return {k: None if v == DEFAULT else v for k, v in parts.items()}


QuotaEntries = list[tuple[dict[str, str | None], dict[str, float | None]]]
ConfigResources = dict[tuple[int, str], list[tuple[str, int, str | None]]]


def _plan(changes: Mapping[Item, str | None]) -> tuple[QuotaEntries, ConfigResources]:
    """Group the changes as AlterClientQuotas entries and IncrementalAlterConfigs resources, in a stable order."""
    quotas: dict[str, dict[str, float | None]] = {}
    configs: ConfigResources = {}
    for item in sorted(changes):
        value = changes[item]
        if item.kind == QUOTA:
            quotas.setdefault(item.resource, {})[item.key] = None if value is None else _quota_value(item, value)
        elif item.kind in RESOURCE_TYPE_OF_KIND:
            _check_config_resource(item)
            op = (item.key, OP_DELETE, None) if value is None else (item.key, OP_SET, str(value))
            configs.setdefault((RESOURCE_TYPE_OF_KIND[item.kind], item.resource), []).append(op)
        else:
            raise PushError("INVALID_REQUEST", f"Unknown item kind {item.kind!r} in {item}.", retriable=False)
    entries = [(_entity_components(resource), ops) for resource, ops in quotas.items()]
    return entries, configs


def _quota_value(item: Item, value: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        message = f"Quota {item} has a non-numeric value {value!r}."
        raise PushError("INVALID_REQUEST", message, retriable=False) from None


def _check_config_resource(item: Item) -> None:
    if item.kind == BROKER and item.resource != DEFAULT_BROKER_RESOURCE and not item.resource.isdigit():
        raise PushError("INVALID_REQUEST", f"Broker resource {item.resource!r} is not a broker id.", retriable=False)
    if item.kind != BROKER and not item.resource:
        raise PushError("INVALID_REQUEST", f"A {item.kind} config needs a resource name: {item}.", retriable=False)
    if not item.key:
        raise PushError("INVALID_REQUEST", f"A config name is empty: {item}.", retriable=False)


def _push_error(error: KafkaClientError) -> PushError:
    return PushError(error.code, error.message, retriable=error.retriable)
