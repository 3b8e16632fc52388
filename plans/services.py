"""Quotas as code in the portal: export a cluster's state as a quota file, plan a file, apply a plan.

The file format and the diff are ``quotafile`` (no Django); the stored plan, its one-version apply and the
grouped request are ``quotas.models.plans`` and ``quotas.workflow``. This module puts them together for a person:
who sees and changes what (admins everything; auditors read and plan, never apply; a tenant member only what its
tenant owns), and what a plan shows beside each change: the warning where a more specific level still wins
(the engine's resolver), the capacity check of the approval page (``capacity_between``), and for byte
rates the impact preview on landed traffic (``history.services.ensure_preview``). Previews run on the pipeline
queue and can take a minute, so a plan is answered at once and shows each preview's state (queued, running, done
with its figures, failed) until it is done: the plan is asynchronous in its impact only.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

import quotafile
from engine.config import EntityRef
from engine.groups import GROUP_KEYS, in_order
from engine.units import BYTE_RATE_KEYS
from history import services as history
from history.models import ImpactPreview
from quotas.models import Cluster, DesiredStateVersion, Plan, PlanState, Tenant, plan_groups
from quotas.models.capacity import CAPACITY_FIELD, capacity_between
from quotas.models.client_metrics import match_owned_by
from quotas.models.group_lookup import ClusterGroups, cluster_groups
from quotas.models.plans import check_configs, check_scopes, current_state
from quotas.models.tenants import (
    entity_owned_by,
    is_admin,
    member_tenants,
    quota_visible,
    sees_everything,
    tenants_of,
)
from quotas.workflow.errors import InvalidRequest, PermissionDenied
from quotas.workflow.transitions import choose_tenant

#: How many refused entities a PERMISSION_DENIED message names.
NAMED = 5
#: The most impact previews one plan asks for (each is a Spark job on the pipeline queue): the first byte-rate
#: changes in precedence order get one, the rest say why they have none.
MAX_PREVIEWS = 20


# ------------------------------------------------------------------ export


def export(actor: AbstractBaseUser, cluster: Cluster) -> str:
    """The cluster's desired state as a quota file: everything for admins and auditors; for a tenant member the
    quotas its tenants may read (``quota_visible``: owned entities and the ``<default>`` ones) and the
    subscriptions selecting only its clients, without broker and topic configs (the cluster's, not a tenant's)."""
    if sees_everything(actor):
        return quotafile.write(current_state(cluster))
    tenants = member_tenants(actor)
    if not tenants:
        raise PermissionDenied("You are not a member of any tenant; an export holds what your tenant owns.")
    names = {t.name for t in tenants}
    state = current_state(
        cluster,
        quota_visible=lambda u, c, ip: quota_visible(tenants, u, c, ip),
        subscription_visible=lambda match: any(match_owned_by(t, match) is None for t in tenants),
        configs=False,
        group_visible=lambda owner: owner in names,
        exempt=False,
    )
    return quotafile.write(state)


# ------------------------------------------------------------------ plan


def _tenant_scope(actor: AbstractBaseUser, tenant_name: str | None, desired: quotafile.QuotaState) -> Tenant:
    """The tenant a member plans for: the one named, else its only one (``choose_tenant``)."""
    named = None
    if tenant_name:
        named = Tenant.objects.filter(name=tenant_name).first()
        if named is None:
            raise InvalidRequest(f"No tenant named {tenant_name!r}.", "tenant")
        if not tenants_of(actor).filter(pk=named.pk).exists():  # membership, as a tenant-scoped token narrows it
            raise PermissionDenied(f"You are not a member of tenant {named.name!r}; plan for one of yours.", "tenant")

    def owns(t: Tenant) -> bool:
        return all(entity_owned_by(t, ref.user, ref.client_id) is None for ref in (desired.quotas or {})) and all(
            g.tenant == t.name for g in (desired.groups or {}).values())

    return choose_tenant(actor, named, owns)


def _member_refusals(tenant: Tenant, changes: list[quotafile.Change], desired: quotafile.QuotaState,
                     current: quotafile.QuotaState) -> list[str]:
    """Why the tenant may not ask for each change it may not ask for (entity by entity, once)."""
    reasons: dict[str, str] = {}
    for c in changes:
        if c.path in reasons:
            continue
        if c.section == quotafile.QUOTA:
            ref = EntityRef.parse(c.entity)
            why = "ip quotas are for admins" if ref.ip is not None else entity_owned_by(tenant, ref.user, ref.client_id)
        elif c.section == quotafile.CLIENT_METRICS:
            name = c.entity[quotafile.CLIENT_METRICS]
            mine = (desired.client_metrics or {}).get(name)
            theirs = (current.client_metrics or {}).get(name)
            why = match_owned_by(tenant, mine.match) if mine is not None else None
            if why is None and theirs is not None:
                why = match_owned_by(tenant, theirs.match)
        elif c.section in (quotafile.GROUP, quotafile.EXEMPT):
            why = plan_groups.member_refusal(tenant, c, current)
        else:
            why = "broker and topic configs are for admins"
        if why is not None:
            reasons[c.path] = why
    return [f"{path}: {why}" for path, why in reasons.items()]


def _pairs(quotas: dict[EntityRef, dict[str, float]], key: str) -> dict[tuple[str | None, str | None], float]:
    return {(r.user, r.client_id): v[key] for r, v in quotas.items() if r.ip is None and key in v}


def _budgets(cluster_wide: set[tuple[EntityRef, str]], key: str) -> set[tuple[str | None, str | None]]:
    return {(r.user, r.client_id) for r, k in cluster_wide if k == key and r.ip is None}


def _capacity(check: Any) -> dict[str, Any]:
    """The approval page's capacity check (``quotas.models.capacity.CapacityCheck``) as stored with the plan."""
    return {
        "key": check.key, "capacity": check.capacity, "granted_without": check.granted_without,
        "granted_with": check.granted_with, "exceeds": check.exceeds, "warning": check.warning,
        "counted": check.counted, "brokers": check.brokers, "multiplier": check.multiplier, "known": check.known,
        "scope": check.scope, "budgets": list(check.budgets), "budget_with": check.budget_with,
        "budget_without": check.budget_without, "groups": list(check.groups),
        "defaults": [{"entity": d.entity, "value": d.value, "applies_to": d.applies_to,
                      "applies_to_without": d.applies_to_without} for d in check.defaults],
    }


