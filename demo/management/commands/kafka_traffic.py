"""``python manage.py kafka_traffic``: the demo's real clients on the demo's Kafka cluster (``traffic.kafka_clients``).

The clients sign in as the demo principals (their SCRAM credentials are made by ``demo_data``); what they ask for
is logged as usage (one record per message sent, per batch fetched, at the partition's leader) for the history
and the what-if, and what they see of Kafka's throttling is published as live samples of the cluster, each with
the quota that applies to it (the portal's effective-quota resolver, re-read every few seconds so an approved
change shows at once), as ``"src": "client"``, when the cluster's live samples are its clients'
(``QUOTAS_LIVE_SOURCES``, ``quotas.management.live_sources``); otherwise (the default: Prometheus feeds them) the
clients only log their usage and what they saw goes to this command's log. Runs until SIGTERM / SIGINT (or
``--duration`` seconds).
"""

from __future__ import annotations

import signal
import sys
import time
from collections import defaultdict
from typing import Any

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from engine import usage_log
from engine.monitor import Sampler
from quotas.choices import ConnectorKind
from quotas.management.live_sources import CLIENT, applied_stamp, live_source
from quotas.models import Cluster, effective_client_quotas
from quotas.push.address import kafka_credentials
from traffic.kafka_clients import DEMO_KAFKA_TRAFFIC, KafkaTraffic

#: quota type of a sample -> the key whose bound it carries
KEY_OF = {
    "produce": "producer_byte_rate",
    "fetch": "consumer_byte_rate",
    "controller_mutation": "controller_mutation_rate",
}


class Command(BaseCommand):
    help = "Run the demo's real Kafka clients (SCRAM principals, some above their quotas) on a Kafka cluster."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--cluster", default="prod", help="The portal's Kafka cluster (default prod).")
        parser.add_argument("--duration", type=float, default=None, metavar="S", help="Stop after S seconds.")
        parser.add_argument("--status-every", type=float, default=30.0, metavar="S")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=options["cluster"]).first()
        if cluster is None or cluster.connector != ConnectorKind.KAFKA:
            raise CommandError(f"No Kafka cluster named {options['cluster']!r} (demo_data makes prod one when "
                               "QUOTAS_DEMO_KAFKA is set).")
        creds = kafka_credentials(cluster)
        if not creds.username or not creds.password:
            raise CommandError(f"Cluster {cluster.name!r} has no SASL user and password ({cluster.password_env}).")
        bootstrap = cluster.bootstrap_servers
        try:
            publishes = live_source(cluster.name) == CLIENT
        except ValueError as e:
            raise CommandError(str(e)) from e
        client = redis.Redis.from_url(settings.QUOTAS_REDIS_URL, socket_timeout=5)
        samplers: dict[int, Sampler] = {}
        bounds: dict[tuple[str, str, str], tuple[str, float | None]] = {}

        def refresh_bounds() -> None:
            """Which quota applies to each client, read here (the main thread) every few seconds: the clients'
            statistics callbacks run on librdkafka's threads and only read this dict."""
            for spec in DEMO_KAFKA_TRAFFIC:
                found = {q.key: q for q in effective_client_quotas(cluster, spec.user, spec.client_id)}
                for quota_type, key in KEY_OF.items():
                    q = found.get(key)
                    tags = q.tags if q is not None and q.tags else f"{spec.user}:{spec.client_id}"
                    bounds[(spec.user, spec.client_id, quota_type)] = (tags, q.value if q is not None else None)

        def sensor(user: str, client_id: str, quota_type: str) -> tuple[str, float | None]:
            return bounds.get((user, client_id, quota_type), (f"{user}:{client_id}", None))

        def publish(samples: list[dict[str, Any]]) -> None:
            per_broker: dict[int, list[dict[str, Any]]] = defaultdict(list)
            for s in samples:
                per_broker[s["b"]].append(s)
            for broker_id, rows in per_broker.items():
                sampler = samplers.setdefault(broker_id, Sampler(client, cluster.name, broker_id, {}))
                sampler.publish(rows, int(time.time() * 1000))

        def usage(quota_type: str, broker_id: int, records: list[tuple[str, str, float, int]]) -> None:
            usage_log.append(client, cluster.name, broker_id, quota_type, records)

        traffic = KafkaTraffic(cluster.name, bootstrap, DEMO_KAFKA_TRAFFIC, sensor=sensor,
                               publish=publish if publishes else None, usage=usage)
        traffic.ensure_topics(creds.username, creds.password)
        refresh_bounds()
        stop = {"now": False}

        def on_signal(signum: int, _frame: Any) -> None:
            stop["now"] = True

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        traffic.start()
        self.stdout.write(f"kafka_traffic: {len(DEMO_KAFKA_TRAFFIC)} clients on {cluster.name} ({bootstrap}); live "
                          + ("samples: what the clients see" if publishes else
                             "samples come from Prometheus (QUOTAS_LIVE_SOURCES): the clients log their usage only"))
        started = last = read = time.monotonic()
        stamp = applied_stamp(cluster)
        try:
            while not stop["now"]:
                time.sleep(0.5)
                now = time.monotonic()
                landed = applied_stamp(cluster)
                if now - read >= 5.0 or landed != stamp:  # a change that reached the brokers shows at once
                    read, stamp = now, landed
                    refresh_bounds()
                if options["duration"] is not None and now - started >= options["duration"]:
                    break
                if now - last >= options["status_every"]:
                    last = now
                    self.stdout.write(f"kafka_traffic: seen {traffic.seen}; errors {traffic.errors[-3:]}")
                    sys.stdout.flush()
        finally:
            traffic.stop()
            self.stdout.write(f"kafka_traffic: stopped; seen {traffic.seen}")
