"""Project-level views: the health check that scripts, Docker and load balancers poll."""

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET


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


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Report whether the portal can reach its database and Redis.

    Both are really contacted (not just configured), because a portal that
    cannot reach Redis cannot queue pushes or stream samples: that is 503.
    """
    checks = {"database": _check_database(), "redis": _check_redis()}
    errors = {name: message for name, message in checks.items() if message is not None}
    body: dict[str, object] = {
        "status": "error" if errors else "ok",
        **{name: "error" if message else "ok" for name, message in checks.items()},
    }
    if errors:
        body["errors"] = errors
    return JsonResponse(body, status=503 if errors else 200)
