"""Changing groups, their values and exempt principals: each change one desired-state version, audited.

A group is items of the cluster's desired state (``group_items``): its spec (members, order, values) and a budget
scope per cluster-wide value. Every change computes the items before and after under the cluster's version lock and
bumps the version with the difference, so a push brings it to the brokers' scope hash like any change.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from engine.entities import validate_quota_value
from engine.errors import QuotaValidationError
from engine.groups import GROUP_KEYS, PER_BROKER_ONLY, entity_field
from quotas.choices import BudgetScope
from quotas.connectors.base import BUDGET_SCOPE, CLUSTER_WIDE, EXEMPT, EXEMPT_KEY, GROUP, GROUP_SPEC, Item, State
from quotas.models.audit import AuditAction, record
from quotas.models.clusters import Cluster
from quotas.models.groups import ExemptPrincipal, GroupKind, InvalidGroup, QuotaGroup, check_group, check_takes_groups
from quotas.models.pushes import DesiredStateVersion
from quotas.models.requests import QuotaRequest
from quotas.models.tenants import OwnedName, Tenant

#: A value change: the new value (None removes the key) and its budget scope (None keeps the one it has).
ValueChange = tuple[float | None, str | None]


def group_items(group: QuotaGroup, rows: list[tuple[str, float, str]] | None = None) -> State:
    """The desired-state items of one group: its spec, and a budget scope per cluster-wide value."""
    if rows is None:
        rows = list(group.values.values_list("key", "value", "budget_scope"))
    spec = group.spec({key: value for key, value, _ in rows})
    items: State = {Item(GROUP, group.name, GROUP_SPEC): spec.to_json()}
    for key, _, scope in rows:
        if scope == BudgetScope.CLUSTER_WIDE:
            items[Item(BUDGET_SCOPE, entity_field(group.name), key)] = CLUSTER_WIDE
    return items


def cluster_group_items(cluster: Cluster) -> State:
    """Every group and exempt principal of a cluster as desired-state items."""
    state: State = {}
    for group in QuotaGroup.objects.filter(cluster=cluster).select_related("tenant").prefetch_related("values"):
        state.update(group_items(group, [(v.key, v.value, v.budget_scope) for v in group.values.all()]))
    for principal in ExemptPrincipal.objects.filter(cluster=cluster).values_list("principal", flat=True):
        state[Item(EXEMPT, principal, EXEMPT_KEY)] = EXEMPT_KEY
    return state


def _bump(cluster: Cluster, lock: DesiredStateVersion, before: State, after: State) -> int | None:
    changes: dict[Item, str | None] = {i: v for i, v in after.items() if before.get(i) != v}
    changes.update({i: None for i in before if i not in after})
    return lock.bump(changes) if changes else None


def create_group(
    actor: AbstractBaseUser | None, cluster: Cluster, tenant: Tenant, name: str, kind: str, *,
    principals: list[str] | None = None, client_id_prefix: str = "", prefix_principal: str = "",
    description: str = "",
) -> QuotaGroup:
    """Make a group (no values yet: it holds nobody back until one is set)."""
    check_group(cluster, tenant, name, kind, principals, client_id_prefix, prefix_principal)
    with transaction.atomic():
        lock = DesiredStateVersion.lock(cluster)
        group = QuotaGroup.objects.create(
            cluster=cluster, tenant=tenant, name=name, kind=kind,
            principals=list(principals or []) if kind == GroupKind.PRINCIPALS else [],
            client_id_prefix=client_id_prefix if kind == GroupKind.CLIENT_PREFIX else "",
            prefix_principal=prefix_principal if kind == GroupKind.CLIENT_PREFIX else "",
            description=description,
        )
        _bump(cluster, lock, {}, group_items(group, []))
        record(AuditAction.GROUP_CHANGED, actor, tenant=tenant, cluster=cluster, entity=group.path,
               after={"kind": kind, "members": group.members_text()})
    return group


def update_members(actor: AbstractBaseUser | None, group: QuotaGroup, *, principals: list[str] | None = None,
                   client_id_prefix: str | None = None, prefix_principal: str | None = None) -> QuotaGroup:
    """Change who a group holds (its kind and name stay)."""
    new_principals = group.principals if principals is None else list(principals)
    prefix = group.client_id_prefix if client_id_prefix is None else client_id_prefix
    under = group.prefix_principal if prefix_principal is None else prefix_principal
    check_group(group.cluster, group.tenant, group.name, group.kind, new_principals, prefix, under,
                exclude_pk=group.pk)
    with transaction.atomic():
        lock = DesiredStateVersion.lock(group.cluster)
        before_text, before = group.members_text(), group_items(group)
        group.principals, group.client_id_prefix, group.prefix_principal = new_principals, prefix, under
        group.save(update_fields=["principals", "client_id_prefix", "prefix_principal"])
        _bump(group.cluster, lock, before, group_items(group))
        record(AuditAction.GROUP_CHANGED, actor, tenant=group.tenant, cluster=group.cluster, entity=group.path,
               before={"members": before_text}, after={"members": group.members_text()})
    return group


def delete_group(actor: AbstractBaseUser | None, group: QuotaGroup) -> None:
    """Remove a group and its values: its members fall back to their own quotas."""
    if QuotaRequest.objects.filter(group=group, state__in=["submitted", "approved", "applying"]).exists():
        raise InvalidGroup(f"Group {group.name} has requests still open; decide or withdraw them first.", "name")
    with transaction.atomic():
        lock = DesiredStateVersion.lock(group.cluster)
        before = group_items(group)
        record(AuditAction.GROUP_CHANGED, actor, tenant=group.tenant, cluster=group.cluster, entity=group.path,
               before={"kind": group.kind, "members": group.members_text(),
                       "values": {k: v for k, v, _ in group.values.values_list("key", "value", "budget_scope")}})
        QuotaRequest.objects.filter(group=group).update(group=None)
        group.delete()
        _bump(group.cluster, lock, before, {})


def check_group_value(key: str, value: object, scope: str | None) -> float:
    """The value as stored, or InvalidGroup naming the field."""
    if key not in GROUP_KEYS:
        raise InvalidGroup(f"A group holds {', '.join(GROUP_KEYS)}, not {key!r}.", "key")
    try:
        checked = validate_quota_value(key, value)
    except QuotaValidationError as e:
        raise InvalidGroup(e.message, "value") from None
    if scope is not None and scope not in BudgetScope.values:
        raise InvalidGroup(f"A budget scope is per_broker or cluster_wide, not {scope!r}.", "budget_scope")
    if key in PER_BROKER_ONLY and scope == BudgetScope.CLUSTER_WIDE:
        raise InvalidGroup(
            f"A group's {key} has per_broker as its only budget_scope: Kafka's controller enforces it once for the "
            "whole cluster, so there are no brokers to share a cluster-wide budget among.", "budget_scope")
    return checked


def set_group_values(
    actor: AbstractBaseUser | None, group: QuotaGroup, changes: Mapping[str, ValueChange], *,
    request: QuotaRequest | None = None, comment: str = "",
) -> int | None:
    """Set or remove group values in one version (None: nothing changed); audited as quota changes of the group."""
    checked = {k: (None if v is None else check_group_value(k, v, s), s) for k, (v, s) in changes.items()}
    with transaction.atomic():
        lock = DesiredStateVersion.lock(group.cluster)
        before = group_items(group)
        held = {v.key: v for v in group.values.all()}
        where = {"tenant": group.tenant, "cluster": group.cluster, "entity": group.path, "request": request}
        for key, (value, scope) in checked.items():
            row = held.get(key)
            old = (row.value, row.budget_scope) if row else (None, None)
            if value is None:
                if row is not None:
                    row.delete()
            else:
                scope = scope or (row.budget_scope if row else BudgetScope.PER_BROKER)
                group.values.update_or_create(key=key, defaults={"value": value, "budget_scope": scope})
            new = (value, None if value is None else scope)
            if old[0] != new[0]:
                record(AuditAction.QUOTA_ALTERED, actor, key=key, before=old[0], after=new[0], comment=comment,
                       **where)
            if old[1] != new[1]:
                record(AuditAction.BUDGET_SCOPE_ALTERED, actor, key=key, before=old[1], after=new[1],
                       comment=comment, **where)
        return _bump(group.cluster, lock, before, group_items(group))


def set_exempt(actor: AbstractBaseUser | None, cluster: Cluster, principal: str, exempt: bool,
               reason: str = "") -> bool:
    """Make a principal exempt from every quota of the cluster, or not; False when it already was so."""
    if not principal or not principal.strip():
        raise InvalidGroup("Name the principal to exempt.", "principal")
    if exempt:
        check_takes_groups(cluster, "exempt principals")
    with transaction.atomic():
        lock = DesiredStateVersion.lock(cluster)
        row = ExemptPrincipal.objects.filter(cluster=cluster, principal=principal).first()
        if (row is not None) == exempt:
            return False
        item = Item(EXEMPT, principal, EXEMPT_KEY)
        if exempt:
            ExemptPrincipal.objects.create(cluster=cluster, principal=principal, reason=reason, created_by=actor)
            lock.bump({item: EXEMPT_KEY})
        else:
            row.delete()
            lock.bump({item: None})
        record(AuditAction.EXEMPT_CHANGED, actor, cluster=cluster, entity=f"/users/{principal}",
               before=not exempt, after=exempt, comment=reason)
    return True


def refresh_tenant_groups(tenant_id: int) -> None:
    """A tenant's patterns changed: each of its tenant groups takes its new members, one version per cluster."""
    for group in QuotaGroup.objects.filter(tenant_id=tenant_id, kind=GroupKind.TENANT).select_related("cluster"):
        with transaction.atomic():
            lock = DesiredStateVersion.lock(group.cluster)
            held = dict.fromkeys(
                [Item(GROUP, group.name, GROUP_SPEC)], _held_spec(group.cluster, group.name)
            )
            after = {Item(GROUP, group.name, GROUP_SPEC): group_items(group)[Item(GROUP, group.name, GROUP_SPEC)]}
            _bump(group.cluster, lock, {k: v for k, v in held.items() if v is not None}, after)


def _held_spec(cluster: Cluster, name: str) -> str | None:
    """The spec the change log last gave a group (what the brokers were told)."""
    from quotas.models.pushes import DesiredChange

    row = (DesiredChange.objects.filter(cluster=cluster, kind=GROUP, resource=name)
           .order_by("-version", "-pk").values_list("value", flat=True).first())
    return row


@receiver(post_save, sender=OwnedName)
@receiver(post_delete, sender=OwnedName)
def _patterns_changed(sender: type[OwnedName], instance: OwnedName, **_: object) -> None:
    if QuotaGroup.objects.filter(tenant_id=instance.tenant_id, kind=GroupKind.TENANT).exists():
        refresh_tenant_groups(instance.tenant_id)


__all__ = [
    "check_group_value",
    "cluster_group_items",
    "create_group",
    "delete_group",
    "group_items",
    "refresh_tenant_groups",
    "set_exempt",
    "set_group_values",
    "update_members",
]
