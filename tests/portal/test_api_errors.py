"""Every error under /api/ is JSON in the API's shape, whoever raises it (issue 20); the pages keep HTML."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.test import Client, RequestFactory
from rest_framework import exceptions
from rest_framework.test import APIClient

from portal import errors
from portal.api.users import CurrentUserView
from portal.errors import api_exception_handler as exception_handler
from quotas.models import Cluster
from tests.people import api, make_user

pytestmark = pytest.mark.django_db

ALTER = "/api/clusters/prod/client-quotas/alter"


def assert_api_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = json.loads(response.content)
    assert set(body) == {"code", "message", "details"} and body["code"] == code and body["message"]
    return body


@pytest.fixture
def admin() -> APIClient:
    Cluster.objects.create(name="prod")
    return api(make_user("root", staff=True))


def test_unknown_api_routes_are_json_404s_and_unknown_pages_html(admin: APIClient) -> None:
    for path in ("/api/no-such-thing/", "/api/clusters/prod/no-such-rpc", "/api/clusters/prod/client-quotas/"):
        body = assert_api_error(admin.get(path), 404, "NOT_FOUND")
        assert "/api/schema/" in body["message"]
    assert_api_error(APIClient().get("/api/nothing-here"), 404, "NOT_FOUND")  # before authentication
    page = Client().get("/no-such-page/")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")


def test_a_body_over_the_limit_is_a_json_413(admin: APIClient, settings: Any) -> None:
    five_mb = b"{\"entries\": [], \"pad\": \"" + b"x" * (5 * 1024 * 1024) + b"\"}"  # the 5 MB request
    body = assert_api_error(admin.post(ALTER, five_mb, content_type="application/json"), 413, "REQUEST_TOO_LARGE")
    assert body["details"] == {"limit_bytes": settings.DATA_UPLOAD_MAX_MEMORY_SIZE, "retriable": False}
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 1024 * 1024
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    for content_type in ("application/json", "application/x-www-form-urlencoded", "text/plain"):
        response = admin.post(ALTER, b"a" * 101, content_type=content_type)
        assert_api_error(response, 413, "REQUEST_TOO_LARGE")
    assert admin.post(ALTER, {"entries": []}, format="json").status_code == 200  # under it: as before


def test_a_body_found_too_large_while_parsing_is_413_too() -> None:
    """Django raises RequestDataTooBig lazily (multipart fields, request.body): DRF's handler and handler400 say 413."""
    response = exception_handler(RequestDataTooBig("too big"), {})
    assert response is not None and response.status_code == 413 and response.data["code"] == "REQUEST_TOO_LARGE"
    api_request = RequestFactory().post("/api/requests/")
    assert_api_error(errors.bad_request(api_request, RequestDataTooBig("x")), 413, "REQUEST_TOO_LARGE")
    page = errors.bad_request(RequestFactory().post("/login/"), RequestDataTooBig("x"))
    assert page.status_code == 413 and page["Content-Type"].startswith("text/html")


