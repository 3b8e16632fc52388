"""One error shape for the whole API: ``{"code", "message", "details"}``.

Codes follow Kafka's error names where Kafka has one (INVALID_REQUEST), so a client
branches on ``code`` the way a Kafka admin client branches on the error code; the
message says what to change.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

#: DRF exceptions -> the code a client sees. Unknown APIExceptions use their default_code, upper-cased.
_CODES: dict[type[exceptions.APIException], str] = {
    exceptions.ValidationError: "INVALID_REQUEST",
    exceptions.ParseError: "INVALID_REQUEST",  # a body that is not JSON is an invalid request too
    exceptions.NotAuthenticated: "NOT_AUTHENTICATED",
    exceptions.AuthenticationFailed: "AUTHENTICATION_FAILED",
    exceptions.PermissionDenied: "PERMISSION_DENIED",
    exceptions.NotFound: "NOT_FOUND",
    exceptions.MethodNotAllowed: "METHOD_NOT_ALLOWED",
    exceptions.NotAcceptable: "NOT_ACCEPTABLE",
    exceptions.UnsupportedMediaType: "UNSUPPORTED_MEDIA_TYPE",
    exceptions.Throttled: "THROTTLED",
}


class ApiError(exceptions.APIException):
    """An error with its code, message and details chosen by the view."""

    def __init__(self, code: str, message: str, details: Any = None, status_code: int = 400) -> None:
        super().__init__(detail=message, code=code)
        self.code = code
        self.message = message
        self.details = details
        self.status_code = status_code


class ResourceExhausted(ApiError):
    """503 RESOURCE_EXHAUSTED: the server is short of a bounded resource (list memory) right now.

    ``retry_after`` (seconds) becomes the ``Retry-After`` header through DRF's ``wait`` hook; it is
    left out when retrying the same request cannot help (e.g. a page larger than the whole pool).
    """

    def __init__(self, message: str, details: Any = None, retry_after: int | None = None) -> None:
        details = {**(details or {}), "retriable": retry_after is not None}
        super().__init__("RESOURCE_EXHAUSTED", message, details, status_code=status.HTTP_503_SERVICE_UNAVAILABLE)
        self.wait = retry_after


REDIS_RETRY_AFTER_S = 5


def redis_unavailable(what: str = "") -> ApiError:
    """503 REDIS_UNAVAILABLE: the portal's Redis (task queue, live data, engine) cannot be reached right now.

    Retriable (``Retry-After``); what is in the database is unaffected, and ``/healthz`` says when Redis is back.
    """
    message = (
        f"The portal's Redis cannot be reached right now{f' ({what})' if what else ''}, so this request could not "
        f"be completed; try again in a few seconds (GET /healthz shows when Redis is back)."
    )
    error = ApiError("REDIS_UNAVAILABLE", message, {"retriable": True, "dependency": "redis"}, status_code=503)
    error.wait = REDIS_RETRY_AFTER_S
    return error


def too_large() -> ApiError:
    """413 REQUEST_TOO_LARGE: a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE``, refused before it is read or parsed.

    Kafka names its size refusals ``*_TOO_LARGE`` (MESSAGE_TOO_LARGE, the sink's TELEMETRY_TOO_LARGE); not retriable.
    """
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    message = f"The request body is larger than {limit} bytes, the most the API accepts; send less."
    return ApiError("REQUEST_TOO_LARGE", message, {"limit_bytes": limit, "retriable": False}, status_code=413)


class ErrorSerializer(serializers.Serializer):
    """The body of every error response (for the schema)."""

    code = serializers.CharField(
        help_text="INVALID_REQUEST, INVALID_CONFIG, NOT_FOUND, PERMISSION_DENIED, NOT_AUTHENTICATED, CONFLICT, "
        "STALE_REQUEST and PLAN_STALE (409: the values a request was submitted against moved on), "
        "INVALID_GROUP (400) and GROUP_OVERLAP (409: another group matches the same clients), "
        "RESOURCE_EXHAUSTED (503, retry after Retry-After seconds), REDIS_UNAVAILABLE and DATABASE_UNAVAILABLE "
        "(503, retriable), "
        "REQUEST_TOO_LARGE (413), METHOD_NOT_ALLOWED, "
        "THROTTLED (429), UNKNOWN_SERVER_ERROR (500), ..."
    )
    message = serializers.CharField(help_text="What went wrong and what to change.")
    details = serializers.JSONField(allow_null=True, help_text="Per-field or per-entry errors, when there are any.")


_METHODS = ("get", "put", "post", "delete", "patch")


def document_error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular hook: each operation lists the errors any API call may answer, in the Error shape.

    Beyond the ones a view documents: 401 (every operation needs a token or a session), 403 (the role, or CSRF with
    a session), 400 for an operation with parameters or a body, 404 for one with a path parameter (no such name, or
    not one the caller may see), 413 and 415 for one with a body (too large, not JSON). Listed rather than left to a
    ``default`` response, so a status nobody documented still shows up (the schema fuzz test checks every answer).
    """
    if "Error" not in result.get("components", {}).get("schemas", {}):
        return result
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for path, item in result.get("paths", {}).items():
        for method, operation in item.items():
            if method not in _METHODS or not path.startswith("/api/"):
                continue
            parameters = [*item.get("parameters", []), *operation.get("parameters", [])]
            statuses = {"401": "Not authenticated.", "403": "Not allowed."}
            if parameters or "requestBody" in operation:
                statuses["400"] = "A bad parameter or body."
            if "{" in path:
                statuses["404"] = "No such object, or not one you may see."
            statuses["503"] = "A dependency is unreachable right now (REDIS_UNAVAILABLE & co.); retriable."
            if "requestBody" in operation:
                statuses["413"] = "The body is larger than the API accepts (REQUEST_TOO_LARGE)."
                statuses["415"] = "A body in a media type the operation does not read."
            responses = operation.setdefault("responses", {})
            for status_code, description in statuses.items():
                responses.setdefault(status_code, {"description": description, **error})
    return result


def _first_error(detail: Any, path: str = "") -> str:
    """The first leaf of a DRF error tree, prefixed with where it is (``entries.0.ops.1.key: ...``)."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = "" if key == "non_field_errors" else str(key)
            return _first_error(value, f"{path}.{name}" if path and name else path or name)
    if isinstance(detail, list):
        for i, value in enumerate(detail):
            if isinstance(value, dict | list):
                return _first_error(value, f"{path}.{i}" if path else str(i))
            return _first_error(value, path)
    return f"{path}: {detail}" if path else str(detail)


def _body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"code": code, "message": message, "details": details}


def unknown_name(noun: str, listed_at: str) -> dict[str, str]:
    """``error_messages`` of a ``SlugRelatedField`` naming an object: an unknown name is refused with a sentence
    that says where the names are listed, instead of DRF's ``Object with name=nope does not exist.``."""
    return {
        "does_not_exist": f"No {noun} named '{{value}}'; GET {listed_at} lists them.",
        "invalid": f"A {noun} is named by a string (GET {listed_at} lists them).",
    }


#: Django's own message of ``get_object_or_404`` (what DRF's ``get_object`` raises), which names a model class.
_DJANGO_NOT_FOUND = re.compile(r"No \w+ matches the given query\.")


def _not_found(exc: Http404, context: dict[str, Any]) -> exceptions.NotFound:
    """A lookup by URL that found nothing, said in words: what was looked for and what lists them.

    DRF's generic views raise Django's ``No QuotaRequest matches the given query.`` (or nothing at all for an id
    that is not a number); the view knows the model and the lookup, and the path without the lookup lists them.
    """
    message = str(exc.args[0]) if exc.args else ""
    view, request = context.get("view"), context.get("request")
    kwarg = getattr(view, "lookup_url_kwarg", None) or getattr(view, "lookup_field", None)
    value = (getattr(view, "kwargs", None) or {}).get(kwarg) if kwarg else None
    if value is None or request is None or (message and not _DJANGO_NOT_FOUND.fullmatch(message)):
        return exceptions.NotFound(message or "No such object here, or not one you may see.")
    model = getattr(getattr(view, "queryset", None), "model", None)
    if model is None:  # views that build their queryset per request name the model in their serializer
        model = getattr(getattr(getattr(view, "serializer_class", None), "Meta", None), "model", None)
    noun = str(model._meta.verbose_name) if model is not None else "object"
    key = "id" if view.lookup_field in ("pk", "id") else view.lookup_field
    shown = value if str(value).isdigit() else repr(value)
    path = request.path
    listed = path[: path.rfind(f"/{value}/") + 1] if f"/{value}/" in path else None
    where = f"; GET {listed} lists them" if listed else ""
    return exceptions.NotFound(f"No {noun} with {key} {shown} (or not one you may see){where}.")


def _in_words(exc: exceptions.APIException, context: dict[str, Any]) -> exceptions.APIException:
    """DRF's stock refusals (405, 406, 415, 429, a body that does not parse, a default 401/403/404) reworded: what
    was refused and what to send instead. Exceptions raised with a message of their own keep it."""
    request = context.get("request")
    method = getattr(request, "method", "")
    path = getattr(request, "path", "")
    if isinstance(exc, exceptions.MethodNotAllowed):
        view = context.get("view")
        allowed = ", ".join(getattr(view, "allowed_methods", []) or [])
        exc.detail = f"{method} is not allowed on {path!r}; allowed: {allowed}."
    elif isinstance(exc, exceptions.Throttled):
        wait = f"in {exc.wait:.0f} seconds" if exc.wait is not None else "later"
        exc.detail = f"Too many requests; try again {wait}."
    elif isinstance(exc, exceptions.UnsupportedMediaType):
        media = getattr(request, "content_type", "") or "(none)"
        exc.detail = f"A body of media type {media!r} is not read here; send JSON with Content-Type: application/json."
    elif isinstance(exc, exceptions.NotAcceptable):
        exc.detail = "This endpoint answers in JSON; send Accept: application/json, or no Accept header."
    elif isinstance(exc, exceptions.ParseError):
        why = str(exc.detail).split(" - ", 1)[-1]
        exc.detail = f"The body could not be read as JSON ({why}); send a JSON object with Content-Type: " \
            "application/json."
    elif str(exc.detail) == str(exc.default_detail):
        if isinstance(exc, exceptions.NotAuthenticated):
            exc.detail = ("Not signed in: send a personal access token (Authorization: Bearer <token>; POST "
                          "/api/tokens/ makes one) or call from a signed-in browser session.")
        elif isinstance(exc, exceptions.PermissionDenied):
            exc.detail = "Your account may not do this here; ask a portal admin if it should."
        elif isinstance(exc, exceptions.NotFound):
            exc.detail = "No such object here, or not one you may see."
    return exc


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler (status, WWW-Authenticate, Retry-After, rollback), re-shaped into the API's error body.

    Django's own 404, 403 and too-large body become DRF's; an ``ApiError`` keeps its code, anything else of DRF gets
    the code of ``_CODES``. The domain's errors are made ``ApiError`` first (``portal.errors.api_exception_handler``);
    anything else unhandled stays a 500 from Django.
    """
    if isinstance(exc, Http404):
        exc = _not_found(exc, context)
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
    elif isinstance(exc, RequestDataTooBig):  # raised lazily, when a parser reads the body
        exc = too_large()
    if isinstance(exc, exceptions.APIException) and not isinstance(exc, ApiError | exceptions.ValidationError):
        exc = _in_words(exc, context)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, ApiError):
        response.data = _body(exc.code, exc.message, exc.details)
    elif isinstance(exc, exceptions.ValidationError):
        response.data = _body("INVALID_REQUEST", _first_error(exc.detail), exc.detail)
    elif isinstance(exc, exceptions.APIException):
        code = next((c for cls, c in _CODES.items() if isinstance(exc, cls)), str(exc.default_code).upper())
        detail = exc.detail
        message = _first_error(detail) if isinstance(detail, dict | list) else str(detail)
        response.data = _body(code, message, detail if isinstance(detail, dict | list) else None)
    return response
