"""Kafka's client-quota managers, thin over a sensor backend (the model or Redis).

Each manager keeps one sensor per (quota type, resolved entity), resolves the
entity with Kafka's precedence, and turns a violation into a throttle time the
way the matching Kafka manager does.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import NamedTuple, Protocol

from .decisions import NO_EXPIRY, SERVER_TIME, TRACK_THROTTLE, Decision, Kind, Op, Outcome, check_sampling
from .entities import ClientEntity, QuotaOverrides, QuotaType, Resolution
from .errors import EngineUnavailable, QuotaValidationError, ThrottlingQuotaExceeded
from .groups import GroupLayer
from .javamath import DOUBLE_MAX, LONG_MAX_AS_DOUBLE, java_round, to_int
from .sensor_keys import sensor_key

_KEY, _BOUND, _SLOT = itemgetter(0), itemgetter(1), itemgetter(4)  # of a cached resolution
_VALUE, _T = itemgetter(2), itemgetter(3)  # of a UsageRecord

FAIL_OPEN = "open"
FAIL_CLOSED = "closed"

#: ``ClientRequestQuotaManager.NANOS_TO_PERCENTAGE_PER_SECOND``
NANOS_TO_PERCENTAGE_PER_SECOND = 100 / 1e9


_NAMESPACE = re.compile(r"[A-Za-z0-9._-]{1,200}")


def check_namespace(namespace: str) -> str:
    """Namespaces go inside key names and hash tags: letters, digits, '.', '-' and '_' only."""
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise QuotaValidationError(
            f"A namespace is 1 to 200 letters, digits, '.', '-' or '_' (it names Redis keys), got {namespace!r}."
        )
    return namespace


def check_usages(usages: Sequence[UsageRecord]) -> None:
    """Usage is an amount: finite and >= 0, recorded at an integer millisecond time."""
    for u in usages:
        v = u[2]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise QuotaValidationError(f"Usage must be a finite number >= 0, got {v!r} for {u[0]!r}/{u[1]!r}.")
        if isinstance(u[3], bool) or not isinstance(u[3], int):
            raise QuotaValidationError(f"The time of a usage record is integer milliseconds, got {u[3]!r}.")


def nanos_to_percentage(nanos: float) -> float:
    """Request-handler thread time as a percentage of one second (KIP-124)."""
    return nanos * NANOS_TO_PERCENTAGE_PER_SECOND


class Backend(Protocol):
    """What a manager needs of an engine: the model (``ModelBackend``) or Redis (``RedisBackend``)."""

    def execute(self, decisions: Sequence[Decision]) -> list[Outcome]: ...

    def record_columns(
        self, op: Op, kind: Kind, flags: int, samples: int, window_ms: int, aux: float | None,
        keys: Sequence[str | bytes], ts: Sequence[float], values: Sequence[float], bounds: Sequence[float],
        slots: Sequence[int] | None = None,
    ) -> tuple[bytes, Sequence[float], Sequence[float]]: ...


class RecordResult(NamedTuple):
    """The answer to one recorded request, with what the live charts and the replay need."""

    throttle_ms: int  # what the broker returns in throttle_time_ms (Java int)
    tags: str = ""
    measured: float | None = None  # the sensor's rate or tokens after the op
    violated: bool = False
    throttle_ms_long: int = 0  # the long before Kafka's (int) cast
    observed: float | None = None  # the value that violated the bound
    quotas_enabled: bool = True
    degraded: bool = False  # answered by the fail policy because Redis was unreachable


class UsageRecord(NamedTuple):
    """One request's usage, as a broker would record it."""

    user: str
    client_id: str
    value: float
    t: int


