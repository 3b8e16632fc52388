"""Reconcile: comparing each target with desired state (Celery beat runs ``reconcile_all``), recording the
differences as drift, and pushing the targets that are behind.

After a restore of the database, heal mode re-applies over a target only once reconcile has seen it in sync (an
admin adopted or re-applied what it held)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import redis
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from quotas.connector_registry import connector_for
from quotas.connectors.base import QUOTA, Item, PushError, portal_managed
from quotas.models import (
    AuditAction,
    Broker,
    Cluster,
    DesiredStateVersion,
    Drift,
    DriftResolution,
    DriftStatus,
    push_targets,
    record,
)
from quotas.models.desired import desired_state, portal_applied_version
from quotas.models.pushes import item_path, restore_fence
from quotas.push import address, dispatch, flags, resolve, target_push

log = logging.getLogger(__name__)

REPORT, HEAL = "report", "heal"


@dataclass(frozen=True)
class Difference:
    item: Item
    status: str
    desired: str | None
    actual: str | None


def _managed(item: Item, desired: Mapping[Item, str]) -> bool:
    """Every quota is the portal's; of configs, those it manages (a broker holds others that are not its business)."""
    return item in desired or item.kind == QUOTA or portal_managed(item)


def _same(item: Item, a: str, b: str) -> bool:
    if item.kind == QUOTA:
        try:
            return float(a) == float(b)
        except ValueError:
            return False
    return a.strip() == b.strip()


def compare(desired: Mapping[Item, str], actual: Mapping[Item, str]) -> list[Difference]:
    """What the target holds against desired state: missing, extra (of what the portal manages) or different."""
    out = []
    for item in sorted(set(desired) | {i for i in actual if _managed(i, desired)}):
        d, a = desired.get(item), actual.get(item)
        if a is None:
            out.append(Difference(item, DriftStatus.MISSING, d, None))
        elif d is None:
            out.append(Difference(item, DriftStatus.EXTRA, None, a))
        elif not _same(item, d, a):
            out.append(Difference(item, DriftStatus.DIFFERENT, d, a))
    return out


@dataclass(frozen=True)
class ReconcileOutcome:
    target: str
    status: str  # "in-sync", "drift", "healed", "behind", "changing", "unreachable"
    version: int
    differences: int = 0


def _record_drift(cluster: Cluster, broker: Broker | None, version: int, diffs: list[Difference]) -> None:
    """Open a Drift row per new difference (audited), update the ones still there, close the ones gone."""
    now = timezone.now()
    current = {d.item: d for d in diffs}
    open_rows = {row.item: row for row in Drift.objects.filter(cluster=cluster, broker=broker, resolved_at=None)}
    with transaction.atomic():
        for item, row in open_rows.items():
            d = current.get(item)
            if d is None:
                row.resolved_at, row.resolution = now, DriftResolution.CONVERGED
                row.save(update_fields=["resolved_at", "resolution"])
            elif (row.status, row.desired, row.actual) != (d.status, d.desired, d.actual):
                row.status, row.desired, row.actual, row.version = d.status, d.desired, d.actual, version
                row.save(update_fields=["status", "desired", "actual", "version"])
        where = address._where(cluster, broker)
        for item, d in current.items():
            if item in open_rows:
                continue
            Drift.objects.create(
                cluster=cluster, broker=broker, kind=item.kind, resource=item.resource, key=item.key,
                status=d.status, desired=d.desired, actual=d.actual, version=version, detected_at=now,
            )
            record(
                AuditAction.DRIFT_DETECTED, None, cluster=cluster, entity=item_path(item), key=item.key,
                before=d.desired, after=d.actual, comment=f"{where}: {d.status} at desired-state version {version}",
            )


