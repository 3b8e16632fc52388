"""A small synchronous KIP-714 client of the portal's telemetry sink (``telemetry_ui/ingest/sink.py``), over HTTP/1.1.

One keep-alive ``http.client`` connection (re-opened once when the server closed it). The wire format is the
sink's: ``POST /telemetry/v1/<cluster>/get-subscriptions`` (JSON) and ``POST /telemetry/v1/<cluster>/push`` (the
compressed OTLP bytes, the request fields as ``Kafka-*`` headers).

    client = TelemetryClient("http://127.0.0.1:8000", "prod", "app-1")
    client.get_subscriptions()                           # -> the answer (dict); remembers id and subscription
    client.push([("org.apache.kafka.producer.record.queue.time.avg", 1.5)])   # points, or OTLP bytes
    client.loop(lambda: [("org.apache.kafka.producer.x", 1.0)], duration_s=10)  # what a Kafka client does
    client.close(terminating=True)

``run_once(points)`` does the one request that is due (a get when there is no subscription, else a push) without
sleeping and returns a :class:`Step` with the answer and how long to wait before the next one, following what
Kafka's ``ClientTelemetryReporter`` does: push every ``push_interval_ms``; on ``THROTTLING_QUOTA_EXCEEDED`` wait
``retry_after_ms`` (at least the interval for a push refused by the sink's memory limit, HTTP 503, or the
``retry_after_ms`` given); on ``UNKNOWN_SUBSCRIPTION_ID`` or ``UNSUPPORTED_COMPRESSION_TYPE`` get the subscription
again at once and continue; on ``INVALID_RECORD`` or ``TELEMETRY_TOO_LARGE`` keep pushing at the interval; on
``INVALID_REQUEST`` (e.g. after a terminating push) stop. Only points whose name starts with a requested metric
prefix are sent (all of them for ``*``; none when nothing is requested).

``build_metrics_data(points)`` makes an OTLP ``MetricsData`` payload with opentelemetry-proto.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from .compression import IDS, compress

ZERO_UUID_TEXT = "AAAAAAAAAAAAAAAAAAAAAA"

#: A point: ``(name, value)``, ``(name, value, attrs)`` or a mapping with ``name``, ``value`` and optional
#: ``attrs``, ``t`` (epoch ms; default now), ``kind`` (``gauge`` (default) or ``sum``, a delta sum).
Point = tuple[Any, ...] | Mapping[str, Any]


def _any_value(value: Any) -> Any:
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue

    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def _key_values(attrs: Mapping[str, Any] | None) -> list[Any]:
    from opentelemetry.proto.common.v1.common_pb2 import KeyValue

    return [KeyValue(key=str(k), value=_any_value(v)) for k, v in (attrs or {}).items()]


def _normalize(point: Point, now_ms: int) -> dict[str, Any]:
    if isinstance(point, Mapping):
        p = dict(point)
    else:
        p = {"name": point[0], "value": point[1], "attrs": point[2] if len(point) > 2 else {}}
    p.setdefault("attrs", {})
    p.setdefault("t", now_ms)
    p.setdefault("kind", "gauge")
    return p


def build_metrics_data(points: Iterable[Point], resource: Mapping[str, Any] | None = None) -> bytes:
    """Serialized OTLP ``MetricsData``: one resource (``resource`` attributes), one scope, a metric per point."""
    from opentelemetry.proto.metrics.v1 import metrics_pb2 as m
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource

    now = int(time.time() * 1000)
    metrics = []
    for raw in points:
        p = _normalize(raw, now)
        dp = m.NumberDataPoint(time_unix_nano=int(p["t"]) * 1_000_000, attributes=_key_values(p["attrs"]))
        if isinstance(p["value"], int) and not isinstance(p["value"], bool):
            dp.as_int = p["value"]
        else:
            dp.as_double = float(p["value"])
        if p["kind"] == "sum":
            metric = m.Metric(name=p["name"], sum=m.Sum(
                data_points=[dp], aggregation_temporality=m.AGGREGATION_TEMPORALITY_DELTA, is_monotonic=True))
        else:
            metric = m.Metric(name=p["name"], gauge=m.Gauge(data_points=[dp]))
        metrics.append(metric)
    data = m.MetricsData(resource_metrics=[m.ResourceMetrics(
        resource=Resource(attributes=_key_values(resource)),
        scope_metrics=[m.ScopeMetrics(metrics=metrics)],
    )])
    return data.SerializeToString()


@dataclass
class Step:
    """What ``run_once`` did: ``action`` ("get" | "push" | "idle" | "stopped"), the answer, when to come back."""

    action: str
    response: dict[str, Any] | None
    wait_s: float


class TelemetryClient:
    def __init__(
        self,
        base_url: str,
        cluster: str,
        client_id: str,
        software_name: str = "quotas-telemetry-client",
        software_version: str = "1.0",
        *,
        compression: str = "zstd",
        timeout_s: float = 10.0,
        resource: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base_url must be http(s)://host[:port], not {base_url!r}")
        self.scheme, self.host, self.port = url.scheme, url.hostname, url.port
        self.prefix = url.path.rstrip("/") + f"/telemetry/v1/{quote(cluster, safe='')}"
        self.cluster, self.client_id = cluster, client_id
        self.software_name, self.software_version = software_name, software_version
        self.compression = compression
        self.timeout_s = timeout_s
        self.resource = dict(resource or {})
        self.clock = clock
        self._conn: http.client.HTTPConnection | None = None
        # what the last accepted get said
        self.client_instance_id: str | None = None
        self.subscription_id: int | None = None
        self.push_interval_ms = 0
        self.requested_metrics: list[str] = []
        self.accepted_compression_types: list[str] = []
        self.telemetry_max_bytes = 0
        # the state machine of run_once
        self.next_at = 0.0
        self.stopped = False
        self.terminating = False

    # ------------------------------------------------------------ HTTP

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            self._conn = cls(self.host, self.port, timeout=self.timeout_s)
        return self._conn

    def _post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """POST on the keep-alive connection (re-opened once if the server closed it); (status, JSON answer)."""
        for attempt in (0, 1):
            conn = self._connection()
            try:
                conn.request("POST", self.prefix + path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.CannotSendRequest, http.client.BadStatusLine):
                self.close_connection()
                if attempt:
                    raise
                continue
            if resp.getheader("Connection", "").lower() == "close":
                self.close_connection()
            try:
                answer = json.loads(data) if data else {}
            except ValueError:
                answer = {"error_code": "UNKNOWN_SERVER_ERROR", "message": data[:200].decode(errors="replace")}
            answer["http_status"] = resp.status
            return resp.status, answer
        raise AssertionError("unreachable")

    def close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # ------------------------------------------------------------ the two requests

    def get_subscriptions(self) -> dict[str, Any]:
        """GetTelemetrySubscriptions; an accepted answer updates the id, subscription, interval, metrics."""
        body = json.dumps({
            "client_instance_id": self.client_instance_id or ZERO_UUID_TEXT,
            "client_id": self.client_id,
            "client_software_name": self.software_name,
            "client_software_version": self.software_version,
        }).encode()
        _status, answer = self._post("/get-subscriptions", body, {"Content-Type": "application/json"})
        if answer.get("client_instance_id"):
            self.client_instance_id = answer["client_instance_id"]
        if answer.get("error_code") == "NONE":
            self.subscription_id = int(answer["subscription_id"])
            self.push_interval_ms = int(answer["push_interval_ms"])
            self.requested_metrics = list(answer.get("requested_metrics") or [])
            self.accepted_compression_types = list(answer.get("accepted_compression_types") or [])
            self.telemetry_max_bytes = int(answer.get("telemetry_max_bytes") or 0)
        return answer

    def choose_compression(self, wanted: str | None = None) -> str:
        """``wanted`` (or the client's default) if the sink accepts it, else the sink's first choice, else none."""
        wanted = wanted or self.compression
        if not self.accepted_compression_types or wanted in self.accepted_compression_types or wanted == "none":
            return wanted
        return self.accepted_compression_types[0]

    def push(
        self,
        metrics: bytes | Iterable[Point],
        compression: str | None = None,
        terminating: bool = False,
        *,
        subscription_id: int | None = None,
    ) -> dict[str, Any]:
        """PushTelemetry of OTLP bytes (sent as given) or points (built with ``build_metrics_data``).

        ``compression`` is a name; an unknown one is sent as is (the sink answers UNSUPPORTED_COMPRESSION_TYPE).
        """
        if self.client_instance_id is None:
            raise RuntimeError("get_subscriptions() first: the sink assigns the client instance id")
        payload = metrics if isinstance(metrics, bytes | bytearray) else build_metrics_data(metrics, self.resource)
        name = self.choose_compression(compression) if compression is None else compression
        body = compress(IDS[name], bytes(payload)) if name in IDS else bytes(payload)
        sid = self.subscription_id if subscription_id is None else subscription_id
        headers = {
            "Content-Type": "application/x-protobuf",
            "Kafka-Client-Instance-Id": self.client_instance_id,
            "Kafka-Subscription-Id": str(sid if sid is not None else 0),
            "Kafka-Compression-Type": name,
            "Kafka-Terminating": "true" if terminating else "false",
            "Kafka-Client-Id": self.client_id,
            "Kafka-Client-Software-Name": self.software_name,
            "Kafka-Client-Software-Version": self.software_version,
        }
        _status, answer = self._post("/push", body, headers)
        return answer

    # ------------------------------------------------------------ what a Kafka client does

    def selected(self, points: Iterable[Point]) -> list[Point]:
        """The points the subscription asks for (name starts with a requested prefix; all for ``*``)."""
        prefixes = self.requested_metrics
        if "*" in prefixes:
            return list(points)
        out = []
        for p in points:
            name = p["name"] if isinstance(p, Mapping) else p[0]
            if any(str(name).startswith(prefix) for prefix in prefixes if prefix):
                out.append(p)
        return out

    def _wait(self, ms: float) -> float:
        self.next_at = self.clock() + ms / 1000.0
        return ms / 1000.0

    def run_once(self, points: Iterable[Point] | Callable[[], Iterable[Point]] = ()) -> Step:
        """Do the request that is due now (none if it is not due yet) and say when the next one is."""
        if self.stopped:
            return Step("stopped", None, float("inf"))
        now = self.clock()
        if now < self.next_at:
            return Step("idle", None, self.next_at - now)
        if self.subscription_id is None:
            answer = self.get_subscriptions()
            code = answer.get("error_code")
            if code == "NONE":
                return Step("get", answer, self._wait(0))  # the first push after a get is accepted at once
            if code == "THROTTLING_QUOTA_EXCEEDED":
                return Step("get", answer, self._wait(max(int(answer.get("retry_after_ms") or 0), 100)))
            self.stopped = code == "INVALID_REQUEST"
            return Step("get", answer, self._wait(max(self.push_interval_ms, 1000)))
        wanted = points() if callable(points) else points
        answer = self.push(self.selected(wanted), terminating=self.terminating)
        code = answer.get("error_code")
        interval = max(self.push_interval_ms, 1)
        if code == "NONE":
            if self.terminating:
                self.stopped = True
                return Step("push", answer, float("inf"))
            return Step("push", answer, self._wait(interval))
        if code == "THROTTLING_QUOTA_EXCEEDED":
            retry = int(answer.get("retry_after_ms") or 0)
            return Step("push", answer, self._wait(retry if retry > 0 else interval))
        if code in ("UNKNOWN_SUBSCRIPTION_ID", "UNSUPPORTED_COMPRESSION_TYPE"):
            self.subscription_id = None  # get again at once, then continue with the new subscription
            return Step("push", answer, self._wait(0))
        if code == "INVALID_REQUEST":
            self.stopped = True
            return Step("push", answer, float("inf"))
        return Step("push", answer, self._wait(interval))  # INVALID_RECORD, TELEMETRY_TOO_LARGE, unknown

    def loop(
        self,
        points: Iterable[Point] | Callable[[], Iterable[Point]] = (),
        *,
        duration_s: float | None = None,
        until: Callable[[list[Step]], bool] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> list[Step]:
        """Run ``run_once`` (sleeping in between) for ``duration_s`` or until ``until(steps)``; the steps done."""
        end = None if duration_s is None else self.clock() + duration_s
        steps: list[Step] = []
        while not self.stopped:
            step = self.run_once(points)
            if step.action != "idle":
                steps.append(step)
                if until is not None and until(steps):
                    break
            if end is not None and self.clock() >= end:
                break
            wait = step.wait_s if end is None else min(step.wait_s, max(0.0, end - self.clock()))
            if wait > 0:
                sleep(wait)
        return steps

    def close(self, terminating: bool = True, points: Iterable[Point] = ()) -> dict[str, Any] | None:
        """Send the terminating push (allowed whatever the interval) when subscribed, then close the connection."""
        answer = None
        try:
            if terminating and self.subscription_id is not None and not self.stopped:
                answer = self.push(self.selected(points), terminating=True)
                self.stopped = True
        finally:
            self.close_connection()
        return answer
