"""Kafka's replication throttles: the broker rates, the topics' throttled-replica lists and their quota managers.

Reassignment and log-dir moves copy whole partitions; left alone they crowd out
client traffic. Kafka caps that copy traffic per broker with three byte rates
(leader, follower, alter-log-dirs), applied only to the replicas a topic's
``{leader,follower}.replication.throttled.replicas`` lists name. The rates are
measured with ``SimpleRate`` (the window is max(elapsed, one window), never padded
to N-1 windows), so a throttle starts within the first second of a move rather
than after ten. This module validates those configs as Kafka does, keeps them in
Redis for every engine user, and drives one sensor per (broker, replication type).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, Final, Literal

import redis

from .config import VersionedHashStore
from .decisions import Decision, Kind, Op, Outcome
from .errors import EngineUnavailable, QuotaValidationError, UnknownQuotaKey
from .javamath import INT_MAX, LONG_MAX, LONG_MIN, java_round
from .managers import FAIL_CLOSED, FAIL_OPEN, Backend
from .redis_backend import RedisBackend

# ---- config keys (QuotaConfig, LogConfig) ----

LEADER_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_RATE: Final = "follower.replication.throttled.rate"
ALTER_LOG_DIRS_RATE: Final = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS: Final = "follower.replication.throttled.replicas"

#: ``QuotaConfig.QUOTA_BYTES_PER_SECOND_DEFAULT``: a rate that is not set throttles nothing.
QUOTA_BYTES_PER_SECOND_DEFAULT: Final = LONG_MAX
BROKER_RATE_KEYS: Final = (LEADER_RATE, FOLLOWER_RATE, ALTER_LOG_DIRS_RATE)
TOPIC_REPLICA_KEYS: Final = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

NUM_SAMPLES_DEFAULT: Final = 11  # 10 whole windows + the current one
WINDOW_SIZE_SECONDS_DEFAULT: Final = 1

_LIST_FORMAT = (
    "{name} must be the literal '*' or a list of replicas in the following format: "
    "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
)


class ReplicationType(StrEnum):
    """The three replication quota types; each has its own rate key, sampling keys and sensor."""

    LEADER = "leader"
    FOLLOWER = "follower"
    ALTER_LOG_DIRS = "alter-log-dirs"

    @property
    def rate_key(self) -> str:
        return _RATE_KEY[self]

    @property
    def replicas_key(self) -> str | None:
        """The topic config naming the throttled replicas (log-dir moves throttle every replica they move)."""
        return _REPLICAS_KEY.get(self)

    @property
    def sensor_name(self) -> str:
        """``QuotaType.toString()``, which Kafka uses as the sensor's name."""
        return _SENSOR_NAME[self]

    @property
    def samples_key(self) -> str:
        return _WINDOW_PREFIX[self] + "replication.quota.window.num"

    @property
    def window_key(self) -> str:
        return _WINDOW_PREFIX[self] + "replication.quota.window.size.seconds"


_RATE_KEY = {
    ReplicationType.LEADER: LEADER_RATE,
    ReplicationType.FOLLOWER: FOLLOWER_RATE,
    ReplicationType.ALTER_LOG_DIRS: ALTER_LOG_DIRS_RATE,
}
_REPLICAS_KEY = {ReplicationType.LEADER: LEADER_REPLICAS, ReplicationType.FOLLOWER: FOLLOWER_REPLICAS}
_SENSOR_NAME = {
    ReplicationType.LEADER: "LeaderReplication",
    ReplicationType.FOLLOWER: "FollowerReplication",
    ReplicationType.ALTER_LOG_DIRS: "AlterLogDirsReplication",
}
_WINDOW_PREFIX = {
    ReplicationType.LEADER: "",
    ReplicationType.FOLLOWER: "",
    ReplicationType.ALTER_LOG_DIRS: "alter.log.dirs.",
}


class _All(Enum):
    ALL_REPLICAS = "*"

    def __repr__(self) -> str:
        return "ALL_REPLICAS"


#: Every replica of a topic is throttled (``ReplicationQuotaManager.ALL_REPLICAS``, the config's ``*``).
ALL_REPLICAS: Final = _All.ALL_REPLICAS
Partitions = frozenset[int] | Literal[_All.ALL_REPLICAS]

