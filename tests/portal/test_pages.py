"""The HTML pages and the ASGI/Celery wiring."""

import pytest
from django.test import Client


def test_home_page_renders_name_and_links(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Quota portal" in html
    assert 'href="/api/schema/swagger-ui/"' in html
    assert 'href="/healthz"' in html
    assert "frontend/portal.css" in html


def test_stylesheet_is_served_by_the_project(settings) -> None:
    # Under uvicorn nothing else serves static files; whitenoise must. Tests skip collectstatic,
    # so whitenoise looks files up with the staticfiles finders (a Client built now sees that).
    settings.WHITENOISE_USE_FINDERS = True
    response = Client().get("/static/frontend/portal.css")
    assert response.status_code == 200


@pytest.mark.django_db
def test_admin_login_page_renders(client: Client) -> None:
    assert client.get("/admin/login/").status_code == 200


def test_asgi_routes_http_and_websocket() -> None:
    from channels.routing import ProtocolTypeRouter

    from portal.asgi import application

    assert isinstance(application, ProtocolTypeRouter)
    assert set(application.application_mapping) == {"http", "websocket"}


def test_celery_uses_the_project_redis(settings) -> None:
    from portal.celery import app

    assert app.main == "portal"
    assert app.conf.broker_url == settings.CELERY_BROKER_URL == settings.QUOTAS_REDIS_URL