def reconcile_target(cluster: Cluster, broker: Broker | None, *, mode: str | None = None) -> ReconcileOutcome:
    """Compare one target with desired state and record drift; ``heal`` mode re-applies when it drifted.

    A target behind desired state is not drifting, it is waiting: it gets a push instead.
    """
    mode = mode or settings.QUOTAS_DRIFT_MODE
    connector = connector_for(cluster.connector)
    version = DesiredStateVersion.objects.get(cluster=cluster).version
    desired = desired_state(cluster, broker)
    try:
        target = address.target_of(cluster, broker)
    except PushError as e:
        log.warning("Reconcile cannot reach %s: %s", cluster.name, e)
        return ReconcileOutcome(f"{cluster.name}/cluster", "unreachable", version)
    try:
        with target_push._target_lock(connector, cluster, broker):
            held, actual = connector.describe(target, desired)
            if held is None:
                held = portal_applied_version(cluster, broker)
    except PushError as e:
        log.warning("Reconcile could not describe %s: %s", target.label, e)
        return ReconcileOutcome(target.label, "unreachable", version)
    except redis.exceptions.LockError:
        return ReconcileOutcome(target.label, "changing", version)
    if DesiredStateVersion.objects.get(cluster=cluster).version != version:
        return ReconcileOutcome(target.label, "changing", version)  # compared against a moving state: next round
    pk = broker.pk if broker is not None else None
    if held < version:
        dispatch.enqueue_pushes(cluster.pk, [pk], force=flags._stale_flag(cluster.pk, pk))
        return ReconcileOutcome(target.label, "behind", version)
    diffs = compare(desired, actual)
    _record_drift(cluster, broker, version, diffs)
    if held > version:  # the database went back (see _stale): shown, never re-applied by itself
        log.warning("%s", target_push._stale(target, held, version).message)
        return ReconcileOutcome(target.label, "ahead", version, len(diffs))
    if not diffs:
        _seen_in_sync(cluster.pk, pk, version)
        return ReconcileOutcome(target.label, "in-sync", version)
    if mode == HEAL and _may_heal(cluster.pk, pk, version):
        resolve.heal(cluster, broker, None)
        return ReconcileOutcome(target.label, "healed", version, len(diffs))
    return ReconcileOutcome(target.label, "drift", version, len(diffs))


def _synced_key(cluster_id: int, broker_pk: int | None) -> str:
    return f"portal:push-synced:{cluster_id}:{broker_pk if broker_pk is not None else 'cluster'}"


def _may_heal(cluster_id: int, broker_pk: int | None, version: int) -> bool:
    """Whether heal mode may re-apply desired state over a drifted target.

    After a restore, only once reconcile has seen the target in sync with the restored state (an admin adopted or
    re-applied what it held): until then its differences are what the brokers kept of decisions the restored
    database lost. Without Redis it cannot tell, and answers no.
    """
    fence = restore_fence(version)
    if not fence:
        return True
    try:
        seen = flags._client().get(_synced_key(cluster_id, broker_pk))
    except (redis.exceptions.RedisError, OSError):
        return False
    return seen is not None and int(seen) == fence


def _seen_in_sync(cluster_id: int, broker_pk: int | None, version: int) -> None:
    fence = restore_fence(version)
    if fence:
        try:
            flags._client().set(_synced_key(cluster_id, broker_pk), fence)
        except (redis.exceptions.RedisError, OSError):  # heal mode then waits for the next round in sync
            log.warning("Could not note that cluster %s target %s is in sync", cluster_id, broker_pk)


def forget_in_sync() -> int:
    """Forget which targets reconcile saw in sync (a restore: heal mode waits for them again); returns how many.

    Raises redis.RedisError when the portal's Redis cannot be reached.
    """
    client = flags._client()
    keys = list(client.scan_iter(match="portal:push-synced:*", count=1000))
    return int(client.delete(*keys)) if keys else 0


def reconcile_all(mode: str | None = None) -> list[ReconcileOutcome]:
    """Every target of every cluster (Celery beat runs it every QUOTAS_RECONCILE_SECONDS)."""
    out = []
    for cluster in Cluster.objects.all():
        for broker in push_targets(cluster):
            out.append(reconcile_target(cluster, broker, mode=mode))
    return out
