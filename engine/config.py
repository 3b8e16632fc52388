"""Quota configuration held in the engine's namespaces in Redis, and the engine facade.

A namespace is one broker (Kafka's per-broker quotas) or a cluster-wide budget
that every broker shares. The config of a namespace is one Redis hash plus a
version; a change is validated whole, applied atomically with a new version and
announced on a pub/sub channel, so every engine user reloads it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from .entities import (
    DEFAULT,
    TYPE_OF_KEY,
    ClientEntity,
    QuotaOverrides,
    QuotaType,
    normalize_ip,
    validate_quota_key,
    validate_quota_value,
)
from .errors import EngineUnavailable, QuotaValidationError
from .managers import FAIL_OPEN, ClientQuotaManager, manager_for
from .redis_backend import UNAVAILABLE, RedisBackend

log = logging.getLogger(__name__)

USER, CLIENT_ID, IP = "user", "client-id", "ip"
KEY_SEP = "\x1f"  # between an entity's field and a quota key in the config hash


def namespace_for_broker(cluster: str, broker_id: int | str) -> str:
    """Kafka's quotas are per broker: each broker's sensors and config live in their own namespace."""
    return f"{cluster}.broker-{broker_id}"


def cluster_namespace(cluster: str) -> str:
    """One budget shared by all brokers of a cluster (which Kafka itself cannot do)."""
    return f"{cluster}.cluster"


@dataclass(frozen=True)
class EntityRef:
    """An entity as AlterClientQuotas names it: {"user": ..., "client-id": ...} or {"ip": ...}."""

    user: str | None = None
    client_id: str | None = None
    ip: str | None = None

    def __post_init__(self) -> None:
        """Kafka's entity rules hold for every EntityRef, however it was built; ip addresses are canonical."""
        parts = {USER: self.user, CLIENT_ID: self.client_id, IP: self.ip}
        named = {k: v for k, v in parts.items() if v is not None}
        if not named:
            raise QuotaValidationError("An entity names at least one of user, client-id or ip.")
        if self.ip is not None and len(named) > 1:
            raise QuotaValidationError("An ip entity cannot be combined with user or client-id.")
        for kind, value in named.items():
            if not isinstance(value, str):
                raise QuotaValidationError(f"The {kind} name must be a string, got {value!r}.")
            if value == "":
                raise QuotaValidationError(f"The {kind} name must not be empty; use {DEFAULT!r} for the default.")
        if self.ip is not None and self.ip != DEFAULT:
            object.__setattr__(self, "ip", normalize_ip(self.ip))

    @classmethod
    def parse(cls, components: Mapping[str, str | None]) -> EntityRef:
        unknown = set(components) - {USER, CLIENT_ID, IP}
        if unknown:
            raise QuotaValidationError(f"Unknown entity type(s) {sorted(unknown)}; use user, client-id or ip.")
        for kind, value in components.items():
            if value is not None and not isinstance(value, str):
                raise QuotaValidationError(f"The {kind} name must be a string, got {value!r}.")

        def name(kind: str) -> str | None:
            if kind not in components:
                return None
            value = components[kind]
            return DEFAULT if value is None else value  # Kafka names the default entity with null

        return cls(name(USER), name(CLIENT_ID), name(IP))

    @property
    def kind(self) -> str:
        return "ip" if self.ip is not None else "client"

    def field(self) -> str:
        """A stable hash field: 'user=alice,client-id=<default>' with names JSON-escaped."""
        parts = [(USER, self.user), (CLIENT_ID, self.client_id), (IP, self.ip)]
        return json.dumps({k: v for k, v in parts if v is not None}, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_field(cls, field: str) -> EntityRef:
        return cls.parse(json.loads(field))


@dataclass(frozen=True)
class AlterOp:
    """One AlterClientQuotas op: set ``key`` to ``value``, or remove it when ``value`` is None."""

    entity: EntityRef
    key: str
    value: float | int | None


#: Sets/deletes hash fields with a new version and announces it; shared by the engine's config stores.
ALTER_LUA = """
-- KEYS[1] config hash, KEYS[2] version; ARGV: channel, then field/value pairs ('' = delete the field)
local version = redis.call('INCR', KEYS[2])
for i = 2, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
redis.call('PUBLISH', ARGV[1], version)
return version
"""


class VersionedHashStore:
    """One Redis hash of validated settings with a version and a pub/sub channel: the engine's config stores.

    Subclasses validate and encode; this class reads the hash and its version in one transaction
    and writes a batch of fields (``''`` deletes one) in one script that bumps and announces the version.
    """

    def __init__(self, client: redis.Redis, namespace: str, name: str) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.hash_key = f"qe:{{{namespace}}}:{name}"
        self.version_key = f"qe:{{{namespace}}}:{name}-version"
        self.channel = f"qe:{name}:{namespace}"
        self._alter = client.register_script(ALTER_LUA)

    def _read(self) -> tuple[int, dict[bytes, bytes]]:
        try:
            with self.client.pipeline(transaction=True) as p:
                p.get(self.version_key)
                p.hgetall(self.hash_key)
                version, raw = p.execute()
        except UNAVAILABLE as e:
            raise EngineUnavailable(f"Redis is unreachable for the {self.name} of {self.namespace}: {e}") from e
        return int(version or 0), raw

    def version(self) -> int:
        try:
            return int(self.client.get(self.version_key) or 0)
        except UNAVAILABLE as e:
            raise EngineUnavailable(f"Redis is unreachable for the {self.name} of {self.namespace}: {e}") from e

    def _write(self, fields: list[Any]) -> int:
        """Set the field/value pairs (``''`` deletes) in one script; returns the new version."""
        try:
            return int(self._alter(keys=[self.hash_key, self.version_key], args=[self.channel, *fields]))
        except UNAVAILABLE as e:
            raise EngineUnavailable(
                f"Redis did not answer: the change to the {self.name} may or may not have been applied; "
                f"read it back: {e}"
            ) from e


class QuotaConfigStore(VersionedHashStore):
    """The configured quotas of one namespace, in Redis."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        super().__init__(client, namespace, "config")

    def load(self) -> tuple[int, dict[EntityRef, dict[str, float]]]:
        """The version and every entity's quotas, read in one transaction."""
        version, raw = self._read()
        config: dict[EntityRef, dict[str, float]] = {}
        for f, v in raw.items():
            entity, _, key = f.decode().rpartition(KEY_SEP)
            try:
                ref = EntityRef.from_field(entity)
            except (QuotaValidationError, ValueError):
                log.warning("Skipping an invalid quota entity %r in %s", entity, self.hash_key)
                continue
            config.setdefault(ref, {})[key] = float(v)
        return version, config

    def alter(self, ops: Iterable[AlterOp], validate_only: bool = False) -> int:
        """Validate every op first, then apply all of them in one atomic script: a batch is whole or nothing."""
        ops = list(ops)
        seen: set[tuple[EntityRef, str]] = set()
        for op in ops:
            if (op.entity, op.key) in seen:
                raise QuotaValidationError(f"Key {op.key!r} is altered twice for the same entity {op.entity.field()}.")
            seen.add((op.entity, op.key))
            if op.value is not None:
                validate_quota_value(op.key, op.value, op.entity.kind)
            else:
                validate_quota_key(op.key, op.entity.kind)
        if validate_only or not ops:
            return self.version()
        # one field per (entity, key): a change never reads and rewrites a neighbour's value
        fields: list[Any] = []
        for op in ops:
            fields += [op.entity.field() + KEY_SEP + op.key, "" if op.value is None else repr(float(op.value))]
        return self._write(fields)


class QuotaEngine:
    """The four client-quota managers of one namespace, fed by its config store.

    Decisions read config from memory (as a broker does); ``refresh()`` reloads it
    when the stored version moved, which a pub/sub listener or a caller triggers.
    """

    def __init__(
        self,
        client: redis.Redis,
        namespace: str,
        *,
        samples: int = 11,
        window_s: int = 1,
        fail_mode: str = FAIL_OPEN,
        engine_clock: bool = False,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.store = QuotaConfigStore(client, namespace)
        self.backend = RedisBackend(client)
        self.settings = {"samples": samples, "window_s": window_s, "fail_mode": fail_mode, "engine_clock": engine_clock}
        self.version = -1
        self.managers: dict[QuotaType, ClientQuotaManager] = {}
        self._build({})

    def _build(self, config: Mapping[EntityRef, Mapping[str, float]]) -> None:
        """Load a config into the managers in place: a manager a caller holds sees every reload.

        Kafka's ``quotaTypesEnabled`` is only ever OR-ed in, so the new overrides keep every
        level the old ones had enabled (removing the last quota keeps recording, as in Kafka).
        """
        if not self.managers:
            self.managers = {
                qt: manager_for(qt, self.backend, namespace=self.namespace, **self.settings)  # type: ignore[arg-type]
                for qt in QuotaType
            }
        fresh = {qt: QuotaOverrides() for qt in QuotaType}
        for entity, values in config.items():
            if entity.kind != "client":
                continue
            for key, value in values.items():
                qt = TYPE_OF_KEY.get(key)
                if qt is not None:
                    fresh[qt].update(ClientEntity(entity.user, entity.client_id), value)
        for qt, manager in self.managers.items():
            fresh[qt].types_enabled |= manager.overrides.types_enabled
            manager.overrides = fresh[qt]
            manager._resolved.clear()

    def refresh(self, force: bool = False) -> bool:
        """Reload the config if its version changed; True when it did. Usage is never reset by a reload."""
        if not force and self.store.version() == self.version:
            return False
        version, config = self.store.load()
        self._build(config)
        self.version = version
        return True

    def manager(self, quota_type: QuotaType | str) -> ClientQuotaManager:
        return self.managers[QuotaType(quota_type)]

    def sweep(self, now_ms: int) -> int:
        """Give back the memory of this namespace's sensors idle for a whole expiry (see RedisBackend.sweep)."""
        return self.backend.sweep(f"qe:{{{self.namespace}|*", now_ms)

    def listen(self) -> redis.client.PubSub:
        """A subscription to this namespace's config changes; call refresh() on each message."""
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.store.channel)
        return pubsub

    def effective(self, user: str, client_id: str) -> dict[str, dict[str, Any]]:
        """Per key: the bound that applies, the precedence level that supplied it and the levels skipped."""
        result = {}
        for qt, m in self.managers.items():
            r = m.resolve(user, client_id)
            result[qt.config_key] = {"value": r.bound, "level": r.level, "skipped": list(r.skipped), "tags": r.tags}
        return result


__all__ = [
    "AlterOp",
    "EntityRef",
    "QuotaConfigStore",
    "QuotaEngine",
    "cluster_namespace",
    "namespace_for_broker",
]
