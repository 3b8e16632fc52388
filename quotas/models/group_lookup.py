"""A cluster's groups and exempt principals read once, for the resolver, the capacity check and the preview.

The effective quota and the capacity check ask, for many clients at once, "which group's value applies"; this reads
the cluster's groups (their members, order and values) and exempt principals in a fixed number of queries, whatever
the number of groups, and answers from memory with the engine's rules (``engine.groups``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.db.models import Prefetch

from engine.config import EntityRef
from engine.entities import DEFAULT
from engine.errors import QuotaEngineError
from engine.groups import GROUP_KEYS, GroupSpec, first_group, in_order
from quotas.choices import BudgetScope, EntityType
from quotas.connectors.base import QUOTA
from quotas.models.clusters import Cluster
from quotas.models.groups import ExemptPrincipal, GroupKind, QuotaGroup
from quotas.models.tenants import OwnedName

if TYPE_CHECKING:
    from quotas.models.pushes import Drift


@dataclass(frozen=True)
class ClusterGroups:
    """A cluster's groups in the brokers' order, their values' budget scopes, and its exempt principals."""

    groups: tuple[GroupSpec, ...] = ()
    scopes: dict[tuple[str, str], str] = field(default_factory=dict)  # (group name, key) -> budget scope
    exempt: frozenset[str] = frozenset()

    def first(self, key: str, principal: str, client_id: str) -> GroupSpec | None:
        """The group whose value of ``key`` applies to the client when no naming level holds one, or None."""
        return first_group(self.groups, key, principal, client_id)

    def scope(self, name: str, key: str) -> str:
        """The budget scope of a group's value."""
        return self.scopes.get((name, key), BudgetScope.PER_BROKER)

    def holding(self, key: str) -> list[GroupSpec]:
        """The groups that hold a value of ``key``, in order."""
        return [g for g in self.groups if key in g.quotas]

    def shadowed(self, key: str, user: str | None, client_id: str | None) -> list[str]:
        """The groups holding ``key`` that a quota of this entity takes members out of, in order.

        A level that names the client wins over its group (the precedence's step 2), so a quota set on Kafka for a
        member's principal (or principal and client-id) shadows the member's group; a client-id alone shadows the
        prefix groups of any principal. A ``<default>`` part names no client and shadows nothing.
        """
        if user == DEFAULT or client_id == DEFAULT or (user is None and client_id is None):
            return []
        out = []
        for g in self.holding(key):
            if user is None:
                hit = g.any_user and g.prefix is not None and client_id.startswith(g.prefix)
            else:
                hit = g.matches(user, client_id if client_id is not None else (g.prefix or ""))
            if hit:
                out.append(g.name)
        return out

    def with_value(self, name: str, key: str, value: float | None, scope: str | None) -> ClusterGroups:
        """The same groups with one group's value of ``key`` set (None: removed), as a request or a plan would."""
        groups = []
        for g in self.groups:
            if g.name == name:
                quotas = {k: v for k, v in g.quotas.items() if k != key}
                if value is not None:
                    quotas[key] = float(value)
                g = GroupSpec(g.name, g.order, g.users, g.patterns, g.any_user, g.prefix, quotas)
            groups.append(g)
        scopes = {k: v for k, v in self.scopes.items() if k != (name, key)}
        if value is not None:
            scopes[(name, key)] = scope or BudgetScope.PER_BROKER
        return ClusterGroups(tuple(groups), scopes, self.exempt)


def cluster_groups(cluster: Cluster) -> ClusterGroups:
    """The cluster's groups and exempt principals: 4 queries at most (groups, their values, the user patterns of the
    tenants of tenant groups, exempt principals), however many groups there are."""
    exempt = frozenset(ExemptPrincipal.objects.filter(cluster=cluster).values_list("principal", flat=True))
    rows = list(
        QuotaGroup.objects.filter(cluster=cluster).select_related("tenant")
        .prefetch_related(Prefetch("values", to_attr="held"))
    )  # fmt: skip
    if not rows:
        return ClusterGroups(exempt=exempt)
    tenants = {g.tenant_id for g in rows if g.kind == GroupKind.TENANT}
    patterns: dict[int, list[str]] = {t: [] for t in tenants}
    if tenants:
        owned = OwnedName.objects.filter(tenant_id__in=tenants, entity_type=EntityType.USER)
        for tenant_id, pattern in owned.values_list("tenant_id", "pattern"):
            patterns[tenant_id].append(pattern)
    specs, scopes = [], {}
    for g in rows:
        values = {v.key: v.value for v in g.held}
        scopes.update({(g.name, v.key): v.budget_scope for v in g.held})
        specs.append(g.spec(values, patterns=patterns.get(g.tenant_id)))
    return ClusterGroups(tuple(in_order(specs)), scopes, exempt)


__all__ = ["ClusterGroups", "cluster_groups"]


def drift_shadows(rows: Iterable[Drift]) -> dict[int, list[str]]:
    """Per open quota drift row (pk) that Kafka holds for a group's member, the groups it shadows: a quota set on
    Kafka directly for a member takes it out of its group. One ``cluster_groups`` per cluster with such rows."""
    by_cluster: dict[int, ClusterGroups] = {}
    out: dict[int, list[str]] = {}
    for row in rows:
        if row.kind != QUOTA or row.actual is None or row.resolved_at is not None or row.key not in GROUP_KEYS:
            continue
        try:
            entity = EntityRef.from_field(row.resource)
        except (ValueError, TypeError, KeyError, QuotaEngineError):
            continue
        if entity.ip is not None:
            continue
        groups = by_cluster.get(row.cluster_id)
        if groups is None:
            groups = by_cluster[row.cluster_id] = cluster_groups(Cluster(pk=row.cluster_id))
        names = groups.shadowed(row.key, entity.user, entity.client_id)
        if names:
            out[row.pk] = names
    return out