# ---- validation, with Kafka's ConfigException text ----

_JAVA_WS = "".join(map(chr, range(33)))  # String.trim() drops every char <= ' '
_LONG_TEXT = re.compile(r"[+-]?[0-9]+")
_REPLICA_ID = re.compile(r"[0-9]+")
_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
TOPIC_MAX_LENGTH: Final = 249


def config_error(name: str, value: object, reason: str) -> QuotaValidationError:
    """Kafka's ``ConfigException(name, value, message)`` wording, so operators recognise it."""
    return QuotaValidationError(f"Invalid value {value} for configuration {name}: {reason}")


def validate_throttle_rate(key: str, value: object) -> int:
    """A broker rate as Kafka's ConfigDef takes it: a LONG (number or decimal text), at least 0.

    Zero is allowed (it stops throttled replication); fractions, non-numbers and values
    beyond a Java long are refused, naming the key and why.
    """
    if key not in BROKER_RATE_KEYS:
        raise UnknownQuotaKey(f"Unknown broker throttle config {key!r}; valid keys are {', '.join(BROKER_RATE_KEYS)}.")
    not_long = "Not a number of type LONG"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise config_error(
            key, value, f"Expected value to be a 64-bit integer (long), but it was a {type(value).__name__}"
        )
    if isinstance(value, str):
        text = value.strip(_JAVA_WS)
        if not _LONG_TEXT.fullmatch(text):
            raise config_error(key, value, f"{not_long} (bytes per second as a whole number, e.g. 1048576)")
        v = int(text)
    elif isinstance(value, float):
        if not math.isfinite(value) or value != math.floor(value):
            raise config_error(key, value, f"{not_long} (a byte rate is a whole number of bytes per second)")
        v = int(value)
    else:
        v = value
    if v > LONG_MAX or v < LONG_MIN:
        raise config_error(key, value, f"{not_long} (it is beyond {LONG_MAX})")
    if v < 0:
        hint = "0 stops throttled replication; delete the key to lift the throttle"
        raise config_error(key, value, f"Value must be at least 0 ({hint})")
    return v


def validate_topic_name(topic: object) -> str:
    """Kafka's ``Topic.validate``: names also key the throttle store, so a bad one is refused up front."""
    if not isinstance(topic, str):
        raise QuotaValidationError(f"A topic name must be a string, got {type(topic).__name__} {topic!r}.")
    if not topic:
        raise QuotaValidationError("Topic name is illegal, it can't be empty")
    if topic in (".", ".."):
        raise QuotaValidationError('Topic name cannot be "." or ".."')
    if len(topic) > TOPIC_MAX_LENGTH:
        raise QuotaValidationError(
            f"Topic name is illegal, it can't be longer than {TOPIC_MAX_LENGTH} characters, topic name: {topic}"
        )
    if not _TOPIC_CHARS.fullmatch(topic):
        raise QuotaValidationError(
            f'Topic name "{topic}" is illegal, it contains a character other than ASCII alphanumerics, '
            "'.', '_' and '-'"
        )
    return topic


def validate_broker_id(broker_id: object) -> int:
    if isinstance(broker_id, bool) or not isinstance(broker_id, int) or not 0 <= broker_id <= INT_MAX:
        raise QuotaValidationError(f"A broker id is an integer from 0 to {INT_MAX}, got {broker_id!r}.")
    return broker_id


@dataclass(frozen=True)
class ThrottledReplicas:
    """A validated throttled-replica list: ``*``, or (partition, broker) pairs (empty = nothing throttled)."""

    replicas: tuple[tuple[int, int], ...] = ()
    wildcard: bool = False

    def __str__(self) -> str:
        """The canonical config text, as stored: no spaces, no trailing commas."""
        return "*" if self.wildcard else ",".join(f"{p}:{b}" for p, b in self.replicas)

    @property
    def is_empty(self) -> bool:
        return not self.wildcard and not self.replicas

    def partitions_for(self, broker_id: int) -> Partitions:
        """``ConfigHandler.parseThrottledPartitions``: the partitions listed with this broker, or all for ``*``."""
        if self.wildcard:
            return ALL_REPLICAS
        return frozenset(p for p, b in self.replicas if b == broker_id)


