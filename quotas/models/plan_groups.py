"""The groups and exempt principals of a plan: read as the quota file holds them, checked, and written under the
plan's desired-state lock (``apply_plan``), so a whole file, groups included, is one desired-state version.

``quotafile.groups`` is the file's side (no Django); ``group_changes`` the one-change-one-version functions the API
and pages call. Here the rows change in the plan's transaction and the items are the difference of the cluster's
group items (``cluster_group_items``) before and after, so the brokers' scope hash gets them as from any change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import quotafile
from engine.config import EntityRef
from engine.entities import DEFAULT, entity_path
from engine.groups import GROUP_KEYS, NAMING_LEVELS, GroupSpec
from quotafile.groups import DESCRIPTION, EXEMPT, GROUP, MEMBERS, PRINCIPALS, Group, members_text
from quotas.choices import BudgetScope, EntityType
from quotas.connectors.base import Item
from quotas.models.audit import AuditAction, scope_audit
from quotas.models.clusters import Cluster
from quotas.models.group_changes import cluster_group_items
from quotas.models.groups import (
    ExemptPrincipal,
    GroupKind,
    GroupOverlap,
    InvalidGroup,
    QuotaGroup,
    check_group,
    check_takes_groups,
    takes_groups,
)
from quotas.models.requests import QuotaRequest
from quotas.models.tenants import Tenant

#: A plan's change as stored (``Change.as_dict`` and what the plan added).
Body = Mapping[str, Any]


def has_groups(cluster: Cluster) -> bool:
    """Whether the cluster's brokers enforce groups and exempt principals (``takes_groups``: a Kafka cluster, or a
    per-broker engine cluster); a file of another leaves both sections out."""
    return takes_groups(cluster)


def file_groups(cluster: Cluster, visible: Callable[[str], bool] | None = None) -> dict[str, Group]:
    """The cluster's groups as the file holds them (``visible``: by owning tenant's name, for a tenant member)."""
    out = {}
    for row in QuotaGroup.objects.filter(cluster=cluster).select_related("tenant").prefetch_related("values"):
        if visible is not None and not visible(row.tenant.name):
            continue
        values = {v.key: v.value for v in row.values.all()}
        wide = {v.key for v in row.values.all() if v.budget_scope == BudgetScope.CLUSTER_WIDE}
        out[row.name] = Group(row.name, row.tenant.name, row.kind, tuple(row.principals), row.client_id_prefix,
                              row.prefix_principal, row.description, values, wide)
    return out


def file_exempt(cluster: Cluster) -> dict[str, str]:
    return dict(ExemptPrincipal.objects.filter(cluster=cluster).values_list("principal", "reason"))


def value_now(state: quotafile.QuotaState, change: Body) -> tuple[Any, str | None]:
    """A group or exempt change's current value (as the plan recorded ``old``) and, for a group value, its scope."""
    if change["section"] == EXEMPT:
        return (state.exempt or {}).get(change["entity"]["principal"]), None
    group = (state.groups or {}).get(change["entity"][GROUP])
    key = change["key"]
    if group is None:
        return None, None
    if key == MEMBERS:
        return group.members(), None
    if key == DESCRIPTION:
        return group.description or None, None
    return quotafile._number(key, group.values.get(key)), group.scope(key)


# ------------------------------------------------------------------ checking a plan


