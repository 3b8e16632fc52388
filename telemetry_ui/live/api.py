"""Monitor API: an entity's samples without a WebSocket, and its minute rollups for the hour view.

- ``GET /api/monitor/<cluster>/recent/?entity=<tags>[&since_ms=]``: the entity's samples of every quota type
  (default: the last 5 minutes), oldest first: ``{"cluster", "entity", "display", "since_ms", "points": [sample,
  ...]}`` (``display``: the entity in words, as the pages name it, e.g. ``client-id 1 (any principal)`` for ``:1``)
  (the samples are the engine's, as in the WebSocket's ``backfill``).
- ``GET /api/monitor/<cluster>/history/?entity=<tags>&minutes=60``: the entity's minute rollups of every quota
  type over the last ``minutes`` (1..120, default 60), oldest first:
  ``{"cluster", "entity", "display", "minutes", "since_ms", "rollups": [{"t", "b", "q", "rate_avg", "rate_max",
  "thr_avg", "thr_max", "thr_frac", "tokens_min", "bound", "n"}, ...]}`` (``q`` added to each of the engine's rows;
  a row is one broker's minute, written when the minute is over).

The same rule as the WebSocket: admins and auditors read every entity, a tenant member the entities its tenants
own (403 ``PERMISSION_DENIED`` otherwise, and no connection samples). 404 ``NOT_FOUND`` for an unknown cluster,
400 ``INVALID_REQUEST`` for bad parameters, 503 ``ENGINE_UNAVAILABLE`` when Redis cannot be reached.
"""

from __future__ import annotations

from typing import Any

import redis
from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from engine.entities import display_tags
from engine.errors import EngineUnavailable
from engine.monitor import MINUTES_KEPT, minutes, recent
from portal.api.errors import ApiError, ErrorSerializer
from quotas.api.params import INT64_MAX, int_param
from quotas.api.views.base import get_cluster

from .monitoring import BACKFILL_MS, CLOCK_SLACK_MS, QUOTA_TYPES, Viewer, check_tags, load_viewer, now_ms, sort_points

ERRORS = {400: ErrorSerializer, 401: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer,
          503: ErrorSerializer}
CLUSTER = OpenApiParameter("cluster", OpenApiTypes.STR, OpenApiParameter.PATH, description="The cluster's name.")
ENTITY = OpenApiParameter(
    "entity", OpenApiTypes.STR, OpenApiParameter.QUERY, required=True,
    description="Sensor tags '<URL-encoded user>:<client-id>' ('alice:' = user alice's own quota).",
)

_clients: dict[str, redis.Redis] = {}


def _redis() -> redis.Redis:
    url = settings.QUOTAS_REDIS_URL
    client = _clients.get(url)
    if client is None:
        client = _clients[url] = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
    return client


def _int_param(request: Request, name: str, default: int, low: int, high: int | None = None) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError("INVALID_REQUEST", f"{name} must be a whole number, not {raw[:40]!r}.") from None
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ApiError("INVALID_REQUEST", f"{name} must be {bounds}.")
    return value


def _entity(request: Request, cluster: str) -> tuple[str, Viewer]:
    """The entity of the query (checked), and the caller's Viewer, once the caller may watch it."""
    get_cluster(cluster)  # 404 first: the cluster list is no secret
    tags = request.query_params.get("entity")
    problem = check_tags(tags)
    if problem:
        raise ApiError("INVALID_REQUEST", problem)
    assert tags is not None
    viewer = load_viewer(request.user)
    if not viewer.may_watch(tags, cluster):
        raise ApiError(
            "PERMISSION_DENIED", f"You may not watch {tags!r}: none of your tenants owns that user and client-id.",
            status_code=403,
        )
    return tags, viewer


def _unavailable(e: Exception) -> EngineUnavailable:
    return EngineUnavailable(f"Live data is unavailable right now (Redis: {e}); try again.")


class MonitorRecentView(APIView):
    """The last samples of one entity (every quota type, every broker)."""

    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        operation_id="monitor_recent",
        summary="An entity's recent samples (the last 5 minutes by default)",
        parameters=[CLUSTER, ENTITY, int_param("since_ms", 0, INT64_MAX, "Epoch ms; default 5 minutes ago.")],
        responses={200: OpenApiTypes.OBJECT, **ERRORS},
    )
    def get(self, request: Request, cluster: str) -> Response:
        tags, viewer = _entity(request, cluster)
        since = _int_param(request, "since_ms", now_ms() - BACKFILL_MS, 0, INT64_MAX)  # a Redis stream id's ms
        client = _redis()
        points: list[dict[str, Any]] = []
        try:
            for q in QUOTA_TYPES:
                if viewer.may_see_type(q):
                    rows = recent(client, cluster, q, tags, max(0, since - CLOCK_SLACK_MS))
                    points.extend(p for p in rows if p.get("t", 0) >= since)
        except (redis.RedisError, OSError) as e:
            raise _unavailable(e) from e
        return Response({"cluster": cluster, "entity": tags, "display": display_tags(tags), "since_ms": since,
                         "points": sort_points(points)})


class MonitorHistoryView(APIView):
    """Minute rollups of one entity: the hour view."""

    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        operation_id="monitor_history",
        summary="An entity's minute rollups over the last `minutes` (default 60)",
        parameters=[CLUSTER, ENTITY, int_param("minutes", 1, MINUTES_KEPT, f"1..{MINUTES_KEPT}, default 60.")],
        responses={200: OpenApiTypes.OBJECT, **ERRORS},
    )
    def get(self, request: Request, cluster: str) -> Response:
        tags, viewer = _entity(request, cluster)
        span = _int_param(request, "minutes", 60, 1, MINUTES_KEPT)
        now = now_ms()
        since = now - now % 60_000 - span * 60_000  # the last `span` whole minutes (the current one is not written yet)
        client = _redis()
        rows: list[dict[str, Any]] = []
        try:
            for q in QUOTA_TYPES:
                if viewer.may_see_type(q):
                    rows.extend({**r, "q": q} for r in minutes(client, cluster, q, tags, since))
        except (redis.RedisError, OSError) as e:
            raise _unavailable(e) from e
        return Response({"cluster": cluster, "entity": tags, "display": display_tags(tags), "minutes": span,
                         "since_ms": since, "rollups": sort_points(rows)})
