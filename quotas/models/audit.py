"""The audit trail: every change of a request or a quota, with before and after, who and when.

Entries are only ever added. A quota change is recorded per (entity, key) with the value
before and after (null = no value); a change of a value's budget scope (it became, or stopped being,
a cluster-wide budget) is an entry of its own, with the scope before and after (null = no value);
a request's move is recorded with the state before and after.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import models, transaction
from django.utils import timezone

from engine.config import EntityRef
from engine.entities import entity_path
from engine.errors import QuotaEngineError
from quotas.choices import BudgetScope
from quotas.models.clusters import Cluster
from quotas.models.pushes import DesiredStateVersion
from quotas.models.quotas import Alteration, AlterOutcome, QuotaValue, alter_client_quotas
from quotas.models.requests import QuotaRequest
from quotas.models.tenants import Tenant, owning_tenant


class AuditAction(models.TextChoices):
    QUOTA_ALTERED = "quota_altered", "Quota value changed"
    BUDGET_SCOPE_ALTERED = "budget_scope_altered", "Quota value made cluster-wide or per broker"
    SUBMITTED = "submitted", "Request submitted"
    WITHDRAWN = "withdrawn", "Request withdrawn"
    APPROVED = "approved", "Request approved"
    REJECTED = "rejected", "Request rejected"
    APPLYING = "applying", "Request being pushed to the brokers"
    APPLIED = "applied", "Request applied to the desired state"
    FAILED = "failed", "Request failed to apply"
    EXPIRED = "expired", "Boost expired"
    CONFIG_ALTERED = "config_altered", "Broker or topic config changed"
    PUSH_FAILED = "push_failed", "A push to a broker failed"
    DRIFT_DETECTED = "drift_detected", "A broker differs from desired state"
    DRIFT_HEALED = "drift_healed", "Desired state re-applied to a broker"
    DRIFT_ADOPTED = "drift_adopted", "What a broker held adopted into desired state"
    SUBSCRIPTION_ALTERED = "subscription_altered", "Client-metrics subscription changed"
    SCRAM_CREATED = "scram_created", "SCRAM credential created"
    SCRAM_ROTATED = "scram_rotated", "SCRAM credential rotated"
    SCRAM_DELETED = "scram_deleted", "SCRAM credential deleted"
    WEBHOOK_CHANGED = "webhook_changed", "Tenant webhook created, changed, re-keyed or deleted"
    DATABASE_RESTORED = "database_restored", "Portal database restored from a backup; versions fenced"
    GROUP_CHANGED = "group_changed", "Group quota created, its members changed, or deleted"
    EXEMPT_CHANGED = "exempt_changed", "Principal made exempt from every quota, or no longer"


class AuditEntry(models.Model):
    """One change. ``actor`` is null for the system (e.g. boost expiry); ``actor_name`` outlives the account."""

    created = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    actor_name = models.CharField(max_length=150, help_text="The username, or 'system'.")
    action = models.CharField(max_length=32, choices=AuditAction.choices)
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit")
    cluster = models.ForeignKey(Cluster, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit")
    request = models.ForeignKey(QuotaRequest, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit")
    entity = models.CharField(max_length=600, blank=True, help_text="Kafka's config path of the entity.")
    key = models.CharField(max_length=255, blank=True, help_text="A quota key, or a broker/topic config name.")
    before = models.JSONField(null=True, blank=True, help_text="The value or state before; null = none.")
    after = models.JSONField(null=True, blank=True, help_text="The value or state after; null = none.")
    comment = models.TextField(blank=True)

    class Meta:
        verbose_name_plural = "audit entries"
        ordering = ["-pk"]

    def __str__(self) -> str:
        return f"{self.created:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.entity} {self.key}"


def record(
    action: str,
    actor: AbstractBaseUser | None,
    *,
    request: QuotaRequest | None = None,
    before: Any = None,
    after: Any = None,
    comment: str = "",
    **fields: Any,
) -> AuditEntry:
    """Add one entry; a request's tenant, cluster, entity and key are filled in from it."""
    if request is not None:
        fields = {
            "tenant": request.tenant,
            "cluster": request.cluster,
            "entity": request.entity,
            "key": request.key,
            **fields,
        }
    return AuditEntry.objects.create(
        action=action,
        actor=actor,
        actor_name=actor.get_username() if actor is not None else "system",
        request=request,
        before=before,
        after=after,
        comment=comment,
        **fields,
    )


def _snapshot(cluster: Cluster, refs: Sequence[EntityRef]) -> dict[tuple[EntityRef, str], tuple[float, str]]:
    """The stored values of these entities and their budget scopes, by (entity, key)."""
    values: dict[tuple[EntityRef, str], tuple[float, str]] = {}
    for ref in set(refs):
        rows = QuotaValue.objects.filter(
            entity__cluster=cluster, entity__user=ref.user, entity__client_id=ref.client_id, entity__ip=ref.ip
        )
        for key, value, scope in rows.values_list("key", "value", "budget_scope"):
            values[(ref, key)] = (value, scope)
    return values


def scope_audit(before: tuple[float, str] | None, after: tuple[float, str] | None) -> tuple[str | None, str | None]:
    """The budget scopes a ``budget_scope_altered`` entry records for one value (None: no value), or ``(None,
    None)`` when there is nothing to record: the scope did not change, or a per-broker value (Kafka's meaning) came
    or went."""
    old = before[1] if before is not None else None
    new = after[1] if after is not None else None
    if old == new or {old, new} <= {None, BudgetScope.PER_BROKER}:
        return None, None
    return old, new


def _ref(entry: Alteration) -> EntityRef | None:
    try:
        return EntityRef.parse(dict(entry.entity))
    except QuotaEngineError:
        return None  # alter_client_quotas refuses the batch with the reason


def audited_alter(
    cluster: Cluster,
    entries: Sequence[Alteration],
    actor: AbstractBaseUser | None,
    *,
    request: QuotaRequest | None = None,
    comment: str = "",
) -> AlterOutcome:
    """``alter_client_quotas`` plus one audit entry per changed (entity, key), in one transaction (and one more when
    its budget scope changed: ``scope_audit``).

    The cluster's version row is locked first, so the before-values read here are the ones the
    alteration replaces. The tenant of an entry is the request's, else the one tenant owning the entity.
    """
    refs = [r for r in (_ref(e) for e in entries) if r is not None]
    with transaction.atomic():
        DesiredStateVersion.lock(cluster)
        before = _snapshot(cluster, refs)
        outcome = alter_client_quotas(cluster, entries)
        if not outcome.changed:
            return outcome
        after = _snapshot(cluster, refs)
        for ref, key in sorted(set(before) | set(after), key=lambda rk: (rk[0].field(), rk[1])):
            old, new = before.get((ref, key)), after.get((ref, key))
            if old == new:
                continue
            tenant = request.tenant if request is not None else owning_tenant(ref.user, ref.client_id)
            where = {
                "request": request, "tenant": tenant, "cluster": cluster, "key": key,
                "entity": entity_path(ref.user, ref.client_id, ref.ip),
                "comment": comment or f"desired-state version {outcome.version}",
            }  # fmt: skip
            old_value, new_value = (old[0] if old else None), (new[0] if new else None)
            if old_value != new_value:
                record(AuditAction.QUOTA_ALTERED, actor, before=old_value, after=new_value, **where)
            old_scope, new_scope = scope_audit(old, new)
            if old_scope is not None or new_scope is not None:
                record(AuditAction.BUDGET_SCOPE_ALTERED, actor, before=old_scope, after=new_scope, **where)
    return outcome
