"""``python manage.py prometheus_source --cluster prod --url http://127.0.0.1:9090``: Kafka's own quota sensors, read
from Prometheus (the brokers' JMX exporter), as the live samples of a Kafka cluster (``observe.kafka_quotas``).

Once a second (``--interval``) it asks Prometheus for every quota sensor of the cluster's brokers (``--match
LABEL=VALUE`` picks the cluster's series when Prometheus scrapes several; the project's Prometheus labels them
``cluster=<runner's name>``) and publishes them per broker into the monitor's streams (``"src": "prometheus"``), each
with the quota the portal resolves for its sensor tags: ``effective_client_quotas`` (``effective_ip_quota`` for
per-ip connection sensors), read in this thread and kept for a few seconds, or until a change lands on the brokers,
so the first sample under a new quota carries it.
Basic auth: ``--username`` with the password in ``$QUOTAS_PROMETHEUS_PASSWORD``; a bearer token in
``$QUOTAS_PROMETHEUS_TOKEN``. Runs until SIGTERM / SIGINT (or ``--duration`` seconds; ``--once`` prints one poll).
One source feeds a cluster's live samples (``quotas.management.live_sources``): it refuses a cluster that
``QUOTAS_LIVE_SOURCES`` gives to its clients.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from engine.groups import TAG_PREFIX
from engine.monitor import CONNECTION
from observe.kafka_quotas import Entity, Naming, PrometheusSource, SamplePublisher, SourceLoop
from observe.prometheus import PrometheusClient, PrometheusError
from quotas.choices import ConnectorKind
from quotas.management.live_sources import PROMETHEUS, applied_stamp, live_source
from quotas.models import Cluster, GroupValue, effective_client_quotas, effective_ip_quota

#: quota type of a sample -> the key whose bound it carries
KEY_OF = {
    "produce": "producer_byte_rate",
    "fetch": "consumer_byte_rate",
    "request": "request_percentage",
    "controller_mutation": "controller_mutation_rate",
}
BOUND_TTL_S = 5.0  # a resolved bound is used this long before it is read again
RESOLVE_PER_TICK = 200  # at most this many stale bounds are read again per tick (new sensors always are)


class Bounds:
    """The quota of each sensor, resolved with the portal's models and kept for ``BOUND_TTL_S``, or until a change
    lands on the brokers (``applied_stamp``, looked at once a second)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._cache: dict[Entity, tuple[float | None, float]] = {}
        self._budget = RESOLVE_PER_TICK
        self._tick = 0.0
        self._stamp: int | None = None

    def resolve(self, entity: Entity) -> float | None:
        if entity.quota_type == CONNECTION:
            if not entity.tags.startswith("ip:"):
                return None  # a listener's rate limit is a broker config, not a client quota
            try:
                return effective_ip_quota(self.cluster, entity.tags[3:]).value
            except ValueError:
                return None
        key = KEY_OF.get(entity.quota_type)
        user = entity.user or ""
        if user.startswith(TAG_PREFIX) and not entity.client_id:  # a group's sensor (the quota callback's tags)
            row = GroupValue.objects.filter(group__cluster=self.cluster, group__name=user[len(TAG_PREFIX):], key=key)
            return row.values_list("value", flat=True).first()
        found = {q.key: q for q in effective_client_quotas(self.cluster, entity.user or "", entity.client_id or "")}
        q = found.get(key) if key else None
        # the resolver names the sensor it bounds: a bound for other tags (a sensor Kafka keeps after the quotas
        # changed, until it expires) is not this sensor's
        return q.value if q is not None and q.tags == entity.tags else None

    def __call__(self, entity: Entity) -> float | None:
        now = time.monotonic()
        if now - self._tick >= 1.0:  # a new second: a new budget of re-reads, and has a change landed?
            self._tick, self._budget = now, RESOLVE_PER_TICK
            stamp = applied_stamp(self.cluster)
            if stamp != self._stamp:
                self._stamp = stamp
                self._cache.clear()
        hit = self._cache.get(entity)
        if hit is not None and (now - hit[1] < BOUND_TTL_S or self._budget <= 0):
            return hit[0]
        self._budget -= hit is not None
        value = self.resolve(entity)
        self._cache[entity] = (value, now)
        return value


def _pairs(values: list[str], what: str) -> dict[str, str]:
    out = {}
    for text in values:
        name, sep, value = text.partition("=")
        if not sep or not name:
            raise CommandError(f"{what} is NAME=VALUE, not {text!r}")
        out[name] = value
    return out


