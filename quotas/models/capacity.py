"""The capacity check an approver decides on: what a byte-rate change does to a cluster's granted total.

Counted as Kafka enforces it: each known entity gets the quota of the precedence (Kafka's 8 levels, with the groups
and exempt principals of ``docs/capabilities/group-quotas.md``), each sensor once, a per-broker value x the cluster's
brokers, a cluster-wide budget once. A group with a value is one sensor, counted once, however many members share it.
Read-only over desired state; the approval pages, the API and the plans use it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from engine.entities import DEFAULT, PRECEDENCE, ClientEntity, QuotaOverrides, entity_path
from engine.groups import NAMING_LEVELS
from engine.units import format_byte_rate, format_exact
from quotas.choices import BudgetScope, QuotaScope
from quotas.models.clusters import Cluster
from quotas.models.group_lookup import ClusterGroups, cluster_groups
from quotas.models.quotas import QuotaEntity, QuotaValue
from quotas.models.requests import QuotaRequest, RequestState

#: Byte-rate keys and the cluster capacity they draw on.
CAPACITY_FIELD = {"producer_byte_rate": "capacity_in_bytes_per_s", "consumer_byte_rate": "capacity_out_bytes_per_s"}
#: Stand-ins for "a principal / client-id the cluster's quotas do not name" (a client of a user-level quota, the
#: users of a client-id quota): they match no configured name, so they resolve as any such name would.
OTHER_USER, OTHER_CLIENT = "\x00another principal", "\x00another client-id"

Pair = tuple[str | None, str | None]


@dataclass(frozen=True)
class DefaultShare:
    """A quota naming ``<default>`` and how many of the known entities it applies to (each its own sensor, so it
    counts once for each), with the request and without it; ``value`` None: it exists only without the request."""

    entity: str
    value: float | None
    applies_to: int
    applies_to_without: int


@dataclass(frozen=True)
class CapacityCheck:
    """What a byte-rate request does to the cluster's granted total, in bytes/s the cluster really carries.

    The total is counted over the ``known`` entities (the principal/client-id combinations this cluster's quotas
    name, and the request's): each gets the quota Kafka applies to it (8-level precedence), and each sensor
    counts once, so a ``<default>`` counts once for every known entity it applies to (``defaults``). A per-broker
    value counts x ``multiplier`` (the cluster's brokers: Kafka enforces it on each); a cluster-wide budget counts
    once (its brokers share it out), ``budgets`` naming those that supplied a sensor with the request. A group's
    value is one sensor whatever its members (``groups``: those counted with the request, as ``/groups/<name>``;
    a cluster-wide one is among ``budgets`` too); an exempt principal counts nothing.
    """

    key: str
    scope: str
    brokers: int
    multiplier: int
    capacity: int | None
    granted_without: float
    granted_with: float
    known: int = 0
    defaults: tuple[DefaultShare, ...] = ()
    budgets: tuple[str, ...] = ()
    budget_with: float = 0.0
    budget_without: float = 0.0
    groups: tuple[str, ...] = ()

    @property
    def exceeds(self) -> bool:
        return self.capacity is not None and self.granted_with > self.capacity

    @property
    def counted(self) -> str:
        """How the total was counted, in a sentence an approver can check."""
        brokers = f"x {self.multiplier} broker{'s' if self.multiplier != 1 else ''}"
        if self.scope != QuotaScope.PER_BROKER:
            per = "once (one cluster-wide budget)"
        elif self.budgets:
            per = (
                f"per-broker values {brokers} (Kafka enforces each on every broker), cluster-wide budgets once (the "
                f"brokers share each one out: {', '.join(self.budgets)}, {format_byte_rate(self.budget_with)} in all)"
            )
        else:
            per = f"{brokers} (quotas are per broker)"
        shares = "; ".join(
            f"{d.entity} = {format_byte_rate(d.value)} applies to {d.applies_to} of them"
            + (f" ({d.applies_to_without} without the request)" if d.applies_to_without != d.applies_to else "")
            for d in self.defaults
            if d.value is not None
        )
        return (
            f"Over {self.known} known entit{'y' if self.known == 1 else 'ies'} (the principal/client-id combinations "
            f"this cluster's quotas name, and the request's), each with the quota Kafka applies to it, each sensor "
            f"once{'; ' + shares if shares else ''}{self._groups_text()}; {per}."
        )

    def _groups_text(self) -> str:
        if not self.groups:
            return ""
        return (f"; {len(self.groups)} group{'s' if len(self.groups) != 1 else ''} once each, whatever their members "
                f"(one sensor each: {', '.join(self.groups)})")

    @property
    def warning(self) -> str | None:
        if not self.exceeds or self.capacity is None:
            return None
        return (
            f"With this request the cluster grants {format_byte_rate(self.granted_with)} "
            f"({format_exact(self.key, self.granted_with)}) of {self.key}, above its capacity of "
            f"{format_byte_rate(self.capacity)} ({format_exact(self.key, self.capacity)}); without it: "
            f"{format_byte_rate(self.granted_without)} ({format_exact(self.key, self.granted_without)})."
        )


def _known_pairs(entities: Iterable[Pair]) -> set[tuple[str, str]]:
    """The (principal, client-id) pairs the entities name; a part left out or ``<default>`` is another name."""
    known = set()
    for user, client_id in entities:
        named_user = user if user not in (None, DEFAULT) else None
        named_client = client_id if client_id not in (None, DEFAULT) else None
        if named_user is None and named_client is None:
            continue  # only defaults: it names nobody
        known.add((named_user or OTHER_USER, named_client or OTHER_CLIENT))
    return known


@dataclass(frozen=True)
class Granted:
    """What the known pairs are granted: bytes/s of per-broker values (per broker) and of cluster-wide budgets (in
    all), how many sensors each entity supplied, the cluster-wide entities that supplied one, and the groups counted
    (names, in order) with those of them that are cluster-wide."""

    per_broker: float
    cluster_wide: float
    supplied: Counter[Pair]
    budgets: tuple[Pair, ...]
    groups: tuple[str, ...] = ()
    group_budgets: tuple[str, ...] = ()

    def total(self, multiplier: int) -> float:
        """Bytes/s the cluster carries: per-broker values on each of ``multiplier`` brokers, budgets once."""
        return self.per_broker * multiplier + self.cluster_wide


def granted_total(
    values: dict[Pair, float], known: Iterable[tuple[str, str]], cluster_wide: Iterable[Pair] = (),
    groups: ClusterGroups | None = None, key: str = "",
) -> Granted:
    """The bytes/s granted to the known (principal, client-id) pairs, as Kafka resolves them, and how many sensors
    each entity supplied.

    Each pair gets the quota of the most specific level holding one (``QuotaOverrides``, the engine's 8 levels);
    pairs sharing a sensor (a user-level quota covers all its clients) count once. Pairs no quota applies to add
    nothing. A sensor whose value is cluster-wide (its entity in ``cluster_wide``) counts apart: once for the cluster.

    With ``groups`` (the cluster's, their values of ``key``): an exempt principal adds nothing; a pair that no level
    naming it holds a value for and that is a member of a group holding one is behind the group's sensor, not the
    defaults'; each group holding a value counts once (a member or none: its value is granted to whoever joins).
    """
    groups = groups or ClusterGroups()
    overrides = QuotaOverrides()
    for (user, client_id), value in values.items():
        overrides.update(ClientEntity(user, client_id), value)
    sensors: dict[str, tuple[float, Pair]] = {}
    for user, client_id in known:
        if user in groups.exempt:
            continue
        resolved = overrides.resolve(user, client_id)
        if resolved.level not in NAMING_LEVELS and groups.first(key, user, client_id) is not None:
            continue  # the group's sensor, counted once below
        if resolved.bound is None or resolved.level is None:
            continue
        u, c = PRECEDENCE[resolved.level - 1]
        sensors[resolved.tags] = (resolved.bound, (user if u == "u" else u, client_id if c == "c" else c))
    supplied: Counter[Pair] = Counter(entity for _, entity in sensors.values())
    budgets = set(cluster_wide)
    once = [bound for bound, entity in sensors.values() if entity in budgets]
    each = [bound for bound, entity in sensors.values() if entity not in budgets]
    used = tuple(sorted((pair for pair in supplied if pair in budgets), key=lambda pair: entity_path(*pair)))
    holding = groups.holding(key) if key else []
    shared = [g.name for g in holding if groups.scope(g.name, key) == BudgetScope.CLUSTER_WIDE]
    once += [g.quotas[key] for g in holding if g.name in shared]
    each += [g.quotas[key] for g in holding if g.name not in shared]
    return Granted(sum(each), sum(once), supplied, used, tuple(g.name for g in holding), tuple(shared))


def capacity_check(request: QuotaRequest) -> CapacityCheck | None:
    """The cluster's granted total of the request's byte-rate key, without and with the request.

    Kafka enforces byte rates per broker, so a per-broker value is worth value x brokers; a cluster-wide
    value is worth itself. ``<default>`` quotas count once per known entity they apply to (``granted_total``).
    For an applied request, "without" puts back the value (and budget scope) it replaced. None for keys that are not
    byte rates (no capacity to compare with).
    """
    if request.key not in CAPACITY_FIELD:
        return None
    if request.group_name:
        return _group_capacity_check(request)
    cluster = request.cluster
    values, budgets = _cluster_values(cluster, request.key)
    mine: Pair = (request.user, request.client_id)
    with_, without = dict(values), dict(values)
    budgets_with, budgets_without = set(budgets), set(budgets)
    with_[mine] = request.value
    budgets_with.discard(mine)
    if request.cluster_wide:
        budgets_with.add(mine)
    if request.state == RequestState.APPLIED:
        without.pop(mine, None)
        budgets_without.discard(mine)
        if request.previous_value is not None:
            without[mine] = request.previous_value
            if request.previous_budget_scope == BudgetScope.CLUSTER_WIDE:
                budgets_without.add(mine)
    return capacity_between(
        cluster, request.key, without, with_, [mine], cluster_wide_without=budgets_without,
        cluster_wide_with=budgets_with,
    )


def _cluster_values(cluster: Cluster, key: str) -> tuple[dict[Pair, float], set[Pair]]:
    """The cluster's values of ``key`` (entity -> value) and the entities whose value is cluster-wide."""
    rows = QuotaValue.objects.filter(entity__cluster=cluster, entity__ip__isnull=True, key=key)
    values: dict[Pair, float] = {}
    budgets: set[Pair] = set()
    for u, c, v, scope in rows.values_list("entity__user", "entity__client_id", "value", "budget_scope"):
        values[(u, c)] = v
        if scope == BudgetScope.CLUSTER_WIDE:
            budgets.add((u, c))
    return values, budgets


def _group_capacity_check(request: QuotaRequest) -> CapacityCheck:
    """A group request's check: the cluster's quotas as they are, its groups with the group's value and without it
    (for an applied request, the value and scope it replaced), as an entity's request is checked."""
    values, budgets = _cluster_values(request.cluster, request.key)
    groups = cluster_groups(request.cluster)
    with_ = groups.with_value(request.group_name, request.key, request.value, request.budget_scope)
    without = groups
    if request.state == RequestState.APPLIED:
        without = groups.with_value(request.group_name, request.key, request.previous_value,
                                    request.previous_budget_scope)
    return capacity_between(request.cluster, request.key, values, values, cluster_wide_without=budgets,
                            cluster_wide_with=budgets, groups_without=without, groups_with=with_)


def capacity_between(
    cluster: Cluster, key: str, without: dict[Pair, float], with_: dict[Pair, float], extra: Iterable[Pair] = (),
    *, cluster_wide_without: Iterable[Pair] = (), cluster_wide_with: Iterable[Pair] = (),
    groups_without: ClusterGroups | None = None, groups_with: ClusterGroups | None = None,
) -> CapacityCheck:
    """The cluster's granted total of a byte-rate key for two sets of its quotas (entity -> value): without and
    with a change (one request, or a whole plan). Counted over the known entities (those the cluster's quotas
    name, the principals its groups list, plus ``extra`` and every entity of either set), each with the quota the
    precedence gives it: a per-broker value x the cluster's brokers, a cluster-wide one (its entity in
    ``cluster_wide_*``) once; a group holding a value one sensor. ``groups_*``: the cluster's groups without and
    with the change (read once from the cluster when None: the change leaves them as they are)."""
    if groups_without is None or groups_with is None:
        current = cluster_groups(cluster)
        groups_without, groups_with = groups_without or current, groups_with or current
    brokers = cluster.brokers.count()
    multiplier = max(brokers, 1) if cluster.scope == QuotaScope.PER_BROKER else 1
    entities = QuotaEntity.objects.filter(cluster=cluster, ip__isnull=True).values_list("user", "client_id")
    listed = [(u, None) for g in (*groups_without.groups, *groups_with.groups) for u in g.users]
    known = _known_pairs([*entities, *listed, *extra, *with_, *without])
    granted_with = granted_total(with_, known, cluster_wide_with, groups_with, key)
    granted_without = granted_total(without, known, cluster_wide_without, groups_without, key)
    defaults = tuple(
        DefaultShare(entity_path(*pair), with_.get(pair), granted_with.supplied.get(pair, 0),
                     granted_without.supplied.get(pair, 0))
        for pair in sorted({*with_, *without}, key=lambda pair: entity_path(*pair))
        if DEFAULT in pair
    )
    return CapacityCheck(
        key=key,
        scope=cluster.scope,
        brokers=brokers,
        multiplier=multiplier,
        capacity=getattr(cluster, CAPACITY_FIELD[key]),
        granted_without=granted_without.total(multiplier),
        granted_with=granted_with.total(multiplier),
        known=len(known),
        defaults=defaults,
        budgets=(*(entity_path(*pair) for pair in granted_with.budgets),
                 *(f"/groups/{name}" for name in granted_with.group_budgets)),
        budget_with=granted_with.cluster_wide,
        budget_without=granted_without.cluster_wide,
        groups=tuple(f"/groups/{name}" for name in granted_with.groups),
    )
