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