def check_groups(cluster: Cluster, desired: quotafile.QuotaState,
                 changes: Iterable[quotafile.Change]) -> list[quotafile.FileError]:
    """Judge the file's new groups and member changes by ``check_group`` (tenant, members, overlaps), and refuse
    groups and exempt principals on a cluster that cannot take them (``check_takes_groups``); returns the errors
    with their lines."""
    errors: list[quotafile.FileError] = []
    if not has_groups(cluster):
        for section, attr, what in (("groups", "groups", "group quotas"),
                                    ("exemptPrincipals", "exempt", "exempt principals")):
            if getattr(desired, attr):
                try:
                    check_takes_groups(cluster, what)
                except InvalidGroup as e:
                    errors.append(quotafile.FileError(desired.line(section), section,
                                                      f"{e.message} Leave the section out."))
        return errors
    held = {g.name: g for g in QuotaGroup.objects.filter(cluster=cluster)}
    tenants = {t.name: t for t in Tenant.objects.filter(name__in={g.tenant for g in (desired.groups or {}).values()})}
    after = groups_after(cluster, desired, changes)  # an overlap the plan itself ends is none
    for c in changes:
        if c.section != GROUP or c.key != MEMBERS or c.new is None:
            continue
        group = desired.groups[c.entity[GROUP]]
        line = desired.line("groups", group.name, MEMBERS)
        tenant = tenants.get(group.tenant)
        if tenant is None:
            errors.append(quotafile.FileError(desired.line("groups", group.name), "tenant",
                                              f"No tenant named {group.tenant!r}; name the tenant owning the group."))
            continue
        existing = held.get(group.name)
        try:
            check_group(cluster, tenant, group.name, group.kind, list(group.principals), group.client_id_prefix,
                        group.prefix_principal, exclude_pk=existing.pk if existing else None)
        except GroupOverlap as e:
            if _overlaps(after, group):  # else the plan moves members between groups: apply frees them first
                errors.append(quotafile.FileError(line, "members", e.message))
        except InvalidGroup as e:
            errors.append(quotafile.FileError(line, "members", e.message))
    return errors


def _overlaps(groups: Mapping[str, Group], group: Group) -> bool:
    """Whether another group would match the same clients as ``group`` in a way the order cannot decide
    (``check_group``'s overlaps, over the groups as the plan leaves them)."""
    for other in groups.values():
        if other.name == group.name or other.kind != group.kind:
            continue
        if group.kind == GroupKind.TENANT and other.tenant == group.tenant:
            return True
        if group.kind == PRINCIPALS and set(other.principals) & set(group.principals):
            return True
        if group.kind == GroupKind.CLIENT_PREFIX and (other.client_id_prefix, other.prefix_principal) == (
                group.client_id_prefix, group.prefix_principal):
            return True
    return False


def groups_after(cluster: Cluster, desired: quotafile.QuotaState,
                 changes: Iterable[quotafile.Change]) -> dict[str, Group]:
    """Every group of the cluster as it will be once the plan is applied (a tenant member's plan sees only its
    tenant's groups; the others stay as they are)."""
    after = file_groups(cluster)
    for name in {c.entity[GROUP] for c in changes if c.section == GROUP}:
        if name in (desired.groups or {}):
            after[name] = desired.groups[name]
        else:
            after.pop(name, None)
    return after


def specs_of(cluster: Cluster, groups: Mapping[str, Group]) -> tuple[list[GroupSpec], dict[tuple[str, str], str]]:
    """The groups as the brokers take them (``QuotaGroup.spec``'s rules) and their values' budget scopes, for the
    resolver and the capacity check of a plan's "after"."""
    tenants = {t.name: t for t in Tenant.objects.filter(name__in={g.tenant for g in groups.values()})}
    specs, scopes = [], {}
    for g in groups.values():
        if g.tenant not in tenants:
            continue  # refused by check_groups already
        row = QuotaGroup(cluster=cluster, tenant=tenants[g.tenant], name=g.name, kind=g.kind,
                         principals=list(g.principals), client_id_prefix=g.client_id_prefix,
                         prefix_principal=g.prefix_principal)
        specs.append(row.spec(dict(g.values)))
        scopes.update({(g.name, key): g.scope(key) or BudgetScope.PER_BROKER for key in g.values})
    return specs, scopes


def member_refusal(tenant: Tenant, change: quotafile.Change, current: quotafile.QuotaState) -> str | None:
    """Why a tenant member may not ask for a group or exempt change (None: it may)."""
    if change.section == EXEMPT:
        return "exempt principals are for admins"
    owner = (change.new or {}).get("tenant") if change.key == MEMBERS else None
    held = (current.groups or {}).get(change.entity[GROUP])
    if owner is not None and owner != tenant.name:
        return f"the group would belong to tenant {owner!r}, not {tenant.name!r}"
    if held is not None and held.tenant != tenant.name:
        return f"the group belongs to tenant {held.tenant!r}"
    return None


