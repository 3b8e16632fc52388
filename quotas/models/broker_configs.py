"""Desired broker and topic configs of a cluster: connection limits (KIP-612) and replication throttles.

Kafka keeps these as dynamic configs of a broker (``/config/brokers/<id>``), of every broker
(``/config/brokers/<default>``) and of a topic (``/config/topics/<name>``), changed through
IncrementalAlterConfigs. The rules are the engine's: ``ConnectionConfig.from_props`` judges the
connection configs of the *combined* state (a per-broker entry overrides the cluster default, and
``max.connections.per.ip=0`` is only valid with overrides, so a value alone cannot be judged), and
``ReplicationThrottleStore.validate`` judges the throttle rates and throttled-replica lists. This
module stores what passed them, whole or nothing, under the cluster's desired-state version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from engine.connections import ConnectionConfig
from engine.errors import QuotaEngineError, QuotaValidationError
from engine.replication import (
    BROKER_RATE_KEYS,
    TOPIC_REPLICA_KEYS,
    ReplicationThrottleStore,
    ThrottleOp,
    validate_broker_id,
    validate_topic_name,
)
from quotas.choices import QuotaScope
from quotas.connectors.base import BROKER, TOPIC, Item
from quotas.models.audit import AuditAction, record
from quotas.models.clusters import Broker, Cluster
from quotas.models.pushes import DesiredStateVersion

DEFAULT_BROKER = "<default>"
SET, DELETE = "SET", "DELETE"
#: Keys ``from_props`` reads but the portal derives from the cluster (listeners) or Kafka does not change
#: dynamically (the quota window), so a batch may not set them.
RESERVED_KEYS = frozenset(
    {"listeners", "inter.broker.listener.name", "quota.window.num", "quota.window.size.seconds"}
)


class BrokerConfig(models.Model):
    """One dynamic config of one broker, or of every broker (``broker`` NULL: Kafka's ``<default>`` broker)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="broker_configs")
    broker = models.ForeignKey(
        Broker, null=True, blank=True, on_delete=models.CASCADE, related_name="configs", help_text="Empty = default."
    )
    key = models.CharField(max_length=255)
    value = models.TextField(blank=True, help_text="As Kafka stores it: text.")
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "pk"]
        # NULLs are distinct in SQL unique indexes, so the default broker's uniqueness is its own partial index.
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "broker", "key"],
                condition=Q(broker__isnull=False),
                name="quotas_broker_config_unique_key",
            ),
            models.UniqueConstraint(
                fields=["cluster", "key"], condition=Q(broker__isnull=True), name="quotas_broker_config_unique_default"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}:{broker_path(self.broker.broker_id if self.broker else None)} {self.key}"