class ClientQuotaManager:
    """Produce and fetch byte-rate quotas (``ClientQuotaManager``): a sampled Rate per resolved entity."""

    kind = Kind.RATE
    bounded = False

    def __init__(
        self,
        quota_type: QuotaType,
        backend: Backend,
        *,
        samples: int = 11,
        window_s: int = 1,
        window_ms: int | None = None,
        namespace: str = "local",
        overrides: QuotaOverrides | None = None,
        fail_mode: str = FAIL_OPEN,
        engine_clock: bool = False,
    ) -> None:
        if fail_mode not in (FAIL_OPEN, FAIL_CLOSED):
            raise QuotaValidationError(f"fail_mode must be {FAIL_OPEN!r} or {FAIL_CLOSED!r}, got {fail_mode!r}.")
        check_namespace(namespace)
        check_sampling(samples, window_s * 1000 if window_ms is None else window_ms)
        self.quota_type = quota_type
        self.backend = backend
        self.samples = samples
        self.window_s = window_s
        self.window_ms = window_s * 1000 if window_ms is None else window_ms
        self.namespace = namespace
        self.overrides = overrides if overrides is not None else QuotaOverrides()
        self.fail_mode = fail_mode
        # a cluster-wide namespace shared by brokers with skewed clocks decides on Redis's clock instead
        self.flags = TRACK_THROTTLE | (SERVER_TIME if engine_clock else 0)
        # (user, client-id) -> (sensor key, bound, resolution, tags, hash slot); cleared on every quota change
        self._resolved: dict[tuple[str, str], tuple[bytes, float, Resolution, str, int]] = {}
        # a Redis Cluster backend groups a batch by the slots cached above (no slot computed per decision)
        self._slotted = bool(getattr(backend, "cluster", False))
        # sensor tags -> this broker's share of a cluster-wide budget, which then bounds the sensor
        self.shares: dict[str, float] = {}
        self.unshared: Callable[[Resolution], float | None] | None = None
        # the cluster's groups and exempt principals (None: none, Kafka's resolution alone)
        self.groups: GroupLayer | None = None
        # a group once held a value of this type: as Kafka's mask, only ever OR-ed in
        self._grouped = False

    # ---- configuration ----

    @property
    def quotas_enabled(self) -> bool:
        return self.overrides.types_enabled != 0 or self._grouped

    def update_quota(self, user: str | None, client_id: str | None, bound: float | None) -> None:
        """Set (or with ``None`` remove) the limit of a config entity; usage is never reset."""
        self.overrides.update(ClientEntity(user, client_id), bound)
        self._resolved.clear()

    def set_shares(
        self, shares: Mapping[str, float], unshared: Callable[[Resolution], float | None] | None = None
    ) -> None:
        """Bound these sensors (by tags) by this broker's share of their cluster-wide budget; usage is never reset.

        ``unshared(resolution)`` bounds a budgeted sensor that has no share yet (None: not budgeted)."""
        if shares != self.shares or unshared is not self.unshared:
            self.shares, self.unshared = dict(shares), unshared
            self._resolved.clear()

    def set_groups(self, layer: GroupLayer) -> None:
        """Resolve with these groups and exempt principals from now on (an empty layer: Kafka's levels alone);
        usage is never reset."""
        wanted = layer if layer else None
        if wanted != self.groups:
            self.groups = wanted
            self._grouped = self._grouped or layer.holds(self.quota_type.config_key)
            self._resolved.clear()

    def _lookup(self, user: str, client_id: str) -> tuple[bytes, float, Resolution, str, int]:
        """The sensor and bound of a (user, client-id), resolved once per config version."""
        hit = self._resolved.get((user, client_id))
        if hit is None:
            if len(self._resolved) > 100_000:
                self._resolved.clear()
            r = self.resolve(user, client_id)
            bound = LONG_MAX_AS_DOUBLE if r.bound is None else r.bound
            key, slot = sensor_key(self.namespace, self.quota_type.sensor_prefix, r.tags)
            hit = self._resolved[(user, client_id)] = (key.encode(), bound, r, r.tags, slot)
        return hit

    def configured(self, user: str, client_id: str) -> Resolution:
        """Kafka's resolution, with the groups and exempt principals when the cluster has any: the bound as
        configured (a cluster-wide budget whole, not this broker's share)."""
        if self.groups is None:
            return self.overrides.resolve(user, client_id)
        return self.groups.resolve(self.overrides, self.quota_type.config_key, user, client_id)

    def resolve(self, user: str, client_id: str) -> Resolution:
        """``configured``, with a budgeted sensor's bound replaced by this broker's share of the budget."""
        r = self.configured(user, client_id)
        if r.bound is None or not (self.shares or self.unshared):
            return r
        share = self.shares.get(r.tags)
        if share is None and self.unshared is not None:
            share = self.unshared(r)
        return r if share is None else dataclasses.replace(r, bound=share)

    def quota(self, user: str, client_id: str) -> tuple[float, str]:
        """The bound that applies (Long.MAX_VALUE as a double when none) and the sensor tags."""
        r = self.resolve(user, client_id)
        return (LONG_MAX_AS_DOUBLE if r.bound is None else r.bound), r.tags

    def max_value_in_quota_window(self, user: str, client_id: str) -> float:
        """The largest fetch that cannot by itself guarantee a throttle: Q * (N-1) * W."""
        if not self.quotas_enabled:
            return DOUBLE_MAX
        r = self.resolve(user, client_id)
        if r.bound is None:
            return DOUBLE_MAX
        return r.bound * (self.samples - 1) * self.window_s

    def sensor_key(self, tags: str) -> str:
        """The sensor of these tags: its keys share its entity's bucket tag (``engine.sensor_keys``)."""
        return sensor_key(self.namespace, self.quota_type.sensor_prefix, tags)[0]

    # ---- decisions ----

    def _decision(self, r: Resolution, op: Op, value: float, t: int) -> Decision:
        bound = LONG_MAX_AS_DOUBLE if r.bound is None else r.bound
        return Decision(
            key=self.sensor_key(r.tags),
            kind=self.kind,
            op=op,
            value=value,
            t=t,
            bound=bound,
            samples=self.samples,
            window_ms=self.window_ms,
            aux=float(self.window_ms) if self.bounded else None,
            flags=TRACK_THROTTLE,
        )

    def throttle_time_long(self, throttle_raw: float) -> int:
        """``QuotaUtils.throttleTime`` (bounded at one window for the request quota)."""
        t = java_round(throttle_raw)
        return min(t, self.window_ms) if self.bounded else t

    def _fail(self, r: Resolution | None) -> RecordResult:
        tags = r.tags if r else ""
        if self.fail_mode == FAIL_OPEN:
            return RecordResult(0, tags, degraded=True)
        ms = self.window_ms if self.bounded else self.samples * self.window_ms
        return RecordResult(ms, tags, violated=True, throttle_ms_long=ms, degraded=True)

    def record(self, user: str, client_id: str, value: float, t: int) -> RecordResult:
        """``maybeRecordAndGetThrottleTimeMs``: record and check, or nothing at all when no quota exists."""
        return self.record_many([UsageRecord(user, client_id, value, t)])[0]

    def record_many(self, usages: Sequence[UsageRecord], validate: bool = True) -> list[RecordResult]:
        """Many requests' usage in one engine call (one script call in Redis), answered in order.

        Usage must be a finite amount >= 0 at an integer time (``QuotaValidationError`` otherwise);
        the replay passes ``validate=False`` because Kafka's managers take any double.
        """
        if validate:
            check_usages(usages)
        return self._record_columns(Op.RECORD, usages)

    def _record_columns(self, op: Op, usages: Sequence[UsageRecord]) -> list[RecordResult]:
        """The hot path: resolve from the cache, send columns, build the answers (kept lean on purpose)."""
        if not self.quotas_enabled:
            return [RecordResult(0, quotas_enabled=False) for _ in usages]
        cache, lookup = self._resolved, self._lookup
        hits = [cache.get((u[0], u[1])) or lookup(u[0], u[1]) for u in usages]
        try:
            bits, values, throttles = self.backend.record_columns(
                op, self.kind, self.flags, self.samples, self.window_ms,
                float(self.window_ms) if self.bounded else None,
                list(map(_KEY, hits)), list(map(_T, usages)), list(map(_VALUE, usages)), list(map(_BOUND, hits)),
                slots=list(map(_SLOT, hits)) if self._slotted else None,
            )
        except EngineUnavailable:
            return [self._fail(h[2]) for h in hits]
        new = tuple.__new__
        results = []
        for i, h in enumerate(hits):
            if bits[i] & 1:
                long_ms = self.throttle_time_long(throttles[i])
                v = values[i]
                results.append(new(RecordResult, (to_int(long_ms), h[3], v, True, long_ms, v, True, False)))
            else:
                results.append(new(RecordResult, (0, h[3], values[i], False, 0, None, True, False)))
        return results

    def unrecord(self, user: str, client_id: str, value: float, t: int, validate: bool = True) -> None:
        """Fetch's un-record: a throttled fetch returns nothing, so its bytes are taken back out.

        As Kafka's ``unrecordQuotaSensor`` it records even when no quota is configured.
        """
        if validate:
            check_usages([UsageRecord(user, client_id, value, t)])
        self._nocheck(user, client_id, -value, t)

    def _nocheck(self, user: str, client_id: str, value: float, t: int, flags: int = 0) -> None:
        r = self.resolve(user, client_id)
        d = self._decision(r, Op.RECORD_NOCHECK, value, t)
        d.flags |= flags
        try:
            self.backend.execute([d])
        except EngineUnavailable:
            if self.fail_mode == FAIL_CLOSED:
                raise

    def measure(self, user: str, client_id: str, t: int) -> Outcome:
        r = self.resolve(user, client_id)
        return self.backend.execute([self._decision(r, Op.MEASURE, 0.0, t)])[0]


