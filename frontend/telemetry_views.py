"""Client telemetry pages (KIP-714 pushes kept by the sink; ``telemetry_ui/README.md``, the storage contract).

- ``/telemetry/``: the clusters, each linking to its live client instances;
- ``/telemetry/<cluster>/``: the cluster's live client instances (the sink's instances hash), ``?client_id=`` for
  the instances of one client id;
- ``/telemetry/<cluster>/instance/<id>/``: one instance's pushed metrics as charts, streamed over ``/ws/monitor/``
  (``subscribe_telemetry``) by ``frontend/static/frontend/telemetry.js``;
- ``/telemetry/<cluster>/client/<client id>/``: the pushed metrics of every instance of one client id as charts (one
  line per instance and set of attributes): the last 10 minutes from the firehose (``by_client``), then live by the
  same script, subscribed to each of the client id's live instances (the instances hash).

Tenant members see the instances whose client id one of their tenants owns (``entity_owned_by`` with no user);
another instance answers 403. Admins and auditors see every instance.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import redis
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from frontend.monitoring import Visibility, monitor_redis
from frontend.pages import Refused, not_found, page, portal_page
from quotas.models import Cluster
from telemetry_ui.ingest import telemetry_store
from telemetry_ui.live.monitoring import (
    TEL_BACKFILL_MS,
    check_instance,
    client_tags,
    parse_instance,
    tel_instance_key,
    tel_instances_key,
)

WS_PATH = "/ws/monitor/"
MAX_ROWS = 2000
MAX_LIVE = 200  # subscriptions per WebSocket (telemetry_ui.live.consumers.MAX_SUBSCRIPTIONS)


def _when(ms: Any) -> str:
    if not isinstance(ms, int | float) or ms <= 0:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def may_see_client(vis: Visibility, client_id: Any, cluster: str) -> bool:
    if vis.everything:
        return True
    return isinstance(client_id, str) and bool(client_id) and vis.may_see(client_tags(client_id), cluster)


def instance_row(cluster: str, info: dict[str, Any]) -> dict[str, Any]:
    instance = str(info.get("instance", ""))
    client_id = info.get("client_id") or ""
    return {
        "instance": instance,
        "url": reverse("telemetry-instance", args=[cluster, instance]),
        "client_id": client_id,
        "client_url": reverse("telemetry-client", args=[cluster, client_id]) if client_id else "",
        "client_instances_url": reverse("telemetry-cluster", args=[cluster]) + "?" + _query(client_id),
        "software": " ".join(str(info.get(k) or "") for k in ("software_name", "software_version")).strip(),
        "source_address": info.get("source_address") or "",
        "subscription_id": info.get("subscription_id"),
        "interval_s": (info["push_interval_ms"] / 1000) if isinstance(info.get("push_interval_ms"), int) else None,
        "last_push": _when(info.get("last_push_ms")),
        "last_push_ms": info.get("last_push_ms") or 0,
        "pushes": info.get("pushes") or 0,
        "errors": info.get("errors") or 0,
        "last_error": info.get("last_error") or "",
        "terminated": bool(info.get("terminated")),
    }


def _query(client_id: str) -> str:
    from urllib.parse import urlencode

    return urlencode({"client_id": client_id})


def _cluster(name: str) -> Cluster:
    found = Cluster.objects.filter(name=name).first()
    if found is None:
        raise not_found(f"Cluster {name!r}")
    return found


@require_GET
@portal_page
def index(request: HttpRequest) -> HttpResponse:
    clusters = list(Cluster.objects.order_by("name").values_list("name", flat=True))
    rows = [{"name": c, "url": reverse("telemetry-cluster", args=[c])} for c in clusters]
    return page(request, "frontend/telemetry_index.html", {"clusters": rows})


@require_GET
@portal_page
def cluster_instances(request: HttpRequest, cluster: str) -> HttpResponse:
    found = _cluster(cluster)
    vis = Visibility.of(request.user)
    client_filter = request.GET.get("client_id")
    unavailable = ""
    rows: list[dict[str, Any]] = []
    try:
        raw = monitor_redis().hgetall(tel_instances_key(found.name))
    except (redis.RedisError, OSError) as e:
        raw = {}
        unavailable = f"The telemetry store could not be read ({e.__class__.__name__})."
    for value in raw.values():
        info = parse_instance(value)
        if info is None or not may_see_client(vis, info.get("client_id"), found.name):
            continue
        if client_filter is not None and info.get("client_id") != client_filter:
            continue
        rows.append(instance_row(found.name, info))
    rows.sort(key=lambda r: (r["terminated"], -r["last_push_ms"], r["client_id"], r["instance"]))
    context = {
        "cluster": found,
        "rows": rows[:MAX_ROWS],
        "total": len(rows),
        "max_rows": MAX_ROWS,
        "client_filter": client_filter,
        "unavailable": unavailable,
    }
    return page(request, "frontend/telemetry_cluster.html", context)


@require_GET
@portal_page
def instance_detail(request: HttpRequest, cluster: str, instance: str) -> HttpResponse:
    found = _cluster(cluster)
    if check_instance(instance):
        raise Refused(400, "That is not a client instance id.")
    client = monitor_redis()
    try:
        info = parse_instance(client.hget(tel_instances_key(found.name), instance))
        if info is None:  # gone from the hash: its last push may still be kept
            rows = client.xrevrange(tel_instance_key(found.name, instance), count=1)
            if rows:
                last = json.loads(rows[0][1][b"d"])
                info = {"instance": instance, "client_id": last.get("client_id"), "last_push_ms": last.get("t")}
    except (redis.RedisError, OSError, ValueError, KeyError) as e:
        raise Refused(503, f"The telemetry store could not be read ({e.__class__.__name__}).") from None
    if info is None:
        raise not_found(f"Client instance {instance!r} of {found.name}")
    if not may_see_client(Visibility.of(request.user), info.get("client_id"), found.name):
        raise Refused(403, f"The client instance {instance} is not one of a client id your tenants own.")
    row = instance_row(found.name, {**info, "instance": instance})
    bootstrap = {"cluster": found.name, "instance": instance, "ws_path": WS_PATH,
                 "window_ms": TEL_BACKFILL_MS}
    context = {"cluster": found, "row": row, "bootstrap": bootstrap, "window_minutes": TEL_BACKFILL_MS // 60000}
    return page(request, "frontend/telemetry_instance.html", context)


@require_GET
@portal_page
def client_detail(request: HttpRequest, cluster: str, client_id: str) -> HttpResponse:
    found = _cluster(cluster)
    if not may_see_client(Visibility.of(request.user), client_id, found.name):
        raise Refused(403, f"The client id {client_id} is not one your tenants own.")
    client = monitor_redis()
    since = telemetry_store.now_ms() - TEL_BACKFILL_MS
    try:
        records = [r for r in telemetry_store.instances(found.name, client) if r.get("client_id") == client_id]
        backfill = telemetry_store.by_client(found.name, client_id, since, client)
    except (redis.RedisError, OSError, ValueError, KeyError) as e:
        raise Refused(503, f"The telemetry store could not be read ({e.__class__.__name__}).") from None
    rows = [instance_row(found.name, r) for r in records]
    rows.sort(key=lambda r: (r["terminated"], -r["last_push_ms"], r["instance"]))
    live = [r["instance"] for r in rows if not r["terminated"]][:MAX_LIVE]
    bootstrap = {"cluster": found.name, "client_id": client_id, "instances": live, "backfill": backfill,
                 "ws_path": WS_PATH, "window_ms": TEL_BACKFILL_MS}
    context = {
        "cluster": found,
        "client_id": client_id,
        "rows": rows,
        "instances_url": reverse("telemetry-cluster", args=[found.name]) + "?" + _query(client_id),
        "bootstrap": bootstrap,
        "window_minutes": TEL_BACKFILL_MS // 60000,
    }
    return page(request, "frontend/telemetry_client.html", context)
