"""A namespace's whole desired state, applied at a version: where the portal's pushes land in the engine.

The portal numbers every committed change of a cluster (its desired-state version). A push brings a
namespace to a version, either whole or as the items changed since the version it holds; one script
(``lua/apply_state.lua``) checks the version and writes every store at once, so a push lands entirely
or not at all, an older or repeated push is a no-op, and every engine user hears of the stores that
changed (each store's pub/sub channel). Each application is appended to a push log, so anyone can
check that no version was applied twice.

Items are ``(kind, resource, key) -> text`` (the connectors' ``Item``):

- ``quota``: ``resource`` is ``EntityRef.field()``; stored in the ``config`` hash read by ``QuotaEngine``;
- ``broker``: ``resource`` ``""`` (the default broker) or a broker id; kept in ``broker-configs`` as
  ``<default>|key`` / ``<id>|key``; the replication rates that apply to the namespace's broker (its own,
  else the default's) are derived into ``replication-throttles`` for ``ReplicationThrottles``;
- ``topic``: a topic's throttled-replica lists, in ``replication-throttles`` as ``topic|<topic>|<key>``;
- ``client-metrics``: a KIP-714 subscription's configs, in ``client-metrics`` as ``<name>|<key>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import redis

from .config import KEY_SEP, EntityRef, VersionedHashStore
from .entities import validate_quota_value
from .errors import EngineUnavailable, QuotaValidationError
from .redis_backend import UNAVAILABLE, redis_error
from .replication import BROKER_RATE_KEYS, TOPIC_REPLICA_KEYS, ReplicationThrottleStore, ThrottleOp

QUOTA, BROKER, TOPIC, CLIENT_METRICS = "quota", "broker", "topic", "client-metrics"
DEFAULT_BROKER = "<default>"
STORES = ("config", "broker-configs", "replication-throttles", "client-metrics")
DELTA, FULL, FORCE = "delta", "full", "force"
APPLY_STATE_LUA = (Path(__file__).parent / "lua" / "apply_state.lua").read_text()

ItemKey = tuple[str, str, str]


class NeedsFullState(QuotaValidationError):
    """A delta was pushed on top of a version the namespace does not hold (it lost its state): push it whole."""

    code = "NEEDS_FULL_STATE"


class PushRecord(NamedTuple):
    """One application, from the push log: the version held before, the version applied, how, and when (ms)."""

    held: int
    version: int
    mode: str
    at_ms: int


class BrokerConfigStore(VersionedHashStore):
    """The broker configs of a namespace as pushed (``<default>|key`` and ``<id>|key``), versioned."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        super().__init__(client, namespace, "broker-configs")

    def load(self) -> dict[str, dict[str, str]]:
        """broker resource (``<default>`` or an id) -> key -> value."""
        _, raw = self._read()
        out: dict[str, dict[str, str]] = {}
        for f, v in raw.items():
            resource, _, key = f.decode().partition("|")
            out.setdefault(resource, {})[key] = v.decode()
        return out

    def effective(self, broker_id: int | None) -> dict[str, str]:
        """The configs that apply to one broker: the default broker's, overlaid with its own (Kafka's order)."""
        loaded = self.load()
        own = loaded.get(str(broker_id), {}) if broker_id is not None else {}
        return {**loaded.get(DEFAULT_BROKER, {}), **own}


def _field(kind: str, resource: str, key: str) -> tuple[int, str]:
    """The store (index in STORES) and hash field of an item."""
    if kind == QUOTA:
        return 0, resource + KEY_SEP + key
    if kind == BROKER:
        return 1, f"{resource or DEFAULT_BROKER}|{key}"
    if kind == TOPIC:
        return 2, f"topic|{resource}|{key}"
    if kind == CLIENT_METRICS:
        return 3, f"{resource}|{key}"
    raise QuotaValidationError(f"Unknown item kind {kind!r}; use quota, broker, topic or client-metrics.")


def _validated(kind: str, resource: str, key: str, value: str | None) -> str | None:
    """The value as stored, after the engine's own rules; None deletes."""
    if kind == QUOTA:
        entity = EntityRef.from_field(resource)
        if value is None:
            return None
        try:
            number = float(value)
        except ValueError:
            raise QuotaValidationError(f"{key} of {resource} must be a number, got {value!r}.") from None
        return repr(validate_quota_value(key, number, entity.kind))
    if kind == BROKER:
        if resource and not resource.isdigit():
            raise QuotaValidationError(f"A broker resource is '' (the default broker) or an id, not {resource!r}.")
        if value is not None and key in BROKER_RATE_KEYS:
            return ReplicationThrottleStore.validate(ThrottleOp(key, value)) or None
        return value
    if kind == TOPIC:
        if key not in TOPIC_REPLICA_KEYS:
            raise QuotaValidationError(f"The engine keeps only throttled-replica lists of topics, not {key!r}.")
        return ReplicationThrottleStore.validate(ThrottleOp(key, value, resource)) or None
    if kind == CLIENT_METRICS:
        if not resource or "|" in resource:
            raise QuotaValidationError(f"A client-metrics resource is a non-empty name without '|', not {resource!r}.")
        return value
    raise QuotaValidationError(f"Unknown item kind {kind!r}; use quota, broker, topic or client-metrics.")