class ClientRequestQuotaManager(ClientQuotaManager):
    """``request_percentage``: thread time in percent of a second, throttle capped at one window."""

    bounded = True
    EXEMPT_KEY_SUFFIX = "exempt-Request-time"

    def __init__(self, backend: Backend, **kwargs: object) -> None:
        super().__init__(QuotaType.REQUEST, backend, **kwargs)  # type: ignore[arg-type]

    def record_request_time(self, user: str, client_id: str, thread_time_nanos: int, t: int) -> RecordResult:
        return self.record(user, client_id, nanos_to_percentage(thread_time_nanos), t)

    def record_no_throttle(self, user: str, client_id: str, network_time_nanos: int, t: int) -> None:
        """The network thread's send time: counted toward the quota, never throttled on the spot.

        Kafka installs this callback only while request quotas are enabled.
        """
        if self.quotas_enabled:
            self._nocheck(user, client_id, nanos_to_percentage(network_time_nanos), t)

    def record_exempt(self, thread_time_nanos: int, t: int) -> None:
        """Cluster-action traffic: visible in metrics, never counted against a client; never expires.

        Recorded only while request quotas are enabled, as Kafka's ``maybeRecordExempt``.
        """
        if not self.quotas_enabled:
            return
        d = Decision(
            key=self.exempt_key(),
            kind=Kind.RATE,
            op=Op.RECORD_NOCHECK,
            value=nanos_to_percentage(thread_time_nanos),
            t=t,
            samples=self.samples,
            window_ms=self.window_ms,
            flags=NO_EXPIRY,
        )
        try:
            self.backend.execute([d])
        except EngineUnavailable:
            if self.fail_mode == FAIL_CLOSED:
                raise

    def exempt_key(self) -> str:
        return f"qe:{{{self.namespace}|{self.EXEMPT_KEY_SUFFIX}}}"


