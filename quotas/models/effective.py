"""The quota that applies to a client: Kafka's 8-level precedence over a cluster's rows, with the group step and
exempt principals (``engine.groups``), and an ip's connection rate; what the effective-quota API, the entity page
and the live sources explain."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Q

from engine.connections import IpRates, normalize_ip
from engine.entities import (
    DEFAULT,
    TYPE_OF_KEY,
    ClientEntity,
    QuotaOverrides,
    QuotaType,
    entity_path,
    level_entity,
    sanitize,
)
from engine.groups import NAMING_LEVELS
from engine.groups import tag as group_tag
from quotas.choices import BudgetScope
from quotas.models.clusters import Cluster
from quotas.models.group_lookup import cluster_groups
from quotas.models.quotas import IP_KEY, QuotaEntity, QuotaValue


@dataclass(frozen=True)
class EffectiveQuota:
    """The value of one key that applies to a client, where it comes from and what was passed over.

    ``level`` is 1..8 for client quotas (Kafka's precedence) and 1 (the ip) or 2 (``<default>`` ip)
    for connection_creation_rate; ``skipped`` are the more specific levels that hold no value. A group's value
    (``group``) has no level: it comes after the levels that name the client (all skipped) and before Kafka's
    defaults (``beaten``: those holding a value). An exempt principal (``exempt``) gets no quota and no walk.
    """

    key: str
    value: float | None
    level: int | None
    entity: str | None
    skipped: list[tuple[int, str]]
    tags: str | None = None  # the sensor tags "user:client-id" the engine records into
    budget_scope: str | None = None  # the value's: per_broker or cluster_wide (None: no value applies)
    group: str | None = None  # the group whose value applies (``level`` is then None: a group is no Kafka level)
    exempt: bool = False  # the principal is exempt: no quota applies, whatever the levels and groups hold
    beaten: list[tuple[int, str]] = field(default_factory=list)  # default levels holding a value a group won over


def effective_client_quotas(cluster: Cluster, user: str, client_id: str) -> list[EffectiveQuota]:
    """For each client key, the precedence of ``docs/capabilities/group-quotas.md`` over the cluster's rows: an
    exempt principal gets no quota; else the engine's resolution (``QuotaOverrides.resolve``) when it picks a level
    that names the client; else the first group the client is a member of that holds a value of the key; else
    Kafka's defaults. With the budget scope of the value that applies (a cluster-wide value is a budget the brokers
    share out). The cluster's groups and exempt principals are read once (``cluster_groups``: a few queries).

    Only the (at most 8) entities that can match are read, so the cost does not grow with the cluster:
    one OR term per entity shape, each naming the cluster and its shape's columns, so each term is a lookup
    in that shape's partial unique index (SQLite: MULTI-INDEX OR) instead of a scan of the cluster's rows.
    Unordered: the precedence, not the row order, decides.
    """
    groups = cluster_groups(cluster)
    if user in groups.exempt:
        return [EffectiveQuota(qt.config_key, None, None, None, [], exempt=True) for qt in QuotaType]
    users, clients = [user, DEFAULT], [client_id, DEFAULT]
    shapes = (
        Q(cluster=cluster, user__in=users, client_id__in=clients)
        | Q(cluster=cluster, user__in=users, client_id__isnull=True)
        | Q(cluster=cluster, user__isnull=True, client_id__in=clients)
    )
    rows = QuotaEntity.objects.filter(shapes, ip__isnull=True).order_by().prefetch_related("quota_values")
    overrides = {qt: QuotaOverrides() for qt in QuotaType}
    scopes: dict[tuple[QuotaType, ClientEntity], str] = {}
    for row in rows:
        for qv in row.quota_values.all():
            qt = TYPE_OF_KEY.get(qv.key)
            if qt is not None:
                entity = ClientEntity(row.user, row.client_id)
                overrides[qt].update(entity, qv.value)
                scopes[(qt, entity.sanitized())] = qv.budget_scope

    def path(level: int) -> str:
        e = level_entity(level, user, client_id)
        return entity_path(e.user, e.client_id)

    su = sanitize(user)
    answer = []
    for qt in QuotaType:
        r = overrides[qt].resolve(user, client_id)
        # every more specific level that holds nothing (the engine's own `skipped` lists only the levels that
        # Kafka's quotaLimit probed after choosing the sensor tags, which leaves out e.g. 1 and 2 for level 3)
        stop = r.level if r.level is not None else 9
        limits = overrides[qt].limits
        group = groups.first(qt.config_key, user, client_id) if r.level not in NAMING_LEVELS else None
        if group is not None:
            # every level that names the client holds nothing; the group beats the defaults that hold a value
            skipped = [(lv, path(lv)) for lv in sorted(NAMING_LEVELS)]
            beaten = [(lv, path(lv)) for lv in range(stop, 9)
                      if lv not in NAMING_LEVELS and level_entity(lv, su, client_id) in limits]
            answer.append(EffectiveQuota(
                qt.config_key, group.quotas[qt.config_key], None, f"/groups/{group.name}", skipped,
                f"{group_tag(group.name)}:", groups.scope(group.name, qt.config_key), group=group.name,
                beaten=beaten,
            ))
            continue
        skipped = [(lv, path(lv)) for lv in range(1, stop) if level_entity(lv, su, client_id) not in limits]
        source = path(r.level) if r.level is not None else None
        scope = scopes.get((qt, level_entity(r.level, su, client_id))) if r.level is not None else None
        answer.append(EffectiveQuota(qt.config_key, r.bound, r.level, source, skipped, r.tags, scope))
    return answer


def effective_ip_quota(cluster: Cluster, ip: str) -> EffectiveQuota:
    """The ip's ``connection_creation_rate`` as the engine's ``IpRates`` picks it: its own, else the default ip's."""
    ip = normalize_ip(ip)
    rates = IpRates()
    rows = QuotaValue.objects.filter(entity__cluster=cluster, entity__ip__in=[ip, DEFAULT], key=IP_KEY)
    present = set()
    for row in rows.select_related("entity"):
        present.add(row.entity.ip)
        rates.update(None if row.entity.ip == DEFAULT else row.entity.ip, int(row.value))
    own, default = entity_path(ip=ip), entity_path(ip=DEFAULT)
    if ip in present:
        return EffectiveQuota(IP_KEY, float(rates.rate_for(ip)), 1, own, [], budget_scope=BudgetScope.PER_BROKER)
    if DEFAULT in present:
        return EffectiveQuota(
            IP_KEY, float(rates.rate_for(ip)), 2, default, [(1, own)], budget_scope=BudgetScope.PER_BROKER
        )
    return EffectiveQuota(IP_KEY, None, None, None, [(1, own), (2, default)])


__all__ = ["EffectiveQuota", "effective_client_quotas", "effective_ip_quota"]