def test_an_oversized_form_on_a_page_is_an_html_413(settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = Client().post("/login/", {"username": "x" * 2000, "password": "y"})
    assert response.status_code == 413 and response["Content-Type"].startswith("text/html")


def test_requests_django_refuses_before_the_view_are_json_400s(admin: APIClient, settings: Any) -> None:
    assert_api_error(admin.get("/api/me/", HTTP_HOST="evil.example"), 400, "INVALID_REQUEST")  # DisallowedHost
    fields = "&".join(f"f{i}=1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    response = admin.post("/api/requests/", fields, content_type="application/x-www-form-urlencoded")
    assert_api_error(response, 400, "INVALID_REQUEST")  # TooManyFieldsSent
    assert_api_error(admin.post(ALTER, b"{not json", content_type="application/json"), 400, "INVALID_REQUEST")
    assert_api_error(admin.get("/api/me/", CONTENT_LENGTH="lots"), 400, "INVALID_REQUEST")
    page = Client().get("/login/", HTTP_HOST="evil.example")
    assert page.status_code == 400 and not page["Content-Type"].startswith("application/json")


def test_a_crash_under_the_api_is_a_json_500_without_details(monkeypatch: pytest.MonkeyPatch) -> None:
    user = make_user("crash")

    def boom(self: Any) -> Any:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(CurrentUserView, "get_object", boom)
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(user)
    body = assert_api_error(client.get("/api/me/"), 500, "UNKNOWN_SERVER_ERROR")
    assert "secret" not in body["message"]
    page = errors.server_error(RequestFactory().get("/entities/"))
    assert page.status_code == 500 and page["Content-Type"].startswith("text/html")


def test_methods_not_allowed_are_json(admin: APIClient) -> None:
    assert_api_error(admin.delete("/api/clusters/"), 405, "METHOD_NOT_ALLOWED")
    assert_api_error(admin.put(ALTER, {}, format="json"), 405, "METHOD_NOT_ALLOWED")

    def plain_view(request: HttpRequest) -> HttpResponse:
        return HttpResponseNotAllowed(["GET"])  # what @require_GET answers: HTML-less text

    response = errors.ApiErrorMiddleware(plain_view)(RequestFactory().post("/api/anything"))
    body = assert_api_error(response, 405, "METHOD_NOT_ALLOWED")
    assert response["Allow"] == "GET" and "POST" in body["message"]
    page = errors.ApiErrorMiddleware(plain_view)(RequestFactory().post("/entities/"))
    assert page.status_code == 405 and "json" not in page["Content-Type"]


def test_a_nul_character_in_the_path_or_query_is_a_json_400(admin: APIClient) -> None:
    """Found by the schema fuzz on PostgreSQL, which refuses NUL in any string: a list filtered by a value with one
    (``/api/requests/?tenant=%00``) was a 500 with a traceback."""
    for url in ("/api/requests/?tenant=a%00b", "/api/subscription-requests/?state=%00&cluster=",
                "/api/clusters/pr%00d/", "/api/requests/?page_size=1&x%00=1"):
        body = assert_api_error(admin.get(url), 400, "INVALID_REQUEST")
        assert "NUL" in body["message"]
    assert admin.get("/api/requests/?tenant=ab").status_code == 200  # without one: as before


def test_drf_refusals_are_said_in_words_with_their_codes(admin: APIClient) -> None:
    """What DRF itself refuses (405, a body that is not JSON, a media type, no credentials, a lookup, throttling) is
    a sentence saying what to send instead, never the framework's stock text (issue 29)."""
    body = assert_api_error(admin.delete("/api/clusters/"), 405, "METHOD_NOT_ALLOWED")
    assert body["message"] == "DELETE is not allowed on '/api/clusters/'; allowed: GET, POST, HEAD, OPTIONS."
    body = assert_api_error(admin.post(ALTER, b"{not json", content_type="application/json"), 400, "INVALID_REQUEST")
    assert body["message"].startswith("The body could not be read as JSON (Expecting property name")
    assert "send a JSON object with Content-Type: application/json" in body["message"]
    body = assert_api_error(admin.post(ALTER, b"x", content_type="text/plain"), 415, "UNSUPPORTED_MEDIA_TYPE")
    assert body["message"].startswith("A body of media type 'text/plain' is not read here; send JSON")
    body = assert_api_error(APIClient().get("/api/requests/"), 401, "NOT_AUTHENTICATED")
    assert "Authorization: Bearer <token>" in body["message"]
    body = assert_api_error(admin.get("/api/requests/", HTTP_ACCEPT="text/csv"), 406, "NOT_ACCEPTABLE")
    assert "Accept: application/json" in body["message"]
    for path, message in [
        ("/api/requests/999/", "No quota request with id 999 (or not one you may see); GET /api/requests/ lists them."),
        ("/api/tenants/nope/", "No tenant with name 'nope' (or not one you may see); GET /api/tenants/ lists them."),
        ("/api/clusters/nope/", "No cluster named 'nope'; GET /api/clusters/ lists them."),
        ("/api/webhooks/999/", "No webhook with id 999 (or not one you may see); GET /api/webhooks/ lists them."),
    ]:
        assert assert_api_error(admin.get(path), 404, "NOT_FOUND")["message"] == message, path
    throttled = exception_handler(exceptions.Throttled(wait=7), {})
    assert throttled is not None and throttled.status_code == 429 and throttled["Retry-After"] == "7"
    assert throttled.data == {"code": "THROTTLED", "message": "Too many requests; try again in 7 seconds.",
                              "details": None}


def test_an_unknown_name_in_a_body_names_the_list(admin: APIClient) -> None:
    """An unknown cluster or tenant in a body is INVALID_REQUEST at its field, saying where the names are listed."""
    body = {"tenant": "nope", "cluster": "nowhere", "user": "svc", "key": "producer_byte_rate", "value": 1}
    answer = assert_api_error(admin.post("/api/requests/", body, format="json"), 400, "INVALID_REQUEST")
    assert answer["details"] == {"tenant": ["No tenant named 'nope'; GET /api/tenants/ lists them."],
                                 "cluster": ["No cluster named 'nowhere'; GET /api/clusters/ lists them."]}
    assert "Object with" not in answer["message"]
    webhook = {"tenant": "nope", "url": "https://example.com/hook", "events": ["request.submitted"]}
    answer = assert_api_error(admin.post("/api/webhooks/", webhook, format="json"), 400, "INVALID_REQUEST")
    assert answer["details"]["tenant"] == ["No tenant named 'nope'; GET /api/tenants/ lists them."]
    answer = assert_api_error(admin.post("/api/tenants/", {"name": "t", "members": ["ghost"]}, format="json"), 400,
                              "INVALID_REQUEST")
    assert answer["details"]["members"][0].startswith("No account with the username 'ghost'")
