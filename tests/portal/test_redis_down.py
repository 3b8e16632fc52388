"""When the portal's Redis is down (issue 20): /healthz names it (503), the API answers typed 503 JSON errors, the
pages say so in words, what does not need Redis still works, and all of it comes back when Redis does.

A real redis-server of this test, stopped and started again on the same port; never a mock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.test import Client

from devtools.redis_server import RedisServer
from quotas.models import Broker, Cluster
from tests.people import make_user

pytestmark = pytest.mark.django_db


def _point_at(url: str) -> None:
    """The portal's Redis (settings, Celery, Channels) is ``url`` from now on; Celery's cached connections dropped."""
    from portal.celery import app
    from tests.services import point_portal_at

    point_portal_at(url)
    app._pool = None  # the next publish opens a pool (and producers) on the new URL
    app.amqp._producer_pool = None


@pytest.fixture
def down(redis_url: str, settings: Any) -> Iterator[RedisServer]:
    """A Redis of this test's own that the portal uses; the test stops and restarts it."""
    server = RedisServer(name="redis-down-test").start()
    _point_at(server.url)
    try:
        yield server
    finally:
        server.stop()
        _point_at(redis_url)


def _no_trace(response: Any) -> str:
    text = response.content.decode(errors="replace")
    assert "Traceback" not in text and "/work/" not in text and ".py" not in text, text[:500]
    return text


def test_redis_down_is_said_out_loud_and_survived(down: RedisServer) -> None:
    cluster = Cluster.objects.create(name="rd")
    Broker.objects.create(cluster=cluster, broker_id=1, host="127.0.0.1")
    admin = Client()
    admin.force_login(make_user("root", staff=True))
    rd = {"enforcement": "off", "cluster_wide_values": 0}
    assert admin.get("/healthz").json() == {"status": "ok", "database": "ok", "redis": "ok", "budgets": {"rd": rd}}

    down.stop()
    health = admin.get("/healthz")
    assert health.status_code == 503
    assert (health.json()["redis"], health.json()["database"]) == ("error", "ok")  # which one is down

    # the API: typed 503s with a sentence, never a 500 or a stack trace
    live = admin.get("/api/monitor/rd/recent/", {"entity": "svc-1:"})
    assert live.status_code == 503 and live.json()["code"] == "ENGINE_UNAVAILABLE", live.content
    _no_trace(live)
    heal = admin.post("/api/clusters/rd/reapply/", {"broker": 1}, content_type="application/json")
    assert heal.status_code == 503 and heal.json()["code"] == "BROKER_NOT_AVAILABLE", heal.content
    assert heal.json()["details"]["retriable"] is True and "try again" in heal.json()["message"]
    # what lives in the database still works: the change waits there for reconcile to push it
    body = {"entries": [{"entity": [{"entity_type": "user", "name": "svc-1"}],
                         "ops": [{"key": "producer_byte_rate", "value": 5000}]}]}
    changed = admin.post("/api/clusters/rd/client-quotas/alter", body, content_type="application/json")
    assert changed.status_code == 200 and changed.json()["version"] == 1, changed.content

    # the pages: words, not a 500
    monitor = admin.get("/monitor/")
    assert monitor.status_code == 200 and "Redis could not be read" in _no_trace(monitor).replace("&#x27;", "'")
    instance = admin.get("/telemetry/rd/instance/inst-1/")
    assert instance.status_code == 503 and "could not be read" in _no_trace(instance)

    down.start()  # the same port, as a restarted Redis comes back
    assert admin.get("/healthz").status_code == 200
    assert admin.get("/api/monitor/rd/recent/", {"entity": "svc-1:"}).status_code == 200
    assert admin.post("/api/clusters/rd/reapply/", {"broker": 1}, content_type="application/json").status_code == 202


def test_an_unforeseen_redis_error_is_a_typed_503_in_the_api_and_words_on_a_page(down: RedisServer) -> None:
    """The safety net under every view: a Redis connection error nobody caught (a real one, from the stopped
    server) is 503 REDIS_UNAVAILABLE with Retry-After in the API, and a readable 503 page."""
    from django.test import RequestFactory
    from rest_framework.views import APIView

    from frontend.pages import portal_page
    from portal.errors import api_exception_handler as exception_handler

    down.stop()
    try:
        redis.Redis.from_url(down.url, socket_connect_timeout=1).ping()
    except redis.exceptions.ConnectionError as e:
        error = e
    else:
        pytest.fail("the stopped Redis answered")
    response = exception_handler(error, {"view": APIView(), "request": None})
    assert response is not None and response.status_code == 503
    assert response.data["code"] == "REDIS_UNAVAILABLE" and response["Retry-After"] == "5"
    assert "try again" in response.data["message"] and response.data["details"]["retriable"] is True

    @portal_page
    def needs_redis(request: Any) -> Any:
        raise error

    request = RequestFactory().get("/somewhere/")
    request.user = make_user("amy")
    page = needs_redis(request)
    assert page.status_code == 503 and page["Retry-After"] == "5"
    text = _no_trace(page)
    assert "Redis cannot be reached right now" in text and "/healthz" in text
    assert json.dumps(response.data)  # the API's body is plain JSON