def _replica_id(entry: str, i: int, name: str, part: str) -> str | None:
    """Why ``part`` is not a replica id Kafka parses (``[0-9]+`` that fits an int), or None."""
    if not part:
        return f"entry {i} ({entry!r}) has no {name}"
    if not _REPLICA_ID.fullmatch(part):
        return f"entry {i} ({entry!r}): the {name} {part!r} is not a non-negative integer"
    if int(part) > INT_MAX:
        return f"entry {i} ({entry!r}): the {name} {part} is larger than {INT_MAX}"
    return None


def validate_throttled_replicas(key: str, value: object) -> ThrottledReplicas:
    """``ThrottledReplicaListValidator``: ``*`` alone, or ``partition:broker`` entries (trimmed), or empty.

    An empty entry may only trail the list (``0:1,`` is fine, ``0:1,,1:2`` is not): Kafka's
    broker would fail to parse an inner one. The error names the first bad entry and why.
    """
    if key not in TOPIC_REPLICA_KEYS:
        raise UnknownQuotaKey(f"Unknown topic throttle config {key!r}; valid keys are {', '.join(TOPIC_REPLICA_KEYS)}.")
    if isinstance(value, str):
        entries, shown = value.split(","), value
    elif isinstance(value, (list, tuple)) and all(isinstance(e, str) for e in value):
        entries, shown = list(value), ",".join(value)
    else:
        raise config_error(key, value, f"{key} must be a List but was {type(value).__name__}")
    proposed = [e.strip(_JAVA_WS) for e in entries]
    if proposed == ["*"]:
        return ThrottledReplicas(wildcard=True)
    pairs: list[tuple[int, int]] = []
    first_empty: int | None = None
    for i, entry in enumerate(proposed, 1):
        if not entry:
            first_empty = first_empty or i
            continue
        if first_empty is not None:
            reason = f"entry {first_empty} is empty; only a trailing comma may be left empty"
        elif entry == "*":
            reason = f"entry {i} is '*', which throttles every replica and must be the whole list"
        elif entry.count(":") != 1:
            reason = f"entry {i} ({entry!r}) is not of the form [partitionId]:[brokerId]"
        else:
            p, b = entry.split(":")
            reason = _replica_id(entry, i, "partition id", p) or _replica_id(entry, i, "broker id", b)
            if reason is None:
                pairs.append((int(p), int(b)))
                continue
        raise config_error(key, shown, f"{_LIST_FORMAT.format(name=key)} ({reason})")
    return ThrottledReplicas(tuple(pairs))


def throttled_partitions(value: object, broker_id: int, key: str = LEADER_REPLICAS) -> Partitions:
    """The partitions a topic's list throttles on ``broker_id`` (Kafka's ``parseThrottledPartitions``).

    Unlike Kafka's broker, spaces around entries are tolerated here as the validator
    tolerates them (Kafka's parser would fail on ``0:1, 1:2`` after accepting it).
    """
    broker_id = validate_broker_id(broker_id)
    return validate_throttled_replicas(key, value).partitions_for(broker_id)


def _window_setting(key: str, value: object) -> int:
    """``replication.quota.window.*``: an INT of at least 1 (``ConfigDef.Range.atLeast(1)``)."""
    if isinstance(value, str) and _LONG_TEXT.fullmatch(value.strip(_JAVA_WS)):
        value = int(value.strip(_JAVA_WS))
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value <= INT_MAX:
        raise config_error(key, value, "Not a number of type INT")
    if value < 1:
        raise config_error(key, value, "Value must be at least 1")
    return value


def quota_window(configs: Mapping[str, object], replication_type: ReplicationType | str) -> tuple[int, int]:
    """(samples, window seconds) for a replication type from broker configs, defaulting to 11 and 1."""
    rt = ReplicationType(replication_type)
    return (
        _window_setting(rt.samples_key, configs.get(rt.samples_key, NUM_SAMPLES_DEFAULT)),
        _window_setting(rt.window_key, configs.get(rt.window_key, WINDOW_SIZE_SECONDS_DEFAULT)),
    )


