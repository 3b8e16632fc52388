"""API access rules and the OpenAPI schema."""

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from drf_spectacular.validation import validate_schema
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient


def test_schema_is_valid_openapi(client: Client) -> None:
    response = client.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    schema = response.json()
    validate_schema(schema)  # raises on an invalid OpenAPI 3 document
    assert schema["openapi"].startswith("3.")
    assert "/api/me/" in schema["paths"]
    assert "tokenAuth" in schema["components"]["securitySchemes"]


def test_schema_generates_without_warnings(tmp_path) -> None:
    # Every endpoint must be described well enough for drf-spectacular (no guessing).
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))


def test_swagger_ui_is_served_locally(settings) -> None:
    settings.WHITENOISE_USE_FINDERS = True  # no collectstatic in tests (see test_pages)
    client = Client()
    response = client.get("/api/schema/swagger-ui/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in html
    assert client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js").status_code == 200


@pytest.mark.django_db
def test_api_refuses_anonymous_caller() -> None:
    response = APIClient().get("/api/me/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Token")


@pytest.mark.django_db
def test_api_refuses_bad_token() -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert client.get("/api/me/").status_code == 401


@pytest.mark.django_db
def test_api_accepts_token() -> None:
    user = get_user_model().objects.create_user("alice")  # a token, no password
    token = Token.objects.create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    response = client.get("/api/me/")
    assert response.status_code == 200
    assert response.json() == {"id": user.id, "username": "alice", "is_staff": False}