class TopicConfig(models.Model):
    """One replication config of a topic (its throttled-replica lists)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="topic_configs")
    topic = models.CharField(max_length=249)
    key = models.CharField(max_length=64)
    value = models.TextField(blank=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "topic", "key"], name="quotas_topic_config_unique_key")
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}:/config/topics/{self.topic} {self.key}"


def broker_path(broker_id: int | None) -> str:
    return f"/config/brokers/{DEFAULT_BROKER if broker_id is None else broker_id}"


class InvalidConfig(QuotaValidationError):
    """A config name or value Kafka would refuse (IncrementalAlterConfigs answers INVALID_CONFIG); nothing changed."""

    code = "INVALID_CONFIG"

    def __init__(self, message: str, key: str | None = None, resource: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.resource = resource


@dataclass(frozen=True)
class ConfigResource:
    """A broker (``broker_id`` None = the default broker) or a topic."""

    broker_id: int | None = None
    topic: str | None = None

    @property
    def is_topic(self) -> bool:
        return self.topic is not None

    @property
    def path(self) -> str:
        return f"/config/topics/{self.topic}" if self.topic is not None else broker_path(self.broker_id)


@dataclass(frozen=True)
class ConfigOp:
    """One IncrementalAlterConfigs op: SET ``key`` to ``value`` or DELETE it (back to Kafka's default)."""

    key: str
    value: Any = None
    op: str = SET


@dataclass
class ConfigOutcome:
    """The resource's configs after the batch (or as they would be), what changed, and the cluster's version."""

    version: int
    changed: bool
    configs: dict[str, str]
    changes: list[tuple[str, str | None, str | None]] = field(default_factory=list)  # (key, before, after)


def _check_request(cluster: Cluster, resource: ConfigResource, ops: Sequence[ConfigOp]) -> Broker | None:
    """The request's shape (INVALID_REQUEST, as Kafka answers a malformed request): the broker, ops, duplicates."""
    broker = None
    if resource.is_topic:
        validate_topic_name(resource.topic)
    elif resource.broker_id is not None:
        validate_broker_id(resource.broker_id)
        if cluster.scope == QuotaScope.CLUSTER_WIDE:
            raise QuotaValidationError(
                f"Cluster {cluster.name!r} is cluster_wide: its brokers share one namespace, so set broker configs "
                "on the default broker (broker_id null)."
            )
        broker = Broker.objects.filter(cluster=cluster, broker_id=resource.broker_id).first()
        if broker is None:
            raise QuotaValidationError(
                f"Cluster {cluster.name!r} has no broker {resource.broker_id}; use null for the default broker."
            )
    if not ops:
        raise QuotaValidationError("Give at least one op.")
    seen: set[str] = set()
    for op in ops:
        if op.op not in (SET, DELETE):
            raise QuotaValidationError(f"Unknown op {op.op!r} for {op.key!r}; use SET or DELETE.")
        if op.key in seen:
            raise QuotaValidationError(f"Error due to duplicate config keys: {op.key!r} is altered twice.")
        seen.add(op.key)
        if op.op == SET and op.value is None:
            raise QuotaValidationError(f"{op.key} needs a value; to remove it use op DELETE.")
    return broker


def _broker_rows(cluster: Cluster) -> dict[int | None, dict[str, str]]:
    """Every broker-level config of the cluster, by broker id (None = default)."""
    rows: dict[int | None, dict[str, str]] = {}
    for broker_id, key, value in BrokerConfig.objects.filter(cluster=cluster).values_list(
        "broker__broker_id", "key", "value"
    ):
        rows.setdefault(broker_id, {})[key] = value
    return rows


def _stored_text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else str(value)


def _apply_ops(
    resource: ConfigResource, current: Mapping[str, str], ops: Sequence[ConfigOp]
) -> tuple[dict[str, str], dict[str, Any]]:
    """The resource's configs after the ops, and the raw values of the connection keys set (judged combined).

    Replication keys are judged one by one by the engine's store validator and kept in its canonical text
    (an empty replica list is Kafka's default, so it is stored as a delete, as the engine's store does).
    """
    after = dict(current)
    raw: dict[str, Any] = {}
    for op in ops:
        if op.op == DELETE:
            after.pop(op.key, None)
            continue
        if resource.is_topic or op.key in BROKER_RATE_KEYS or op.key in TOPIC_REPLICA_KEYS:
            try:
                stored = ReplicationThrottleStore.validate(ThrottleOp(op.key, op.value, resource.topic))
            except QuotaEngineError as e:
                raise InvalidConfig(e.message, op.key, resource.path) from e
            if stored:
                after[op.key] = stored
            else:
                after.pop(op.key, None)
        elif op.key in RESERVED_KEYS:
            raise InvalidConfig(
                f"{op.key} is not a dynamic config the portal sets: listeners come from the cluster's listeners "
                "and the quota window is static in Kafka.",
                op.key,
                resource.path,
            )
        else:
            raw[op.key] = op.value
            after[op.key] = _stored_text(op.value)
    return after, raw


def _check_connections(
    cluster: Cluster, brokers: Mapping[int | None, Mapping[str, str]], raw: Mapping[str, Any], changed: int | None
) -> None:
    """``ConnectionConfig.from_props`` over the default broker and every broker's combined configs.

    A broker's effective configs are the default's overlaid with its own (Kafka's precedence); the values
    just set are judged as sent (``raw``), so the engine sees e.g. a JSON number rather than its text.
    """
    listeners = list(cluster.listeners.all())
    base: dict[str, object] = {"listeners": ",".join(lst.name for lst in listeners) or "PLAINTEXT"}
    inter = next((lst.name for lst in listeners if lst.is_inter_broker), None)
    if inter is not None:
        base["inter.broker.listener.name"] = inter
    default = brokers.get(None, {})
    for broker_id in sorted({None, *brokers}, key=lambda b: -1 if b is None else b):
        own = brokers.get(broker_id, {})
        merged: dict[str, object] = {**default, **own} if broker_id is not None else dict(default)
        props = {k: v for k, v in merged.items() if k not in BROKER_RATE_KEYS}
        if broker_id == changed:
            props.update({k: v for k, v in raw.items() if k in props})
        try:
            ConnectionConfig.from_props({**base, **props})
        except QuotaEngineError as e:
            where = broker_path(broker_id)
            key = next((k for k in raw if k in e.message), None)
            raise InvalidConfig(f"{e.message} (the combined configs of {where})", key, where) from e


def alter_configs(
    cluster: Cluster,
    resource: ConfigResource,
    ops: Sequence[ConfigOp],
    actor: AbstractBaseUser | None,
    *,
    validate_only: bool = False,
) -> ConfigOutcome:
    """IncrementalAlterConfigs on the desired state: validated whole, applied whole, versioned and audited.

    The cluster's version row is locked first, so the combined validation sees the rows this batch replaces
    and two batches on one cluster cannot each pass against a state the other is changing. A batch that
    changes nothing keeps the version; one that does bumps it once and adds an audit entry per changed key.
    """
    broker = _check_request(cluster, resource, ops)
    with transaction.atomic():
        state = DesiredStateVersion.lock(cluster) if not validate_only else None
        if resource.is_topic:
            rows = TopicConfig.objects.filter(cluster=cluster, topic=resource.topic)
            current = dict(rows.values_list("key", "value"))
            after, _ = _apply_ops(resource, current, ops)
        else:
            brokers = _broker_rows(cluster)
            current = dict(brokers.get(resource.broker_id, {}))
            after, raw = _apply_ops(resource, current, ops)
            _check_connections(cluster, {**brokers, resource.broker_id: after}, raw, resource.broker_id)
        changes = [
            (key, current.get(key), after.get(key))
            for key in sorted(set(current) | set(after))
            if current.get(key) != after.get(key)
        ]
        if validate_only:
            found = DesiredStateVersion.objects.filter(cluster=cluster).first()
            return ConfigOutcome(found.version if found else 0, False, after, changes)
        assert state is not None
        if not changes:
            return ConfigOutcome(state.version, False, after, changes)
        _write(cluster, resource, broker, changes)
        if resource.is_topic:
            kind, name = TOPIC, resource.topic or ""
        else:
            kind, name = BROKER, "" if resource.broker_id is None else str(resource.broker_id)
        version = state.bump({Item(kind, name, key): new for key, _old, new in changes})
        for key, old, new in changes:
            record(
                AuditAction.CONFIG_ALTERED,
                actor,
                cluster=cluster,
                entity=resource.path,
                key=key,
                before=old,
                after=new,
                comment=f"desired-state version {version}",
            )
    return ConfigOutcome(version, True, after, changes)


def _write(
    cluster: Cluster, resource: ConfigResource, broker: Broker | None, changes: Sequence[tuple[str, Any, Any]]
) -> None:
    """Store the validated changes of one resource (None after = delete the row)."""
    if resource.is_topic:
        rows: models.QuerySet[Any] = TopicConfig.objects.filter(cluster=cluster, topic=resource.topic)
        make: dict[str, Any] = {"cluster": cluster, "topic": resource.topic}
        model: type[models.Model] = TopicConfig
    else:
        rows = BrokerConfig.objects.filter(cluster=cluster, broker=broker)
        make = {"cluster": cluster, "broker": broker}
        model = BrokerConfig
    for key, _old, new in changes:
        if new is None:
            rows.filter(key=key).delete()
        elif not rows.filter(key=key).update(value=new, updated=timezone.now()):
            model.objects.create(key=key, value=new, **make)
