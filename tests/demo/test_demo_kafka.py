"""The demo on a real Kafka cluster: ``prod`` is the session's 3-broker Kafka, its quotas are pushed there, the demo
principals get SCRAM credentials, and the demo's real clients (``manage.py kafka_traffic``) are throttled by Kafka,
which the live monitor's samples show with the quota that applies."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.core.management import call_command

from demo.management.commands.demo_data import KAFKA_ENV, SUBSCRIPTION, SUBSCRIPTION_CONFIGS
from engine import usage_log
from engine.monitor import entity_key
from history import jobs
from kafka_wire import CLIENT_METRICS_RESOURCE, MATCH_EXACT, SOURCE_CLIENT_METRICS, AdminClient
from pipeline.recorded import MATERIAL_FRACTION
from quotas import tasks
from quotas.models import Cluster
from quotas.models.client_metrics import alter_subscription
from quotas.push import target_push
from traffic.kafka_clients import DEMO_KAFKA_TRAFFIC

pytestmark = pytest.mark.django_db
KIB = 1024


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def kafka_demo(kafka_cluster, engine_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:  # type: ignore[no-untyped-def]
    """What scripts/run_portal.sh exports before demo_data: the SASL bootstrap servers and the portal's password.

    Afterwards the demo's client-metrics subscription leaves the session's cluster (the portal's way: removed, then
    pushed): it matches every producer, and the KIP-714 tests count which clients a subscription of theirs reaches.
    """
    monkeypatch.setenv(KAFKA_ENV, kafka_cluster.bootstrap("SASL_PLAINTEXT"))
    monkeypatch.setenv("QUOTAS_KAFKA_PASSWORD_PROD", kafka_cluster.admin_credentials()["password"])
    call_command("demo_data", stdout=io.StringIO(), stderr=io.StringIO())
    cluster = Cluster.objects.get(name="prod")
    yield cluster
    alter_subscription(cluster, SUBSCRIPTION, None, None)
    target_push.push_target(cluster.pk, None)


def test_prod_is_the_real_cluster_with_its_quotas_and_the_principals_credentials(
    kafka_cluster,
    kafka_demo: Cluster,  # type: ignore[no-untyped-def]
) -> None:
    assert kafka_demo.connector == "kafka" and kafka_demo.security_protocol == "SASL_PLAINTEXT"
    assert sorted(kafka_demo.brokers.values_list("broker_id", flat=True)) == sorted(
        n.node_id for n in kafka_cluster.nodes
    )
    assert Cluster.objects.get(name="staging").connector == "engine"  # both connectors in the demo

    target_push.push_target(kafka_demo.pk, None)

    for node in kafka_cluster.nodes:
        with AdminClient(node.address("PLAINTEXT")) as client:
            held = client.describe_client_quotas([("user", MATCH_EXACT, "svc-payments-api")], strict=True)
            creds = client.describe_user_scram_credentials(sorted({s.user for s in DEMO_KAFKA_TRAFFIC}))
            (subscription,) = client.describe_configs([(CLIENT_METRICS_RESOURCE, SUBSCRIPTION, None)]).results
        assert [(v.key, v.value) for e in held.entries for v in e.values] == [("producer_byte_rate", 512 * KIB)]
        assert all(mechanisms for mechanisms in creds.values())
        # the producers' KIP-714 metrics are asked for (the previews' demand estimate reads their queue time)
        held_configs = {c.name: c.value for c in subscription.configs if c.config_source == SOURCE_CLIENT_METRICS}
        assert held_configs == SUBSCRIPTION_CONFIGS
    # a second run changes nothing and pushes nothing new
    out = io.StringIO()
    call_command("demo_data", stdout=out, stderr=io.StringIO())
    assert "nothing changed" in out.getvalue()


def test_the_demo_clients_are_throttled_by_kafka_and_the_monitor_shows_it(
    kafka_demo: Cluster, engine_redis: redis.Redis, settings: Any, tmp_path: Any
) -> None:
    target_push.push_target(kafka_demo.pk, None)
    settings.QUOTAS_LIVE_SOURCES = "prod=client"  # the clients feed prod's live samples (default: Prometheus)

    call_command("kafka_traffic", duration=15, status_every=60, stdout=io.StringIO())

    # svc-payments-api asks for 1 MiB/s against its own (user-level) 512 KiB/s per broker: Kafka throttles it
    rows = [json.loads(f[b"d"]) for _id, f in engine_redis.xrange(entity_key("prod", "produce", "svc-payments-api:"))]
    assert rows, "no sample of svc-payments-api's produce sensor"
    assert {r["src"] for r in rows} == {"client"} and {r["bound"] for r in rows} == {512 * KIB}
    assert max(r["thr_max"] for r in rows) > 0
    # svc-analytics-loader (256 KiB/s) is a member of tenant analytics' group: it is shown on the group's one sensor,
    # bound by the group's 192 KiB/s, not on its own under the <default> user's 2 MiB/s. (The session's brokers read
    # the scope of their own cluster's name, not the demo's prod, so Kafka's throttling of it is not asserted here;
    # tests/kafka/test_group_quotas.py proves the group's enforcement.)
    assert not engine_redis.exists(entity_key("prod", "produce", "svc-analytics-loader:"))
    key = entity_key("prod", "produce", "group@analytics:")
    loader = [json.loads(f[b"d"]) for _id, f in engine_redis.xrange(key)]
    assert loader and {r["bound"] for r in loader} == {192 * KIB}

    # what the clients asked for is logged at the partition's leader, and the landing task lands it for previews
    batches = usage_log.read(engine_redis, "prod")
    produced = [b for b in batches if b.quota_type == "produce" and "svc-payments-api" in b.users]
    assert produced and {b.broker for b in produced} <= set(kafka_demo.brokers.values_list("broker_id", flat=True))
    assert sum(v for b in produced for u, v in zip(b.users, b.values, strict=True) if u == "svc-payments-api") > 0
    settings.QUOTAS_LANDING_ROOT = str(tmp_path)
    landed = tasks.land()
    assert list((tmp_path / "usage").rglob("*.parquet")), landed

    # the preview's job on what landed: the records hold what Kafka let through, and the clients' samples of the same
    # sensor say Kafka was throttling it under 512 KiB/s meanwhile, so the advice says it is a lower bound
    result = jobs.run("whatif", ["--root", str(tmp_path), "--cluster", "prod", "--user=svc-payments-api", "--key",
                                 "producer_byte_rate", "--value", str(2 * 1024 * KIB), "--advice-target", "0.01"])
    recorded = result["recorded_throttling"]
    assert recorded["source"] == "client" and result["recorded_quota"] == 512 * KIB
    assert result["recorded_throttled_fraction"] >= MATERIAL_FRACTION and recorded["material"]
    advice = result["advice"]
    assert advice["lower_bound"] and "under 512 KiB/s" in advice["note"]