def winners(group: Group, key: str, after: Mapping[EntityRef, Mapping[str, float]]) -> list[str]:
    """Where a member's own quota (a level naming the client) still wins over the group's ``key``, in words."""
    tenant = Tenant.objects.filter(name=group.tenant).first() if group.kind == GroupKind.TENANT else None
    found = sorted(entity_path(r.user, r.client_id, r.ip) for r, values in after.items()
                   if key in values and _names_member(group, tenant, r))
    out = [f"{path} {key} names its clients, so it wins over group {group.name} for them." for path in found[:5]]
    if len(found) > 5:
        out.append(f"... and {len(found) - 5} more entities naming members win over group {group.name}.")
    return out


def _names_member(group: Group, tenant: Tenant | None, ref: EntityRef) -> bool:
    """Whether the entity is at a level naming a client (``NAMING_LEVELS``) and names some of the group's members."""
    if ref.ip is not None or quotafile.precedence_level(ref) not in NAMING_LEVELS:
        return False
    user = None if ref.user in (None, DEFAULT) else ref.user
    client = None if ref.client_id in (None, DEFAULT) else ref.client_id
    if group.kind == PRINCIPALS:
        return user in group.principals
    if group.kind == GroupKind.TENANT:
        return user is not None and tenant is not None and tenant.owns(EntityType.USER, user)
    prefixed = client is not None and client.startswith(group.client_id_prefix)
    if group.prefix_principal:
        return (user == group.prefix_principal and (client is None or prefixed)) or (user is None and prefixed)
    return prefixed


# ------------------------------------------------------------------ applying


def write_groups(cluster: Cluster, changes: list[Body]) -> tuple[dict[Item, str | None], list[dict[str, Any]]]:
    """Write a plan's group and exempt changes; the caller holds the cluster's desired-state lock (``apply_plan``).

    Deletions first, then new groups and member changes (a change of kind or tenant makes the group anew, keeping
    its values), descriptions, values, exempt principals. Returns the items that changed and the audit entries
    (``apply_plan`` writes them with the plan's note). InvalidGroup when a group cannot be made as the file says.
    """
    if not changes:
        return {}, []
    before = cluster_group_items(cluster)
    audits: list[dict[str, Any]] = []
    rows = {g.name: g for g in QuotaGroup.objects.filter(cluster=cluster).select_related("tenant")}
    tenants = {t.name: t for t in Tenant.objects.filter(
        name__in={c["new"]["tenant"] for c in changes if c["key"] == MEMBERS and c["new"]})}
    members = [c for c in changes if c["section"] == GROUP and c["key"] == MEMBERS]
    def order(c: Body) -> int:  # deletions, then member changes in place: they free names and principals
        held = rows.get(c["entity"][GROUP])
        in_place = held is not None and c["new"] is not None and (c["new"]["kind"], c["new"]["tenant"]) == (
            held.kind, held.tenant.name)
        return 0 if c["new"] is None else 1 if in_place else 2

    deleted = set()
    for c in sorted(members, key=order):
        name = c["entity"][GROUP]
        group = rows.get(name)
        if c["new"] is None or (group is not None and (c["new"]["kind"], c["new"]["tenant"]) !=
                                (group.kind, group.tenant.name)):
            kept = _delete(group, audits, audit=c["new"] is None) if group is not None else []
            if c["new"] is None:
                rows.pop(name, None)
                deleted.add(name)
                continue
            rows[name] = _create(cluster, tenants, name, c["new"], audits, c["old"])
            for key, value, scope in kept:
                rows[name].values.create(key=key, value=value, budget_scope=scope)
        elif group is None:
            rows[name] = _create(cluster, tenants, name, c["new"], audits, None)
        else:
            new = c["new"]
            check_group(cluster, group.tenant, name, group.kind, new.get("principals", []),
                        new.get("clientIdPrefix", ""), new.get("principal", ""), exclude_pk=group.pk)
            before_text = group.members_text()
            group.principals = new.get("principals", [])
            group.client_id_prefix, group.prefix_principal = new.get("clientIdPrefix", ""), new.get("principal", "")
            group.save(update_fields=["principals", "client_id_prefix", "prefix_principal"])
            audits.append({"action": AuditAction.GROUP_CHANGED, "tenant": group.tenant, "entity": group.path,
                           "key": "", "before": {"members": before_text}, "after": {"members": group.members_text()}})
    for c in changes:
        if c["section"] != GROUP or c["key"] not in (DESCRIPTION, *GROUP_KEYS) or c["entity"][GROUP] in deleted:
            continue  # a deleted group's values went with it (its audit entry lists them)
        group = rows[c["entity"][GROUP]]
        if c["key"] == DESCRIPTION:
            group.description = c["new"] or ""
            group.save(update_fields=["description"])
            continue
        _write_value(group, c, audits)
    for c in changes:
        if c["section"] == EXEMPT:
            _write_exempt(cluster, c, audits)
    after = cluster_group_items(cluster)
    items: dict[Item, str | None] = {i: v for i, v in after.items() if before.get(i) != v}
    items.update({i: None for i in before if i not in after})
    return items, audits


