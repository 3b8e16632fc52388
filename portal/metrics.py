"""The portal's own metrics for Prometheus (``GET /metrics``, text format 0.0.4, with ``prometheus-client``).

Everything is read at scrape time from where it already lives (the database, Redis), so several portal replicas
and workers need no shared in-process registry and every replica answers the same: requests by state, push latency
(from commit to applied, as a cumulative histogram over the push rows), pending and failed pushes, open drift, the
Celery queues' depth, the engine's live sensors per cluster, the KIP-714 telemetry accepted and refused, and each
cluster's budget enforcement (``quotas.budgets``: one series per state, 1 for the cluster's current one).

Scraping is open unless ``QUOTAS_METRICS_TOKEN`` is set, then it needs ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from datetime import timedelta

import redis
from django.conf import settings
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from engine.monitor import latest_key
from quotas.budgets import STATES, enforcements
from quotas.models import Cluster, Drift, Push, PushState, QuotaRequest, RequestState

#: Push latency buckets, seconds (a push waits at least a Celery round trip; Kafka's verify adds broker answers).
PUSH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
QUEUES = ("celery", "pipeline", "previews")


class PortalCollector(Collector):
    """Collects the portal's figures on each scrape (aggregate queries; none grows with the rows it counts)."""

    def collect(self) -> Iterator[Metric]:
        requests = GaugeMetricFamily("quotas_requests", "Quota requests by state.", labels=["state"])
        counts = dict(QuotaRequest.objects.values_list("state").annotate(n=Count("pk")).order_by())
        for state in RequestState.values:
            requests.add_metric([state], counts.get(state, 0))
        yield requests

        pushes = GaugeMetricFamily("quotas_pushes", "Pushes not applied yet, by state and cluster.",
                                   labels=["cluster", "state"])
        rows = (
            Push.objects.filter(state__in=[PushState.PENDING, PushState.FAILED])
            .values_list("cluster__name", "state").annotate(n=Count("pk")).order_by()
        )
        for cluster, state, n in rows:
            pushes.add_metric([cluster, state], n)
        yield pushes

        yield self._push_latency()

        drift = GaugeMetricFamily("quotas_drift_open", "Open drift rows by cluster.", labels=["cluster"])
        for cluster, n in Drift.objects.filter(resolved_at=None).values_list("cluster__name").annotate(
            n=Count("pk")
        ).order_by():
            drift.add_metric([cluster], n)
        yield drift

        yield from self._redis_figures()
        yield from self._budget_figures()

    def _budget_figures(self) -> Iterator[Metric]:
        """Per cluster that can hold budgets: a series per enforcement state (1: the current one; all 0 when the
        rounds could not be read), the cluster-wide values and the brokers reporting within the lease."""
        state = GaugeMetricFamily(
            "quotas_budget_enforcement",
            "Cluster-wide budget enforcement: coordinated (shares follow demand), fallback (a broker on its last "
            "shares or budget / live brokers) or off (no plugin reported); 1 for the current state.",
            labels=["cluster", "state"],
        )
        values = GaugeMetricFamily("quotas_budget_values", "Quota values that are cluster-wide budgets.",
                                   labels=["cluster"])
        reporting = GaugeMetricFamily(
            "quotas_budget_brokers_reporting", "Brokers whose budget plugin took its shares within the lease.",
            labels=["cluster"],
        )
        for e in enforcements():
            for name in STATES:
                state.add_metric([e.cluster, name], 1 if e.state == name else 0)
            values.add_metric([e.cluster], e.budgets)
            reporting.add_metric([e.cluster], e.reporting)
        yield from (state, values, reporting)

    def _push_latency(self) -> HistogramMetricFamily:
        waited = ExpressionWrapper(F("applied_at") - F("created"), output_field=DurationField())
        applied = Push.objects.filter(state=PushState.APPLIED, applied_at__isnull=False).annotate(waited=waited)
        aggregates = {
            f"le_{i}": Count("pk", filter=Q(waited__lte=timedelta(seconds=b))) for i, b in enumerate(PUSH_BUCKETS)
        }
        found = applied.aggregate(n=Count("pk"), total=Sum("waited"), **aggregates)
        total_s = found["total"].total_seconds() if found["total"] is not None else 0.0
        buckets = [(str(b), found[f"le_{i}"]) for i, b in enumerate(PUSH_BUCKETS)] + [("+Inf", found["n"])]
        histogram = HistogramMetricFamily(
            "quotas_push_latency_seconds",
            "From a version's commit to its push applied on the target (a Kafka cluster: every broker answering it).",
            labels=[],
        )
        histogram.add_metric([], buckets, sum_value=total_s)
        return histogram

    def _redis_figures(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("quotas_celery_queue_depth", "Messages waiting in a Celery queue.", labels=["queue"])
        sensors = GaugeMetricFamily("quotas_live_sensors", "Sensors with a live sample, per cluster (engine, "
                                    "clients, Prometheus).", labels=["cluster"])
        up = GaugeMetricFamily("quotas_redis_up", "1 when the portal's Redis answered this scrape.")
        try:
            client = redis.Redis.from_url(settings.QUOTAS_REDIS_URL, socket_connect_timeout=1.0, socket_timeout=2.0)
            with client.pipeline(transaction=False) as p:
                for queue in QUEUES:
                    p.llen(queue)
                names = list(Cluster.objects.values_list("name", flat=True))
                for name in names:
                    p.hlen(latest_key(name))
                answers = p.execute()
        except (redis.RedisError, OSError):
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        for queue, n in zip(QUEUES, answers, strict=False):
            depth.add_metric([queue], n)
        for name, n in zip(names, answers[len(QUEUES):], strict=True):
            sensors.add_metric([name], n)
        yield from (up, depth, sensors)


def _authorized(request: HttpRequest) -> bool:
    token = getattr(settings, "QUOTAS_METRICS_TOKEN", "")
    if not token:
        return True
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    return hmac.compare_digest(given.encode(), token.encode())


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The portal's metrics in Prometheus text format."""
    if not _authorized(request):
        return HttpResponse("metrics need Authorization: Bearer <QUOTAS_METRICS_TOKEN>\n", status=401,
                            content_type="text/plain")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PortalCollector())
    return HttpResponse(generate_latest(registry), content_type="text/plain; version=0.0.4; charset=utf-8")
