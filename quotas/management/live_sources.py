"""Which source feeds a Kafka cluster's live samples: one per cluster, so two never overwrite each other.

A Kafka cluster's live streams (``mon:{<cluster>}:*``: the charts, "throttled now", the overview and the landed
history) are fed by exactly one of:

- ``prometheus``: Kafka's own quota sensors, read from Prometheus by ``manage.py prometheus_source`` (the
  default: what every Kafka shop has, for every client of the cluster);
- ``client``: what the demo's own clients saw of Kafka's answers (``manage.py kafka_traffic``, librdkafka's
  statistics), for a cluster without Prometheus.

``QUOTAS_LIVE_SOURCES`` (settings, from the environment) names the exceptions: ``"prod=client,lab=prometheus"``;
an unlisted Kafka cluster is ``prometheus``. The other source still runs where it has more to give: the demo's
clients keep logging their usage records (per message, for the what-if) whatever feeds the charts.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.conf import settings
from django.db.models import Max

from quotas.models import Cluster, Push, PushState

PROMETHEUS, CLIENT = "prometheus", "client"
SOURCES = (PROMETHEUS, CLIENT)
DEFAULT = PROMETHEUS


def parse(text: str) -> dict[str, str]:
    """``"prod=client,lab=prometheus"`` -> ``{"prod": "client", "lab": "prometheus"}``; ValueError naming the
    accepted form for anything else."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, source = item.partition("=")
        name, source = name.strip(), source.strip()
        if not sep or not name or source not in SOURCES:
            raise ValueError(
                f"QUOTAS_LIVE_SOURCES: {item!r} is not CLUSTER=SOURCE with SOURCE one of {', '.join(SOURCES)} "
                "(e.g. prod=client)."
            )
        out[name] = source
    return out


def live_source(cluster: str, table: Mapping[str, str] | None = None) -> str:
    """The source that feeds ``cluster``'s live samples (``prometheus`` unless ``QUOTAS_LIVE_SOURCES`` says)."""
    if table is None:
        table = parse(getattr(settings, "QUOTAS_LIVE_SOURCES", ""))
    return table.get(cluster, DEFAULT)


def applied_stamp(cluster: Cluster) -> int:
    """The newest desired-state version that landed on the cluster's brokers (-1: none yet).

    The live sources resolve each sensor's bound from desired state and keep it a few seconds; when this moves, a
    change reached the brokers, so they read every bound again: the first sample taken under a new quota carries
    it, and a rate is never measured against the quota it replaced.
    """
    found = Push.objects.filter(cluster=cluster, state=PushState.APPLIED).aggregate(v=Max("version"))
    return -1 if found["v"] is None else int(found["v"])