def build_plan(
    actor: AbstractBaseUser, cluster: Cluster, document: str, prune: bool, tenant_name: str | None = None
) -> Plan:
    """Plan a quota file against the cluster's desired state and store the plan (with its previews queued).

    Raises ``quotafile.InvalidQuotaFile`` (every error with its line and key) for a file that cannot be
    applied, and PERMISSION_DENIED naming what a member's tenant may not change.
    """
    desired = quotafile.read(document)
    if desired.cluster != cluster.name:
        raise quotafile.InvalidQuotaFile([quotafile.FileError(
            desired.line("cluster"), "cluster",
            f"The file is for cluster {desired.cluster!r}, not {cluster.name!r}; plan it on its own cluster.",
        )])
    base = DesiredStateVersion.objects.filter(cluster=cluster).values_list("version", flat=True).first() or 0
    tenant: Tenant | None = None
    scope_errors = check_scopes(cluster, desired)
    if sees_everything(actor):
        current = current_state(cluster)
        errors = check_configs(cluster, desired)
        if errors or scope_errors:
            raise quotafile.InvalidQuotaFile(sorted(errors + scope_errors, key=lambda e: e.line or 0))
        changes = quotafile.diff(current, desired, prune)
        errors = plan_groups.check_groups(cluster, desired, changes)
        if errors:
            raise quotafile.InvalidQuotaFile(errors)
    else:
        if scope_errors:
            raise quotafile.InvalidQuotaFile(scope_errors)
        tenant = _tenant_scope(actor, tenant_name, desired)
        for section, attr in (("brokerConfigs", "broker_configs"), ("topicConfigs", "topic_configs")):
            if getattr(desired, attr) is not None:
                raise PermissionDenied(
                    f"Line {desired.line(section)}: {section} are the cluster's, changed by admins; leave the "
                    f"section out of a tenant's file (an export for your tenant has none)."
                )
        current = current_state(
            cluster,
            quota_visible=lambda u, c, ip: quota_visible([tenant], u, c, ip),
            subscription_visible=lambda match: match_owned_by(tenant, match) is None,
            configs=False,
            group_visible=lambda owner: owner == tenant.name,
            exempt=False,
        )

        def removable(section: str, ident: Any) -> bool:
            if section == quotafile.QUOTA:
                return ident.ip is None and entity_owned_by(tenant, ident.user, ident.client_id) is None
            return section in (quotafile.CLIENT_METRICS, quotafile.GROUP)  # its groups only: the others are unseen

        changes = quotafile.diff(current, desired, prune, removable)
        refused = _member_refusals(tenant, changes, desired, current)
        if refused:
            more = f" (and {len(refused) - NAMED} more)" if len(refused) > NAMED else ""
            raise PermissionDenied(
                f"Tenant {tenant.name!r} may not change {len(refused)} of the file's entities: "
                + "; ".join(refused[:NAMED]) + more
            )
        errors = plan_groups.check_groups(cluster, desired, changes)
        if errors:
            raise quotafile.InvalidQuotaFile(errors)
    return _store(actor, cluster, tenant, document, prune, base, current, changes, desired)


