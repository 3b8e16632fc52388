"""OTLP ``MetricsData`` (what a KIP-714 client pushes) decoded into plain points.

``decode_metrics(payload)`` parses the protobuf with opentelemetry-proto and flattens every data
point of every metric (gauge, sum, histogram, exponential histogram, summary) into a
:class:`MetricPoint`: metric name, attributes (resource attributes overlaid by the point's own),
time in epoch milliseconds and a value (the number, or the count/sum of a distribution).
A payload that is not MetricsData raises :class:`InvalidRecord` (Kafka's INVALID_RECORD).
``decode_push(compression_type, payload, max_bytes)`` decompresses first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .compression import decompress
from .errors import InvalidRecord


@dataclass(frozen=True)
class MetricPoint:
    name: str
    attributes: dict[str, Any] = field(hash=False)
    time_ms: int
    value: float
    kind: str = "gauge"  # gauge | sum | histogram | exponential_histogram | summary
    count: int | None = None
    unit: str = ""


def _any_value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, which)


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in kvs}


def _number(p: Any) -> float:
    which = p.WhichOneof("value")
    if which == "as_int":
        return float(p.as_int)
    if which == "as_double":
        return float(p.as_double)
    return 0.0


def decode_metrics(payload: bytes) -> list[MetricPoint]:
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

    data = MetricsData()
    try:
        data.ParseFromString(bytes(payload))
    except (DecodeError, ValueError, TypeError) as e:
        raise InvalidRecord(f"Telemetry payload is not OTLP MetricsData: {e}") from e
    points: list[MetricPoint] = []
    for rm in data.resource_metrics:
        base = _attrs(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                which = m.WhichOneof("data")
                if which in ("gauge", "sum"):
                    for p in getattr(m, which).data_points:
                        points.append(
                            MetricPoint(m.name, {**base, **_attrs(p.attributes)}, p.time_unix_nano // 1_000_000,
                                        _number(p), which, None, m.unit)
                        )
                elif which in ("histogram", "exponential_histogram", "summary"):
                    for p in getattr(m, which).data_points:
                        points.append(
                            MetricPoint(m.name, {**base, **_attrs(p.attributes)}, p.time_unix_nano // 1_000_000,
                                        float(p.sum), which, int(p.count), m.unit)
                        )
    return points


def decode_push(compression_type: int, payload: bytes, max_bytes: int = 1_048_576 * 64) -> list[MetricPoint]:
    return decode_metrics(decompress(compression_type, payload, max_bytes))


class OtlpExporter:
    """A ClientMetricsManager exporter: decompress, decode, and hand the points to ``sink``.

    ``sink(context, instance, points)``; a payload that does not decode fails the push with
    INVALID_RECORD (and counts a plugin error), as an exporter failure does in Kafka.
    """

    def __init__(self, sink: Any, max_decompressed_bytes: int | None = None) -> None:
        self.sink = sink
        self.max_decompressed_bytes = max_decompressed_bytes

    def __call__(self, context: Any, instance: Any, compression_type: int, payload: bytes, max_bytes: int) -> None:
        limit = self.max_decompressed_bytes or max(max_bytes * 64, max_bytes)
        self.sink(context, instance, decode_push(compression_type, payload, limit))


# ------------------------------------------------------------------ OTLP/HTTP export requests (POST /v1/metrics)

#: The two encodings of OTLP/HTTP (the response uses the request's).
PROTOBUF = "application/x-protobuf"
JSON = "application/json"

#: gRPC status codes carried by an error answer's ``google.rpc.Status``.
INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, UNAVAILABLE, UNAUTHENTICATED = 3, 5, 8, 14, 16


@dataclass
class ResourcePoints:
    """The points of one ``ResourceMetrics`` (one client, for a broker's push) and its resource attributes."""

    attributes: dict[str, Any]
    points: list[MetricPoint]


@dataclass
class ExportRequest:
    """A decoded ``ExportMetricsServiceRequest``: accepted points per resource, and what was rejected."""

    resources: list[ResourcePoints]
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)

    @property
    def accepted(self) -> int:
        return sum(len(r.points) for r in self.resources)

    def message(self) -> str:
        return "; ".join(self.reasons)


def _hex_ids_to_base64(node: Any) -> None:
    """OTLP/JSON writes exemplars' ``traceId``/``spanId`` as hex; protobuf's JSON mapping wants base64 bytes."""
    import base64

    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("traceId", "spanId", "trace_id", "span_id") and isinstance(value, str) and value:
                try:
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode()
                except ValueError:
                    pass  # not hex: left for the parser to judge
            else:
                _hex_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids_to_base64(item)


