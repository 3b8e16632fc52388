"""Desired client quotas: entities, their values, and the per-cluster desired-state version.

The rules (which keys exist, which values Kafka accepts, how entity names are
formed, the 8-level precedence) are the engine's (``engine``); this module
only stores what passed them and answers two of Kafka's questions over the rows:
DescribeClientQuotas and AlterClientQuotas ("which quota applies to this client" is ``effective``).

Each value has a budget scope (``BudgetScope``): per broker, Kafka's meaning, or cluster-wide, a budget for the sum
over the cluster's brokers that their budget plugin shares out (``check_budget_scope`` says where that is allowed).
A value that is cluster-wide is also a ``budget-scope`` item of the cluster's desired state, beside its ``quota``
item: Kafka keeps the value, the engine's Redis the scope.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, models, transaction
from django.db.models import Q

from engine.config import CLIENT_ID, IP, USER, EntityRef
from engine.connections import normalize_ip
from engine.entities import (
    DEFAULT,
    QUOTA_KEYS,
    entity_path,
    validate_quota_key,
    validate_quota_value,
)
from engine.errors import QuotaEngineError, QuotaValidationError
from quotas.choices import BUDGET_KEYS, BudgetScope, ConnectorKind, MatchType, QuotaKey, QuotaScope
from quotas.connectors.base import BUDGET_SCOPE, CLUSTER_WIDE, QUOTA, Item
from quotas.models import rows
from quotas.models.clusters import Cluster
from quotas.models.pushes import DesiredStateVersion

#: Kafka's entity type -> the QuotaEntity column that holds its name.
ENTITY_FIELDS = {USER: "user", CLIENT_ID: "client_id", IP: "ip"}
IP_KEY = "connection_creation_rate"


class QuotaEntity(models.Model):
    """A Kafka client-quota entity of one cluster: user and/or client-id, or an ip.

    A NULL column is an absent part and the string ``<default>`` is Kafka's default
    entity, so ``(user=alice, client_id=NULL)`` is ``/config/users/alice`` and
    ``(user=<default>, client_id=<default>)`` is level 5. User names are stored raw
    (the engine sanitizes them when resolving); ips in canonical form.
    An entity exists only while it holds at least one value.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="quota_entities")
    user = models.CharField(max_length=255, null=True, blank=True)
    client_id = models.CharField(max_length=255, null=True, blank=True)
    ip = models.CharField(max_length=64, null=True, blank=True)

    class Meta:
        verbose_name_plural = "quota entities"
        ordering = ["cluster", "pk"]
        # NULLs are distinct in SQL unique indexes (SQLite and PostgreSQL < 15), so "unique together"
        # is one partial unique index per entity shape; each shape has no NULL in its columns.
        constraints = [
            models.CheckConstraint(
                condition=Q(ip__isnull=True) | Q(user__isnull=True, client_id__isnull=True),
                name="quotas_entity_ip_alone",
                violation_error_message="An ip entity cannot be combined with user or client-id.",
            ),
            models.CheckConstraint(
                condition=Q(user__isnull=False) | Q(client_id__isnull=False) | Q(ip__isnull=False),
                name="quotas_entity_not_empty",
                violation_error_message="An entity names at least one of user, client-id or ip.",
            ),
            models.CheckConstraint(
                condition=~Q(user="") & ~Q(client_id="") & ~Q(ip=""),
                name="quotas_entity_no_empty_name",
                violation_error_message="Entity names are never empty; the default entity is '<default>'.",
            ),
            models.UniqueConstraint(
                fields=["cluster", "user", "client_id"],
                condition=Q(user__isnull=False, client_id__isnull=False),
                name="quotas_entity_unique_user_client",
            ),
            models.UniqueConstraint(
                fields=["cluster", "user"],
                condition=Q(user__isnull=False, client_id__isnull=True),
                name="quotas_entity_unique_user",
            ),
            models.UniqueConstraint(
                fields=["cluster", "client_id"],
                condition=Q(user__isnull=True, client_id__isnull=False),
                name="quotas_entity_unique_client",
            ),
            models.UniqueConstraint(
                fields=["cluster", "ip"], condition=Q(ip__isnull=False), name="quotas_entity_unique_ip"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}:{self.path}"

    @property
    def components(self) -> dict[str, str]:
        """The entity as Kafka's APIs name it: entity type -> name, default as ``<default>``."""
        return {t: getattr(self, f) for t, f in ENTITY_FIELDS.items() if getattr(self, f) is not None}

    @property
    def path(self) -> str:
        """Kafka's config path, e.g. ``/config/users/alice/clients/<default>`` or ``/config/ips/<default>``."""
        return entity_path(self.user, self.client_id, self.ip)


class QuotaValue(models.Model):
    """One configured quota: a key of the entity and its value as a double (as Kafka keeps them), and what the value
    means: a limit on each broker (Kafka's meaning) or a cluster-wide budget (``budget_scope``)."""

    entity = models.ForeignKey(QuotaEntity, on_delete=models.CASCADE, related_name="quota_values")
    key = models.CharField(max_length=32, choices=QuotaKey.choices)
    value = models.FloatField()
    budget_scope = models.CharField(
        max_length=16,
        choices=BudgetScope.choices,
        default=BudgetScope.PER_BROKER,
        help_text="per_broker: a limit on each broker (Kafka's meaning); cluster_wide: a budget for the sum over the "
        "cluster's brokers, shared out between them by their budget plugin.",
    )

    class Meta:
        ordering = ["entity", "key"]
        constraints = [
            models.UniqueConstraint(fields=["entity", "key"], name="quotas_value_unique_key"),
            # The engine refuses <= 0 (a quota of 0 overflows Kafka's throttle); the database refuses it too.
            models.CheckConstraint(condition=Q(value__gt=0), name="quotas_value_positive"),
            models.CheckConstraint(condition=Q(key__in=list(QUOTA_KEYS)), name="quotas_value_known_key"),
            models.CheckConstraint(
                condition=Q(budget_scope=BudgetScope.PER_BROKER)
                | Q(budget_scope=BudgetScope.CLUSTER_WIDE, key__in=list(BUDGET_KEYS)),
                name="quotas_value_budget_scope",
                violation_error_message="Only producer_byte_rate, consumer_byte_rate and request_percentage values "
                "can be cluster_wide.",
            ),
        ]

    def __str__(self) -> str:
        scope = " (cluster-wide)" if self.budget_scope == BudgetScope.CLUSTER_WIDE else ""
        return f"{self.entity} {self.key}={self.value!r}{scope}"

    @property
    def cluster_wide(self) -> bool:
        return self.budget_scope == BudgetScope.CLUSTER_WIDE


class InvalidBudgetScope(QuotaValidationError):
    """A budget scope the value cannot have (a key or entity that is never shared out, or a cluster whose brokers
    share no budgets); nothing was changed."""

    code = "INVALID_BUDGET_SCOPE"


def check_budget_scope(cluster: Cluster, key: str, scope: str, *, ip: bool = False) -> str:
    """``scope`` if a value of ``key`` of the cluster may have it, else InvalidBudgetScope saying what to send.

    per_broker is always allowed. cluster_wide: for producer_byte_rate, consumer_byte_rate and request_percentage
    (Kafka's produce, fetch and request quotas, which the brokers' plugin shares out), at any of the 8 user/client-id
    levels, never an ip; on a Kafka cluster or a per-broker engine cluster (whose brokers run the same rounds,
    ``traffic.engine_budgets``), not on a cluster_wide engine cluster (one namespace: one budget already).
    """
    if scope not in BudgetScope.values:
        raise InvalidBudgetScope(
            f"budget_scope must be per_broker or cluster_wide, not {scope!r}; leave it out to keep the value's scope."
        )
    if scope == BudgetScope.PER_BROKER:
        return scope
    allowed = ", ".join(BUDGET_KEYS[:-1]) + f" and {BUDGET_KEYS[-1]}"
    if ip:
        raise InvalidBudgetScope(
            f"An ip quota ({key}) cannot be cluster-wide: Kafka counts connections per broker and ip. Only {allowed} "
            "values of user and client-id entities can be cluster_wide."
        )
    if key not in BUDGET_KEYS:
        raise InvalidBudgetScope(
            f"A {key} value cannot be cluster-wide: only {allowed} values can be cluster_wide (Kafka enforces "
            f"{key} where no budget can be shared out); send budget_scope per_broker or leave it out."
        )
    if cluster.connector != ConnectorKind.KAFKA and cluster.scope == QuotaScope.CLUSTER_WIDE:
        raise InvalidBudgetScope(
            f"Cluster {cluster.name!r} is cluster_wide: its brokers share one engine namespace, so every value there "
            "is one budget for the whole cluster already. Send budget_scope per_broker or leave it out."
        )
    return scope


# ------------------------------------------------------------------ DescribeClientQuotas


@dataclass(frozen=True)
class FilterComponent:
    """One DescribeClientQuotas filter component; ``match`` only for ``exact``."""

    entity_type: str
    match_type: str
    match: str | None = None


def describe_client_quotas(
    cluster: Cluster, components: Sequence[FilterComponent], strict: bool
) -> models.QuerySet[QuotaEntity]:
    """Kafka's DescribeClientQuotas as a lazy queryset (the caller pages through it; memory stays bounded).

    ``exact`` matches the name, ``default`` the default entity, ``specified`` any non-default name;
    ``strict`` keeps only entities with exactly the filtered entity types, otherwise they may have more.
    Invalid filters raise QuotaValidationError with Kafka's reasons.
    """
    seen: set[str] = set()
    for c in components:
        if c.entity_type not in ENTITY_FIELDS:
            raise QuotaValidationError(f"Unknown entity type {c.entity_type!r}; use user, client-id or ip.")
        if c.entity_type in seen:
            raise QuotaValidationError(f"Duplicate {c.entity_type} filter component; give each entity type once.")
        seen.add(c.entity_type)
        if c.match_type == MatchType.EXACT and not c.match:
            raise QuotaValidationError(f"The exact {c.entity_type} filter needs a non-empty match name.")
        if c.match_type != MatchType.EXACT and c.match is not None:
            raise QuotaValidationError(
                f"The {c.match_type} {c.entity_type} filter takes no match name; use match_type exact for a name."
            )
    if IP in seen and len(seen) > 1:
        raise QuotaValidationError("An ip filter component cannot be combined with user or client-id components.")

    qs = QuotaEntity.objects.filter(cluster=cluster)
    for c in components:
        column = ENTITY_FIELDS[c.entity_type]
        if c.match_type == MatchType.EXACT:
            qs = qs.filter(**{column: _canonical_ip(c.match) if c.entity_type == IP else c.match})
        elif c.match_type == MatchType.DEFAULT:
            qs = qs.filter(**{column: DEFAULT})
        else:
            qs = qs.filter(**{f"{column}__isnull": False}).exclude(**{column: DEFAULT})
    if strict:
        for entity_type, column in ENTITY_FIELDS.items():
            if entity_type not in seen:
                qs = qs.filter(**{f"{column}__isnull": True})
    # The serializer sorts each entity's values by key, so the prefetch needs no ORDER BY (the default one,
    # ["entity", "key"], joins the entity and cluster tables for every page just to sort).
    return qs.prefetch_related(models.Prefetch("quota_values", queryset=QuotaValue.objects.order_by()))


def _canonical_ip(name: str | None) -> str | None:
    """Ips are stored canonical, so any spelling of an address finds its entity; a non-address matches nothing."""
    try:
        return normalize_ip(name) if name not in (None, DEFAULT) else name
    except QuotaValidationError:
        return name


# ------------------------------------------------------------------ AlterClientQuotas


@dataclass(frozen=True)
class QuotaOp:
    """Set ``key`` to ``value``, or delete it when ``remove`` (the value is then ignored, as Kafka does).

    ``scope``: the value's budget scope (``BudgetScope``); None keeps the scope the value has (per_broker for a new
    value), so a change of the number alone never turns a cluster-wide budget into a per-broker limit."""

    key: str
    value: object = None
    remove: bool = False
    scope: str | None = None


@dataclass(frozen=True)
class Alteration:
    """One AlterClientQuotas entry: the entity as (entity type, name) pairs (None = default) and its ops."""

    entity: Sequence[tuple[str, str | None]]
    ops: Sequence[QuotaOp]


@dataclass(frozen=True)
class EntryResult:
    """Kafka's per-entry answer: the entity as given and the error (None = NONE)."""

    entity: Sequence[tuple[str, str | None]]
    error: QuotaEngineError | None = None

    @property
    def error_code(self) -> str:
        return "NONE" if self.error is None else self.error.code

    @property
    def error_message(self) -> str | None:
        return None if self.error is None else self.error.message


@dataclass
class AlterOutcome:
    """What an accepted batch did: the cluster's desired-state version after it, and whether anything changed."""

    version: int
    changed: bool
    results: list[EntryResult] = field(default_factory=list)


class AlterationRejected(QuotaValidationError):
    """At least one entry is invalid; nothing was applied. ``results`` holds the answer of every entry; ``code`` is
    the invalid entries' when they share one (INVALID_BUDGET_SCOPE), else INVALID_REQUEST."""

    def __init__(self, results: list[EntryResult]) -> None:
        bad = [(i, r.error) for i, r in enumerate(results) if r.error is not None]
        first, error = bad[0]
        super().__init__(
            f"{len(bad)} of {len(results)} entries invalid, nothing was changed (every entry's answer is in "
            f"details.entries); entry {first}: {error.message}"
        )
        self.results = results
        codes = {e.code for _, e in bad}
        self.code = codes.pop() if len(codes) == 1 else QuotaValidationError.code


_NAME_MAX = {t: QuotaEntity._meta.get_field(f).max_length for t, f in ENTITY_FIELDS.items()}


def _parse_entity(components: Sequence[tuple[str, str | None]]) -> EntityRef:
    """Kafka's entity rules (the engine's ``EntityRef.parse``), plus what a list form and the columns add."""
    mapping: dict[str, str | None] = {}
    for entity_type, name in components:
        if entity_type in mapping:
            raise QuotaValidationError(f"Duplicate entity type {entity_type!r} in one entity; give each type once.")
        mapping[entity_type] = name
    ref = EntityRef.parse(mapping)
    for entity_type, name in mapping.items():
        limit = _NAME_MAX[entity_type]
        if name is not None and len(name) > limit:
            raise QuotaValidationError(f"The {entity_type} name is {len(name)} characters long; at most {limit} fit.")
    if ref.ip is not None and ref.ip != DEFAULT:
        ref = EntityRef(ip=normalize_ip(ref.ip))  # one row per address, however it is spelled
    return ref


#: One validated op: key, value (None: remove) and budget scope (None: keep the value's).
Op = tuple[str, float | None, str | None]


def _validate_entry(
    cluster: Cluster, entry: Alteration, seen: set[tuple[EntityRef, str]]
) -> tuple[EntityRef, list[Op]]:
    """The engine's key/value rules for each op, and where a budget scope is allowed (``check_budget_scope``); a key
    altered twice in the batch is refused as the engine does."""
    ref = _parse_entity(entry.entity)
    ops: list[Op] = []
    for op in entry.ops:
        if (ref, op.key) in seen:
            raise QuotaValidationError(f"Key {op.key!r} is altered twice for the same entity {ref.field()}.")
        seen.add((ref, op.key))
        if op.remove:
            validate_quota_key(op.key, ref.kind)
            ops.append((op.key, None, None))
        elif op.value is None:
            validate_quota_key(op.key, ref.kind)
            raise QuotaValidationError(f"{op.key} needs a value; to delete the quota send remove: true.")
        else:
            value = validate_quota_value(op.key, op.value, ref.kind)
            scope = None if op.scope is None else check_budget_scope(cluster, op.key, op.scope, ip=ref.ip is not None)
            ops.append((op.key, value, scope))
    return ref, ops


def alter_client_quotas(cluster: Cluster, entries: Sequence[Alteration], validate_only: bool = False) -> AlterOutcome:
    """Kafka's AlterClientQuotas on the desired state, whole or nothing.

    Every entry is validated first (each gets Kafka's error code and message); if any is
    invalid, AlterationRejected carries all answers and nothing is written. Otherwise the
    batch is applied in one transaction that also bumps the cluster's desired-state version
    (only when a row really changed). ``validate_only`` stops after validation.
    """
    seen: set[tuple[EntityRef, str]] = set()
    results: list[EntryResult] = []
    validated: list[tuple[EntityRef, list[Op]]] = []
    for entry in entries:
        try:
            validated.append(_validate_entry(cluster, entry, seen))
            results.append(EntryResult(entry.entity))
        except QuotaEngineError as e:
            results.append(EntryResult(entry.entity, e))
    if any(r.error is not None for r in results):
        raise AlterationRejected(results)
    if validate_only:
        state = DesiredStateVersion.objects.filter(cluster=cluster).first()
        return AlterOutcome(state.version if state else 0, False, results)

    by_ref: dict[EntityRef, list[Op]] = {}
    for ref, ops in validated:
        by_ref.setdefault(ref, []).extend(ops)
    with transaction.atomic():
        # two round trips on PostgreSQL whatever the batch, the commit in the second: the lock with the reads it
        # guards, then the writes and the commit (rows.pipeline; SQLite inserts new entities in between)
        with rows.pipeline() as p:
            take = DesiredStateVersion.lock_in(p, cluster)
            held = _held_rows_in(p, cluster, list(by_ref))
        state = take()
        entities = _entities(cluster, by_ref, held())
        with rows.pipeline(commit=True) as p:
            changes = _apply_all(cluster, by_ref, entities, p)
            version = state.bump(changes, p) if changes else state.version
    return AlterOutcome(version, bool(changes), results)


#: Names matched per statement by ``_held_rows``.
_MATCH_CHUNK = 500
_COLUMNS = ("user", "client_id", "ip")


def _held_rows_in(p: rows.Pipeline, cluster: Cluster, refs: Sequence[EntityRef]) -> Callable[[], list[tuple[Any, ...]]]:
    """(entity pk, user, client_id, ip, value pk, key, value, budget scope) of the entities ``refs`` that exist, a
    row per value (a LEFT JOIN: an entity without values comes back once, with NULLs), read in the pipeline ``p``;
    returns what gives them once its block has ended.

    One statement per shape of entity (which of user, client id and ip it names), matching the first name it has
    with IN and the others' presence with IS [NOT] NULL: the shape's own unique index then finds each name (an OR of
    a term per entity made SQLite read every entity of the cluster from a batch of 100 on). Entities of the same
    first name but another second one are read too and left out here."""
    e = {name: rows.column(QuotaEntity, name) for name in ("id", "cluster", *_COLUMNS)}
    v = {name: rows.column(QuotaValue, name) for name in ("id", "entity", "key", "value", "budget_scope")}
    head = (
        f"SELECT e.{e['id']}, e.{e['user']}, e.{e['client_id']}, e.{e['ip']}, v.{v['id']}, v.{v['key']}, "
        f"v.{v['value']}, v.{v['budget_scope']} FROM {rows.table(QuotaEntity)} e LEFT JOIN {rows.table(QuotaValue)} v "
        f"ON v.{v['entity']} = e.{e['id']} WHERE e.{e['cluster']} = %s"
    )
    shapes: dict[tuple[bool, ...], list[str]] = {}
    for ref in refs:
        parts = (ref.user, ref.client_id, ref.ip)
        shape = tuple(part is not None for part in parts)
        shapes.setdefault(shape, []).append(next(part for part in parts if part is not None))
    wanted = {(ref.user, ref.client_id, ref.ip) for ref in refs}
    sent: list[rows.Pending] = []
    for shape, names in shapes.items():
        lead = shape.index(True)
        presence = "".join(
            f" AND e.{e[name]} IS {'NOT ' if present else ''}NULL"
            for i, (name, present) in enumerate(zip(_COLUMNS, shape, strict=True)) if i != lead
        )  # fmt: skip
        names = list(dict.fromkeys(names))
        for start in range(0, len(names), _MATCH_CHUNK):
            chunk = names[start : start + _MATCH_CHUNK]
            sql = f"{head} AND e.{e[_COLUMNS[lead]]} IN ({', '.join(['%s'] * len(chunk))}){presence}"
            sent.append(p.execute(sql, [cluster.pk, *chunk]))
    return lambda: [row for pending in sent for row in pending.rows if tuple(row[1:4]) in wanted]


def scope_change(resource: str, key: str, before: str | None, after: str | None) -> dict[Item, str | None]:
    """The ``budget-scope`` item a value's change of scope makes (``before``/``after``: its scope, None when the value
    does not exist), or nothing: only a cluster-wide value has the item."""
    was, now = before == BudgetScope.CLUSTER_WIDE, after == BudgetScope.CLUSTER_WIDE
    if was == now:
        return {}
    return {Item(BUDGET_SCOPE, resource, key): CLUSTER_WIDE if now else None}


#: An entity's names: (user, client_id, ip).
Names = tuple[str | None, str | None, str | None]


def _names(ref: EntityRef) -> Names:
    return ref.user, ref.client_id, ref.ip


@dataclass
class _Entities:
    """The entities of a batch as ``_entities`` found or made them: their pks, and their values before the batch.
    ``new``: the entities still to insert (PostgreSQL: with their values, ``_insert_new``), by the stand-in pk each
    has in ``pks`` meanwhile (negative: no row has it)."""

    pks: dict[Names, int]
    held: dict[tuple[int, str], tuple[int, float, str]]  # (entity pk, key) -> (value pk, value, budget scope)
    new: dict[int, Names] = field(default_factory=dict)


def _entities(cluster: Cluster, by_ref: Mapping[EntityRef, list[Op]], found: list[tuple[Any, ...]]) -> _Entities:
    """The batch's entities from ``found`` (``_held_rows_in``), and those it sets a value of that do not exist yet.
    On PostgreSQL these are inserted with their values in the pipeline of the writes (``_insert_new``); elsewhere
    here, at once (one statement for all): the value rows need their pks."""
    entities: dict[Names, int] = {}
    held: dict[tuple[int, str], tuple[int, float, str]] = {}
    for pk, user, client_id, ip, value_pk, key, value, scope in found:
        entities[(user, client_id, ip)] = pk
        if value_pk is not None:
            held[(pk, key)] = (value_pk, value, scope)
    new = [
        _names(ref) for ref, ops in by_ref.items()
        if _names(ref) not in entities and any(value is not None for _, value, _ in ops)
    ]  # fmt: skip
    if new and connection.vendor == "postgresql":
        stand_in = {-1 - i: names for i, names in enumerate(new)}
        entities.update({names: pk for pk, names in stand_in.items()})
        return _Entities(entities, held, stand_in)
    if new:
        made = rows.insert(QuotaEntity, ("cluster", *_COLUMNS), [(cluster.pk, *p) for p in new], ("id", *_COLUMNS))
        entities.update({tuple(names): pk for pk, *names in made})
    return _Entities(entities, held)


#: New entities inserted per statement by ``_insert_new`` (each with its values).
_NEW_CHUNK = 100


def _insert_new(
    p: rows.Pipeline, cluster: Cluster, new: Mapping[int, Names], creates: Sequence[tuple[int, str, float, str]]
) -> None:
    """PostgreSQL: insert the new entities and their values (``creates`` of their stand-in pks) in one statement per
    ``_NEW_CHUNK`` entities, sent in ``p``: the entities' INSERT ... RETURNING feeds the values' INSERT (a
    data-modifying WITH), matched on the names, so their pks need no round trip of their own."""
    e = {name: rows.column(QuotaEntity, name) for name in ("id", "cluster", *_COLUMNS)}
    v = ", ".join(rows.column(QuotaValue, name) for name in ("entity", "key", "value", "budget_scope"))
    values_of: dict[int, list[tuple[str, float, str]]] = {}
    for entity, key, value, scope in creates:
        values_of.setdefault(entity, []).append((key, value, scope))
    same = " AND ".join(f"e.{e[c]} IS NOT DISTINCT FROM w.{alias}" for c, alias in zip(_COLUMNS, "uci", strict=True))
    stand_ins = list(new)
    for start in range(0, len(stand_ins), _NEW_CHUNK):
        chunk = stand_ins[start : start + _NEW_CHUNK]
        made = [new[pk] for pk in chunk]
        wanted = [(*new[pk], *value) for pk in chunk for value in values_of.get(pk, [])]
        sql = (
            f"WITH e AS (INSERT INTO {rows.table(QuotaEntity)} ({e['cluster']}, {e['user']}, {e['client_id']}, "
            f"{e['ip']}) VALUES {', '.join(['(%s, %s, %s, %s)'] * len(made))} RETURNING {e['id']}, {e['user']}, "
            f"{e['client_id']}, {e['ip']}) INSERT INTO {rows.table(QuotaValue)} ({v}) SELECT e.{e['id']}, w.k, w.x, "
            f"w.s FROM e JOIN (VALUES "
            + ", ".join(["(%s::varchar, %s::varchar, %s::varchar, %s::varchar, %s::double precision, %s::varchar)"]
                        * len(wanted))
            + f") AS w(u, c, i, k, x, s) ON {same}"
        )  # fmt: skip
        params = [x for names in made for x in (cluster.pk, *names)] + [x for row in wanted for x in row]
        p.execute(sql, params)


def _apply_all(
    cluster: Cluster, by_ref: Mapping[EntityRef, list[Op]], found: _Entities, p: rows.Pipeline
) -> dict[Item, str | None]:
    """Write validated entries (by entity) in a few plain statements whatever their number (one change or a batch
    of 100 costs about the same), sent in the pipeline ``p``: their values inserted, updated and deleted in bulk.
    Runs under the cluster's version lock, so no other change of the cluster interleaves. Returns the items that
    changed (None = removed): a value's ``quota`` item, and its ``budget-scope`` item when it became or stopped
    being cluster-wide; an entity left without values is deleted."""
    entities, held = found.pks, found.held
    changes: dict[Item, str | None] = {}
    creates: list[tuple[int, str, float, str]] = []
    updates: list[tuple[float, str, int]] = []
    deletes: list[int] = []
    emptied: set[int] = set()
    for ref, ops in by_ref.items():
        entity = entities.get(_names(ref))
        if entity is None:
            continue  # only removals, of an entity that holds nothing
        resource = ref.field()
        for key, value, scope in ops:
            row = held.get((entity, key))
            if value is None:
                if row is not None:
                    deletes.append(row[0])
                    del held[(entity, key)]
                    emptied.add(entity)
                    changes[Item(QUOTA, resource, key)] = None
                    changes.update(scope_change(resource, key, row[2], None))
                continue
            if row is None:
                scope = scope or BudgetScope.PER_BROKER
                creates.append((entity, key, value, scope))
                held[(entity, key)] = (0, value, scope)
            else:
                scope = scope or row[2]
                if row[1] == value and row[2] == scope:
                    continue
                updates.append((value, scope, row[0]))
                held[(entity, key)] = (row[0], value, scope)
            if row is None or row[1] != value:
                changes[Item(QUOTA, resource, key)] = repr(float(value))
            changes.update(scope_change(resource, key, row[2] if row is not None else None, scope))
    value_table, entity_table = rows.table(QuotaValue), rows.table(QuotaEntity)
    _delete_in(p, f"DELETE FROM {value_table} WHERE {rows.column(QuotaValue, 'id')}", deletes)
    if found.new:
        _insert_new(p, cluster, found.new, [c for c in creates if c[0] < 0])
        creates = [c for c in creates if c[0] >= 0]
    rows.insert(QuotaValue, ("entity", "key", "value", "budget_scope"), creates, via=p)
    update = (
        f"UPDATE {value_table} SET {rows.column(QuotaValue, 'value')} = %s, "
        f"{rows.column(QuotaValue, 'budget_scope')} = %s WHERE {rows.column(QuotaValue, 'id')} = %s"
    )
    for params in updates:  # one statement per row, all sent together
        p.execute(update, params)
    still = {entity for entity, _ in held}
    gone = [pk for pk in emptied if pk not in still]
    # what the ORM's delete of the entities ran (its cascade to their values, then them), as plain statements
    _delete_in(p, f"DELETE FROM {value_table} WHERE {rows.column(QuotaValue, 'entity')}", gone)
    _delete_in(p, f"DELETE FROM {entity_table} WHERE {rows.column(QuotaEntity, 'id')}", gone)
    return changes


def _delete_in(p: rows.Pipeline, head: str, pks: Sequence[int]) -> None:
    """``head IN (pks)``, in statements of at most ``rows.MAX_PARAMS`` pks, sent in ``p``."""
    for start in range(0, len(pks), rows.MAX_PARAMS):
        chunk = pks[start : start + rows.MAX_PARAMS]
        p.execute(f"{head} IN ({', '.join(['%s'] * len(chunk))})", chunk)


__all__ = [
    "Alteration",
    "AlterationRejected",
    "AlterOutcome",
    "EntryResult",
    "FilterComponent",
    "InvalidBudgetScope",
    "QuotaEntity",
    "QuotaOp",
    "QuotaValue",
    "alter_client_quotas",
    "check_budget_scope",
    "describe_client_quotas",
]