class NamespaceState:
    """The desired state of one namespace (a broker's, or a cluster's shared one), applied by version."""

    def __init__(self, client: redis.Redis, namespace: str, broker_id: int | None = None) -> None:
        self.client = client
        self.namespace = namespace
        self.broker_id = broker_id
        self.desired_key = f"qe:{{{namespace}}}:desired-version"
        self.log_key = f"qe:{{{namespace}}}:push-log"
        self.stores = [VersionedHashStore(client, namespace, name) for name in STORES]
        self._apply = client.register_script(APPLY_STATE_LUA)

    def _keys(self) -> list[str]:
        keys = [self.desired_key, self.log_key]
        for s in self.stores:
            keys += [s.hash_key, s.version_key]
        return keys

    def applied_version(self) -> int:
        """The desired-state version the namespace holds; -1 before the first push (or after losing its data)."""
        try:
            return int(self.client.get(self.desired_key) or -1)
        except UNAVAILABLE as e:
            raise EngineUnavailable(f"Redis is unreachable for namespace {self.namespace}: {e}") from e

    def apply(
        self,
        version: int,
        changes: Mapping[ItemKey, str | None],
        *,
        base: int = -1,
        mode: str = DELTA,
    ) -> tuple[bool, int]:
        """Bring the namespace to ``version``; returns (changed, the version it holds now).

        ``delta``: ``changes`` are the items changed after ``base`` (None deletes); refused with NeedsFullState
        when the namespace holds less than ``base``. ``full``: ``changes`` is the whole state. Both are no-ops
        at or below the version held. ``force`` writes the whole state whatever is held (healing drift).
        Every item is validated before anything is written.
        """
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise QuotaValidationError(f"A desired-state version is an integer >= 0, got {version!r}.")
        if mode not in (DELTA, FULL, FORCE):
            raise QuotaValidationError(f"Unknown push mode {mode!r}; use delta, full or force.")
        per_store: list[list[str]] = [[], [], [], []]
        for (kind, resource, key), value in changes.items():
            stored = _validated(kind, resource, key, value)
            if stored is None and mode != DELTA:
                continue  # a whole state holds no deletions: what is absent is removed
            index, f = _field(kind, resource, key)
            per_store[index] += [f, "-" if stored is None else "=" + stored]
        args: list[object] = [self.namespace, version, base, mode, "" if self.broker_id is None else self.broker_id]
        args += [len(s) // 2 for s in per_store]
        for s in per_store:
            args += s
        try:
            status, held = self._apply(keys=self._keys(), args=args)
        except UNAVAILABLE as e:
            raise EngineUnavailable(
                f"Redis did not answer: the push to {self.namespace} may or may not have landed; retry it: {e}"
            ) from e
        except redis.exceptions.ResponseError as e:
            raise redis_error(e, f"The push to {self.namespace} failed") from e
        if status == -1:
            raise NeedsFullState(f"{self.namespace} holds version {held}, not {base}: push the whole state.")
        return bool(status), int(held)

    def read(self) -> tuple[int, dict[ItemKey, str]]:
        """The version held and every item, read in one transaction (what drift detection compares)."""
        try:
            with self.client.pipeline(transaction=True) as p:
                p.get(self.desired_key)
                for s in self.stores:
                    p.hgetall(s.hash_key)
                version, *hashes = p.execute()
        except UNAVAILABLE as e:
            raise EngineUnavailable(f"Redis is unreachable for namespace {self.namespace}: {e}") from e
        items: dict[ItemKey, str] = {}
        for index, raw in enumerate(hashes):
            for f, v in raw.items():
                text, value = f.decode(), v.decode()
                if index == 0:
                    resource, _, key = text.rpartition(KEY_SEP)
                    items[(QUOTA, resource, key)] = value
                elif index == 1:
                    resource, _, key = text.partition("|")
                    items[(BROKER, "" if resource == DEFAULT_BROKER else resource, key)] = value
                elif index == 2:
                    parts = text.split("|")
                    if parts[0] == "topic":  # broker|... rates are derived from broker-configs, not pushed
                        items[(TOPIC, parts[1], parts[2])] = value
                else:
                    resource, _, key = text.partition("|")
                    items[(CLIENT_METRICS, resource, key)] = value
        return int(version or -1), items

    def history(self, limit: int = 10_000) -> list[PushRecord]:
        """The push log, oldest first (the last 10,000 applications are kept)."""
        try:
            raw = self.client.lrange(self.log_key, 0, limit - 1)
        except UNAVAILABLE as e:
            raise EngineUnavailable(f"Redis is unreachable for namespace {self.namespace}: {e}") from e
        out = []
        for line in reversed(raw):
            held, version, mode, at = line.decode().split()
            out.append(PushRecord(int(held), int(version), mode, int(at)))
        return out


__all__ = [
    "BROKER",
    "BrokerConfigStore",
    "CLIENT_METRICS",
    "NamespaceState",
    "NeedsFullState",
    "PushRecord",
    "QUOTA",
    "TOPIC",
]
