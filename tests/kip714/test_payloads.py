"""Payloads: Kafka's compression ids round trip, OTLP MetricsData decodes, garbage is INVALID_RECORD."""

from __future__ import annotations

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from kip714 import ClientMetricsManager, InvalidRecord, RequestContext, TelemetryTooLarge
from kip714.compression import IDS, SUPPORTED_COMPRESSION_TYPES, compress, decompress
from kip714.errors import UnsupportedCompressionType
from kip714.otlp import OtlpExporter, decode_metrics, decode_push

T0 = 1_700_000_000_000


def metrics_data() -> bytes:
    def kv(k: str, v: str) -> KeyValue:
        return KeyValue(key=k, value=AnyValue(string_value=v))

    gauge = Metric(
        name="org.apache.kafka.producer.record.queue.time.max",
        unit="ms",
        gauge=Gauge(data_points=[NumberDataPoint(time_unix_nano=T0 * 1_000_000, as_double=12.5,
                                                 attributes=[kv("topic", "orders")])]),
    )
    total = Metric(
        name="org.apache.kafka.producer.record.send.total",
        sum=Sum(is_monotonic=True, aggregation_temporality=1,
                data_points=[NumberDataPoint(time_unix_nano=(T0 + 5) * 1_000_000, as_int=42)]),
    )
    data = MetricsData(resource_metrics=[ResourceMetrics(
        resource=Resource(attributes=[kv("client_id", "producer-1")]),
        scope_metrics=[ScopeMetrics(metrics=[gauge, total])],
    )])
    return data.SerializeToString()


@pytest.mark.parametrize("name", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_round_trips(name: str) -> None:
    raw = metrics_data() * 50
    assert decompress(IDS[name], compress(IDS[name], raw)) == raw


def test_ids_are_kafkas_and_zstd_is_preferred() -> None:
    assert IDS == {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    assert SUPPORTED_COMPRESSION_TYPES == (4, 3, 1, 2)
    with pytest.raises(UnsupportedCompressionType):
        compress(5, b"x")


@pytest.mark.parametrize("name", ["gzip", "snappy", "lz4", "zstd"])
def test_corrupt_compressed_data_is_invalid_record(name: str) -> None:
    with pytest.raises(InvalidRecord) as e:
        decompress(IDS[name], b"\x82SNAPPY\x00garbage-garbage" if name == "snappy" else b"garbage-garbage")
    assert e.value.code == "INVALID_RECORD"


@pytest.mark.parametrize("name", ["gzip", "snappy", "lz4", "zstd"])
def test_decompression_is_bounded(name: str) -> None:
    with pytest.raises(TelemetryTooLarge):
        decompress(IDS[name], compress(IDS[name], b"a" * 10_000), max_bytes=1000)


def test_otlp_decodes_into_plain_points() -> None:
    points = decode_metrics(metrics_data())
    assert [(p.name, p.attributes, p.time_ms, p.value, p.kind) for p in points] == [
        ("org.apache.kafka.producer.record.queue.time.max", {"client_id": "producer-1", "topic": "orders"}, T0, 12.5,
         "gauge"),
        ("org.apache.kafka.producer.record.send.total", {"client_id": "producer-1"}, T0 + 5, 42.0, "sum"),
    ]
    assert decode_push(IDS["zstd"], compress(IDS["zstd"], metrics_data())) == points


def test_a_payload_that_is_not_metrics_data_is_invalid_record() -> None:
    with pytest.raises(InvalidRecord) as e:
        decode_metrics(b"\xff\xff\xff\xff not protobuf")
    assert e.value.code == "INVALID_RECORD"


def test_the_otlp_exporter_behind_the_manager() -> None:
    seen: list = []
    m = ClientMetricsManager(exporter=OtlpExporter(lambda ctx, inst, pts: seen.extend(pts)),
                             id_generator=lambda: "iVeANM4FSUyRHAg_tg19Ug")
    ctx = RequestContext("producer-1", connection_id="c1")
    g = m.get_telemetry_subscriptions(None, ctx, T0)
    ok = m.push_telemetry(g.client_instance_id, g.subscription_id, 4, compress(4, metrics_data()), False, ctx, T0)
    assert ok.error == "NONE" and len(seen) == 2
    bad = m.push_telemetry(g.client_instance_id, g.subscription_id, 0, b"\xff\xff\xff", False, ctx, T0 + 300_000)
    assert bad.error == "INVALID_RECORD"
    assert m.client_instance(g.client_instance_id).last_known_error == "INVALID_RECORD"
    assert m.counters()["plugin_export"] == 1 and m.counters()["plugin_error"] == 1
