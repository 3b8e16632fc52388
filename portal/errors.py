"""Errors under ``/api/`` are JSON, whoever raises them; the pages keep Django's HTML.

DRF shapes the errors of its own views (``api_exception_handler`` below, then ``portal.api.errors``). What happens
outside them is Django's: an unknown route (404), a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (``RequestDataTooBig``,
raised lazily when the body is read), an unparseable request (``SuspiciousOperation``, 400), a crash (500), a plain
view's 405. The handlers below
(``handler400`` ... in ``portal/urls.py``) answer those in the API's shape for API paths, and
``ApiErrorMiddleware`` refuses an announced oversized body before anything reads it and re-shapes any other error
response under ``/api/`` that is not JSON yet, so a client never has to parse an HTML page.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import status
from rest_framework.response import Response

from engine.errors import EngineUnavailable, QuotaEngineError
from portal.api import errors as api_errors
from portal.api.errors import ApiError, redis_unavailable, too_large
from quotas.models.groups import GroupOverlap, InvalidGroup
from quotas.outages import REDIS_DOWN
from quotas.workflow.errors import WorkflowError

API_PREFIX = "/api/"
#: The database refusing or dropping connections (a restart, a failover): retriable, unlike a bug.
DATABASE_DOWN = (OperationalError, InterfaceError)
DATABASE_RETRY_AFTER_S = 5

#: HTTP status -> the API's code for errors that reach no DRF view (Kafka's names where Kafka has one).
STATUS_CODES = {
    400: "INVALID_REQUEST",
    401: "NOT_AUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    406: "NOT_ACCEPTABLE",
    413: "REQUEST_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    429: "THROTTLED",
    500: "UNKNOWN_SERVER_ERROR",
    503: "UNAVAILABLE",
}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's exception handler (``EXCEPTION_HANDLER``): the domain's errors made ``ApiError``, then the API's shape.

    The engine's typed errors (QuotaValidationError & co.) keep their Kafka code: 400, or 503
    when Redis is unreachable. A refused group keeps its code too: INVALID_GROUP 400, GROUP_OVERLAP 409 (another
    group matches the same clients: a conflict with what exists). The workflow's refusals keep theirs
    (INVALID_REQUEST 400, PERMISSION_DENIED 403, CONFLICT 409). Both have ``details`` naming the field to change
    when one is to blame (``{"principals": ["..."]}``).
    Everything else is ``portal.api.errors.exception_handler``'s.
    """
    if isinstance(exc, InvalidGroup):
        http = status.HTTP_409_CONFLICT if isinstance(exc, GroupOverlap) else status.HTTP_400_BAD_REQUEST
        exc = ApiError(exc.code, exc.message, {exc.field: [exc.message]} if exc.field else None, status_code=http)
    elif isinstance(exc, QuotaEngineError):
        http = status.HTTP_503_SERVICE_UNAVAILABLE if isinstance(exc, EngineUnavailable) else 400
        exc = ApiError(exc.code, exc.message, status_code=http)
    elif isinstance(exc, REDIS_DOWN):
        exc = redis_unavailable()
    elif isinstance(exc, WorkflowError):
        details = exc.details if exc.details is not None else {exc.field: [exc.message]} if exc.field else None
        exc = ApiError(exc.code, exc.message, details, status_code=exc.status)
    return api_errors.exception_handler(exc, context)


def is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX)


def api_error(code: str, message: str, status: int, details: Any = None) -> JsonResponse:
    """The API's error body (``portal.api.errors``): ``{"code", "message", "details"}``."""
    return JsonResponse({"code": code, "message": message, "details": details}, status=status)


