"""The live-monitoring pages: the overview of what is throttled now, and one entity's live charts.

Both read the samples the engine's samplers publish (``engine.monitor``; ``telemetry_ui/README.md``):
the overview from each cluster's ``latest`` hash, the entity page through the WebSocket ``/ws/monitor/``
(live) and the history endpoint (the last hour of minute rollups), drawn by ``frontend/static/frontend/
monitor.js`` with plotly.js served by the portal itself (``frontend/finders.py``).

Tenant members see the entities their tenants own; another tenant's entity answers 403 (the socket refuses
it with PERMISSION_DENIED too). Admins and auditors see everything.
"""

from __future__ import annotations

from typing import Any

import redis
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from engine.entities import display_tags
from engine.groups import group_of_tags
from frontend.monitor_summary import summed_cluster_now
from frontend.monitoring import (
    FRESH_MS,
    HEATMAP_ENTITIES,
    QUOTA_TYPE_LABELS,
    ClusterNow,
    Visibility,
    cluster_now,
    heatmap,
    monitor_redis,
    now_ms,
    tags_names,
    top_throttled,
    valid_tags,
)
from frontend.pages import Refused, entity_url, not_found, page, portal_page, visible_requests
from quotas.models import Cluster, Drift, QuotaEntity, RequestState, is_auditor, sees_everything

#: The WebSocket of the live charts and the JSON endpoints of the hour view (telemetry_ui/README.md).
WS_PATH = "/ws/monitor/"
LIVE_MINUTES = 5
HOUR_MINUTES = 60


@require_GET
@portal_page
def overview(request: HttpRequest) -> HttpResponse:
    """Now, across the clusters: the most throttled entities, utilization by entity and broker, pending
    requests and drifted brokers. Reads each cluster's samplers' summaries (an admin), its index and the fields
    a member may see, or its latest hash whole; no query per entity."""
    everything = sees_everything(request.user)
    vis = Visibility.of(request.user, everything)
    now = now_ms()
    clusters = list(Cluster.objects.order_by("name").prefetch_related("brokers"))
    snapshots: list[ClusterNow] = []
    unavailable = ""
    try:
        client = monitor_redis()
        for c in clusters:
            ids = [b.broker_id for b in c.brokers.all()]
            # an admin's figures from the samplers' summaries when they hold them: O(brokers + shown)
            summed = summed_cluster_now(client, c.name, ids, now) if everything else None
            snapshots.append(summed or cluster_now(client, c.name, ids, vis, now))
    except (redis.RedisError, OSError) as e:
        unavailable = f"The monitor's Redis could not be read ({e.__class__.__name__}); live data is not shown."
    top, throttled_count = top_throttled(snapshots)
    throttled_rows = [
        {
            "e": e,
            "url": entity_url(e.cluster, e.tags),
            "types": sorted(e.throttled_types),
            "age_s": max(0.0, (now - e.newest) / 1000),
        }
        for e in top
    ]
    maps, tables = [], []
    for snap in snapshots:
        hm = heatmap(snap)
        if hm is not None:
            hm["links"] = [entity_url(snap.name, tags) for tags in hm["entities"]]
            hm["names"] = [display_tags(tags) for tags in hm["entities"]]  # its labels, in words; tags on hover
            maps.append(hm)
            rows = [
                {"tags": tags, "url": url, "cells": cells}
                for tags, url, cells in zip(hm["entities"], hm["links"], hm["z"], strict=True)
            ]
            tables.append({**hm, "rows": rows})
    counted = visible_requests(request, everything).aggregate(  # both in one query
        pending=Count("pk", filter=Q(state=RequestState.SUBMITTED)),
        applying=Count("pk", filter=Q(state=RequestState.APPLYING)),
    )
    pending, applying = counted["pending"], counted["applying"]
    drifted: list[dict[str, Any]] = []
    if everything:
        open_drift = (
            Drift.objects.filter(resolved_at__isnull=True)
            .values("cluster__name", "broker__broker_id")
            .annotate(items=Count("pk"))
            .order_by("cluster__name", "broker__broker_id")
        )
        drifted = [
            {
                "cluster": row["cluster__name"],
                "broker": row["broker__broker_id"],
                "items": row["items"],
                "url": reverse("drift") + f"#cluster-{row['cluster__name']}",
            }
            for row in open_drift
        ]
    context = {
        "clusters": snapshots,
        "cluster_count": len(clusters),
        "throttled": throttled_rows,
        "throttled_count": throttled_count,
        "heatmaps": tables,
        "heatmap_limit": HEATMAP_ENTITIES,
        "bootstrap": {"heatmaps": maps},
        "pending": pending,
        "applying": applying,
        "pending_url": reverse("approval-queue")
        if everything
        else reverse("request-list") + "?state=submitted",
        "drifted": drifted,
        "drifted_items": sum(d["items"] for d in drifted),
        "fresh_s": FRESH_MS // 1000,
        "unavailable": unavailable,
        "sampled": sum(s.entity_count for s in snapshots),
    }
    return page(request, "frontend/monitor_overview.html", context)


@require_GET
@portal_page
def entity(request: HttpRequest, cluster: str) -> HttpResponse:
    """One entity (sensor tags ``?e=user:client-id``) live: rate against its bound per broker, tokens against
    zero, throttle time and the fraction of time throttled; the last 5 minutes streamed, or the last hour."""
    found = Cluster.objects.filter(name=cluster).prefetch_related("brokers").first()
    if found is None:
        raise not_found(f"Cluster {cluster!r}")
    tags = request.GET.get("e", "")
    if not valid_tags(tags):
        raise Refused(400, "Name the entity by its sensor tags, e.g. ?e=alice: (user alice) or ?e=alice:app.")
    if not Visibility.of(request.user).may_see(tags, found.name):
        raise Refused(403, f"The entity {tags} of {cluster} is not one your tenants own.")
    user, client_id = tags_names(tags)
    group = group_of_tags(tags)  # a quota group's shared sensor: its members' parts are on its samples
    config = None if group else QuotaEntity.objects.filter(
        cluster=found, user=user, client_id=client_id, ip__isnull=True).first()
    bootstrap = {
        "cluster": found.name,
        "entity": tags,
        "display": display_tags(tags),
        "brokers": [b.broker_id for b in found.brokers.all()],
        "ws_path": WS_PATH,
        # the JSON endpoints of telemetry_ui (GET ...?entity=<tags>&minutes=N)
        "history_url": f"/api/monitor/{found.name}/history/",
        "recent_url": f"/api/monitor/{found.name}/recent/",
        "live_minutes": LIVE_MINUTES,
        "hour_minutes": HOUR_MINUTES,
        "labels": QUOTA_TYPE_LABELS,
        "group": group,
    }
    context = {
        "cluster": found,
        "tags": tags,
        "display": display_tags(tags),
        "user_name": user,
        "client_id": client_id,
        "config_entity": config,
        "can_request": not group and not is_auditor(request.user) and (user is not None or client_id is not None),
        "group": group,
        # the group's own page (its members, values and requests)
        "group_url": f"/clusters/{found.name}/groups/{group}/" if group else "",
        "bootstrap": bootstrap,
        "live_minutes": LIVE_MINUTES,
    }
    return page(request, "frontend/monitor_entity.html", context)