def _create(cluster: Cluster, tenants: Mapping[str, Tenant], name: str, new: Mapping[str, Any],
            audits: list[dict[str, Any]], old: Mapping[str, Any] | None) -> QuotaGroup:
    tenant = tenants.get(new["tenant"])
    if tenant is None:
        raise InvalidGroup(f"No tenant named {new['tenant']!r}; name the tenant owning group {name}.", "tenant")
    kind, principals = new["kind"], list(new.get("principals", []))
    prefix, under = new.get("clientIdPrefix", ""), new.get("principal", "")
    check_group(cluster, tenant, name, kind, principals, prefix, under)
    group = QuotaGroup.objects.create(cluster=cluster, tenant=tenant, name=name, kind=kind, principals=principals,
                                      client_id_prefix=prefix, prefix_principal=under)
    audits.append({"action": AuditAction.GROUP_CHANGED, "tenant": tenant, "entity": group.path, "key": "",
                   "before": None if old is None else {"members": members_text(dict(old))},
                   "after": {"kind": kind, "members": group.members_text()}})
    return group


def _delete(group: QuotaGroup, audits: list[dict[str, Any]], audit: bool) -> list[tuple[str, float, str]]:
    """Delete a group (its values returned, for a group made anew); refused while requests of it are open."""
    if QuotaRequest.objects.filter(
            group=group, state__in=["submitted", "approved", "applying"]).exists():
        raise InvalidGroup(f"Group {group.name} has requests still open; decide or withdraw them first.", "name")
    values = list(group.values.values_list("key", "value", "budget_scope"))
    if audit:  # a group made anew is audited once, by ``_create``
        audits.append({"action": AuditAction.GROUP_CHANGED, "tenant": group.tenant, "entity": group.path, "key": "",
                       "before": {"kind": group.kind, "members": group.members_text(),
                                  "values": {k: v for k, v, _ in values}}, "after": None})
    QuotaRequest.objects.filter(group=group).update(group=None)
    group.delete()
    return values


def _write_value(group: QuotaGroup, c: Body, audits: list[dict[str, Any]]) -> None:
    key, value = c["key"], None if c["new"] is None else float(c["new"])
    row = group.values.filter(key=key).first()
    old = (row.value, row.budget_scope) if row is not None else (None, None)
    if value is None:
        if row is not None:
            row.delete()
        new: tuple[float | None, str | None] = (None, None)
    else:
        new = (value, c.get("new_scope") or BudgetScope.PER_BROKER)
        group.values.update_or_create(key=key, defaults={"value": new[0], "budget_scope": new[1]})
    where = {"tenant": group.tenant, "entity": group.path, "key": key}
    if old[0] != new[0]:
        audits.append({"action": AuditAction.QUOTA_ALTERED, **where, "before": old[0], "after": new[0]})
    scopes = scope_audit(None if old[0] is None else old, None if new[0] is None else new)  # as for client quotas
    if scopes != (None, None):
        audits.append({"action": AuditAction.BUDGET_SCOPE_ALTERED, **where, "before": scopes[0], "after": scopes[1]})


def _write_exempt(cluster: Cluster, c: Body, audits: list[dict[str, Any]]) -> None:
    principal = c["entity"]["principal"]
    row = ExemptPrincipal.objects.filter(cluster=cluster, principal=principal).first()
    if c["new"] is None:
        if row is not None:
            row.delete()
    elif row is None:
        ExemptPrincipal.objects.create(cluster=cluster, principal=principal, reason=c["new"])
    else:
        row.reason = c["new"]
        row.save(update_fields=["reason"])
        return  # a new reason alone: no change of who is exempt
    audits.append({"action": AuditAction.EXEMPT_CHANGED, "entity": f"/users/{principal}", "key": "",
                   "before": c["new"] is None, "after": c["new"] is not None})