def parse_export_request(body: bytes, encoding: str = PROTOBUF) -> Any:
    """The ``ExportMetricsServiceRequest`` message of an OTLP/HTTP body (``PROTOBUF`` or ``JSON``, uncompressed).

    A broker's KIP-714 payload (OTLP ``MetricsData``) is accepted as it is: both messages are one repeated
    ``ResourceMetrics`` in field 1. JSON follows OTLP/JSON (lowerCamelCase or proto names, int64 as strings or
    numbers, enums as integers, hex trace/span ids, unknown fields ignored). Raises :class:`InvalidRecord`.
    """
    import json

    from google.protobuf import json_format
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    request = ExportMetricsServiceRequest()
    try:
        if encoding == JSON:
            tree = json.loads(bytes(body))
            if not isinstance(tree, dict):
                raise ValueError("the body is not a JSON object")
            _hex_ids_to_base64(tree)
            json_format.ParseDict(tree, request, ignore_unknown_fields=True)
        else:
            request.ParseFromString(bytes(body))
    except (DecodeError, json_format.ParseError, ValueError, TypeError, RecursionError) as e:
        raise InvalidRecord(f"Not an OTLP ExportMetricsServiceRequest ({encoding}): {e}") from e
    return request


def _finite(x: float) -> bool:
    return x == x and x not in (float("inf"), float("-inf"))


def decode_export_request(body: bytes, encoding: str = PROTOBUF, max_reasons: int = 3) -> ExportRequest:
    """Decode an OTLP/HTTP metrics export into points per resource, as :func:`decode_metrics` flattens them.

    Rejected (counted in ``rejected``, as OTLP's partial success): every point of a metric without a name, a
    number point without a value, and a point whose value (or a distribution's sum) is not finite (NaN or
    infinite: JSON readers of the stored points could not parse it). Raises :class:`InvalidRecord` for a body
    that does not decode.
    """
    request = parse_export_request(body, encoding)
    out = ExportRequest([])
    reasons: dict[str, None] = {}

    def reject(n: int, why: str) -> None:
        out.rejected += n
        if len(reasons) < max_reasons:
            reasons.setdefault(why)

    for rm in request.resource_metrics:
        base = _attrs(rm.resource.attributes)
        points: list[MetricPoint] = []
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                which = m.WhichOneof("data")
                if which is None:
                    continue
                data_points = getattr(m, which).data_points
                if not m.name:
                    reject(len(data_points), "a metric without a name")
                    continue
                number = which in ("gauge", "sum")
                for p in data_points:
                    if number:
                        kind = p.WhichOneof("value")
                        if kind is None:
                            reject(1, f"{m.name}: a data point without a value")
                            continue
                        value = float(p.as_int) if kind == "as_int" else p.as_double
                        count = None
                    else:
                        value, count = float(p.sum), int(p.count)
                    if not _finite(value):
                        reject(1, f"{m.name}: a value that is not finite")
                        continue
                    attrs = {**base, **_attrs(p.attributes)} if p.attributes else dict(base)
                    points.append(MetricPoint(m.name, attrs, p.time_unix_nano // 1_000_000, value, which, count,
                                              m.unit))
        out.resources.append(ResourcePoints(base, points))
    out.reasons = list(reasons)
    return out


def export_response(rejected: int = 0, message: str = "", encoding: str = PROTOBUF) -> bytes:
    """An ``ExportMetricsServiceResponse``: empty when all was accepted, else its ``partial_success``."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse

    response = ExportMetricsServiceResponse()
    if rejected or message:
        response.partial_success.rejected_data_points = rejected
        response.partial_success.error_message = message
    if encoding == JSON:
        import json

        if not (rejected or message):
            return b"{}"
        partial = {"rejectedDataPoints": str(rejected), "errorMessage": message}  # int64 as a string, as OTLP/JSON
        return json.dumps({"partialSuccess": partial}, separators=(",", ":")).encode()
    return response.SerializeToString()


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def status_body(code: int, message: str, encoding: str = PROTOBUF) -> bytes:
    """The ``google.rpc.Status`` an OTLP/HTTP error answer carries (protobuf, or JSON for JSON requests)."""
    if encoding == JSON:
        import json

        return json.dumps({"code": code, "message": message}, separators=(",", ":")).encode()
    text = message.encode("utf-8")
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text
