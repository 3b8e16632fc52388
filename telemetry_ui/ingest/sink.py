"""The KIP-714 telemetry sink: a broker's GetTelemetrySubscriptions and PushTelemetry over HTTP (ASGI, async views).

Each process keeps one :class:`kip714.manager.ClientMetricsManager` per cluster, its subscriptions
loaded from the cluster's ``ClientMetricsSubscription`` rows and reloaded when the cluster's
``DesiredStateVersion`` moves (checked at most every ``QUOTAS_TELEMETRY_RELOAD_S``; only subscriptions whose
configs changed are re-applied, so the other clients keep their ids and timestamps). The manager is not
thread-safe: it is only touched on the event loop, between awaits.

Wire format (JSON answers; ``error_code`` is Kafka's error name, ``NONE`` when accepted):

``POST /telemetry/v1/<cluster>/get-subscriptions``, body JSON ``{"client_instance_id": base64url UUID (absent,
null or "AAAAAAAAAAAAAAAAAAAAAA" = assign one), "client_id", "client_software_name", "client_software_version"}``
-> ``{"error_code", "throttle_time_ms", "retry_after_ms", "client_instance_id", "subscription_id",
"accepted_compression_types": ["zstd", "lz4", "gzip", "snappy"], "push_interval_ms", "telemetry_max_bytes",
"delta_temporality", "requested_metrics": [...]}`` (+ ``"message"`` with an error).

``POST /telemetry/v1/<cluster>/push``, body = the raw (compressed) OTLP ``MetricsData`` bytes
(``Content-Type: application/x-protobuf``), the request fields as headers:
``Kafka-Client-Instance-Id`` (required), ``Kafka-Subscription-Id`` (int32, required),
``Kafka-Compression-Type`` (``none|gzip|snappy|lz4|zstd`` or Kafka's id 0..4; default ``none``),
``Kafka-Terminating`` (``true|false``, default false), and optionally ``Kafka-Client-Id``,
``Kafka-Client-Software-Name``, ``Kafka-Client-Software-Version`` (used when the sink does not know the
instance yet, e.g. after a restart) -> ``{"error_code", "throttle_time_ms", "retry_after_ms"}`` (+ ``"message"``).

HTTP status: 200 for every Kafka answer (errors included); 400 ``INVALID_REQUEST`` for a request that is not of
this format (bad JSON, missing or malformed headers); 404 ``RESOURCE_NOT_FOUND`` for an unknown cluster; 503
``THROTTLING_QUOTA_EXCEEDED`` (retriable, with ``retry_after_ms`` and ``Retry-After``) when the push memory limiter
has no room (queue full, or the wait timed out): such a push never reached the manager, so it consumed neither
the client's push slot nor its subscription; the client retries it after ``retry_after_ms``.

Memory: a push first holds permits of a process-wide PIP-442 ``AsyncDualMemoryLimiter`` (DIRECT = its raw bytes,
HEAP = an estimate of the decoded size, ``HEAP_FACTOR`` x raw, at most the decompression bound), before its body is
read into memory, and keeps them until it is stored. A push whose ``Content-Length`` exceeds telemetry.max.bytes is
answered (TELEMETRY_TOO_LARGE, after the manager's earlier checks) without reading its body. The payload is
decompressed (bounded) and decoded in a worker thread before the manager sees the push; a payload that does not
decode fails the push through the manager's exporter (INVALID_RECORD, counted as a plugin error and in the
instance's ``errors``), and nothing is stored. Accepted pushes go to ``telemetry_ui.ingest.telemetry_store``.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from kip714 import compression
from kip714.manager import (
    INVALID_REQUEST,
    NONE,
    THROTTLING_QUOTA_EXCEEDED,
    ClientMetricsManager,
    RequestContext,
)
from kip714.otlp import MetricPoint, decode_metrics
from memory_limiter.limiter import (
    AsyncDualMemoryLimiter,
    LimitType,
    Permit,
    PermitAcquireException,
    SemaphoreConfig,
)
from telemetry_ui.clusters import check_cluster_name

from . import telemetry_store as store

RESOURCE_NOT_FOUND = "RESOURCE_NOT_FOUND"
#: HEAP permits of a push: its raw size times this (protobuf objects and points outweigh the bytes)
HEAP_FACTOR = 8
#: A payload may decompress to at most telemetry.max.bytes times this
DECOMPRESS_FACTOR = 64

H_INSTANCE = "Kafka-Client-Instance-Id"
H_SUBSCRIPTION = "Kafka-Subscription-Id"
H_COMPRESSION = "Kafka-Compression-Type"
H_TERMINATING = "Kafka-Terminating"
H_CLIENT_ID = "Kafka-Client-Id"
H_SOFTWARE_NAME = "Kafka-Client-Software-Name"
H_SOFTWARE_VERSION = "Kafka-Client-Software-Version"


def now_ms() -> int:
    return int(time.time() * 1000)


# ------------------------------------------------------------------ per-process state


@dataclass
class ClusterSink:
    """One cluster's manager and what of the database it reflects."""

    manager: ClientMetricsManager
    version: int | None = None
    applied: dict[str, dict[str, str]] = field(default_factory=dict)
    checked: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class _Exporter:
    """The manager's exporter: the payload was decoded before the manager ran; hand over the outcome."""

    def __init__(self) -> None:
        self.outcome: list[MetricPoint] | BaseException | None = None
        self.points: list[MetricPoint] | None = None

    def __call__(self, context: Any, instance: Any, compression_type: int, payload: Any, max_bytes: int) -> None:
        outcome, self.outcome = self.outcome, None
        if isinstance(outcome, BaseException):
            raise outcome
        self.points = outcome or []


