"""Queries the pages and the API answer from alike: what each reads, computed once, in the domain.

The API serializes what these return and the pages render it, so a number on the drift page and in
GET /api/clusters/{cluster}/pushes/summary/ is the same number.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Max, Min, Q, QuerySet

from engine.entities import DEFAULT
from quotas.choices import EntityType
from quotas.models import (
    ClientMetricsSubscription,
    Cluster,
    Drift,
    Push,
    PushState,
    QuotaRequest,
    push_targets,
    sees_everything,
)
from quotas.models.client_metrics import subscription_visible
from quotas.models.tenants import Tenant, member_tenants, owned_prefixes, quota_visible


def pushes_of_request(obj: QuotaRequest) -> list[Push]:
    """The pushes of the desired-state version a request was applied at, one per target (cluster-wide first)."""
    if obj.applied_version is None:
        return []
    rows = Push.objects.filter(cluster_id=obj.cluster_id, version=obj.applied_version).select_related(
        "cluster", "broker"
    )
    return sorted(rows, key=lambda p: -1 if p.broker is None else p.broker.broker_id)


def push_summary(cluster: Cluster) -> dict[str, Any]:
    """The push summary of a cluster in a constant number of aggregate queries (whatever its history holds)."""
    desired = cluster.desired_state.version
    targets = push_targets(cluster)
    pushes = Push.objects.filter(cluster=cluster).order_by()
    outstanding = ~Q(state=PushState.APPLIED)
    per_target = {
        row["broker_id"]: row
        for row in pushes.values("broker_id").annotate(
            applied=Max("version", filter=Q(state=PushState.APPLIED)),
            pending=Count("pk", filter=Q(state=PushState.PENDING)),
            failed=Count("pk", filter=Q(state=PushState.FAILED)),
            oldest_pending=Min("created", filter=Q(state=PushState.PENDING)),
            error_version=Max("version", filter=outstanding & ~Q(error="")),
        )
    }
    # the newest outstanding error of each target: one row each, (cluster, broker, version) being unique
    wanted = Q(pk__in=[])
    for broker_id, row in per_target.items():
        if row["error_version"] is not None:
            wanted |= Q(broker_id=broker_id, version=row["error_version"])
    errors = {p.broker_id: p for p in pushes.filter(wanted).only("broker_id", "error_code", "error", "updated")}
    drift = dict(
        Drift.objects.filter(cluster=cluster, resolved_at=None)
        .order_by()
        .values("broker_id")
        .annotate(n=Count("pk"))
        .values_list("broker_id", "n")
    )
    out = []
    for broker in targets:
        pk = broker.pk if broker is not None else None
        row = per_target.get(pk, {})
        applied = row.get("applied")
        error = errors.get(pk)
        out.append(
            {
                "broker": broker.broker_id if broker is not None else None,
                "applied_version": applied,
                "in_sync": desired == 0 or (applied is not None and applied >= desired),
                "pending": row.get("pending", 0),
                "failed": row.get("failed", 0),
                "oldest_pending_at": row.get("oldest_pending"),
                "last_error_code": error.error_code if error else "",
                "last_error": error.error if error else "",
                "last_error_at": error.updated if error else None,
                "open_drift": drift.get(pk, 0),
            }
        )
    return {"cluster": cluster.name, "scope": cluster.scope, "desired_version": desired, "targets": out}


def visible_subscriptions(user: Any, rows: QuerySet[ClientMetricsSubscription]) -> QuerySet[ClientMetricsSubscription]:
    """Admins and auditors read every subscription; a member the shared ones and its tenants' own
    (``subscription_visible``): another tenant's match names that tenant's client-ids."""
    if sees_everything(user):
        return rows.select_related("cluster")
    tenants = member_tenants(user)
    keep = [pk for pk, match in rows.values_list("pk", "match") if subscription_visible(tenants, match)]
    return rows.filter(pk__in=keep).select_related("cluster")


def visible_entity_pks(user: Any, entities: QuerySet[Any]) -> list[int]:
    """The ids of the described entities a member may read (``quota_visible``).

    Ownership is by fnmatch pattern, which SQL cannot match portably: the query keeps only the rows that may be
    visible (``may_be_visible``: the defaults and the names starting as an owned pattern starts), ownership is
    decided over those rows' names, then the page is read by key (as SCRAM credentials are), so cursor pages stay
    full and a member's cost follows what its tenants own, not the cluster's size.
    """
    tenants = member_tenants(user)
    rows = entities.filter(may_be_visible(tenants)).prefetch_related(None).order_by()
    named = rows.values_list("pk", "user", "client_id", "ip")
    return [pk for pk, u, c, ip in named.iterator(chunk_size=2000) if quota_visible(tenants, u, c, ip)]


def may_be_visible(tenants: list[Tenant]) -> Q:
    """The entities ``quota_visible`` may hold for, as a query (a superset: it decides): the ``<default>`` ip, the
    all-default ones, and those whose named part starts as one of the tenants' patterns does (``owned_prefixes``)."""
    unnamed = Q(user__isnull=True) | Q(user=DEFAULT)
    named_client = Q(pk__in=[])
    for prefix in owned_prefixes(tenants, EntityType.CLIENT_ID):
        named_client |= Q(client_id__startswith=prefix)
    named_user = Q(pk__in=[])
    for prefix in owned_prefixes(tenants, EntityType.USER):
        named_user |= Q(user__startswith=prefix)
    defaults = unnamed & (Q(client_id__isnull=True) | Q(client_id=DEFAULT))
    return Q(ip=DEFAULT) | (Q(ip__isnull=True) & (defaults | (unnamed & named_client) | named_user))
