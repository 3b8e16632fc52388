"""Project-level views: the health check that scripts, Docker and load balancers poll."""

import logging

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from quotas.budgets import enforcements

log = logging.getLogger(__name__)


def _check_database() -> str | None:
    """Run a trivial query; return an error message, or None when the database answers."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error means "down"; report it, don't raise
        return f"{type(exc).__name__}: {exc}"
    return None


def _check_redis() -> str | None:
    """PING the project's Redis with short timeouts; return an error message, or None when it answers."""
    try:
        with redis.Redis.from_url(settings.QUOTAS_REDIS_URL, socket_connect_timeout=1.0, socket_timeout=1.0) as client:
            client.ping()
    except Exception as exc:  # connection refused, timeout, auth error...
        return f"{type(exc).__name__}: {exc}"
    return None


def _budget_enforcement() -> tuple[dict[str, object], dict[str, str]]:
    """Per cluster that can hold budgets, whether its cluster-wide budgets are enforced (``quotas.budgets``), and the
    degraded ones with why. Never raises: a health check reports, it does not fail on what it reports."""
    try:
        found = enforcements()
    except Exception as exc:  # the database is down: the database check says so
        log.warning("healthz could not read the budget enforcement: %s", exc)
        return {}, {}
    states = {e.cluster: {"enforcement": e.state, "cluster_wide_values": e.budgets} for e in found}
    degraded = {f"budgets.{e.cluster}": e.reason for e in found if e.degraded}
    return states, degraded


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Report whether the portal can reach its database and Redis, and whether each cluster's budgets are enforced.

    Both are really contacted (not just configured), because a portal that
    cannot reach Redis cannot queue pushes or stream samples: that is 503.
    ``budgets`` has each cluster's budget enforcement (``coordinated``, ``fallback``, ``off``, ``unknown``) and how
    many of its values are cluster-wide; a cluster whose budgets are not shared out by demand (a broker on its
    fallback, or no plugin while it holds cluster-wide values) makes the status ``degraded``, with the reason under
    ``degraded``: still 200, the portal itself works.
    """
    checks = {"database": _check_database(), "redis": _check_redis()}
    errors = {name: message for name, message in checks.items() if message is not None}
    budgets, degraded = _budget_enforcement() if checks["database"] is None else ({}, {})
    status = "error" if errors else "degraded" if degraded else "ok"
    body: dict[str, object] = {
        "status": status,
        **{name: "error" if message else "ok" for name, message in checks.items()},
        "budgets": budgets,
    }
    if errors:
        body["errors"] = errors
    if degraded:
        body["degraded"] = degraded
    return JsonResponse(body, status=503 if errors else 200)
