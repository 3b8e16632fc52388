"""/healthz really contacts the database and Redis."""

import pytest
from django.test import Client

from devtools.redis_server import free_port


@pytest.mark.django_db
def test_healthz_ok_against_real_redis(client: Client, redis_url: str) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"status": "ok", "database": "ok", "redis": "ok", "budgets": {}}


@pytest.mark.django_db
def test_healthz_503_when_redis_unreachable(client: Client, settings) -> None:
    settings.QUOTAS_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "error"
    assert body["database"] == "ok"
    assert body["redis"] == "error"
    assert "ConnectionError" in body["errors"]["redis"]


def test_healthz_rejects_post(client: Client) -> None:
    assert client.post("/healthz").status_code == 405
