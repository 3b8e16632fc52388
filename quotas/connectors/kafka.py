"""The Kafka connector: pushes the portal's desired state to a broker with Kafka's own admin APIs.

Quotas go through AlterClientQuotas, broker / topic / client-metrics configs through
IncrementalAlterConfigs; ``describe`` reads them back with DescribeClientQuotas and DescribeConfigs.
Kafka stores no version of ours and has no conditional write, so ``applied_version`` is None (the
portal knows what it pushed) and ``needs_lock`` is True (the portal serializes pushes per target).

Only the configs the portal manages are reported by ``describe`` and removed by a full push: a broker
or topic has many dynamic configs set by its operators (``log.cleaner.threads``, ``retention.ms``)
that the portal must neither report as drift nor delete. ``managed`` decides which ones those are.

Budget scopes (which values are cluster-wide budgets) are not Kafka's: with ``budgets`` (the engine's Redis) they are
written around the Kafka write and read back by ``describe`` (``quotas.connectors.budget_scope``); a push whose
scope write fails is retried whole.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from engine.config import EntityRef
from engine.entities import DEFAULT
from engine.errors import QuotaValidationError
from kafka_wire import (
    BROKER_RESOURCE,
    CLIENT_METRICS_RESOURCE,
    DEFAULT_CLIENT_ID,
    MATCH_DEFAULT,
    MATCH_EXACT,
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
    SaslAuthenticationError,
    raise_for_errors,
)

from .base import (
    BROKER,
    CLIENT_METRICS,
    DEFAULT_BROKER_RESOURCE,
    QUOTA,
    SCOPE_KINDS,
    TOPIC,
    Applied,
    Credentials,
    Delta,
    Item,
    PushError,
    State,
    Target,
    portal_managed,
)
from .budget_scope import BudgetScopes

RESOURCE_TYPE_OF_KIND = {BROKER: BROKER_RESOURCE, TOPIC: TOPIC_RESOURCE, CLIENT_METRICS: CLIENT_METRICS_RESOURCE}
KIND_OF_RESOURCE_TYPE = {v: k for k, v in RESOURCE_TYPE_OF_KIND.items()}
UNKNOWN_TOPIC_OR_PARTITION = 3
#: How long a cluster's broker list (DescribeCluster) is trusted before it is asked again.
BROKERS_TTL_S = 30.0
#: Up to this many changed entities are verified one by one (an exact filter each), more with one full describe.
VERIFY_ENTITIES_ONE_BY_ONE = 8


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
        verify_timeout: float = 15.0,
        budgets: BudgetScopes | None = None,
    ) -> None:
        self.budgets = budgets
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.client_id = client_id or DEFAULT_CLIENT_ID
        self.managed = managed
        self.verify_timeout = verify_timeout
        self._clients: dict[tuple[str, Credentials], AdminClient] = {}
        #: the brokers of a cluster (DescribeCluster), kept BROKERS_TTL_S and dropped when a verification fails
        self._metadata: dict[tuple[str, Credentials], tuple[float, dict[int, str]]] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="kafka-verify")

    def applied_version(self, target: Target) -> int | None:
        """Kafka does not store the portal's version; only the portal knows what it pushed."""
        return None

    def apply(self, target: Target, delta: Delta) -> Applied:
        """Send ``delta``: quotas as one AlterClientQuotas, configs as one IncrementalAlterConfigs.

        A ``full`` delta first describes the target and also removes what it holds beyond ``delta.changes``
        (every quota, every managed config). Both requests are idempotent, so a retry after a partial failure
        is safe. Raises PushError with Kafka's error name for the first entry or resource the broker refused.

        A cluster target (``broker_id`` None) writes through its bootstrap servers, except a broker's own configs,
        which only that broker takes (KRaft answers "Unexpected broker id" elsewhere); the push is applied when every
        broker answers the new values from its own metadata (``answers``). Its budget scopes are written to the
        engine's Redis in two steps around that (``quotas.connectors.budget_scope``): fields joining the scope
        before, fields leaving it after; a Redis that cannot be reached fails the push, retriably.
        """
        changes: dict[Item, str | None] = {i: v for i, v in delta.changes.items() if i.kind not in SCOPE_KINDS}
        scopes = {i: v for i, v in delta.changes.items() if i.kind in SCOPE_KINDS}
        _plan(changes)  # refuse a malformed delta before touching the broker
        budgets = self._budgets_of(target, scopes)
        client = self._client(target)

        def send() -> tuple[bool, dict[str, str]]:
            brokers = self._brokers(client, target)
            if delta.full:
                desired = {item: value for item, value in changes.items() if value is not None}
                for item in self._describe(client, desired, brokers):
                    changes.setdefault(item, None)
            quotas, configs = _plan(changes)
            if quotas:
                raise_for_errors(client.alter_client_quotas(quotas).entries)
            own: dict[int, ConfigResources] = {}
            if target.broker_id is None:
                for (rtype, name), ops in list(configs.items()):
                    if rtype == BROKER_RESOURCE and name != DEFAULT_BROKER_RESOURCE:
                        own.setdefault(int(name), {})[(rtype, name)] = ops
                        del configs[(rtype, name)]
                unknown = sorted(set(own) - set(brokers))
                if unknown:
                    raise PushError(
                        "INVALID_REQUEST",
                        f"{target.label}: no broker {', '.join(map(str, unknown))} in the cluster's metadata "
                        f"(its brokers are {', '.join(map(str, sorted(brokers)))}).",
                        retriable=False,
                    )
            if configs:
                raise_for_errors(client.incremental_alter_configs(configs).responses)
            for node_id, resources in sorted(own.items()):
                raise_for_errors(brokers[node_id].incremental_alter_configs(resources).responses)
            answers = self._verify(target, brokers, changes, delta.version) if target.broker_id is None else {}
            return bool(quotas or configs or own), answers

        try:
            if budgets is None:
                (changed, answers), moved = send(), False
            else:
                (changed, answers), moved = budgets.around(target.cluster, scopes, delta.full, send)
        except KafkaClientError as e:
            raise _push_error(e) from e
        return Applied(changed=changed or moved, version=delta.version, answers=answers)

    def _budgets_of(self, target: Target, scopes: Mapping[Item, str | None]) -> BudgetScopes | None:
        """Where the target's budget scopes go: a Kafka cluster's (``broker_id`` None) to the engine's Redis; None
        when there is none to write (a target without it refuses a push carrying scopes)."""
        if target.broker_id is None and self.budgets is not None:
            return self.budgets
        if scopes:
            raise PushError(
                "INVALID_REQUEST",
                f"{target.label}: the push carries budget scopes, which only a Kafka cluster's target with the "
                "engine's Redis configured (QUOTAS_BUDGET_REDIS_URL) takes.",
                retriable=False,
            )
        return None

    def describe(self, target: Target, desired: Mapping[Item, str]) -> tuple[int | None, State]:
        """What the target holds: every client quota, and the managed dynamic configs of the default broker, of the
        target's broker (a cluster: of each broker, asked itself), and of every topic and client-metrics subscription
        named in ``desired``; a cluster's budget scopes from the engine's Redis. Version: None."""
        client = self._client(target)
        try:
            state = self._describe(client, desired, self._brokers(client, target))
        except KafkaClientError as e:
            raise _push_error(e) from e
        if self.budgets is not None and target.broker_id is None:
            state.update(self.budgets.describe(target.cluster))
        return None, state

    def _brokers(self, client: AdminClient, target: Target) -> dict[int, AdminClient]:
        """The brokers whose own configs the target covers, each with a client to that very broker: the target's
        broker, or for a cluster every broker of its metadata (at the address it advertises on this listener)."""
        if target.broker_id is not None:
            return {target.broker_id: client}
        key = (target.address, target.credentials)
        cached = self._metadata.get(key)
        if cached is None or time.monotonic() - cached[0] > BROKERS_TTL_S:
            cached = (time.monotonic(), dict(client.describe_cluster().addresses))
            self._metadata[key] = cached
        return {
            node_id: self._client(Target(target.cluster, node_id, address, target.credentials))
            for node_id, address in sorted(cached[1].items())
        }

    def _verify(
        self, target: Target, brokers: Mapping[int, AdminClient], changes: Mapping[Item, str | None], version: int
    ) -> dict[str, str]:
        """A Kafka cluster holds its quotas and dynamic configs in its metadata log; a write is applied when every
        broker answers the new values from its own copy. Ask the brokers (all at once) until each does, pausing 2,
        4, 8, 10 ms between rounds (up to 50 ms after the first second); one still behind after ``verify_timeout``
        fails the push, retriably, naming the broker and what it still answers."""
        started = time.monotonic()
        deadline = started + self.verify_timeout
        answers: dict[str, str] = {}
        pending = dict(brokers)
        pause = 0.002
        try:
            while True:
                asked = {b: self._pool.submit(self._behind, c, b, changes) for b, c in sorted(pending.items())}
                for node_id, future in asked.items():
                    behind = future.result()
                    answers[str(node_id)] = f"holds version {version}" if behind is None else behind
                    if behind is None:
                        del pending[node_id]
                if not pending:
                    return answers
                if time.monotonic() >= deadline:
                    detail = "; ".join(f"broker {b}: {answers[str(b)]}" for b in sorted(pending))
                    raise PushError(
                        "REQUEST_TIMED_OUT",
                        f"{target.label}: after {self.verify_timeout:g}s not every broker answers version {version}: "
                        f"{detail}",
                        retriable=True,
                    )
                time.sleep(pause)
                # 10 ms apart while a change is young (the brokers' metadata usually follows within 100 ms: a
                # longer pause only delays "applied"), then backing off to 50 ms
                pause = min(0.01 if time.monotonic() < started + 1.0 else 0.05, pause * 2)
        except KafkaClientError:
            self._metadata.pop((target.address, target.credentials), None)  # a broker left: ask the metadata again
            raise

    def _behind(self, client: AdminClient, node_id: int, changes: Mapping[Item, str | None]) -> str | None:
        """None when the broker answers every changed item's new value (its own configs included), else the first
        item it still answers otherwise. Only what changed is asked: the changed entities' quotas (each with an
        exact, strict filter; all quotas when many changed) and the changed config keys of their resources."""
        named = {i for i in changes if i.kind != BROKER or i.resource in (DEFAULT_BROKER_RESOURCE, str(node_id))}
        held = self._held(client, named)
        for item in sorted(named):
            want, have = changes[item], held.get(item)
            if item.kind == QUOTA and want is not None and have is not None:
                same = float(want) == float(have)
            else:
                same = want == have
            if not same:
                return f"{_item_text(item)} is {have if have is not None else 'unset'} (wants {want or 'unset'})"
        return None

    def _held(self, client: AdminClient, items: set[Item]) -> State:
        """What ``client``'s broker answers for ``items``: their entities' quotas and their configs' keys."""
        state: State = {}
        entities = sorted({i.resource for i in items if i.kind == QUOTA})
        if len(entities) > VERIFY_ENTITIES_ONE_BY_ONE:
            filters: list[list[tuple[str, int, str | None]]] = [[]]
        else:
            filters = [
                [(t, MATCH_DEFAULT if n is None else MATCH_EXACT, n) for t, n in _entity_components(e).items()]
                for e in entities
            ]
        for components in filters:
            response = client.describe_client_quotas(components, strict=bool(components))
            if response.error_code:
                raise KafkaBrokerError(response.error_code, response.error_message)
            for entry in response.entries or ():
                resource = _entity_field({e.entity_type: e.entity_name for e in entry.entity})
                for value in entry.values:
                    state[Item(QUOTA, resource, value.key)] = repr(float(value.value))
        keys: dict[tuple[int, str], set[str]] = {}
        for i in items:
            if i.kind in RESOURCE_TYPE_OF_KIND:
                keys.setdefault((RESOURCE_TYPE_OF_KIND[i.kind], i.resource), set()).add(i.key)
        if keys:
            response = client.describe_configs([(t, n, sorted(k)) for (t, n), k in sorted(keys.items())])
            state.update(self._configs(list(response.results)))
        return state

    def close(self) -> None:
        """Close every broker connection (and the budget scopes' Redis client)."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
        self._metadata.clear()
        if self.budgets is not None:
            self.budgets.close()

    def _client(self, target: Target) -> AdminClient:
        key = (target.address, target.credentials)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                auth = target.credentials
                sasl = (
                    {}
                    if auth.security_protocol == "PLAINTEXT"
                    else {
                        "security_protocol": auth.security_protocol,
                        "sasl_mechanism": auth.sasl_mechanism,
                        "sasl_username": auth.username,
                        "sasl_password": auth.password,
                    }
                )
                try:
                    client = AdminClient(
                        target.address,
                        connect_timeout=self.connect_timeout,
                        request_timeout=self.request_timeout,
                        client_id=self.client_id,
                        **sasl,
                    )
                except ValueError as e:
                    raise PushError("INVALID_REQUEST", f"{target.label}: {e}", retriable=False) from e
                self._clients[key] = client
            return client

    def _describe(
        self, client: AdminClient, desired: Mapping[Item, str], brokers: Mapping[int, AdminClient]
    ) -> State:
        """What ``client``'s broker answers: every quota, the managed configs of the default broker and of the
        topics and subscriptions named in ``desired``; and of each of ``brokers``, its own configs, asked itself."""
        state: State = {}
        response = client.describe_client_quotas((), strict=False)
        if response.error_code:
            raise KafkaBrokerError(response.error_code, response.error_message)
        for entry in response.entries or ():
            resource = _entity_field({e.entity_type: e.entity_name for e in entry.entity})
            for value in entry.values:
                state[Item(QUOTA, resource, value.key)] = repr(float(value.value))

        resources = [(BROKER_RESOURCE, DEFAULT_BROKER_RESOURCE)]
        named = {(RESOURCE_TYPE_OF_KIND[i.kind], i.resource) for i in desired if i.kind in (TOPIC, CLIENT_METRICS)}
        resources += sorted(named)
        results = list(client.describe_configs([(rtype, name, None) for rtype, name in resources]).results)
        for node_id, broker_client in sorted(brokers.items()):
            results += broker_client.describe_configs([(BROKER_RESOURCE, str(node_id), None)]).results
        state.update(self._configs(results))
        return state

    def _configs(self, results: list[Any]) -> State:
        state: State = {}
        for result in results:
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


def _item_text(item: Item) -> str:
    if item.kind == QUOTA:
        return f"{item.key} of {item.resource}"
    return f"{item.kind} {item.resource or '<default>'} {item.key}"


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
    """The client's error as the push pipeline's. A refused login is retried (with the pipeline's backoff), unlike in
    Kafka's own clients: the portal reads its secret again at each push, so a password rotated in Kafka before the
    secret file goes through once the file has the new one, and nothing fails for good meanwhile."""
    retriable = error.retriable or isinstance(error, SaslAuthenticationError)
    return PushError(error.code, error.message, retriable=retriable)