def _store(
    actor: AbstractBaseUser, cluster: Cluster, tenant: Tenant | None, document: str, prune: bool, base: int,
    current: quotafile.QuotaState, changes: list[quotafile.Change], desired: quotafile.QuotaState,
) -> Plan:
    after = quotafile.apply_changes(current, changes)
    cluster_wide = set(current.cluster_wide)
    for c in changes:
        if c.section == quotafile.QUOTA:
            ref = EntityRef.parse(c.entity)
            if c.new_scope == quotafile.CLUSTER_WIDE:
                cluster_wide.add((ref, c.key))
            else:
                cluster_wide.discard((ref, c.key))
    shadows = quotafile.Shadows(after)
    before = current.quotas or {}
    capacities = {}
    keys = {c.key for c in changes if c.section in (quotafile.QUOTA, quotafile.GROUP) and c.key in CAPACITY_FIELD}
    if keys:  # the groups before and after the plan: each group's value is one sensor, counted once
        groups_without = cluster_groups(cluster)
        specs, scopes = plan_groups.specs_of(cluster, plan_groups.groups_after(cluster, desired, changes))
        groups_with = ClusterGroups(tuple(in_order(specs)), scopes, groups_without.exempt)
    for key in keys:
        if any(c.key == key and "ip" not in c.entity for c in changes):
            capacities[key] = _capacity(capacity_between(
                cluster, key, _pairs(before, key), _pairs(after, key),
                cluster_wide_without=_budgets(current.cluster_wide, key), cluster_wide_with=_budgets(cluster_wide, key),
                groups_without=groups_without, groups_with=groups_with,
            ))
    usage = history.usage_version()
    bodies = []
    previews: list[tuple[int, quotafile.Change]] = []
    for i, c in enumerate(changes):
        body = c.as_dict()
        body["warnings"] = []
        body["capacity"] = None
        body["impact"] = None
        if c.section == quotafile.QUOTA and "ip" not in c.entity:
            ref = EntityRef.parse(c.entity)
            if c.new is not None:
                body["warnings"] = shadows.warnings(ref, c.key)
            else:
                source = shadows.fallback(ref, c.key)
                body["warnings"] = [
                    f"After the removal no {c.key} quota applies to these clients (unlimited)." if source is None
                    else f"After the removal these clients get {c.key} from {source}."
                ]
            body["capacity"] = capacities.get(c.key)
            if c.key in BYTE_RATE_KEYS and c.new is not None:
                if len(previews) < MAX_PREVIEWS:
                    previews.append((i, c))
                else:
                    body["warnings"].append(
                        f"No impact preview: a plan previews its first {MAX_PREVIEWS} byte-rate changes; plan this "
                        "change in a smaller file (or ask POST /api/previews/) to see its impact."
                    )
        elif c.section == quotafile.GROUP:
            _group_body(body, c, current, desired, after, capacities.get(c.key))
        bodies.append(body)
    summary = Counter(c.action for c in changes)
    with transaction.atomic():
        for i, c in previews:
            ref = EntityRef.parse(c.entity)
            preview = history.ensure_preview(actor, cluster, ref.user, ref.client_id, c.key, float(c.new), usage,
                                             scope=c.new_scope or quotafile.PER_BROKER)
            bodies[i]["impact"] = {"preview": preview.pk}
        plan = Plan.objects.create(
            cluster=cluster, created_by=actor, tenant=tenant, document=document, prune=prune, base_version=base,
            changes=bodies,
            summary={a: summary.get(a, 0) for a in (quotafile.ADD, quotafile.CHANGE, quotafile.REMOVE)},
        )
    return plan


