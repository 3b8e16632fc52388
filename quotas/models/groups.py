"""Group quotas and exempt principals of a cluster: the tables and their rules.

A group is a named set of clients on one cluster sharing one quota: the principals its tenant owns (kept in step with
the tenant's patterns), an explicit list of principals, or a client-id prefix (optionally under one principal). Its
values (``GroupValue``) are produce, fetch and request-percentage quotas, per broker or cluster-wide. An exempt
principal is one no quota applies to (inter-broker, replicators, the portal's own user).

Neither exists in Kafka's own quota configs: the brokers' quota callback reads them from the cluster's scope hash
(``engine.groups``; items of kinds ``group`` and ``exempt`` of the desired state), and so do a per-broker engine
cluster's brokers (``traffic.engine_budgets``). The precedence is
``engine.groups``'s and ``docs/capabilities/group-quotas.md``'s.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from engine.errors import QuotaValidationError
from engine.groups import (
    GROUP_KEYS,
    PREFIX_ALONE,
    PREFIX_UNDER_PRINCIPAL,
    PRINCIPALS,
    GroupSpec,
    check_name,
    group_of_tags,
    order_of,
)
from quotas.choices import BudgetScope, ConnectorKind, EntityType, QuotaScope
from quotas.models.clusters import Cluster
from quotas.models.tenants import Tenant


class GroupKind(models.TextChoices):
    TENANT = "tenant", "The principals the tenant owns"
    PRINCIPALS = "principals", "A list of principals"
    CLIENT_PREFIX = "client_prefix", "A client-id prefix"


class InvalidGroup(QuotaValidationError):
    """A group that cannot be made as asked (the sentence says what to change)."""

    code = "INVALID_GROUP"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class GroupOverlap(InvalidGroup):
    """A group that would match the same clients as another in a way the order cannot decide."""

    code = "GROUP_OVERLAP"


class QuotaGroup(models.Model):
    """One group of clients on a Kafka cluster, owned by a tenant."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="quota_groups")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="quota_groups")
    name = models.CharField(max_length=64, help_text="Letters, digits, '.', '_' and '-'; unique on the cluster.")
    kind = models.CharField(max_length=16, choices=GroupKind.choices)
    principals = models.JSONField(default=list, blank=True, help_text="The principals of a 'principals' group.")
    client_id_prefix = models.CharField(max_length=255, blank=True, help_text="A 'client_prefix' group's prefix.")
    prefix_principal = models.CharField(
        max_length=255, blank=True, help_text="A 'client_prefix' group only under this principal (blank: any)."
    )
    description = models.CharField(max_length=200, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="quotas_group_unique_name"),
            models.CheckConstraint(condition=Q(kind__in=GroupKind.values), name="quotas_group_known_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}:{self.name}"

    @property
    def path(self) -> str:
        """How audit entries, pages and quota files name the group."""
        return f"/groups/{self.name}"

    def members_text(self) -> str:
        """Who the group holds, in one line."""
        if self.kind == GroupKind.TENANT:
            return f"the principals tenant {self.tenant.name} owns"
        if self.kind == GroupKind.PRINCIPALS:
            return "principals " + ", ".join(self.principals)
        under = f" of principal {self.prefix_principal}" if self.prefix_principal else ""
        return f"client-ids starting {self.client_id_prefix!r}{under}"

    def spec(self, values: dict[str, float] | None = None, patterns: list[str] | None = None) -> GroupSpec:
        """The group as the brokers take it (``values``: its quotas; ``patterns``: a tenant group's tenant's user
        patterns; each read from the database when None)."""
        if values is None:
            values = {v.key: v.value for v in self.values.all()}
        if self.kind == GroupKind.TENANT:
            if patterns is None:
                patterns = self.tenant.owned_names.filter(entity_type=EntityType.USER).values_list("pattern", flat=True)
            return GroupSpec(self.name, order_of(PRINCIPALS, None), patterns=tuple(patterns), quotas=values)
        if self.kind == GroupKind.PRINCIPALS:
            return GroupSpec(self.name, order_of(PRINCIPALS, None), users=tuple(self.principals), quotas=values)
        prefix = self.client_id_prefix
        if self.prefix_principal:
            return GroupSpec(self.name, order_of(PREFIX_UNDER_PRINCIPAL, prefix), users=(self.prefix_principal,),
                             prefix=prefix, quotas=values)
        return GroupSpec(self.name, order_of(PREFIX_ALONE, prefix), any_user=True, prefix=prefix, quotas=values)


class GroupValue(models.Model):
    """One quota of a group: produce, fetch or request percentage, per broker or a cluster-wide budget."""

    group = models.ForeignKey(QuotaGroup, on_delete=models.CASCADE, related_name="values")
    key = models.CharField(max_length=32, choices=[(k, k) for k in GROUP_KEYS])
    value = models.FloatField()
    budget_scope = models.CharField(max_length=16, choices=BudgetScope.choices, default=BudgetScope.PER_BROKER)

    class Meta:
        ordering = ["group", "key"]
        constraints = [
            models.UniqueConstraint(fields=["group", "key"], name="quotas_group_value_unique_key"),
            models.CheckConstraint(condition=Q(value__gt=0), name="quotas_group_value_positive"),
            models.CheckConstraint(condition=Q(key__in=list(GROUP_KEYS)), name="quotas_group_value_known_key"),
        ]

    def __str__(self) -> str:
        return f"{self.group} {self.key}={self.value!r}"


class ExemptPrincipal(models.Model):
    """A principal of a Kafka cluster that no quota applies to, as Kafka exempts its own brokers."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="exempt_principals")
    principal = models.CharField(max_length=255)
    reason = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster", "principal"]
        constraints = [models.UniqueConstraint(fields=["cluster", "principal"], name="quotas_exempt_unique")]

    def __str__(self) -> str:
        return f"{self.cluster.name}: {self.principal} (exempt)"


def takes_groups(cluster: Cluster) -> bool:
    """Whether the cluster's brokers enforce groups and exempt principals: a Kafka cluster's quota callback, or a
    per-broker engine cluster's brokers (the same rounds read the same scope hash)."""
    return cluster.connector == ConnectorKind.KAFKA or cluster.scope == QuotaScope.PER_BROKER


def check_takes_groups(cluster: Cluster, what: str = "group quotas") -> None:
    """InvalidGroup (field ``cluster``) for a cluster whose brokers cannot enforce groups or exempt principals."""
    if not takes_groups(cluster):
        raise InvalidGroup(
            f"Cluster {cluster.name} is an engine cluster with one cluster-wide namespace, whose brokers share every "
            f"sensor and read no scope hash, so it cannot have {what}; a per-broker cluster (Kafka or engine) can.",
            "cluster",
        )


def check_group(
    cluster: Cluster,
    tenant: Tenant,
    name: str,
    kind: str,
    principals: list[str] | None = None,
    client_id_prefix: str = "",
    prefix_principal: str = "",
    exclude_pk: int | None = None,
) -> None:
    """Refuse a group that cannot be made (InvalidGroup, GroupOverlap), naming the field to change."""
    try:
        check_name(name)
    except QuotaValidationError as e:
        raise InvalidGroup(e.message, "name") from None
    check_takes_groups(cluster)
    others = QuotaGroup.objects.filter(cluster=cluster).exclude(pk=exclude_pk)
    if others.filter(name=name).exists():
        raise InvalidGroup(f"Cluster {cluster.name} has a group {name!r} already; pick another name.", "name")
    if kind == GroupKind.TENANT:
        if others.filter(kind=GroupKind.TENANT, tenant=tenant).exists():
            raise GroupOverlap(f"Tenant {tenant.name} has its group on {cluster.name} already: change its values.",
                               "kind")
        return
    if kind == GroupKind.PRINCIPALS:
        names = list(principals or [])
        if not names or any(not isinstance(p, str) or not p.strip() for p in names):
            raise InvalidGroup("List at least one principal, each a non-empty name.", "principals")
        for p in names:
            if not tenant.owns(EntityType.USER, p):
                raise InvalidGroup(f"Tenant {tenant.name} does not own principal {p!r}.", "principals")
        taken = {p: g.name for g in others.filter(kind=GroupKind.PRINCIPALS) for p in g.principals}
        clash = sorted(p for p in names if p in taken)
        if clash:
            raise GroupOverlap(f"Principal {clash[0]} is in group {taken[clash[0]]} already; a principal is listed in "
                               "one group of a cluster at most.", "principals")
        return
    if kind != GroupKind.CLIENT_PREFIX:
        raise InvalidGroup(f"A group's kind is tenant, principals or client_prefix, not {kind!r}.", "kind")
    if not client_id_prefix:
        raise InvalidGroup("A client_prefix group needs the client-id prefix its clients start with.",
                           "client_id_prefix")
    if prefix_principal and not tenant.owns(EntityType.USER, prefix_principal):
        raise InvalidGroup(f"Tenant {tenant.name} does not own principal {prefix_principal!r}.", "prefix_principal")
    same = others.filter(kind=GroupKind.CLIENT_PREFIX, client_id_prefix=client_id_prefix,
                         prefix_principal=prefix_principal).first()
    if same is not None:
        raise GroupOverlap(f"Group {same.name} has the same prefix {client_id_prefix!r}"
                           f"{' under ' + prefix_principal if prefix_principal else ''}; change its values instead.",
                           "client_id_prefix")


def group_watchable(tenants: list[Tenant], tags: str, cluster: str) -> bool | None:
    """For a quota group's shared sensor (``group@<name>:``) on ``cluster``, whether one of the tenants owns that
    cluster's group of that name (its members may watch it live); None for the sensor of anything else.

    Group names are unique per cluster only, so another tenant's group of the same name elsewhere is not theirs. No
    query when the tenants come with their groups and clusters (``member_tenants``).
    """
    name = group_of_tags(tags)
    if name is None:
        return None
    return any(g.name == name and g.cluster.name == cluster for t in tenants for g in t.quota_groups.all())


__all__ = [
    "ExemptPrincipal",
    "GroupKind",
    "GroupOverlap",
    "GroupValue",
    "InvalidGroup",
    "QuotaGroup",
    "check_group",
    "check_takes_groups",
    "takes_groups",
    "group_watchable",
]