class Command(BaseCommand):
    help = "Publish Kafka's quota sensors, read from Prometheus, as a Kafka cluster's live samples."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--cluster", default="prod", help="The portal's Kafka cluster (default prod).")
        parser.add_argument("--url", default=os.environ.get("QUOTAS_PROMETHEUS_URL", ""),
                            help="Prometheus's base URL (default $QUOTAS_PROMETHEUS_URL).")
        parser.add_argument("--match", action="append", default=[], metavar="LABEL=VALUE",
                            help="Only series with this label value, e.g. cluster=dev (repeatable).")
        parser.add_argument("--username", default=None, help="Basic auth user (password: $QUOTAS_PROMETHEUS_PASSWORD).")
        parser.add_argument("--interval", type=float, default=1.0, metavar="S", help="Seconds between polls.")
        parser.add_argument("--window", type=float, default=3.0, metavar="S",
                            help="How old a series' newest sample may be (a few scrape intervals; default 3).")
        parser.add_argument("--members-window", type=float, default=30.0, metavar="S",
                            help="The range of the rate of quota groups' member request counters (a few scrape "
                                 "intervals; default 30; 0: not read).")
        parser.add_argument("--metric", action="append", default=[], metavar="TYPE.FIELD=NAME",
                            help="Another metric name, e.g. produce.rate=kafka_server_produce_byte_rate (repeatable).")
        parser.add_argument("--label", action="append", default=[], metavar="ROLE=NAME",
                            help="Another label name, e.g. client_id=clientId (repeatable; roles: user, client_id, "
                                 "broker, instance, listener, ip).")
        parser.add_argument("--no-connections", action="store_true", help="Leave the connection sensors out.")
        parser.add_argument("--duration", type=float, default=None, metavar="S", help="Stop after S seconds.")
        parser.add_argument("--once", action="store_true",
                            help="Poll once, print the samples as JSON, publish nothing.")
        parser.add_argument("--status-every", type=float, default=30.0, metavar="S")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=options["cluster"]).first()
        if cluster is None or cluster.connector != ConnectorKind.KAFKA:
            raise CommandError(f"No Kafka cluster named {options['cluster']!r}.")
        if not options["url"]:
            raise CommandError("No Prometheus URL: --url or $QUOTAS_PROMETHEUS_URL.")
        try:
            source_of_cluster = live_source(cluster.name)
        except ValueError as e:
            raise CommandError(str(e)) from e
        if source_of_cluster != PROMETHEUS and not options["once"]:
            raise CommandError(
                f"Cluster {cluster.name!r}'s live samples come from its {source_of_cluster}s (QUOTAS_LIVE_SOURCES); "
                f"two sources would overwrite each other's samples. Set {cluster.name}=prometheus there (or leave "
                "the cluster out) to publish Kafka's own sensors."
            )
        try:
            naming = Naming().with_overrides(_pairs(options["metric"], "--metric"), _pairs(options["label"], "--label"))
            client = PrometheusClient(
                options["url"], username=options["username"],
                password=os.environ.get("QUOTAS_PROMETHEUS_PASSWORD") if options["username"] else None,
                bearer_token=os.environ.get("QUOTAS_PROMETHEUS_TOKEN") or None,
            )
        except ValueError as e:
            raise CommandError(str(e)) from e
        bounds = Bounds(cluster)
        source = PrometheusSource(
            client, cluster.name, bound=bounds, naming=naming, selector=_pairs(options["match"], "--match"),
            window_s=options["window"], connections=not options["no_connections"],
            members_window_s=options["members_window"] or None,
        )
        if options["once"]:
            try:
                poll = source.poll()
            except PrometheusError as e:
                raise CommandError(str(e)) from e
            self.stdout.write(json.dumps({"series": poll.series, "skipped": poll.skipped, "samples": poll.samples}))
            return
        publisher = SamplePublisher(redis.Redis.from_url(settings.QUOTAS_REDIS_URL, socket_timeout=5), cluster.name)
        stop = {"now": False}
        last = {"error": "", "status": time.monotonic()}

        def on_signal(signum: int, _frame: Any) -> None:
            stop["now"] = True

        def on_error(e: Exception) -> None:
            if str(e) != last["error"]:  # each new error once, not once a second
                last["error"] = str(e)
                self.stderr.write(f"prometheus_source: {e}")

        def on_published(poll: Any, brokers: list[int], at_ms: float) -> None:
            if time.monotonic() - last["status"] >= options["status_every"]:
                last["status"] = time.monotonic()
                self.stdout.write(f"prometheus_source: {loop.polls} polls, {loop.published} samples published, "
                                  f"{loop.failures} failures; last poll {poll.series} series, {poll.query_ms:.0f} ms")
                sys.stdout.flush()

        loop = SourceLoop(source, publisher, interval_s=options["interval"], on_published=on_published,
                          on_error=on_error)
        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        self.stdout.write(f"prometheus_source: {cluster.name} from {client.url}, every {options['interval']:g}s")
        try:
            loop.run(lambda: stop["now"], duration_s=options["duration"])
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            client.close()
            self.stdout.write(f"prometheus_source: stopped; {loop.polls} polls, {loop.published} samples published, "
                              f"{loop.failures} failures")