def _too_large_response() -> JsonResponse:
    error = too_large()
    return api_error(error.code, error.message, error.status_code, error.details)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """400 (413 for a body over the limit): JSON under /api/, Django's page elsewhere."""
    if isinstance(exception, RequestDataTooBig):
        if is_api(request):
            return _too_large_response()
        response = defaults.bad_request(request, exception)
        response.status_code = 413
        return response
    if is_api(request):
        message = "The request could not be read (malformed or refused headers or body)."
        return api_error("INVALID_REQUEST", message, 400)
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if is_api(request):
        return api_error("PERMISSION_DENIED", str(exception or "") or "You may not do this.", 403)
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if is_api(request):
        message = f"No API endpoint at {request.path!r}; GET /api/schema/ lists them (/api/schema/swagger-ui/)."
        return api_error("NOT_FOUND", message, 404)
    return defaults.page_not_found(request, exception)


def database_unavailable(request: HttpRequest) -> HttpResponse:
    """503 DATABASE_UNAVAILABLE (a page: Django's error page, status 503), with Retry-After: the database refused or
    dropped the connection (a restart, a failover); the transaction rolled back, so the same request can be sent
    again as it is."""
    if is_api(request):
        response: HttpResponse = api_error(
            "DATABASE_UNAVAILABLE",
            "The portal's database cannot be reached right now, so nothing was changed; "
            f"try again in {DATABASE_RETRY_AFTER_S} seconds (GET /healthz shows when it is back).",
            503,
            {"retriable": True, "dependency": "database"},
        )
    else:
        response = defaults.server_error(request)
        response.status_code = 503
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_S)
    return response


def server_error(request: HttpRequest) -> HttpResponse:
    """500: the details are in the server's log (django.request), never in the answer. Under WSGI Django calls this
    inside its except block, so a database that is down is told apart here too (``database_unavailable``)."""
    if isinstance(sys.exc_info()[1], DATABASE_DOWN):
        return database_unavailable(request)
    if is_api(request):
        return api_error("UNKNOWN_SERVER_ERROR", "The server failed to answer this request; it is logged.", 500)
    return defaults.server_error(request)


def _is_json(response: HttpResponse) -> bool:
    return "json" in response.get("Content-Type", "").split(";")[0]


class ApiErrorMiddleware:
    """Under /api/: a body announced larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is 413 before anything reads it (DRF's
    parsers read the stream, which Django's own check does not guard), a NUL character in the path or query is 400
    (bodies go through DRF's fields, which refuse it), and an error response that is not JSON (a plain view's 405, a
    handler's HTML) is re-shaped into the API's error body."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not is_api(request):
            return self.get_response(request)
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return api_error("INVALID_REQUEST", "Content-Length must be a whole number of bytes.", 400)
        if limit is not None and length > limit:
            return _too_large_response()
        if "\x00" in request.path or any("\x00" in k + "".join(v) for k, v in request.GET.lists()):
            # PostgreSQL refuses NUL in any string (a filter or lookup with one was a 500); no name holds one
            return api_error("INVALID_REQUEST", "The path and query parameters may not contain NUL (\\x00) "
                             "characters.", 400)
        response = self.get_response(request)
        if response.status_code >= 400 and not _is_json(response) and not getattr(response, "streaming", False):
            return self._as_json(request, response)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """A view that found the database down answers 503 DATABASE_UNAVAILABLE, on pages too (under ASGI the 500
        handler runs in another thread and cannot see the exception)."""
        return database_unavailable(request) if isinstance(exception, DATABASE_DOWN) else None

    @staticmethod
    def _as_json(request: HttpRequest, response: HttpResponse) -> HttpResponse:
        status = response.status_code
        code = STATUS_CODES.get(status, "INVALID_REQUEST" if status < 500 else "UNKNOWN_SERVER_ERROR")
        if status == 405:
            message = f"{request.method} is not allowed on {request.path!r}; allowed: {response.get('Allow', '')}."
        else:
            try:
                message = f"{HTTPStatus(status).phrase}."
            except ValueError:
                message = f"HTTP {status}."
        converted = api_error(code, message, status)
        for header in ("Allow", "Retry-After", "WWW-Authenticate"):
            if response.has_header(header):
                converted[header] = response[header]
        return converted
