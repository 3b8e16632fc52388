"""The portal's OTLP/HTTP metrics receiver: ``POST /v1/metrics`` (ASGI, one async view).

What sends to it: the portal's KIP-714 broker plugin (``broker-plugins/telemetry-exporter/``,
``PortalTelemetryExporter`` on every broker's ``metric.reporters``), which forwards each client push the broker
accepted, and any OTLP/HTTP sender such as an OpenTelemetry Collector's ``otlphttp`` exporter. Accepted points land
where the KIP-714 sink's do (``telemetry_ui.ingest.telemetry_store``: the cluster's Redis streams, its live-instances
hash and the landing area), so they show on ``/telemetry/<cluster>/`` and the instance pages.

Request (OTLP/HTTP 1.x): body = an ``ExportMetricsServiceRequest`` (a broker's OTLP ``MetricsData`` is the same
bytes), ``Content-Type: application/x-protobuf`` or ``application/json``, optionally ``Content-Encoding: gzip``.

- Cluster: the ``X-Quotas-Cluster`` header (the plugin's ``portal.telemetry.cluster``; a Collector sets it under
  ``headers:``), else ``settings.QUOTAS_OTLP_DEFAULT_CLUSTER``; it must be a portal cluster (404 otherwise).
- Client: per ``ResourceMetrics``; the plugin's headers apply to every resource of the request:
  ``X-Kafka-Client-Instance-Id`` (else the resource attribute ``client_instance_id``, else an id derived from the
  resource attributes), ``X-Kafka-Client-Id`` (else ``client_id``), ``X-Kafka-Principal`` (else ``principal``),
  ``X-Kafka-Client-Address``, ``X-Kafka-Client-Software-Name``/``-Version``, ``X-Kafka-Push-Interval-Ms`` and
  ``X-Kafka-Terminating``. Header values are percent-decoded (UTF-8).
- Authentication: when ``settings.QUOTAS_OTLP_TOKEN`` is set, ``Authorization: Bearer <token>`` is required
  (401 otherwise); when it is empty the receiver is open (loopback development and tests).

Answers, per the OTLP/HTTP specification, in the request's encoding:

- 200 with an ``ExportMetricsServiceResponse``: empty when every point was accepted, else ``partial_success``
  with ``rejected_data_points`` and ``error_message`` (points of a nameless metric, number points without a value,
  values that are not finite);
- 400 (``google.rpc.Status``, INVALID_ARGUMENT) for a body that does not decode, a bad gzip stream or no cluster;
  401 without the token; 404 for an unknown cluster; 413 when the body (``QUOTAS_OTLP_MAX_BYTES``, 4 MiB) or its
  decompressed form (``QUOTAS_OTLP_MAX_DECODED_BYTES``, 64 MiB) is too large; 415 for another content type or
  encoding;
- 429 (the memory limiter's queue is full) or 503 (its wait timed out), with ``Retry-After``: retryable. Every
  request holds permits of the KIP-714 sink's PIP-442 dual memory limiter (``telemetry_ui.ingest.sink.limiter``;
  DIRECT = its body, HEAP = an estimate of the decoded size) until it is stored.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import math
import time
from typing import Any
from urllib.parse import unquote

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from kip714 import compression
from kip714.errors import InvalidRecord, TelemetryTooLarge
from kip714.otlp import (
    INVALID_ARGUMENT,
    JSON,
    NOT_FOUND,
    PROTOBUF,
    RESOURCE_EXHAUSTED,
    UNAUTHENTICATED,
    UNAVAILABLE,
    ExportRequest,
    ResourcePoints,
    decode_export_request,
    export_response,
    status_body,
)
from memory_limiter.limiter import LimitType, Permit, PermitAcquireException, PermitAcquireQueueFullException
from telemetry_ui.clusters import check_cluster_name

from . import telemetry_store as store
from .sink import HEAP_FACTOR, limiter

H_CLUSTER = "X-Quotas-Cluster"
H_INSTANCE = "X-Kafka-Client-Instance-Id"
H_CLIENT_ID = "X-Kafka-Client-Id"
H_PRINCIPAL = "X-Kafka-Principal"
H_ADDRESS = "X-Kafka-Client-Address"
H_SOFTWARE_NAME = "X-Kafka-Client-Software-Name"
H_SOFTWARE_VERSION = "X-Kafka-Client-Software-Version"
H_INTERVAL = "X-Kafka-Push-Interval-Ms"
H_TERMINATING = "X-Kafka-Terminating"

#: Bodies up to this size are decoded on the event loop (a thread hop costs more than the decoding).
INLINE_DECODE_BYTES = 32 * 1024
#: Resource attributes that name the client, when the plugin's headers do not.
INSTANCE_ATTRS = ("client_instance_id", "kafka.client.instance.id")
CLIENT_ID_ATTRS = ("client_id", "kafka.client.id")

_clusters: dict[str, tuple[bool, float]] = {}


def _setting(name: str, default: Any) -> Any:
    return getattr(settings, name, default)


def _encoding(request: HttpRequest) -> str | None:
    content_type = (request.META.get("CONTENT_TYPE") or "").split(";", 1)[0].strip().lower()
    if content_type == PROTOBUF:
        return PROTOBUF
    if content_type == JSON:
        return JSON
    return None


def _answer(status: int, body: bytes, encoding: str, retry_after_s: int | None = None) -> HttpResponse:
    response = HttpResponse(body, status=status, content_type=encoding)
    if retry_after_s is not None:
        response["Retry-After"] = str(retry_after_s)
    return response


def _error(status: int, code: int, message: str, encoding: str = PROTOBUF, **kw: Any) -> HttpResponse:
    return _answer(status, status_body(code, message, encoding), encoding, **kw)


def reset() -> None:
    """Forget which clusters exist (tests)."""
    _clusters.clear()


def _cluster_exists(name: str) -> bool:
    from quotas.models import Cluster

    return Cluster.objects.filter(name=name).exists()


async def cluster_known(name: str) -> bool:
    """Whether the portal has cluster ``name``, looked up at most every ``QUOTAS_TELEMETRY_RELOAD_S`` per name."""
    found = _clusters.get(name)
    now = time.monotonic()
    if found is not None and now - found[1] < float(_setting("QUOTAS_TELEMETRY_RELOAD_S", 2.0)):
        return found[0]
    exists = await sync_to_async(_cluster_exists)(name)
    if len(_clusters) > 10_000:
        _clusters.clear()
    _clusters[name] = (exists, now)
    return exists


def _header(request: HttpRequest, name: str) -> str | None:
    value = request.headers.get(name)
    if value is None or value == "":
        return None
    return unquote(value) if "%" in value else value


def _first_attr(attrs: dict[str, Any], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = attrs.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def derived_instance_id(attrs: dict[str, Any]) -> str:
    """A stable id for a resource that names no client instance: base64url of 16 bytes of a hash of its attributes
    (the form of Kafka's ``Uuid``), so one sender's resource keeps one row."""
    digest = hashlib.sha256(json.dumps(attrs, sort_keys=True, default=str).encode()).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _decode(body: bytes, gzipped: bool, encoding: str, max_decoded: int) -> ExportRequest | BaseException:
    try:
        if gzipped:
            body = compression.decompress(compression.GZIP, body, max_decoded)
        return decode_export_request(body, encoding)
    except Exception as e:  # noqa: BLE001 - every failure is the request's answer
        return e


@csrf_exempt
async def export_metrics(request: HttpRequest) -> HttpResponse:
    """``POST /v1/metrics``: OTLP/HTTP metrics export (see the module's docstring)."""
    if request.method != "POST":
        response = _error(405, INVALID_ARGUMENT, "Only POST is allowed.", JSON)
        response["Allow"] = "POST"
        return response
    token = _setting("QUOTAS_OTLP_TOKEN", "") or ""
    if token:
        given = request.headers.get("Authorization", "")
        scheme, _, credential = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(credential.strip().encode(), token.encode()):
            response = _error(401, UNAUTHENTICATED, "A bearer token is required.", _encoding(request) or PROTOBUF)
            response["WWW-Authenticate"] = 'Bearer realm="otlp"'
            return response
    encoding = _encoding(request)
    if encoding is None:
        return _error(415, INVALID_ARGUMENT,
                      f"Content-Type must be {PROTOBUF} or {JSON}, not {request.META.get('CONTENT_TYPE')!r}.", JSON)
    content_encoding = (request.headers.get("Content-Encoding") or "identity").strip().lower()
    if content_encoding not in ("identity", "gzip"):
        return _error(415, INVALID_ARGUMENT, f"Content-Encoding {content_encoding!r} is not supported (gzip is).",
                      encoding)
    gzipped = content_encoding == "gzip"

    cluster = _header(request, H_CLUSTER) or _setting("QUOTAS_OTLP_DEFAULT_CLUSTER", "") or ""
    if not cluster:
        return _error(400, INVALID_ARGUMENT, f"Which cluster? Send the {H_CLUSTER} header.", encoding)
    if check_cluster_name(cluster):
        return _error(400, INVALID_ARGUMENT, str(check_cluster_name(cluster)), encoding)
    if not await cluster_known(cluster):
        return _error(404, NOT_FOUND, f"No cluster {cluster!r} in the portal.", encoding)

    max_bytes = int(_setting("QUOTAS_OTLP_MAX_BYTES", 4 * 1024 * 1024))
    max_decoded = int(_setting("QUOTAS_OTLP_MAX_DECODED_BYTES", 64 * 1024 * 1024))
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return _error(400, INVALID_ARGUMENT, "Content-Length must be an integer.", encoding)
    if length > max_bytes:
        return _error(413, RESOURCE_EXHAUSTED, f"The body is larger than {max_bytes} bytes.", encoding)
    body: bytes | None = None
    if not request.META.get("CONTENT_LENGTH"):  # chunked: its size is known once read (Django has received it)
        body = request.read(max_bytes + 1)
        if len(body) > max_bytes:
            return _error(413, RESOURCE_EXHAUSTED, f"The body is larger than {max_bytes} bytes.", encoding)
        length = len(body)

    lim = limiter()
    held: list[Permit] = []
    try:
        heap_estimate = min(max_decoded, max(length, 1) * HEAP_FACTOR * (8 if gzipped else 1))
        try:
            for size, kind in ((length, LimitType.DIRECT_MEMORY), (heap_estimate, LimitType.HEAP_MEMORY)):
                pool = lim.get_limiter(kind)
                n = min(size, pool.max_permits) if pool.max_permits > 0 else size
                held.append(await lim.acquire(n, kind))
        except PermitAcquireException as e:
            retry_s = max(1, math.ceil(int(_setting("QUOTAS_TELEMETRY_TIMEOUT_MS", 5000)) / 1000))
            full = isinstance(e, PermitAcquireQueueFullException)
            return _error(429 if full else 503, UNAVAILABLE,
                          f"The receiver has no memory for this request now ({type(e).__name__}); retry later.",
                          encoding, retry_after_s=retry_s)
        if body is None:
            body = request.read(max_bytes + 1)
            if len(body) > max_bytes:
                return _error(413, RESOURCE_EXHAUSTED, f"The body is larger than {max_bytes} bytes.", encoding)
        if len(body) <= INLINE_DECODE_BYTES and not gzipped:
            decoded = _decode(body, gzipped, encoding, max_decoded)
        else:
            decoded = await asyncio.to_thread(_decode, body, gzipped, encoding, max_decoded)
        if isinstance(decoded, TelemetryTooLarge):
            return _error(413, RESOURCE_EXHAUSTED, f"The body decompresses to more than {max_decoded} bytes.",
                          encoding)
        if isinstance(decoded, InvalidRecord):
            return _error(400, INVALID_ARGUMENT, decoded.message, encoding)
        if isinstance(decoded, BaseException):
            return _error(400, INVALID_ARGUMENT, f"The body could not be read: {decoded}", encoding)
        await _store(request, cluster, decoded)
        return _answer(200, export_response(decoded.rejected, decoded.message(), encoding), encoding)
    finally:
        for permit in held:
            lim.release(permit)


def _client_fields(request: HttpRequest, resource: ResourcePoints) -> dict[str, Any]:
    attrs = resource.attributes
    fields: dict[str, Any] = {
        "instance": _header(request, H_INSTANCE) or _first_attr(attrs, INSTANCE_ATTRS),
        "client_id": _header(request, H_CLIENT_ID) or _first_attr(attrs, CLIENT_ID_ATTRS),
        "principal": _header(request, H_PRINCIPAL) or _first_attr(attrs, ("principal",)),
        "source_address": _header(request, H_ADDRESS) or _first_attr(attrs, ("client_source_address",)),
        "software_name": _header(request, H_SOFTWARE_NAME) or _first_attr(attrs, ("client_software_name",)),
        "software_version": _header(request, H_SOFTWARE_VERSION) or _first_attr(attrs, ("client_software_version",)),
    }
    interval = request.headers.get(H_INTERVAL)
    if interval and interval.isdigit():
        fields["push_interval_ms"] = int(interval)
    if fields["instance"] is None:
        fields["instance"] = derived_instance_id(attrs)
    return fields


async def _store(request: HttpRequest, cluster: str, decoded: ExportRequest) -> None:
    """Each resource's points as one entry of the telemetry store, and its instance record updated."""
    terminating = (request.headers.get(H_TERMINATING) or "").strip().lower() == "true"
    client = store.async_client()
    t = store.now_ms()
    entries = []
    for resource in decoded.resources:
        fields = _client_fields(request, resource)
        instance = str(fields.pop("instance"))
        changes = {k: v for k, v in fields.items() if v is not None}
        changes.update(last_push_ms=t, pushes_inc=1, terminated=terminating)
        if resource.points:
            entry = store.make_entry(cluster, instance, fields.get("client_id"), resource.points, t)
            entries.append(entry)
            await store.store_entry(client, entry)
        await store.update_record(client, cluster, instance, **changes)
    if entries:
        await asyncio.to_thread(store.write_landing, entries)