def _group_body(body: dict[str, Any], c: quotafile.Change, current: quotafile.QuotaState,
                desired: quotafile.QuotaState, after: dict[EntityRef, dict[str, float]],
                capacity: dict[str, Any] | None) -> None:
    """A group value change's reach, the members' own quotas that still win over it, and the capacity check."""
    if c.key not in GROUP_KEYS:
        return
    name = c.entity[quotafile.GROUP]
    group = (desired.groups or {}).get(name) or (current.groups or {})[name]
    body["reach"] = quotafile.groups.reach(group.members(), c.key)
    if c.new is not None:
        body["warnings"] = plan_groups.winners(group, c.key, after)
    if capacity is not None:
        body["capacity"] = capacity


# ------------------------------------------------------------------ reading plans


def may_see_plan(actor: AbstractBaseUser, plan: Plan) -> bool:
    if sees_everything(actor):
        return True
    if plan.tenant_id is None:  # an admin's or auditor's plan
        return plan.created_by_id == actor.pk and not tenants_of(actor).exists()
    return plan.tenant_id is not None and tenants_of(actor).filter(pk=plan.tenant_id).exists()


def impact_of(preview: ImpactPreview | None) -> dict[str, Any] | None:
    """A change's impact as a plan shows it: the preview's state while it runs, its figures once done."""
    if preview is None:
        return None
    figures = history.summary(preview)
    return {
        "preview": preview.pk,
        "state": preview.state,
        "progress": preview.progress,
        "stage": preview.stage,
        "summary": figures,
        "error": {"code": preview.error_code, "message": preview.error_message} if preview.error_code else None,
    }


def plan_body(plan: Plan) -> dict[str, Any]:
    """The plan as the API answers it (each change's impact with its preview's current state)."""
    ids = [c["impact"]["preview"] for c in plan.changes if c.get("impact")]
    previews = {p.pk: p for p in ImpactPreview.objects.filter(pk__in=ids)}
    changes = []
    for c in plan.changes:
        body = dict(c)
        if c.get("impact"):
            body["impact"] = impact_of(previews.get(c["impact"]["preview"]))
        changes.append(body)
    request = getattr(plan, "request", None) if plan.state == PlanState.SUBMITTED else None
    return {
        "id": plan.pk,
        "cluster": plan.cluster.name,
        "base_version": plan.base_version,
        "stale": plan.stale,
        "prune": plan.prune,
        "created_by": plan.created_by.get_username() if plan.created_by else None,
        "tenant": plan.tenant.name if plan.tenant else None,
        "state": plan.state,
        "applied_version": plan.applied_version,
        "request": request.pk if request is not None else None,
        "created": plan.created,
        "changes": changes,
        "summary": plan.summary,
    }


def may_apply_directly(actor: AbstractBaseUser) -> bool:
    return is_admin(actor)