class _Oversize:
    """Stands for a body too large to read: the manager only asks its length (and answers TELEMETRY_TOO_LARGE)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __bool__(self) -> bool:
        return True


_sinks: dict[str, ClusterSink] = {}
_limiters: dict[Any, tuple[tuple[int, int, int, int], AsyncDualMemoryLimiter]] = {}


def limiter() -> AsyncDualMemoryLimiter:
    """The push limiter of this event loop, rebuilt when its settings change."""
    wanted = (
        int(settings.QUOTAS_TELEMETRY_HEAP_BYTES),
        int(settings.QUOTAS_TELEMETRY_DIRECT_BYTES),
        int(settings.QUOTAS_TELEMETRY_QUEUE_SIZE),
        int(settings.QUOTAS_TELEMETRY_TIMEOUT_MS),
    )
    loop = asyncio.get_running_loop()
    found = _limiters.get(loop)
    if found is None or found[0] != wanted:
        heap, direct, queue, timeout = wanted
        found = _limiters[loop] = (
            wanted,
            AsyncDualMemoryLimiter(
                heap=SemaphoreConfig(heap, queue, timeout), direct=SemaphoreConfig(direct, queue, timeout)
            ),
        )
    return found[1]


def _cluster_version(cluster: str) -> int | None:
    """The cluster's desired-state version, None when there is no such cluster."""
    from quotas.models import Cluster
    from quotas.models.pushes import DesiredStateVersion

    row = DesiredStateVersion.objects.filter(cluster__name=cluster).values_list("version", flat=True).first()
    if row is not None:
        return int(row)
    return 0 if Cluster.objects.filter(name=cluster).exists() else None


def _subscriptions(cluster: str) -> dict[str, dict[str, str]]:
    from quotas.models.client_metrics import ClientMetricsSubscription

    return {s.name: s.configs for s in ClientMetricsSubscription.objects.filter(cluster__name=cluster)}


def _apply(sink: ClusterSink, wanted: dict[str, dict[str, str]]) -> None:
    """Bring the manager to ``wanted``, touching only the subscriptions that changed."""
    for name in list(sink.applied):
        if name not in wanted:
            sink.manager.update_subscription(name, {})
            del sink.applied[name]
    for name, configs in wanted.items():
        if sink.applied.get(name) != configs:
            sink.manager.update_subscription(name, configs)
            sink.applied[name] = dict(configs)