class ControllerMutationQuotaManager(ClientQuotaManager):
    """KIP-599: a token bucket per resolved entity; the manager's own record is the strict path."""

    kind = Kind.TOKEN_BUCKET

    def __init__(self, backend: Backend, **kwargs: object) -> None:
        super().__init__(QuotaType.CONTROLLER_MUTATION, backend, **kwargs)  # type: ignore[arg-type]

    def throttle_time_long(self, throttle_raw: float) -> int:
        return java_round(throttle_raw)  # -K / Q seconds, in ms

    def record_many(self, usages: Sequence[UsageRecord], validate: bool = True) -> list[RecordResult]:
        """Check, then record only when the bucket is not already negative (checkQuotas + record(v, false))."""
        if validate:
            check_usages(usages)
        return self._record_columns(Op.STRICT, usages)

    def new_quota_for(self, user: str, client_id: str, strict: bool) -> ControllerMutationQuota:
        """The per-request quota object: strict for new request versions, permissive for old ones."""
        if not self.quotas_enabled:
            return UnboundedControllerMutationQuota()
        cls = StrictControllerMutationQuota if strict else PermissiveControllerMutationQuota
        return cls(self, user, client_id)


class ControllerMutationQuota:
    kind = "unbounded"

    def is_exceeded(self) -> bool:
        return False

    def record(self, permits: float, t: int) -> None:
        return None

    def throttle_time(self, t: int) -> int:
        return 0


