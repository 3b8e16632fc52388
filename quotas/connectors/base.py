"""What a connector is: how the portal's desired state reaches one broker (or a cluster-wide namespace).

No Django here: connectors get plain values, so they can be driven and tested on their own.

The desired state of a target is a flat mapping ``Item -> text``:

- ``quota``: ``resource`` is the entity as ``EntityRef.field()`` (JSON of its parts), ``key`` a quota key,
  the value ``repr(float)``;
- ``broker``: ``resource`` is ``""`` for Kafka's ``<default>`` broker or the broker id as text;
- ``topic``: ``resource`` is the topic name;
- ``client-metrics``: ``resource`` is a client-metrics subscription name (KIP-714);
- ``budget-scope``: a quota value that is a cluster-wide budget (``resource`` and ``key`` as its ``quota`` item's,
  the value ``cluster_wide``; a per-broker value, Kafka's meaning, has none). Only a Kafka cluster's target holds
  them: its connector writes them to the cluster's scope hash in the engine's Redis, where the brokers' budget plugin
  reads them (``quotas.connectors.budget_scope``);
- ``group``: a group quota (``resource`` the group's name, ``key`` ``spec``, the value the group's spec JSON:
  members, order, values; ``engine.groups``) and ``exempt``: a principal no quota applies to (``resource`` its name,
  ``key`` ``exempt``, the value ``exempt``). Like budget scopes, only a Kafka cluster's target holds them, in the same
  scope hash.

A push carries the version of the desired state it brings the target to, and either the whole state
(``full``) or the items changed since the version the target holds (``base``), ``None`` meaning delete.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

QUOTA, BROKER, TOPIC, CLIENT_METRICS = "quota", "broker", "topic", "client-metrics"
BUDGET_SCOPE, GROUP, EXEMPT = "budget-scope", "group", "exempt"
KINDS = (QUOTA, BROKER, TOPIC, CLIENT_METRICS, BUDGET_SCOPE, GROUP, EXEMPT)
#: The kinds kept in a cluster's scope hash (the brokers' quota callback reads them), not sent to Kafka.
SCOPE_KINDS = frozenset({BUDGET_SCOPE, GROUP, EXEMPT})
#: The key of a ``group`` item and of an ``exempt`` item, and the value of the latter.
GROUP_SPEC, EXEMPT_KEY = "spec", "exempt"
#: The value of a ``budget-scope`` item.
CLUSTER_WIDE = "cluster_wide"
DEFAULT_BROKER_RESOURCE = ""


class Item(NamedTuple):
    """One setting of a target: a quota key of an entity, or a config key of a broker, topic or subscription.

    A plain tuple, so the engine (which knows nothing of connectors) takes it as ``(kind, resource, key)``.
    """

    kind: str
    resource: str
    key: str


State = dict[Item, str]


#: The broker configs the portal manages (connection limits, KIP-612; replication throttles).
MANAGED_BROKER_KEYS = frozenset(
    {
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "max.connection.creation.rate",
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
        "replica.alter.log.dirs.io.max.bytes.per.second",
    }
)
MANAGED_LISTENER_SUFFIXES = (".max.connections", ".max.connection.creation.rate")
#: The topic configs the portal manages (throttled-replica lists).
MANAGED_TOPIC_KEYS = frozenset({"leader.replication.throttled.replicas", "follower.replication.throttled.replicas"})


def portal_managed(item: Item) -> bool:
    """True for a config the portal owns: the keys its broker-config API accepts, and every key of a client-metrics
    subscription and every budget scope (those exist only because the portal created them)."""
    if item.kind == BROKER:
        if item.key in MANAGED_BROKER_KEYS:
            return True
        if item.key.startswith("listener.name."):
            listener, _, prop = item.key[len("listener.name.") :].partition(".")
            return bool(listener) and ("." + prop) in MANAGED_LISTENER_SUFFIXES
        return False
    if item.kind == TOPIC:
        return item.key in MANAGED_TOPIC_KEYS
    return item.kind == CLIENT_METRICS or item.kind in SCOPE_KINDS


@dataclass(frozen=True)
class Credentials:
    """How a connector authenticates to a Kafka cluster. The password comes from the environment at push time and
    never appears in a repr, a log line or an error."""

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Target:
    """Where a push lands: one broker of a cluster, or the whole cluster (``broker_id`` None): the engine's
    cluster-wide namespace, or a Kafka cluster, whose quotas and dynamic configs live in its metadata log.

    ``address`` is the connector's: a Redis URL for the engine (empty = the portal's own Redis), the bootstrap
    servers (``host:port[,host:port...]``) for Kafka.
    """

    cluster: str
    broker_id: int | None
    address: str = ""
    credentials: Credentials = field(default_factory=Credentials)

    @property
    def label(self) -> str:
        return f"{self.cluster}/broker-{self.broker_id}" if self.broker_id is not None else f"{self.cluster}/cluster"


@dataclass(frozen=True)
class Delta:
    """A push: bring the target to ``version``.

    ``full``: ``changes`` is the complete desired state (nothing else may remain on the target);
    otherwise ``changes`` holds only the items changed after ``base`` (``None`` = delete the item).
    ``force`` re-applies even when the target already claims ``version`` (healing drift).
    """

    version: int
    base: int
    full: bool
    changes: Mapping[Item, str | None] = field(default_factory=dict)
    force: bool = False


@dataclass(frozen=True)
class Applied:
    """What the target answered: whether this push changed it, and the version it holds now.

    ``answers``: for a Kafka cluster, what each broker answered from its own metadata (broker id -> text).
    """

    changed: bool
    version: int
    answers: Mapping[str, str] = field(default_factory=dict)


class PushError(Exception):
    """A push the target refused or could not take. ``code`` is Kafka's error name (e.g. ``INVALID_REQUEST``).

    ``retriable`` errors (the target is down, a timeout) are retried with backoff; the others fail the push.
    ``needs_full``: the target does not hold ``base`` (it lost state); push the whole state instead.
    """

    def __init__(self, code: str, message: str, *, retriable: bool, needs_full: bool = False) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retriable = retriable
        self.needs_full = needs_full


class Connector(Protocol):
    """Applies and describes the desired state of targets of one kind of cluster."""

    #: True when the target cannot order writes itself (Kafka): the portal then serializes pushes per target.
    needs_lock: bool

    def applied_version(self, target: Target) -> int | None:
        """The desired-state version the target holds (-1 = none), or None when only the portal knows it."""
        ...

    def apply(self, target: Target, delta: Delta) -> Applied:
        """Apply ``delta`` whole; raise PushError (nothing, or an idempotent part, was applied)."""
        ...

    def describe(self, target: Target, desired: Mapping[Item, str]) -> tuple[int | None, State]:
        """What the target holds: (its version or None, its state). ``desired`` says which resources to ask about."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...