async def cluster_sink(cluster: str) -> ClusterSink | None:
    """The cluster's sink with its subscriptions current (to ``QUOTAS_TELEMETRY_RELOAD_S``); None = no cluster."""
    sink = _sinks.get(cluster)
    reload_s = float(settings.QUOTAS_TELEMETRY_RELOAD_S)
    if sink is not None and time.monotonic() - sink.checked < reload_s:
        return sink
    if sink is None:
        sink = ClusterSink(ClientMetricsManager(telemetry_max_bytes=int(settings.QUOTAS_TELEMETRY_MAX_BYTES)))
    async with sink.lock:
        if sink.checked and time.monotonic() - sink.checked < reload_s:
            return _sinks.get(cluster)
        version = await sync_to_async(_cluster_version)(cluster)
        if version is None:
            _sinks.pop(cluster, None)
            return None
        if version != sink.version:
            wanted = await sync_to_async(_subscriptions)(cluster)
            _apply(sink, wanted)
            sink.version = version
        sink.checked = time.monotonic()
        _sinks.setdefault(cluster, sink)
        return _sinks[cluster]


def reset() -> None:
    """Forget every manager and limiter (tests)."""
    _sinks.clear()
    _limiters.clear()


# ------------------------------------------------------------------ helpers


def _answer(status: int = 200, **body: Any) -> JsonResponse:
    body.setdefault("throttle_time_ms", 0)
    body.setdefault("retry_after_ms", 0)
    if body.get("message") is None:
        body.pop("message", None)
    response = JsonResponse(body, status=status)
    if status == 503:
        response["Retry-After"] = str(max(1, math.ceil(body["retry_after_ms"] / 1000)))
    return response


def _bad(message: str) -> JsonResponse:
    return _answer(400, error_code=INVALID_REQUEST, message=message)


def _source(request: HttpRequest) -> tuple[str | None, int | None]:
    client = getattr(request, "scope", {}).get("client") or (request.META.get("REMOTE_ADDR"), None)
    host, port = client[0], client[1]
    return host, (int(port) if port is not None else None)


def _compression_id(value: str | None) -> int:
    """Kafka's id of a compression name or id; -1 (unknown: UNSUPPORTED_COMPRESSION_TYPE) for anything else."""
    if value is None or value == "":
        return compression.NONE
    text = value.strip().lower()
    if text in compression.IDS:
        return compression.IDS[text]
    try:
        return int(text)
    except ValueError:
        return -1


