"""Plans of quota files (quotas as code) and tenants' grouped requests to apply them.

A ``Plan`` is the difference between a quota file (``quotafile``) and a cluster's desired state at one
desired-state version (``base_version``), stored with what it would do (impact, capacity, warnings; computed by
the ``plans`` app). It goes stale when desired state moves on. An admin applies it whole: every change in one
transaction, one new desired-state version, each changed key audited, pushed like any change (``apply_plan``).
A tenant member's apply is one ``PlanRequest`` that an admin approves or rejects as a whole (``quotas.workflow``).
A file's groups and exempt principals are ``plan_groups``', written in the same transaction and version.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import models, transaction
from django.db.models import Q

import quotafile
from engine.config import EntityRef
from engine.entities import DEFAULT, entity_path
from engine.errors import QuotaEngineError
from quotas.choices import BudgetScope, QuotaScope
from quotas.connectors.base import BROKER, CLIENT_METRICS, QUOTA, TOPIC, Item
from quotas.models import plan_groups
from quotas.models.audit import AuditAction, AuditEntry, scope_audit
from quotas.models.broker_configs import (
    BrokerConfig,
    ConfigOp,
    ConfigResource,
    TopicConfig,
    _apply_ops,
    _check_connections,
    _write,
)
from quotas.models.client_metrics import ClientMetricsSubscription
from quotas.models.clusters import Broker, Cluster
from quotas.models.pushes import DesiredStateVersion
from quotas.models.quotas import InvalidBudgetScope, QuotaEntity, QuotaValue, check_budget_scope, scope_change
from quotas.models.requests import DecisionReason, RequestState
from quotas.models.staleness import Moved, changed_by
from quotas.models.tenants import Tenant, entity_owned_by

#: Rows per bulk statement when a plan is applied.
WRITE_CHUNK = 200


class PlanState(models.TextChoices):
    PLANNED = "planned", "Planned, not applied"
    APPLIED = "applied", "Applied to desired state"
    SUBMITTED = "submitted", "Submitted as a grouped request"


class Plan(models.Model):
    """A stored plan: the changes a quota file makes to a cluster's desired state at ``base_version``.

    ``changes`` is the list the API answers (action, section, entity, key, old, new, warnings, capacity, and the
    impact preview's id), in Kafka's precedence order; ``summary`` counts them by action.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="plans")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="quota_plans"
    )
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.PROTECT, related_name="plans",
        help_text="The tenant a member planned for; empty for an admin's plan.",
    )
    document = models.TextField(help_text="The quota file as it was planned.")
    prune = models.BooleanField(default=False, help_text="Remove what the file leaves out (within its sections).")
    base_version = models.PositiveBigIntegerField(help_text="The desired-state version the plan was made against.")
    changes = models.JSONField(default=list)
    summary = models.JSONField(default=dict)
    state = models.CharField(max_length=16, choices=PlanState.choices, default=PlanState.PLANNED)
    applied_version = models.PositiveBigIntegerField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-pk"]
        constraints = [models.CheckConstraint(condition=Q(state__in=PlanState.values), name="quotas_plan_known_state")]

    def __str__(self) -> str:
        return f"plan #{self.pk} {self.cluster.name}@{self.base_version} ({self.state})"

    @property
    def stale(self) -> bool:
        """Desired state moved on since the plan was made (any change of the cluster, by anyone)."""
        current = DesiredStateVersion.objects.filter(cluster_id=self.cluster_id).values_list("version", flat=True)
        return (current.first() or 0) != self.base_version


class PlanRequest(models.Model):
    """A tenant member's plan, asked for as one request: an admin approves or rejects it as a whole.

    States as quota requests (``RequestState``): submitted -> approved -> applying -> applied (every broker holds
    ``applied_version``) or failed; or rejected / withdrawn. The decision is kept on the row.
    """

    plan = models.OneToOneField(Plan, on_delete=models.CASCADE, related_name="request")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="plan_requests")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="plan_requests")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="plan_requests")
    reason = models.TextField(blank=True)
    state = models.CharField(max_length=16, choices=RequestState.choices, default=RequestState.SUBMITTED)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="plan_decisions"
    )
    decision_comment = models.TextField(blank=True)
    decision_reason = models.CharField(max_length=16, choices=DecisionReason.choices, blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    applied_version = models.PositiveBigIntegerField(null=True, blank=True)
    failure = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-pk"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=RequestState.values), name="quotas_planreq_known_state"),
        ]

    def __str__(self) -> str:
        return f"plan request #{self.pk} (plan #{self.plan_id}, {self.cluster.name}, {self.state})"

    @property
    def path(self) -> str:
        return f"plan #{self.plan_id}"


