"""Resolving drift: re-applying desired state over a target (``heal``), or adopting what the cluster holds as the
desired state (``adopt``); both close the drift rows and are audited."""

from __future__ import annotations

from collections.abc import Sequence

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from engine.config import EntityRef
from engine.entities import DEFAULT
from quotas.connectors.base import BUDGET_SCOPE, QUOTA, PushError
from quotas.models import (
    Alteration,
    AuditAction,
    Broker,
    Cluster,
    Drift,
    DriftResolution,
    QuotaOp,
    audited_alter,
    record,
)
from quotas.push import address, target_push


def heal(cluster: Cluster, broker: Broker | None, actor: AbstractBaseUser | None) -> target_push.PushOutcome:
    """Re-apply the whole desired state to a target; its open drift is closed as healed, and audited."""
    where = address._where(cluster, broker)
    try:
        outcome = target_push.push_target(cluster.pk, broker.pk if broker is not None else None, force=True)
    except PushError as e:
        why = f"re-apply: {e.code}: {e.message}"
        record(AuditAction.PUSH_FAILED, actor, cluster=cluster, entity=where, comment=why)
        raise
    now = timezone.now()
    comment = f"{where}: re-applied desired-state version {outcome.version}"
    with transaction.atomic():
        rows = list(Drift.objects.filter(cluster=cluster, broker=broker, resolved_at=None))
        if not rows:
            record(AuditAction.DRIFT_HEALED, actor, cluster=cluster, entity=where, comment=comment + " (no open drift)")
        for row in rows:
            row.resolved_at, row.resolution = now, DriftResolution.HEALED
            row.save(update_fields=["resolved_at", "resolution"])
            record(
                AuditAction.DRIFT_HEALED, actor, cluster=cluster, entity=row.path, key=row.key,
                before=row.actual, after=row.desired, comment=comment,
            )
    return outcome


class NotAdoptable(Exception):
    """Drift that cannot be adopted (not a quota, or already resolved); nothing was changed."""


def adopt(cluster: Cluster, drift_ids: Sequence[int], actor: AbstractBaseUser) -> int:
    """Make what the cluster holds the desired state for these quota drifts: an extra or different quota's value is
    written into desired state, a missing one is removed from it; one new version, audited with ``actor`` and the
    drift it came from, the rows closed as adopted. Returns the new version (the push that follows changes nothing
    on the cluster). All or nothing: one row that cannot be adopted refuses the whole call."""
    with transaction.atomic():
        rows = list(
            Drift.objects.select_for_update().filter(cluster=cluster, pk__in=list(drift_ids), resolved_at=None)
        )
        found = {row.pk for row in rows}
        gone = sorted(set(drift_ids) - found)
        if gone:
            raise NotAdoptable(f"Drift {', '.join(map(str, gone))} of {cluster.name} is not open (or does not exist).")
        entries: list[Alteration] = []
        for row in rows:
            if row.kind == BUDGET_SCOPE:
                why = (
                    f"Drift {row.pk} is the budget scope of {row.key} of {row.path} in the engine's Redis: re-apply "
                    "desired state to write it back, or change the value's budget_scope (AlterClientQuotas)."
                )
                raise NotAdoptable(why)
            if row.kind != QUOTA:
                why = f"Drift {row.pk} is a {row.kind} config: only quotas can be adopted; re-apply instead."
                raise NotAdoptable(why)
            ref = EntityRef.from_field(row.resource)
            named = [("user", ref.user), ("client-id", ref.client_id), ("ip", ref.ip)]
            parts = [(k, None if v == DEFAULT else v) for k, v in named if v is not None]
            op = QuotaOp(row.key, remove=True) if row.actual is None else QuotaOp(row.key, float(row.actual))
            entries.append(Alteration(parts, [op]))
        outcome = audited_alter(cluster, entries, actor, comment="adopted from what the cluster holds")
        now = timezone.now()
        for row in rows:
            row.resolved_at, row.resolution = now, DriftResolution.ADOPTED
            row.save(update_fields=["resolved_at", "resolution"])
            record(
                AuditAction.DRIFT_ADOPTED, actor, cluster=cluster, entity=row.path, key=row.key,
                before=row.desired, after=row.actual,
                comment=f"{row.status} on the cluster, adopted at desired-state version {outcome.version}",
            )
    return outcome.version