def _opt_str(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{key!r} must be a string")
    return value


def _decode(type_id: int, body: bytes, limit: int) -> list[MetricPoint] | BaseException:
    try:
        return decode_metrics(compression.decompress(type_id, body, limit))
    except Exception as e:  # noqa: BLE001 - every failure is the push's INVALID_RECORD / TELEMETRY_TOO_LARGE
        return e


# ------------------------------------------------------------------ views


@csrf_exempt
@require_POST
async def get_subscriptions(request: HttpRequest, cluster: str) -> JsonResponse:
    """GetTelemetrySubscriptions.

    Request body (JSON): ``{"client_instance_id": "<base64url UUID>" | null | "AAAAAAAAAAAAAAAAAAAAAA",
    "client_id": str, "client_software_name": str, "client_software_version": str}`` (all optional; the zero
    UUID or none asks for an id to be assigned). The source address and port are the connection's.

    Answer: ``{"error_code": "NONE" | "THROTTLING_QUOTA_EXCEEDED" | "INVALID_REQUEST", "throttle_time_ms": 0,
    "retry_after_ms", "client_instance_id", "subscription_id", "accepted_compression_types": [names],
    "push_interval_ms", "telemetry_max_bytes", "delta_temporality": true, "requested_metrics": [prefixes]}``.
    """
    if check_cluster_name(cluster):
        return _answer(404, error_code=RESOURCE_NOT_FOUND, message=check_cluster_name(cluster))
    try:
        data = json.loads(request.body or b"{}")
        if not isinstance(data, dict):
            raise ValueError("the body must be a JSON object")
        cid = _opt_str(data, "client_instance_id")
        keys = ("client_id", "client_software_name", "client_software_version")
        context_fields = {k: _opt_str(data, k) for k in keys}
    except ValueError as e:
        return _bad(f"Not a GetTelemetrySubscriptions request: {e}")
    sink = await cluster_sink(cluster)
    if sink is None:
        return _answer(404, error_code=RESOURCE_NOT_FOUND, message=f"No cluster {cluster!r}.")
    address, port = _source(request)
    context = RequestContext(
        client_id=context_fields["client_id"],
        software_name=context_fields["client_software_name"],
        software_version=context_fields["client_software_version"],
        source_address=address,
        source_port=port,
        connection_id=f"{address}:{port}",
    )
    t = now_ms()
    r = sink.manager.get_telemetry_subscriptions(cid or None, context, t)
    if r.client_instance_id is not None:
        changes: dict[str, Any] = {
            "client_id": context.client_id,
            "software_name": context.software_name,
            "software_version": context.software_version,
            "source_address": address,
        }
        if r.error == NONE:
            changes.update(
                subscription_id=r.subscription_id, push_interval_ms=r.push_interval_ms,
                metrics=r.requested_metrics, last_get_ms=t, terminated=False,
            )
        else:
            changes.update(errors_inc=1, last_error=r.error)
        await store.update_record(store.async_client(), cluster, r.client_instance_id, **changes)
    return _answer(
        error_code=r.error,
        throttle_time_ms=r.throttle_time_ms,
        retry_after_ms=r.retry_after_ms,
        client_instance_id=r.client_instance_id,
        subscription_id=r.subscription_id,
        accepted_compression_types=[compression.NAMES[i] for i in r.accepted_compression_types],
        push_interval_ms=r.push_interval_ms,
        telemetry_max_bytes=r.telemetry_max_bytes,
        delta_temporality=r.delta_temporality,
        requested_metrics=r.requested_metrics,
        message=r.message,
    )


@csrf_exempt
@require_POST
async def push(request: HttpRequest, cluster: str) -> JsonResponse:
    """PushTelemetry.

    Request: body = the OTLP ``MetricsData`` bytes, compressed as ``Kafka-Compression-Type`` says
    (``none|gzip|snappy|lz4|zstd`` or Kafka's id; default none); headers ``Kafka-Client-Instance-Id`` and
    ``Kafka-Subscription-Id`` (required), ``Kafka-Terminating: true|false``, optional ``Kafka-Client-Id``,
    ``Kafka-Client-Software-Name``, ``Kafka-Client-Software-Version``.

    Answer: ``{"error_code", "throttle_time_ms": 0, "retry_after_ms"}`` (+ ``"message"``): ``NONE``,
    ``THROTTLING_QUOTA_EXCEEDED`` (early; with HTTP 503 when the memory limiter has no room), ``INVALID_REQUEST``
    (after a terminating push, bad instance id), ``UNKNOWN_SUBSCRIPTION_ID``, ``UNSUPPORTED_COMPRESSION_TYPE``,
    ``TELEMETRY_TOO_LARGE``, ``INVALID_RECORD`` (does not decode; nothing stored).
    """
    if check_cluster_name(cluster):
        return _answer(404, error_code=RESOURCE_NOT_FOUND, message=check_cluster_name(cluster))
    h = request.headers
    cid = h.get(H_INSTANCE)
    if not cid:
        return _bad(f"The {H_INSTANCE} header is required.")
    try:
        subscription_id = int(h.get(H_SUBSCRIPTION, ""))
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return _bad(f"{H_SUBSCRIPTION} and Content-Length must be integers.")
    if not -(2**31) <= subscription_id < 2**31 or length < 0:
        return _bad(f"{H_SUBSCRIPTION} must be an int32 and Content-Length not negative.")
    terminating = (h.get(H_TERMINATING) or "false").strip().lower() in ("true", "1", "yes")
    type_id = _compression_id(h.get(H_COMPRESSION))
    sink = await cluster_sink(cluster)
    if sink is None:
        return _answer(404, error_code=RESOURCE_NOT_FOUND, message=f"No cluster {cluster!r}.")
    address, port = _source(request)
    context = RequestContext(
        client_id=h.get(H_CLIENT_ID),
        software_name=h.get(H_SOFTWARE_NAME),
        software_version=h.get(H_SOFTWARE_VERSION),
        source_address=address,
        source_port=port,
        connection_id=f"{address}:{port}",
    )
    max_bytes = sink.manager.telemetry_max_bytes
    if length > max_bytes:  # not read: the manager answers on its length alone
        return await _finish(sink, cluster, cid, subscription_id, type_id, _Oversize(length), terminating, context)

    lim = limiter()
    decode_limit = max_bytes * DECOMPRESS_FACTOR
    held: list[Permit] = []
    try:
        try:
            for size, kind in ((length, LimitType.DIRECT_MEMORY), (length * HEAP_FACTOR, LimitType.HEAP_MEMORY)):
                pool = lim.get_limiter(kind)
                n = min(size, decode_limit) if kind == LimitType.HEAP_MEMORY else size
                if pool.max_permits > 0:
                    n = min(n, pool.max_permits)
                held.append(await lim.acquire(n, kind))
        except PermitAcquireException as e:
            retry = max(100, int(settings.QUOTAS_TELEMETRY_TIMEOUT_MS))
            return _answer(
                503, error_code=THROTTLING_QUOTA_EXCEEDED, retry_after_ms=retry,
                message=f"The telemetry sink has no memory for this push now ({type(e).__name__}); retry later.",
            )
        body = request.body
        outcome: list[MetricPoint] | BaseException | None = None
        if body and compression.is_known_compression_type(type_id) and len(body) <= max_bytes:
            outcome = await asyncio.to_thread(_decode, type_id, body, decode_limit)
        return await _finish(sink, cluster, cid, subscription_id, type_id, body, terminating, context, outcome)
    finally:
        for permit in held:
            lim.release(permit)


async def _finish(
    sink: ClusterSink,
    cluster: str,
    cid: str,
    subscription_id: int,
    type_id: int,
    body: Any,
    terminating: bool,
    context: RequestContext,
    outcome: list[MetricPoint] | BaseException | None = None,
) -> JsonResponse:
    exporter = _Exporter()
    exporter.outcome = outcome
    sink.manager.exporter = exporter  # no await until push_telemetry returns: nobody else runs in between
    t = now_ms()
    r = sink.manager.push_telemetry(cid, subscription_id, type_id, body, terminating, context, t)
    sink.manager.exporter = None
    try:
        instance = sink.manager.client_instance(cid)
    except ValueError:  # not a Kafka Uuid: answered INVALID_REQUEST, no instance to record
        instance = None
    if instance is not None:
        client = store.async_client()
        client_id = instance.attributes.get("client_id") if instance is not None else context.client_id
        changes: dict[str, Any] = {"client_id": client_id, "source_address": context.source_address}
        if r.error == NONE:
            changes.update(last_push_ms=t, pushes_inc=1, terminated=terminating)
            if exporter.points:
                entry = store.make_entry(cluster, cid, client_id, exporter.points, t)
                await store.store_entry(client, entry)
                await asyncio.to_thread(store.write_landing, [entry])
        else:
            changes.update(errors_inc=1, last_error=r.error)
        await store.update_record(client, cluster, cid, **changes)
    return _answer(
        error_code=r.error, throttle_time_ms=r.throttle_time_ms, retry_after_ms=r.retry_after_ms, message=r.message
    )