class UnboundedControllerMutationQuota(ControllerMutationQuota):
    """Used when no mutation quota is configured anywhere."""


class _MutationQuota(ControllerMutationQuota):
    op = Op.RECORD

    def __init__(self, manager: ControllerMutationQuotaManager, user: str, client_id: str) -> None:
        self.manager = manager
        self.user = user
        self.client_id = client_id
        self.last_throttle_ms = 0
        self.last_recorded_ms = 0
        self.last_outcome: Outcome | None = None

    def _decide(self, permits: float, t: int) -> Outcome:
        r = self.manager.resolve(self.user, self.client_id)
        try:
            o = self.manager.backend.execute([self.manager._decision(r, self.op, permits, t)])[0]
        except EngineUnavailable:
            if self.manager.fail_mode == FAIL_OPEN:
                return Outcome()
            o = Outcome(violated=True, throttle_raw=float(self.manager.samples * self.manager.window_ms))
        self.last_outcome = o
        if o.violated and o.throttle_raw is not None:
            self.last_throttle_ms = self.manager.throttle_time_long(o.throttle_raw)
            self.last_recorded_ms = t
        return o

    def throttle_time(self, t: int) -> int:
        """The remembered throttle, decayed by the time elapsed since it was computed."""
        return to_int(max(0, self.last_throttle_ms - (t - self.last_recorded_ms)))


class StrictControllerMutationQuota(_MutationQuota):
    """Rejects with THROTTLING_QUOTA_EXCEEDED once the bucket is negative, before anything is recorded."""

    kind = "strict"
    op = Op.STRICT

    def is_exceeded(self) -> bool:
        return self.last_throttle_ms > 0

    def record(self, permits: float, t: int) -> None:
        o = self._decide(permits, t)
        if o.violated:
            raise ThrottlingQuotaExceeded(self.throttle_time(t))


class PermissiveControllerMutationQuota(_MutationQuota):
    """Always records; a violation only sets the throttle time (old request versions)."""

    kind = "permissive"
    op = Op.RECORD

    def record(self, permits: float, t: int) -> None:
        self._decide(permits, t)


def manager_for(quota_type: QuotaType, backend: Backend, **kwargs: object) -> ClientQuotaManager:
    """The manager class Kafka uses for a quota type."""
    if quota_type == QuotaType.REQUEST:
        return ClientRequestQuotaManager(backend, **kwargs)
    if quota_type == QuotaType.CONTROLLER_MUTATION:
        return ControllerMutationQuotaManager(backend, **kwargs)
    return ClientQuotaManager(quota_type, backend, **kwargs)  # type: ignore[arg-type]
