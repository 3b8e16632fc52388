"""The KIP-714 sink (telemetry_ui/ingest/sink.py) under a real uvicorn, driven by kip714.client over HTTP.

The server runs on the test database file and the test Redis (as tests/telemetry/conftest.py does); the tests
commit their clusters and subscriptions (``transaction=True``) so it sees them. Every test names its own cluster.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from kip714.client import TelemetryClient, build_metrics_data
from quotas.models import Cluster
from quotas.models.client_metrics import alter_subscription
from telemetry_ui.ingest import telemetry_store as store
from tests.services import service_env, start_server

pytestmark = pytest.mark.django_db(transaction=True)

MAX_BYTES = 65_536
RELOAD_S = 0.2
METRIC = "org.apache.kafka.producer.record.send.rate"


@pytest.fixture(scope="module")
def sink(redis_url: str, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """uvicorn with the sink: {"port", "landing", "redis"}."""
    logs = tmp_path_factory.mktemp("sink")
    landing = logs / "landing"
    env = {**service_env(redis_url), "QUOTAS_LANDING_ROOT": str(landing),
           "QUOTAS_TELEMETRY_RELOAD_S": str(RELOAD_S), "QUOTAS_TELEMETRY_MAX_BYTES": str(MAX_BYTES)}
    server, port = start_server(env, logs / "uvicorn.log")
    client = redis.Redis.from_url(redis_url)
    try:
        yield {"port": port, "landing": landing, "redis": client, "server": server}
    finally:
        client.close()
        server.stop()


@pytest.fixture(scope="module")
def tiny_sink(redis_url: str, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[dict[str, Any]]:
    """uvicorn whose push limiter holds one push at a time, a queue of one, and a 1 ms wait."""
    logs = tmp_path_factory.mktemp("tiny-sink")
    env = {**service_env(redis_url), "QUOTAS_LANDING_ROOT": str(logs / "landing"),
           "QUOTAS_TELEMETRY_MAX_BYTES": str(400_000), "QUOTAS_TELEMETRY_DIRECT_BYTES": str(450_000),
           "QUOTAS_TELEMETRY_QUEUE_SIZE": "1", "QUOTAS_TELEMETRY_TIMEOUT_MS": "1"}
    server, port = start_server(env, logs / "uvicorn.log")
    try:
        yield {"port": port, "server": server}
    finally:
        server.stop()


def make_cluster() -> Cluster:
    return Cluster.objects.create(name=f"tel-{uuid.uuid4().hex[:10]}")


def subscribe(cluster: Cluster, interval_ms: int, metrics: str = "org.apache.kafka.", match: str = "") -> None:
    configs = {"metrics": metrics, "interval.ms": str(interval_ms)}
    if match:
        configs["match"] = match
    alter_subscription(cluster, "sub", configs, None)


def client_for(port: int, cluster: Cluster, client_id: str = "app-1", **kw: Any) -> TelemetryClient:
    return TelemetryClient(f"http://127.0.0.1:{port}", cluster.name, client_id, "apache-kafka-java", "3.9.0", **kw)


def points(value: float = 1.0) -> list[Any]:
    return [(METRIC, value, {"topic": "t1"}), ("other.metric.not.requested", 2.0)]


def landed(root: Path, cluster: str) -> list[dict[str, Any]]:
    out = []
    for f in sorted(root.glob("_incoming/telemetry/date=*/hour=*/*")):
        assert f.name.startswith("part-") and f.suffix == ".jsonl", f"a temporary file was left: {f}"
        out.extend(e for e in (json.loads(line) for line in f.read_text().splitlines()) if e["c"] == cluster)
    return out


def test_client_loop_throttling_resubscription_and_termination(sink: dict[str, Any]) -> None:
    cluster = make_cluster()
    subscribe(cluster, 500, match="client_id=app-.*")
    client = client_for(sink["port"], cluster)

    got = client.get_subscriptions()
    assert got["error_code"] == "NONE", got
    assert got["push_interval_ms"] == 500 and got["requested_metrics"] == ["org.apache.kafka."]
    assert got["accepted_compression_types"] == ["zstd", "lz4", "gzip", "snappy"]
    assert got["telemetry_max_bytes"] == MAX_BYTES and got["delta_temporality"] is True
    instance = got["client_instance_id"]
    assert len(instance) == 22 and instance != "AAAAAAAAAAAAAAAAAAAAAA"
    # another get right away is throttled
    again = client.get_subscriptions()
    assert again["error_code"] == "THROTTLING_QUOTA_EXCEEDED" and 0 < again["retry_after_ms"] <= 500

    first = client.push(client.selected(points(1.0)))
    assert first["error_code"] == "NONE", first
    early = client.push(client.selected(points(2.0)))
    assert early["error_code"] == "THROTTLING_QUOTA_EXCEEDED", early
    assert early["throttle_time_ms"] == 0 and 0 < early["retry_after_ms"] <= 500

    # the loop obeys the throttle: its next push waits and is accepted
    client.next_at = client.clock() + early["retry_after_ms"] / 1000
    steps = client.loop(points, until=lambda s: s[-1].action == "push")
    assert steps[-1].response["error_code"] == "NONE", steps
    old_subscription = client.subscription_id

    # the subscription changes: the next push is UNKNOWN_SUBSCRIPTION_ID, the loop gets again and goes on
    subscribe(cluster, 400, match="client_id=app-.*")
    time.sleep(RELOAD_S + 0.6)
    steps = client.loop(points, until=lambda s: sum(1 for x in s if x.response["error_code"] == "NONE") >= 3)
    codes = [(s.action, s.response["error_code"]) for s in steps]
    assert codes[:2] == [("push", "UNKNOWN_SUBSCRIPTION_ID"), ("get", "NONE")], codes
    # As in Kafka, the refused push took the fresh instance's push slot, so the first push after the new get may
    # be throttled; the loop waits retry_after_ms and goes on with the new subscription (no further get).
    assert set(codes[2:]) <= {("push", "NONE"), ("push", "THROTTLING_QUOTA_EXCEEDED")}, codes
    accepted_here = codes.count(("push", "NONE"))
    throttled_here = codes.count(("push", "THROTTLING_QUOTA_EXCEEDED"))
    assert client.subscription_id != old_subscription and client.push_interval_ms == 400
    assert client.client_instance_id == instance

    end = client.push(client.selected(points(9.0)), terminating=True)
    assert end["error_code"] == "NONE", end
    after = client.push(client.selected(points(10.0)))
    assert after["error_code"] == "INVALID_REQUEST", after
    client.close_connection()

    # storage per the contract
    entries = store.recent(cluster.name, instance, 0, client=sink["redis"])
    assert len(entries) == 2 + accepted_here + 1  # first, after the throttle, the new subscription's, terminating
    for e in entries:
        assert set(e) == {"t", "c", "instance", "client_id", "points"}
        assert (e["c"], e["instance"], e["client_id"]) == (cluster.name, instance, "app-1")
        assert [p["name"] for p in e["points"]] == [METRIC]  # what the subscription asked for
        assert set(e["points"][0]) == {"name", "attrs", "t", "value"} and e["points"][0]["attrs"] == {"topic": "t1"}
    assert [e["points"][0]["value"] for e in entries][-1] == 9.0
    assert store.by_client(cluster.name, "app-1", 0, client=sink["redis"]) == entries
    assert store.by_client(cluster.name, "app-2", 0, client=sink["redis"]) == []
    [record] = store.instances(cluster.name, client=sink["redis"])
    assert set(record) == set(store.INSTANCE_FIELDS)
    assert record["instance"] == instance and record["client_id"] == "app-1"
    assert (record["software_name"], record["software_version"]) == ("apache-kafka-java", "3.9.0")
    assert record["source_address"] == "127.0.0.1" and record["push_interval_ms"] == 400
    assert record["subscription_id"] == client.subscription_id and record["metrics"] == ["org.apache.kafka."]
    assert record["pushes"] == len(entries) and record["terminated"] is True
    assert record["last_error"] == "INVALID_REQUEST"
    # throttled get, throttled push, unknown subscription, throttled pushes after it, push after terminating
    assert record["errors"] == 4 + throttled_here
    assert landed(sink["landing"], cluster.name) == entries


def test_unmatched_client_gets_no_metrics_and_sends_nothing(sink: dict[str, Any]) -> None:
    cluster = make_cluster()
    subscribe(cluster, 500, match="client_id=app-.*")
    client = client_for(sink["port"], cluster, client_id="batch-1")
    got = client.get_subscriptions()
    assert got["error_code"] == "NONE" and got["requested_metrics"] == [] and got["push_interval_ms"] == 300_000
    assert client.selected(points()) == []
    client.close_connection()


def fresh(sink: dict[str, Any], cluster: Cluster) -> TelemetryClient:
    client = client_for(sink["port"], cluster)
    assert client.get_subscriptions()["error_code"] == "NONE"
    return client


def test_refused_pushes_store_nothing(sink: dict[str, Any]) -> None:
    cluster = make_cluster()
    subscribe(cluster, 1000)
    r = sink["redis"]

    c = fresh(sink, cluster)
    answer = c.push(points(), compression="brotli")
    assert answer["error_code"] == "UNSUPPORTED_COMPRESSION_TYPE", answer
    # Kafka lets a client that sent an unsupported compression get again at once
    assert c.get_subscriptions()["error_code"] == "NONE"
    c.close_connection()
    c = fresh(sink, cluster)
    assert c.push(points(), compression="gzip")["error_code"] == "NONE"

    big = fresh(sink, cluster)
    answer = big.push(os.urandom(MAX_BYTES + 1), compression="none")
    assert answer["error_code"] == "TELEMETRY_TOO_LARGE", answer

    corrupt = fresh(sink, cluster)
    answer = corrupt.push(b"\x28\xb5\x2f\xfd" + os.urandom(200), compression="none")  # not protobuf
    assert answer["error_code"] == "INVALID_RECORD", answer
    corrupt2 = fresh(sink, cluster)
    headers_only = corrupt2.push(b"\x28\xb5\x2f\xfd garbage that is no zstd frame", compression="zstd")
    assert headers_only["error_code"] == "INVALID_RECORD", headers_only

    for bad in (big, corrupt, corrupt2):
        assert r.exists(store.instance_key(cluster.name, bad.client_instance_id)) == 0
        bad.close_connection()
    records = {x["instance"]: x for x in store.instances(cluster.name, client=r)}
    assert records[corrupt.client_instance_id]["errors"] == 1
    assert records[corrupt.client_instance_id]["last_error"] == "INVALID_RECORD"
    assert records[corrupt.client_instance_id]["pushes"] == 0
    assert records[big.client_instance_id]["last_error"] == "TELEMETRY_TOO_LARGE"
    stored = store.by_client(cluster.name, "app-1", 0, client=r)
    assert [e["instance"] for e in stored] == [c.client_instance_id]  # only the accepted gzip push
    assert [e["instance"] for e in landed(sink["landing"], cluster.name)] == [c.client_instance_id]
    c.close_connection()


def test_bad_requests(sink: dict[str, Any]) -> None:
    import http.client

    cluster = make_cluster()
    conn = http.client.HTTPConnection("127.0.0.1", sink["port"], timeout=5)

    def post(path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        conn.request("POST", path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())

    status, answer = post("/telemetry/v1/no-such-cluster/get-subscriptions", b"{}")
    assert (status, answer["error_code"]) == (404, "RESOURCE_NOT_FOUND")
    status, answer = post(f"/telemetry/v1/{cluster.name}/get-subscriptions", b"[1,")
    assert (status, answer["error_code"]) == (400, "INVALID_REQUEST")
    status, answer = post(f"/telemetry/v1/{cluster.name}/push", b"x", {"Kafka-Subscription-Id": "1"})
    assert (status, answer["error_code"]) == (400, "INVALID_REQUEST")
    # a client instance id that is not a Kafka Uuid: Kafka's INVALID_REQUEST answer
    status, answer = post(f"/telemetry/v1/{cluster.name}/push", b"x",
                          {"Kafka-Subscription-Id": "1", "Kafka-Client-Instance-Id": "not-a-uuid"})
    assert (status, answer["error_code"]) == (200, "INVALID_REQUEST")
    conn.close()


def test_memory_limit_refuses_retriably_instead_of_growing(tiny_sink: dict[str, Any]) -> None:
    """Pushes of ~300 KB against a direct pool of 450 KB with a queue of one and a 1 ms wait: those that find the
    pool in use are refused with a retriable 503 THROTTLING_QUOTA_EXCEEDED, and succeed when retried."""
    cluster = make_cluster()
    subscribe(cluster, 1000, metrics="*")
    payload = build_metrics_data(
        [(f"org.apache.kafka.m{i}", float(i), {"topic": f"topic-{i}", "partition": i}) for i in range(4000)]
    )
    assert 250_000 < len(payload) < 400_000
    clients = [client_for(tiny_sink["port"], cluster, client_id=f"app-{i}") for i in range(12)]
    for c in clients:
        assert c.get_subscriptions()["error_code"] == "NONE"
    answers: dict[int, dict[str, Any]] = {}
    barrier = threading.Barrier(len(clients))

    def run(i: int) -> None:
        barrier.wait()
        answers[i] = clients[i].push(payload, compression="none")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    codes = [answers[i]["error_code"] for i in range(len(clients))]
    refused = [i for i in range(len(clients)) if answers[i]["http_status"] == 503]
    assert refused, codes
    assert "NONE" in codes, codes
    for i in refused:
        assert answers[i]["error_code"] == "THROTTLING_QUOTA_EXCEEDED" and answers[i]["retry_after_ms"] > 0
    assert set(codes) <= {"NONE", "THROTTLING_QUOTA_EXCEEDED"}, codes
    # a refused push did not use the client's push slot: sent again (one at a time), it is accepted
    for i in refused:
        again = clients[i].push(payload, compression="none")
        assert again["error_code"] == "NONE", again
    assert tiny_sink["server"].alive()
    for c in clients:
        c.close_connection()
