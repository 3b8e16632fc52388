"""The OTLP/HTTP metrics receiver (telemetry_ui/ingest/otlp_receiver.py, ``POST /v1/metrics``) under a real uvicorn.

Driven as the KIP-714 broker plugin drives it (protobuf with the X-Kafka-* headers) and as an OpenTelemetry
Collector's otlphttp exporter would (OTLP/JSON or protobuf, gzip, only X-Quotas-Cluster); answers are checked
against the OTLP/HTTP specification, stored points against the telemetry store's contract.
"""

from __future__ import annotations

import gzip
import http.client
import json
import math
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m

from kip714.client import build_metrics_data
from quotas.models import Cluster
from telemetry_ui.ingest import telemetry_store as store
from telemetry_ui.ingest.otlp_receiver import derived_instance_id
from tests.services import service_env, start_server
from tests.telemetry.test_sink import landed

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "s3cret-token"
PB = "application/x-protobuf"


@pytest.fixture(scope="module")
def receiver(redis_url: str, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[dict[str, Any]]:
    """uvicorn serving the portal (open receiver, 1 MiB bodies, 4 MiB decoded): {"port", "landing", "redis"}."""
    logs = tmp_path_factory.mktemp("otlp")
    landing = logs / "landing"
    env = {**service_env(redis_url), "QUOTAS_LANDING_ROOT": str(landing), "QUOTAS_TELEMETRY_RELOAD_S": "0.1",
           "QUOTAS_OTLP_MAX_BYTES": str(1024 * 1024), "QUOTAS_OTLP_MAX_DECODED_BYTES": str(4 * 1024 * 1024),
           "QUOTAS_OTLP_TOKEN": ""}
    server, port = start_server(env, logs / "uvicorn.log")
    client = redis.Redis.from_url(redis_url)
    try:
        yield {"port": port, "landing": landing, "redis": client, "server": server}
    finally:
        client.close()
        server.stop()


@pytest.fixture(scope="module")
def guarded(redis_url: str, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[dict[str, Any]]:
    """uvicorn with QUOTAS_OTLP_TOKEN set and a tiny memory limiter (450 KB direct, queue of one, 1 ms wait)."""
    logs = tmp_path_factory.mktemp("otlp-guarded")
    env = {**service_env(redis_url), "QUOTAS_LANDING_ROOT": str(logs / "landing"), "QUOTAS_OTLP_TOKEN": TOKEN,
           "QUOTAS_TELEMETRY_RELOAD_S": "0.1", "QUOTAS_TELEMETRY_DIRECT_BYTES": str(450_000),
           "QUOTAS_TELEMETRY_QUEUE_SIZE": "1", "QUOTAS_TELEMETRY_TIMEOUT_MS": "1"}
    server, port = start_server(env, logs / "uvicorn.log")
    try:
        yield {"port": port, "server": server}
    finally:
        server.stop()


def post(port: int, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/metrics", body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def status_message(body: bytes) -> tuple[int, str]:
    """(code, message) of a protobuf google.rpc.Status (fields 1 and 2)."""
    from google.protobuf.internal.decoder import _DecodeVarint  # type: ignore[attr-defined]

    pos, code, message = 0, 0, ""
    while pos < len(body):
        tag, pos = _DecodeVarint(body, pos)
        if tag == 0x08:
            code, pos = _DecodeVarint(body, pos)
        elif tag == 0x12:
            n, pos = _DecodeVarint(body, pos)
            message, pos = body[pos:pos + n].decode(), pos + n
        else:
            raise AssertionError(f"unexpected field {tag} in {body!r}")
    return code, message


def make_cluster() -> Cluster:
    return Cluster.objects.create(name=f"otlp-{uuid.uuid4().hex[:10]}")


def plugin_headers(cluster: str, instance: str, client_id: str = "app-1", **extra: str) -> dict[str, str]:
    """What PortalTelemetryExporter sends with a broker's push."""
    return {"Content-Type": PB, "X-Quotas-Cluster": cluster, "X-Kafka-Client-Instance-Id": instance,
            "X-Kafka-Client-Id": client_id, "X-Kafka-Principal": "User:ANONYMOUS",
            "X-Kafka-Client-Address": "127.0.0.1", "X-Kafka-Client-Software-Name": "librdkafka",
            "X-Kafka-Client-Software-Version": "2.16.0", "X-Kafka-Push-Interval-Ms": "1000",
            "X-Kafka-Terminating": "false", "X-Kafka-Cluster-Id": "q1Sh-9_ISia_zwGINzRvyQ", "X-Kafka-Broker-Id": "2",
            **extra}


def test_a_broker_plugin_push_is_stored_like_a_sink_push(receiver: dict[str, Any]) -> None:
    cluster = make_cluster().name
    instance = "vLlZ-sdZRAi4qNcYQMvFNw"
    body = build_metrics_data([("org.apache.kafka.producer.node.request.latency.avg", 1.5, {"node_id": "1"}),
                               ("org.apache.kafka.producer.record.queue.time.max", 7)])
    headers = plugin_headers(cluster, instance, "caf%C3%A9-app", **{"X-Kafka-Principal": "User:al%20ice"})
    status, got, answer = post(receiver["port"], body, headers)
    assert status == 200, answer
    assert got["content-type"] == PB
    response = ExportMetricsServiceResponse.FromString(answer)
    assert not response.HasField("partial_success")

    entries = store.recent(cluster, instance, 0, client=receiver["redis"])
    assert len(entries) == 1
    e = entries[0]
    assert (e["c"], e["instance"], e["client_id"]) == (cluster, instance, "café-app")
    assert [(p["name"], p["value"], p["attrs"]) for p in e["points"]] == [
        ("org.apache.kafka.producer.node.request.latency.avg", 1.5, {"node_id": "1"}),
        ("org.apache.kafka.producer.record.queue.time.max", 7.0, {}),
    ]
    (record,) = [r for r in store.instances(cluster, receiver["redis"]) if r["instance"] == instance]
    assert set(record) == set(store.INSTANCE_FIELDS)
    assert record["client_id"] == "café-app" and record["principal"] == "User:al ice"
    assert (record["software_name"], record["software_version"]) == ("librdkafka", "2.16.0")
    assert (record["source_address"], record["push_interval_ms"]) == ("127.0.0.1", 1000)
    assert record["pushes"] == 1 and record["terminated"] is False and record["last_push_ms"] == e["t"]
    assert [x["instance"] for x in landed(receiver["landing"], cluster)] == [instance]

    # the client's terminating push, forwarded by the plugin
    status, _, _ = post(receiver["port"], body, {**headers, "X-Kafka-Terminating": "true"})
    assert status == 200
    (record,) = [r for r in store.instances(cluster, receiver["redis"]) if r["instance"] == instance]
    assert record["pushes"] == 2 and record["terminated"] is True


def otlp_json(client_id: str, value: Any) -> dict[str, Any]:
    """An OTLP/JSON export as a Collector writes it: camelCase, int64 as strings, hex exemplar ids."""
    return {"resourceMetrics": [{
        "resource": {"attributes": [{"key": "client_id", "value": {"stringValue": client_id}},
                                    {"key": "service.name", "value": {"stringValue": "billing"}}]},
        "scopeMetrics": [{"scope": {"name": "otelcol"}, "metrics": [
            {"name": "org.apache.kafka.consumer.fetch.latency.avg", "unit": "ms",
             "gauge": {"dataPoints": [{"timeUnixNano": "1700000000000000000", "asDouble": value,
                                       "attributes": [{"key": "topic", "value": {"stringValue": "t1"}}],
                                       "exemplars": [{"asDouble": 1.0, "timeUnixNano": "1700000000000000000",
                                                      "traceId": "5b8efff798038103d269b633813fc60c",
                                                      "spanId": "eee19b7ec3c1b174"}]}]}},
            {"name": "org.apache.kafka.consumer.records.consumed.total",
             "sum": {"aggregationTemporality": 1, "isMonotonic": True,
                     "dataPoints": [{"timeUnixNano": "1700000000000000000", "asInt": "42"}]}},
            {"name": "http.duration", "histogram": {"aggregationTemporality": 2, "dataPoints": [
                {"timeUnixNano": "1700000000000000000", "count": "3", "sum": 4.5, "bucketCounts": ["1", "2"],
                 "explicitBounds": [1.0]}]}},
        ]}],
        "unknownFieldFromTheFuture": True,
    }]}


def test_otlp_json_and_gzip_from_a_collector(receiver: dict[str, Any]) -> None:
    cluster = make_cluster().name
    body = json.dumps(otlp_json("billing-1", 2.5)).encode()
    status, got, answer = post(receiver["port"], gzip.compress(body),
                               {"Content-Type": "application/json; charset=utf-8", "Content-Encoding": "gzip",
                                "X-Quotas-Cluster": cluster})
    assert status == 200, answer
    assert got["content-type"] == "application/json" and json.loads(answer) == {}
    (record,) = store.instances(cluster, receiver["redis"])
    resource = {"client_id": "billing-1", "service.name": "billing"}
    assert record["instance"] == derived_instance_id(resource) and record["client_id"] == "billing-1"
    (entry,) = store.recent(cluster, record["instance"], 0, client=receiver["redis"])
    assert [(p["name"], p["value"], p["t"]) for p in entry["points"]] == [
        ("org.apache.kafka.consumer.fetch.latency.avg", 2.5, 1_700_000_000_000),
        ("org.apache.kafka.consumer.records.consumed.total", 42.0, 1_700_000_000_000),
        ("http.duration", 4.5, 1_700_000_000_000),
    ]
    assert entry["points"][0]["attrs"] == {**resource, "topic": "t1"}

    # the same resource again: the same instance row; protobuf + gzip too
    pb = build_metrics_data([("org.apache.kafka.consumer.fetch.latency.avg", 3.0)], resource=resource)
    status, got, answer = post(receiver["port"], gzip.compress(pb),
                               {"Content-Type": PB, "Content-Encoding": "gzip", "X-Quotas-Cluster": cluster})
    assert status == 200 and answer == b"", answer
    assert [r["pushes"] for r in store.instances(cluster, receiver["redis"])] == [2]


def test_rejected_points_are_a_partial_success(receiver: dict[str, Any]) -> None:
    cluster = make_cluster().name
    data = m.MetricsData()
    metrics = data.resource_metrics.add().scope_metrics.add().metrics
    metrics.add(name="ok.metric").gauge.data_points.add(as_double=1.0, time_unix_nano=1)
    metrics.add(name="nan.metric").gauge.data_points.add(as_double=math.nan, time_unix_nano=1)
    metrics.add(name="empty.point").gauge.data_points.add(time_unix_nano=1)
    nameless = metrics.add(name="")
    nameless.sum.data_points.add(as_int=1)
    nameless.sum.data_points.add(as_int=2)
    headers = plugin_headers(cluster, "AAAAAAAAAAAAAAAAAAAAAQ")
    status, _, answer = post(receiver["port"], data.SerializeToString(), headers)
    assert status == 200, answer
    partial = ExportMetricsServiceResponse.FromString(answer).partial_success
    assert partial.rejected_data_points == 4
    assert "not finite" in partial.error_message and "without a value" in partial.error_message
    assert "without a name" in partial.error_message
    (entry,) = store.recent(cluster, "AAAAAAAAAAAAAAAAAAAAAQ", 0, client=receiver["redis"])
    assert [p["name"] for p in entry["points"]] == ["ok.metric"]
    # the same in JSON: partialSuccess with rejectedDataPoints as an int64 string
    status, _, answer = post(receiver["port"], json.dumps(otlp_json("c", "NaN")).encode(),
                             {"Content-Type": JSON_CT, "X-Quotas-Cluster": cluster})
    assert status == 200, answer
    assert json.loads(answer)["partialSuccess"]["rejectedDataPoints"] == "1"


JSON_CT = "application/json"


def test_errors_per_the_otlp_http_specification(receiver: dict[str, Any]) -> None:
    cluster = make_cluster().name
    port = receiver["port"]
    ok_body = build_metrics_data([("a.metric", 1.0)])

    status, got, body = post(port, b"\xff\xff\xff garbage", plugin_headers(cluster, "AAAAAAAAAAAAAAAAAAAAAg"))
    assert status == 400 and got["content-type"] == PB
    code, message = status_message(body)
    assert code == 3 and "Not an OTLP ExportMetricsServiceRequest" in message

    status, got, body = post(port, b"{not json", {"Content-Type": JSON_CT, "X-Quotas-Cluster": cluster})
    assert status == 400 and got["content-type"] == JSON_CT and json.loads(body)["code"] == 3

    status, _, body = post(port, ok_body, {"Content-Type": "text/plain", "X-Quotas-Cluster": cluster})
    assert status == 415 and "Content-Type must be" in json.loads(body)["message"]
    status, _, _ = post(port, ok_body, {"Content-Type": PB, "Content-Encoding": "br", "X-Quotas-Cluster": cluster})
    assert status == 415

    status, _, body = post(port, b"not gzip", {"Content-Type": PB, "Content-Encoding": "gzip",
                                               "X-Quotas-Cluster": cluster})
    assert status == 400 and status_message(body)[0] == 3

    bomb = gzip.compress(b"\0" * (5 * 1024 * 1024))  # decompresses past QUOTAS_OTLP_MAX_DECODED_BYTES (4 MiB)
    status, _, body = post(port, bomb, {"Content-Type": PB, "Content-Encoding": "gzip", "X-Quotas-Cluster": cluster})
    assert status == 413 and status_message(body)[0] == 8

    status, _, body = post(port, b"\0" * (1024 * 1024 + 1), {"Content-Type": PB, "X-Quotas-Cluster": cluster})
    assert status == 413

    status, _, body = post(port, ok_body, {"Content-Type": PB, "X-Quotas-Cluster": "no-such-cluster"})
    assert status == 404 and status_message(body) == (5, "No cluster 'no-such-cluster' in the portal.")
    status, _, body = post(port, ok_body, {"Content-Type": PB})
    assert status == 400 and "X-Quotas-Cluster" in status_message(body)[1]

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/v1/metrics")
    resp = conn.getresponse()
    assert resp.status == 405 and resp.getheader("Allow") == "POST"
    conn.close()
    assert store.instances(cluster, receiver["redis"]) == []  # nothing of the refused requests was stored


def test_the_bearer_token_is_required_when_set(guarded: dict[str, Any]) -> None:
    cluster = make_cluster().name
    body = build_metrics_data([("a.metric", 1.0)])
    headers = plugin_headers(cluster, "AAAAAAAAAAAAAAAAAAAAAw")
    status, got, answer = post(guarded["port"], body, headers)
    assert status == 401 and got["www-authenticate"].startswith("Bearer") and status_message(answer)[0] == 16
    status, _, _ = post(guarded["port"], body, {**headers, "Authorization": "Bearer wrong"})
    assert status == 401
    status, _, answer = post(guarded["port"], body, {**headers, "Authorization": f"Bearer {TOKEN}"})
    assert status == 200, answer


def test_a_full_memory_limiter_answers_retryable_429_or_503_with_retry_after(guarded: dict[str, Any]) -> None:
    """~300 KB requests against a 450 KB direct pool, a queue of one and a 1 ms wait: those that find the pool in
    use are refused with 429 (queue full) or 503 (timed out) and Retry-After; sent again one at a time, accepted."""
    cluster = make_cluster().name
    body = build_metrics_data(
        [(f"org.apache.kafka.m{i}", float(i), {"topic": f"topic-{i}", "partition": i}) for i in range(4000)]
    )
    assert 250_000 < len(body) < 400_000
    answers: dict[int, tuple[int, dict[str, str], bytes]] = {}
    barrier = threading.Barrier(10)

    def run(i: int) -> None:
        headers = {**plugin_headers(cluster, f"AAAAAAAAAAAAAAAAAAAA{i:02d}"), "Authorization": f"Bearer {TOKEN}"}
        barrier.wait()
        answers[i] = post(guarded["port"], body, headers)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    statuses = [answers[i][0] for i in range(10)]
    assert set(statuses) <= {200, 429, 503} and 200 in statuses, statuses
    refused = [i for i in range(10) if answers[i][0] != 200]
    assert refused, statuses
    for i in refused:
        assert int(answers[i][1]["retry-after"]) >= 1 and status_message(answers[i][2])[0] == 14
        headers = {**plugin_headers(cluster, f"AAAAAAAAAAAAAAAAAAAA{i:02d}"), "Authorization": f"Bearer {TOKEN}"}
        assert post(guarded["port"], body, headers)[0] == 200
    assert guarded["server"].alive()


def test_a_chunked_body_without_content_length(receiver: dict[str, Any]) -> None:
    cluster = make_cluster().name
    body = build_metrics_data([("a.metric", 1.0)])

    def chunked(data: bytes) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", receiver["port"], timeout=30)
        try:
            conn.request("POST", "/v1/metrics", body=iter([data[:10], data[10:]]), encode_chunked=True,
                         headers={**plugin_headers(cluster, "AAAAAAAAAAAAAAAAAAAABA"), "Transfer-Encoding": "chunked"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    assert chunked(body) == (200, b"")
    assert [e["points"][0]["name"] for e in store.recent(cluster, "AAAAAAAAAAAAAAAAAAAABA", 0,
                                                          client=receiver["redis"])] == ["a.metric"]
    status, answer = chunked(b"\0" * (1024 * 1024 + 1))
    assert status == 413 and status_message(answer)[0] == 8