class PlanStale(Exception):
    """Desired state moved on since the plan was made (409 PLAN_STALE); ``moved`` names what changed, if known."""

    code = "PLAN_STALE"

    def __init__(self, message: str, moved: list[str] | None = None, items: list[Moved] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.moved = moved or []
        self.items = items or []  # each value that moved: what the plan found, what it is now, what changed it


# ------------------------------------------------------------------ the desired state as a quota file


QuotaFilter = Callable[[str | None, str | None, str | None], bool]
SubscriptionFilter = Callable[[str], bool]


def current_state(
    cluster: Cluster,
    *,
    quota_visible: QuotaFilter | None = None,
    subscription_visible: SubscriptionFilter | None = None,
    configs: bool = True,
    group_visible: Callable[[str], bool] | None = None,
    exempt: bool = True,
) -> quotafile.QuotaState:
    """The cluster's desired state as the file format holds it, limited to what the filters let through.

    ``configs`` False leaves broker and topic configs out (sections None: not managed); the filters keep the
    quota entities (user, client-id, ip) and the subscriptions (by their match) a tenant member may read, and the
    groups (by their tenant's name). A Kafka cluster's groups and exempt principals (``exempt`` False leaves them
    out) come along; an engine cluster has neither (sections None).
    """
    quotas: dict[EntityRef, dict[str, float]] = defaultdict(dict)
    cluster_wide: set[tuple[EntityRef, str]] = set()
    rows = QuotaValue.objects.filter(entity__cluster=cluster).values_list(
        "entity__user", "entity__client_id", "entity__ip", "key", "value", "budget_scope"
    )
    for user, client_id, ip, key, value, scope in rows:
        if quota_visible is not None and not quota_visible(user, client_id, ip):
            continue
        ref = EntityRef(user, client_id, ip)
        quotas[ref][key] = value
        if scope == BudgetScope.CLUSTER_WIDE:
            cluster_wide.add((ref, key))
    subscriptions = {}
    for row in ClientMetricsSubscription.objects.filter(cluster=cluster):
        if subscription_visible is not None and not subscription_visible(row.match):
            continue
        subscriptions[row.name] = quotafile.Subscription(row.metrics, row.interval_ms, row.match)
    state = quotafile.QuotaState(cluster.name, dict(quotas), cluster_wide, client_metrics=subscriptions)
    if configs:
        brokers: dict[str, dict[str, str]] = defaultdict(dict)
        for broker_id, key, value in BrokerConfig.objects.filter(cluster=cluster).values_list(
            "broker__broker_id", "key", "value"
        ):
            brokers[DEFAULT if broker_id is None else str(broker_id)][key] = value
        topics: dict[str, dict[str, str]] = defaultdict(dict)
        for topic, key, value in TopicConfig.objects.filter(cluster=cluster).values_list("topic", "key", "value"):
            topics[topic][key] = value
        state.broker_configs, state.topic_configs = dict(brokers), dict(topics)
    if plan_groups.has_groups(cluster):
        state.groups = plan_groups.file_groups(cluster, group_visible)
        state.exempt = plan_groups.file_exempt(cluster) if exempt else None
    return state


def check_scopes(cluster: Cluster, desired: quotafile.QuotaState) -> list[quotafile.FileError]:
    """Judge the file's cluster-wide values by the rule ``alter_client_quotas`` applies (``check_budget_scope``: a
    Kafka cluster's budgets only); returns the errors with their lines. The file itself said which keys may be."""
    errors: list[quotafile.FileError] = []
    for ref, key in sorted(desired.cluster_wide, key=lambda rk: (quotafile.entity_order(rk[0]), rk[1])):
        try:
            check_budget_scope(cluster, key, BudgetScope.CLUSTER_WIDE, ip=ref.ip is not None)
        except InvalidBudgetScope as e:
            errors.append(quotafile.FileError(desired.line("quotas", ref, key), key, e.message))
    return errors


def check_configs(cluster: Cluster, desired: quotafile.QuotaState) -> list[quotafile.FileError]:
    """Judge the file's broker and topic configs by the rules ``alter_configs`` applies (the engine's), and put
    them in the text Kafka stores (so an unchanged file compares equal); returns the errors with their lines."""
    errors: list[quotafile.FileError] = []
    if desired.broker_configs is not None:
        brokers = {str(b.broker_id): b for b in Broker.objects.filter(cluster=cluster)}
        combined: dict[int | None, dict[str, str]] = {}
        raw_all: dict[int | None, dict[str, Any]] = {}
        for name, configs in desired.broker_configs.items():
            line = desired.line("brokerConfigs", name)
            if name != DEFAULT and cluster.scope == QuotaScope.CLUSTER_WIDE:
                errors.append(quotafile.FileError(line, name, f"Cluster {cluster.name!r} is cluster_wide: its "
                                                  "brokers share one namespace, so give configs under '<default>'."))
                continue
            if name != DEFAULT and name not in brokers:
                errors.append(quotafile.FileError(line, name, f"Cluster {cluster.name!r} has no broker {name}; "
                                                  "use '<default>' for every broker."))
                continue
            broker_id = None if name == DEFAULT else int(name)
            resource = ConfigResource(broker_id=broker_id)
            try:
                after, raw = _apply_ops(resource, {}, [ConfigOp(k, v) for k, v in configs.items()])
            except QuotaEngineError as e:
                key = getattr(e, "key", None)
                errors.append(quotafile.FileError(desired.line("brokerConfigs", name, key), key, e.message))
                continue
            desired.broker_configs[name] = after
            combined[broker_id], raw_all[broker_id] = after, raw
        if not errors:
            for broker_id, raw in raw_all.items():
                try:
                    _check_connections(cluster, combined, raw, broker_id)
                except QuotaEngineError as e:
                    key = getattr(e, "key", None)
                    name = DEFAULT if broker_id is None else str(broker_id)
                    errors.append(quotafile.FileError(desired.line("brokerConfigs", name, key), key, e.message))
                    break
    if desired.topic_configs is not None:
        for topic, configs in desired.topic_configs.items():
            try:
                after, _ = _apply_ops(ConfigResource(topic=topic), {}, [ConfigOp(k, v) for k, v in configs.items()])
            except QuotaEngineError as e:
                key = getattr(e, "key", None)
                errors.append(quotafile.FileError(desired.line("topicConfigs", topic, key), key or topic, e.message))
                continue
            desired.topic_configs[topic] = after
    return errors


# ------------------------------------------------------------------ applying


def _values_now(
    cluster: Cluster, changes: Iterable[Mapping[str, Any]], state: quotafile.QuotaState | None = None
) -> dict[tuple[str, str, str], Any]:
    """The current value of every (section, entity, key) the changes touch, as the plan recorded ``old``
    (``state``: the cluster's ``current_state``, when the caller read it already)."""
    state = state or current_state(cluster)
    out: dict[tuple[str, str, str], Any] = {}
    for c in changes:
        ident = _ident(c)
        section, entity, key = c["section"], c["entity"], c["key"]
        if section == quotafile.QUOTA:
            ref = EntityRef.parse(entity)
            value = (state.quotas or {}).get(ref, {}).get(key)
            out[ident] = quotafile._number(key, value)
            if "old_scope" in c:  # plans made before budget scopes have none: their value alone says
                out[(*ident, "scope")] = state.scope(ref, key)
        elif section == quotafile.BROKER:
            out[ident] = (state.broker_configs or {}).get(entity[quotafile.BROKER], {}).get(key)
        elif section == quotafile.TOPIC:
            out[ident] = (state.topic_configs or {}).get(entity[quotafile.TOPIC], {}).get(key)
        elif section in (quotafile.GROUP, quotafile.EXEMPT):
            out[ident], scope = plan_groups.value_now(state, c)
            if "old_scope" in c:
                out[(*ident, "scope")] = scope
        else:
            sub = (state.client_metrics or {}).get(entity[quotafile.CLIENT_METRICS])
            out[ident] = None if sub is None else sub.configs().get(key)
    return out


def _ident(change: Mapping[str, Any]) -> tuple[str, str, str]:
    return change["section"], change["path"], change["key"]


def plan_moved(plan: Plan, state: quotafile.QuotaState | None = None) -> list[Moved]:
    """The values the plan changes that are no longer what the plan found (its ``old``), each with what moved it
    (``state``: the cluster's ``current_state``, read once for several plans of one cluster)."""
    now = _values_now(plan.cluster, plan.changes, state)
    moved = []
    for c in plan.changes:
        ident = _ident(c)
        scope = now.get((*ident, "scope"), c.get("old_scope"))
        if now[ident] != c["old"] or scope != c.get("old_scope"):
            since = changed_by(plan.cluster_id, c["path"], c["key"], plan.created)
            moved.append(Moved(c["path"], c["key"], (c["old"], c.get("old_scope")), (now[ident], scope), since))
    return moved


def check_not_moved(plan: Plan) -> None:
    """PLAN_STALE when a value the plan changes is no longer what the plan found (for approving a grouped request,
    which waits for an admin while other changes land: only the plan's own items must be unchanged)."""
    moved = plan_moved(plan)
    if moved:
        named = [f"{m.entity} {m.key} ({m.sentence})" for m in moved[:5]]
        raise PlanStale(
            f"Plan #{plan.pk} changes values that moved on since it was made: {'; '.join(named)}"
            f"{'; ...' if len(moved) > 5 else ''}. Reject it as superseded and plan the file again.",
            [f"{m.entity} {m.key}" for m in moved], moved,
        )


def apply_plan(
    plan: Plan, actor: AbstractBaseUser | None, *, strict: bool = True, tenant: Tenant | None = None, comment: str = ""
) -> tuple[int, bool]:
    """Write every change of the plan in one transaction under one new desired-state version, audited per key.

    ``strict``: refuse (PLAN_STALE) when desired state moved on at all since ``base_version``; otherwise only when
    a value the plan changes moved (``check_not_moved``). Returns (version, changed). A push to every target
    follows the commit, as for any change.
    """
    cluster = plan.cluster
    with transaction.atomic():
        state = DesiredStateVersion.lock(cluster)
        if strict and state.version != plan.base_version:
            raise PlanStale(
                f"Plan #{plan.pk} was made against desired-state version {plan.base_version} of cluster "
                f"{cluster.name!r}, which is at version {state.version} now; plan the file again."
            )
        if not strict:
            check_not_moved(plan)
        items: dict[Item, str | None] = {}
        audits: list[dict[str, Any]] = []
        quota_changes: dict[EntityRef, list[Mapping[str, Any]]] = defaultdict(list)
        config_ops: dict[tuple[str, str], list[tuple[str, Any, Any]]] = defaultdict(list)
        subscriptions: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        group_changes: list[Mapping[str, Any]] = []
        for c in plan.changes:
            if c["section"] == quotafile.QUOTA:
                quota_changes[EntityRef.parse(c["entity"])].append(c)
            elif c["section"] in (quotafile.GROUP, quotafile.EXEMPT):
                group_changes.append(c)
            elif c["section"] in (quotafile.BROKER, quotafile.TOPIC):
                config_ops[(c["section"], c["entity"][c["section"]])].append((c["key"], c["old"], c["new"]))
            else:
                subscriptions[c["entity"][quotafile.CLIENT_METRICS]].append(c)
        loaded: list[list[Tenant]] = []

        def tenants() -> list[Tenant]:  # read once, for the audit's owner of each entity (``owning_tenant``)
            if not loaded:
                loaded.append(list(Tenant.objects.prefetch_related("owned_names")))
            return loaded[0]

        validated = [
            (ref, [(c["key"], None if c["new"] is None else float(c["new"]), c.get("new_scope"))
                   for c in entity_changes])
            for ref, entity_changes in quota_changes.items()
        ]
        changed, scopes = _write_quotas(cluster, validated)
        items.update(changed)
        for ref, entity_changes in quota_changes.items():
            owner = tenant or _owner(tenants(), ref)
            for c in entity_changes:
                where = {"tenant": owner, "entity": entity_path(ref.user, ref.client_id, ref.ip), "key": c["key"]}
                if Item(QUOTA, ref.field(), c["key"]) in changed:
                    audits.append({"action": AuditAction.QUOTA_ALTERED, **where,
                                   "before": c["old"] if c["old"] is None else float(c["old"]),
                                   "after": c["new"] if c["new"] is None else float(c["new"])})
                before, after = scopes.get((ref, c["key"]), (None, None))
                if before is not None or after is not None:
                    audits.append({"action": AuditAction.BUDGET_SCOPE_ALTERED, **where, "before": before,
                                   "after": after})
        for (section, name), ops in config_ops.items():
            if section == quotafile.BROKER:
                broker = None if name == DEFAULT else Broker.objects.get(cluster=cluster, broker_id=int(name))
                resource = ConfigResource(broker_id=None if broker is None else broker.broker_id)
                _write(cluster, resource, broker, ops)
                items.update({Item(BROKER, "" if name == DEFAULT else name, k): new for k, _o, new in ops})
            else:
                resource = ConfigResource(topic=name)
                _write(cluster, resource, None, ops)
                items.update({Item(TOPIC, name, k): new for k, _o, new in ops})
            for key, old, new in ops:
                audits.append({"action": AuditAction.CONFIG_ALTERED, "entity": resource.path, "key": key,
                               "before": old, "after": new})
        for name, changes in subscriptions.items():
            _apply_subscription(cluster, name, changes)
            for c in changes:
                items[Item(CLIENT_METRICS, name, c["key"])] = c["new"]
                audits.append({"action": AuditAction.SUBSCRIPTION_ALTERED, "tenant": tenant,
                               "entity": f"/config/client-metrics/{name}", "key": c["key"], "before": c["old"],
                               "after": c["new"]})
        changed_groups, group_audits = plan_groups.write_groups(cluster, group_changes)
        items.update(changed_groups)
        audits.extend(group_audits)
        if not items:  # nothing to change (an unchanged file): no new version, nothing to push
            plan.state, plan.applied_version = PlanState.APPLIED, state.version
            plan.save(update_fields=["state", "applied_version", "updated"])
            return state.version, False
        version = state.bump(items)
        note = f"plan #{plan.pk}" + (f" ({comment})" if comment else "") + f"; desired-state version {version}"
        name = actor.get_username() if actor is not None else "system"
        AuditEntry.objects.bulk_create(  # as ``record`` writes them, in one statement per batch
            (AuditEntry(actor=actor, actor_name=name, cluster=cluster, comment=note, **entry) for entry in audits),
            batch_size=500,
        )
        plan.state, plan.applied_version = PlanState.APPLIED, version
        plan.save(update_fields=["state", "applied_version", "updated"])
    return version, True


#: One quota change of a plan: key, new value (None: removed), new budget scope (None: per broker, or removed).
PlanOp = tuple[str, float | None, str | None]


def _write_quotas(
    cluster: Cluster, validated: list[tuple[EntityRef, list[PlanOp]]]
) -> tuple[dict[Item, str | None], dict[tuple[EntityRef, str], tuple[str | None, str | None]]]:
    """Write a plan's quota changes in bulk (as ``alter_client_quotas``' writer does, whose per-entity OR lookup
    grows too long for a whole file): the cluster's entities and values read once, then inserted, updated and
    deleted in a few statements. Returns the items that changed (None = removed; a ``budget-scope`` item when a value
    became or stopped being cluster-wide) and, for the audit, each value's budget scopes before and after where
    ``scope_audit`` records them; an emptied entity is deleted. A value the file gives without a scope is per broker
    (the file is the whole state of what it lists)."""
    if not validated:
        return {}, {}
    entities = {(e.user, e.client_id, e.ip): e for e in QuotaEntity.objects.filter(cluster=cluster).order_by()}
    held = {(v.entity_id, v.key): v for v in QuotaValue.objects.filter(entity__cluster=cluster).order_by()}
    new = [QuotaEntity(cluster=cluster, user=r.user, client_id=r.client_id, ip=r.ip) for r, ops in validated
           if (r.user, r.client_id, r.ip) not in entities and any(v is not None for _, v, _ in ops)]
    if new:
        QuotaEntity.objects.bulk_create(new, batch_size=WRITE_CHUNK)
        if any(e.pk is None for e in new):  # a backend that does not return keys: read them back
            entities = {(e.user, e.client_id, e.ip): e for e in QuotaEntity.objects.filter(cluster=cluster)}
        else:
            entities.update({(e.user, e.client_id, e.ip): e for e in new})
    changes: dict[Item, str | None] = {}
    scopes: dict[tuple[EntityRef, str], tuple[str | None, str | None]] = {}
    creates, updates, deletes, emptied = [], [], [], set()
    for ref, ops in validated:
        entity = entities.get((ref.user, ref.client_id, ref.ip))
        if entity is None:
            continue
        for key, value, wanted in ops:
            row = held.get((entity.pk, key))
            item = Item(QUOTA, ref.field(), key)
            before = (row.value, row.budget_scope) if row is not None else None
            if value is None:
                if row is not None:
                    deletes.append(row.pk)
                    del held[(entity.pk, key)]
                    emptied.add(entity.pk)
                    changes[item] = None
                    changes.update(scope_change(ref.field(), key, row.budget_scope, None))
                    scopes[(ref, key)] = scope_audit(before, None)
                continue
            scope = wanted or BudgetScope.PER_BROKER
            if row is None:
                held[(entity.pk, key)] = row = QuotaValue(entity=entity, key=key, value=value, budget_scope=scope)
                creates.append(row)
            elif (row.value, row.budget_scope) != (value, scope):
                row.value, row.budget_scope = value, scope
                updates.append(row)
            else:
                continue
            if before is None or before[0] != value:
                changes[item] = repr(float(value))
            changes.update(scope_change(ref.field(), key, before[1] if before else None, scope))
            scopes[(ref, key)] = scope_audit(before, (value, scope))
    for start in range(0, len(deletes), WRITE_CHUNK):
        QuotaValue.objects.filter(pk__in=deletes[start:start + WRITE_CHUNK]).delete()
    QuotaValue.objects.bulk_create(creates, batch_size=WRITE_CHUNK)
    by_value: dict[tuple[float, str], list[int]] = defaultdict(list)
    for row in updates:
        by_value[(row.value, row.budget_scope)].append(row.pk)
    if len(by_value) * 4 <= len(updates):  # a file often sets many entities to the same value: one UPDATE per value
        for (value, scope), pks in by_value.items():
            for start in range(0, len(pks), WRITE_CHUNK):
                QuotaValue.objects.filter(pk__in=pks[start:start + WRITE_CHUNK]).update(value=value, budget_scope=scope)
    else:
        QuotaValue.objects.bulk_update(updates, ["value", "budget_scope"], batch_size=WRITE_CHUNK)
    still = {entity_pk for entity_pk, _ in held}
    gone = [pk for pk in emptied if pk not in still]
    for start in range(0, len(gone), WRITE_CHUNK):
        QuotaEntity.objects.filter(pk__in=gone[start:start + WRITE_CHUNK]).delete()
    return changes, scopes


def _owner(tenants: list[Tenant], ref: EntityRef) -> Tenant | None:
    """``owning_tenant`` over tenants already read: the single tenant owning every named part, else None."""
    if ref.ip is not None:
        return None
    owners = [t for t in tenants if entity_owned_by(t, ref.user, ref.client_id) is None]
    return owners[0] if len(owners) == 1 else None


def _apply_subscription(cluster: Cluster, name: str, changes: Iterable[Mapping[str, Any]]) -> None:
    """Write one subscription's changed keys (all keys removed: the subscription is deleted)."""
    row = ClientMetricsSubscription.objects.filter(cluster=cluster, name=name).first()
    configs = row.configs if row is not None else {}
    for c in changes:
        if c["new"] is None:
            configs.pop(c["key"], None)
        else:
            configs[c["key"]] = c["new"]
    if quotafile.INTERVAL not in configs:
        if row is not None:
            row.delete()
        return
    metrics, interval, match = (configs.get(quotafile.METRICS, ""), int(configs[quotafile.INTERVAL]),
                                configs.get(quotafile.MATCH, ""))
    if row is None:
        ClientMetricsSubscription.objects.create(cluster=cluster, name=name, metrics=metrics, interval_ms=interval,
                                                 match=match)
    else:
        row.metrics, row.interval_ms, row.match = metrics, interval, match
        row.save(update_fields=["metrics", "interval_ms", "match", "updated"])