def _partition_set(partitions: Iterable[int] | Literal[_All.ALL_REPLICAS]) -> Partitions:
    if partitions is ALL_REPLICAS:
        return ALL_REPLICAS
    if isinstance(partitions, (str, bytes)):
        raise QuotaValidationError(f"Partitions are given as integers or ALL_REPLICAS, got {partitions!r}.")
    result = []
    for p in partitions:
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= INT_MAX:
            raise QuotaValidationError(f"A partition id is an integer from 0 to {INT_MAX}, got {p!r}.")
        result.append(p)
    return frozenset(result)


# ---- the manager ----


class ReplicationQuotaManager:
    """``ReplicationQuotaManager``: one SimpleRate sensor per (broker namespace, replication type).

    Replica fetchers record without a check and ask ``is_quota_exceeded`` before the next
    fetch of a throttled partition, as Kafka's do. The bound travels with each decision,
    so changing the quota never resets what was recorded.
    """

    kind = Kind.SIMPLE_RATE

    def __init__(
        self,
        replication_type: ReplicationType | str,
        backend: Backend,
        *,
        samples: int = NUM_SAMPLES_DEFAULT,
        window_s: int = WINDOW_SIZE_SECONDS_DEFAULT,
        namespace: str = "local",
        fail_mode: str = FAIL_OPEN,
    ) -> None:
        if fail_mode not in (FAIL_OPEN, FAIL_CLOSED):
            raise QuotaValidationError(f"fail_mode must be {FAIL_OPEN!r} or {FAIL_CLOSED!r}, got {fail_mode!r}.")
        self.replication_type = ReplicationType(replication_type)
        self.backend = backend
        self.samples = _window_setting(self.replication_type.samples_key, samples)
        self.window_ms = _window_setting(self.replication_type.window_key, window_s) * 1000
        self.namespace = namespace
        self.fail_mode = fail_mode
        self.sensor_key = f"qe:{{{namespace}|{self.replication_type.sensor_name}}}"
        self.degraded = False  # the last decision was answered by the fail policy
        self._bound: float | None = None  # Kafka's quota is null until the broker config handler sets it
        self._throttled: dict[str, Partitions] = {}

    # ---- quota ----

    def update_quota(self, bound: int | float | str | None) -> None:
        """Set the byte rate (``None`` = no quota); validated as the broker config, usage untouched."""
        self._bound = None if bound is None else float(validate_throttle_rate(self.replication_type.rate_key, bound))

    @property
    def upper_bound(self) -> int:
        """``upperBound()``: the bound as a long, Long.MAX_VALUE when there is none."""
        return LONG_MAX if self._bound is None else min(int(self._bound), LONG_MAX)

    def _decision(self, op: Op, value: float, t: int) -> Decision:
        return Decision(self.sensor_key, self.kind, op, value, int(t), self._bound, self.samples, self.window_ms)

    def _decide(self, op: Op, value: float, t: int) -> Outcome | None:
        try:
            outcome = self.backend.execute([self._decision(op, value, t)])[0]
        except EngineUnavailable:
            self.degraded = True
            return None
        self.degraded = False
        return outcome

    def record(self, value: float, t: int) -> None:
        """Count replicated bytes, never checking: the fetch is already done (``record(long)``)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise QuotaValidationError(f"Replicated bytes are a non-negative number, got {value!r}.")
        self._decide(Op.RECORD_NOCHECK, float(value), t)

    def is_quota_exceeded(self, t: int) -> bool:
        """``isQuotaExceeded``: the SimpleRate at ``t`` is above the bound (when Redis is down: the fail mode)."""
        outcome = self._decide(Op.CHECK, 0.0, t)
        if outcome is None:
            return self.fail_mode == FAIL_CLOSED
        return outcome.violated

    def throttle_time_ms(self, t: int) -> int:
        """``QuotaUtils.throttleTime`` on the violation, (O-T)/T*W with SimpleRate's window: for charts only.

        Kafka does not delay replication by this; throttled partitions just sit out fetches
        while the quota is exceeded. This says roughly how long that lasts.
        """
        outcome = self._decide(Op.CHECK, 0.0, t)
        if outcome is None:
            return self.samples * self.window_ms if self.fail_mode == FAIL_CLOSED else 0
        if not outcome.violated or outcome.throttle_raw is None:
            return 0
        return java_round(outcome.throttle_raw)

    def measure(self, t: int) -> Outcome:
        """The byte rate, window and windowed sum at ``t``, for charts; changes nothing."""
        return self.backend.execute([self._decision(Op.MEASURE, 0.0, t)])[0]

    # ---- throttled partitions (in memory, as Kafka's are; fed from the config) ----

    def mark_throttled(self, topic: str, partitions: Iterable[int] | Literal[_All.ALL_REPLICAS] = ALL_REPLICAS) -> None:
        """Throttle these partitions of ``topic`` (all by default); replaces what was marked before."""
        topic = validate_topic_name(topic)
        self._throttled[topic] = _partition_set(partitions)

    def remove_throttle(self, topic: str) -> None:
        self._throttled.pop(topic, None)

    def is_throttled(self, topic: str, partition: int) -> bool:
        marked = self._throttled.get(topic)
        return marked is not None and (marked is ALL_REPLICAS or partition in marked)

    @property
    def throttled(self) -> dict[str, Partitions]:
        """A copy of topic -> throttled partitions (or ALL_REPLICAS)."""
        return dict(self._throttled)


# ---- the throttle configs of a broker namespace, in Redis ----


@dataclass(frozen=True)
class ThrottleOp:
    """One IncrementalAlterConfigs-style change: a broker rate (``topic=None``) or a topic's replica list.

    ``value=None`` deletes the key (back to Kafka's default: unthrottled, no replicas).
    """

    key: str
    value: int | float | str | Sequence[str] | None
    topic: str | None = None

    def field(self) -> str:
        """The hash field: ``broker|<key>`` or ``topic|<topic>|<key>`` (topic names cannot hold ``|``)."""
        return f"broker|{self.key}" if self.topic is None else f"topic|{self.topic}|{self.key}"


@dataclass(frozen=True)
class ThrottleConfig:
    """A loaded, validated snapshot: answer throttle questions for any broker without Redis."""

    version: int = 0
    rates: Mapping[str, int] = field(default_factory=dict)
    topics: Mapping[str, Mapping[str, ThrottledReplicas]] = field(default_factory=dict)

    def rate(self, key: str) -> int:
        """A broker rate, Long.MAX_VALUE when unset (Kafka's default: unthrottled)."""
        if key not in BROKER_RATE_KEYS:
            raise UnknownQuotaKey(f"Unknown broker throttle config {key!r}.")
        return self.rates.get(key, QUOTA_BYTES_PER_SECOND_DEFAULT)

    def replicas(self, topic: str, side: ReplicationType | str) -> ThrottledReplicas:
        key = _replicas_key(side)
        return self.topics.get(topic, {}).get(key, ThrottledReplicas())

    def throttled_partitions(self, topic: str, broker: int, *, side: ReplicationType | str) -> Partitions:
        return self.replicas(topic, side).partitions_for(broker)

    def is_throttled(self, topic: str, partition: int, broker: int, *, side: ReplicationType | str) -> bool:
        """Is this replica throttled on ``broker``'s leader (or follower) side?"""
        marked = self.throttled_partitions(topic, broker, side=side)
        return marked is ALL_REPLICAS or partition in marked


def _replicas_key(side: ReplicationType | str) -> str:
    key = ReplicationType(side).replicas_key
    if key is None:
        raise QuotaValidationError("Log-dir moves have no throttled-replica list; use leader or follower.")
    return key


class ReplicationThrottleStore(VersionedHashStore):
    """A namespace's broker rates and topic replica lists in one Redis hash, versioned, announced on pub/sub.

    A change is validated whole, then applied by the same script as ``QuotaConfigStore``
    (one field per key, so there is no read-modify-write): all of it or none of it.
    """

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        super().__init__(client, namespace, "replication-throttles")

    @staticmethod
    def validate(op: ThrottleOp) -> str:
        """The value as stored ('' = delete the key); raises on anything Kafka would refuse."""
        if op.key in BROKER_RATE_KEYS:
            if op.topic is not None:
                raise QuotaValidationError(f"{op.key} is a broker config; it cannot be set on topic {op.topic!r}.")
            return "" if op.value is None else str(validate_throttle_rate(op.key, op.value))
        if op.key in TOPIC_REPLICA_KEYS:
            if op.topic is None:
                raise QuotaValidationError(f"{op.key} is a topic config; name the topic it applies to.")
            validate_topic_name(op.topic)
            return "" if op.value is None else str(validate_throttled_replicas(op.key, op.value))
        raise UnknownQuotaKey(
            f"Unknown replication throttle config {op.key!r}; valid keys are "
            f"{', '.join(BROKER_RATE_KEYS + TOPIC_REPLICA_KEYS)}."
        )

    def load(self) -> ThrottleConfig:
        """The version and every stored key, read in one transaction."""
        version, raw = self._read()
        rates: dict[str, int] = {}
        topics: dict[str, dict[str, ThrottledReplicas]] = {}
        for f, v in raw.items():
            parts, value = f.decode().split("|"), v.decode()
            if parts[0] == "broker":
                rates[parts[1]] = validate_throttle_rate(parts[1], value)
            else:
                topics.setdefault(parts[1], {})[parts[2]] = validate_throttled_replicas(parts[2], value)
        return ThrottleConfig(version, rates, topics)

    def alter(self, ops: Iterable[ThrottleOp], validate_only: bool = False) -> int:
        """Validate every op, then apply all of them in one script with a new version; returns the version."""
        ops = list(ops)
        fields: list[Any] = []
        seen: set[str] = set()
        for op in ops:
            stored = self.validate(op)
            f = op.field()
            if f in seen:
                where = "the broker" if op.topic is None else f"topic {op.topic!r}"
                raise QuotaValidationError(f"{op.key} is altered twice for {where} in one request.")
            seen.add(f)
            fields += [f, stored]
        if validate_only or not ops:
            return self.version()
        return self._write(fields)


class ReplicationThrottles:
    """One broker's three replication quota managers, fed by its namespace's throttle store.

    ``refresh()`` does what Kafka's broker and topic config handlers do on a change:
    sets each manager's rate (Long.MAX_VALUE when unset) and marks, for this broker,
    the partitions each topic's list names. Usage is never reset by a refresh.
    """

    def __init__(
        self,
        client: redis.Redis,
        namespace: str,
        broker_id: int,
        *,
        backend: Backend | None = None,
        configs: Mapping[str, object] | None = None,
        fail_mode: str = FAIL_OPEN,
    ) -> None:
        self.broker_id = validate_broker_id(broker_id)
        self.store = ReplicationThrottleStore(client, namespace)
        self.client = client
        self.config = ThrottleConfig(version=-1)
        backend = backend if backend is not None else RedisBackend(client)
        self.managers: dict[ReplicationType, ReplicationQuotaManager] = {}
        for rt in ReplicationType:
            samples, window_s = quota_window(configs or {}, rt)
            self.managers[rt] = ReplicationQuotaManager(
                rt, backend, samples=samples, window_s=window_s, namespace=namespace, fail_mode=fail_mode
            )

    def manager(self, replication_type: ReplicationType | str) -> ReplicationQuotaManager:
        return self.managers[ReplicationType(replication_type)]

    def refresh(self, force: bool = False) -> bool:
        """Reload when the stored version moved; True when it did."""
        if not force and self.store.version() == self.config.version:
            return False
        config = self.store.load()
        for rt, m in self.managers.items():
            m.update_quota(config.rate(rt.rate_key))
            key = rt.replicas_key
            if key is None:
                continue
            for topic in set(m.throttled) | set(config.topics):
                replicas = config.topics.get(topic, {}).get(key)
                if replicas is None or replicas.is_empty:
                    m.remove_throttle(topic)
                else:
                    m.mark_throttled(topic, replicas.partitions_for(self.broker_id))
        self.config = config
        return True

    def listen(self) -> redis.client.PubSub:
        """A subscription to this namespace's throttle changes; call refresh() on each message."""
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.store.channel)
        return pubsub


__all__ = [
    "ALL_REPLICAS",
    "ALTER_LOG_DIRS_RATE",
    "FOLLOWER_RATE",
    "FOLLOWER_REPLICAS",
    "LEADER_RATE",
    "LEADER_REPLICAS",
    "QUOTA_BYTES_PER_SECOND_DEFAULT",
    "ReplicationQuotaManager",
    "ReplicationThrottleStore",
    "ReplicationThrottles",
    "ReplicationType",
    "ThrottleConfig",
    "ThrottleOp",
    "ThrottledReplicas",
    "quota_window",
    "throttled_partitions",
    "validate_throttle_rate",
    "validate_throttled_replicas",
    "validate_topic_name",
]
