"""Whether each cluster's cluster-wide budgets are enforced as budgets: ``coordinated``, ``fallback`` or ``off``.

The brokers' budget plugin (an engine broker: ``traffic.engine_budgets``) records each broker's last round in the
cluster's key space (``qb:{<cluster>}:brokers``, ``engine.budget_store``); the state is
``BudgetStore.enforcement`` over those rounds and the cluster's registered brokers, on Redis's clock:

- ``coordinated``: every broker's last round is within the lease: shares follow demand;
- ``fallback``: a broker's round is older than the lease (Redis away, a broker down, a plugin stuck): it enforces
  its last shares, then budget / live brokers (never unlimited, never zero). Degraded, not down;
- ``off``: no broker has ever reported: no plugin runs, so Kafka enforces each cluster-wide value on every broker
  (brokers x the budget), and no group quota or exempt principal applies. Degraded only when the cluster holds
  cluster-wide values, groups or exempt principals;
- ``unknown``: the Redis holding the rounds could not be read.

Read where the plugin writes: a Kafka cluster's ``QUOTAS_BUDGET_REDIS_URL`` (default the engine's Redis), an engine
cluster's brokers' Redis. A cluster_wide engine cluster (one namespace) has no budget scopes and no state here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import redis
from django.conf import settings
from django.db.models import Count

from engine.budget_store import COORDINATED, FALLBACK, OFF, BudgetStore
from engine.budgets import BudgetParams
from engine.redis_backend import connect
from quotas.choices import BudgetScope, ConnectorKind, QuotaScope
from quotas.connector_registry import budget_redis_url
from quotas.models import Broker, Cluster, ExemptPrincipal, GroupValue, QuotaGroup, QuotaValue

UNKNOWN = "unknown"
STATES = (COORDINATED, FALLBACK, OFF)
#: How long reading the rounds may take (health checks and scrapes must answer fast).
READ_TIMEOUT_S = 1.0
LEASE_MS = BudgetParams.lease_ms

_clients: dict[str, redis.Redis] = {}


def _client(url: str) -> redis.Redis:
    if url not in _clients:
        _clients[url] = connect(url, READ_TIMEOUT_S)
    return _clients[url]


@dataclass(frozen=True)
class Enforcement:
    """One cluster's budget enforcement: its state, the brokers' last rounds and how many values are budgets."""

    cluster: str
    state: str
    budgets: int  # cluster-wide quota values
    brokers: int  # registered brokers
    rounds_ago_ms: dict[int, int] = field(default_factory=dict)  # broker id -> how long ago its last round was
    error: str | None = None
    groups: int = 0  # group quotas, which only the brokers' quota callback enforces
    exempt: int = 0  # exempt principals, likewise

    @property
    def reporting(self) -> int:
        """Brokers whose last round is within the lease."""
        return sum(1 for ago in self.rounds_ago_ms.values() if ago <= LEASE_MS)

    @property
    def degraded(self) -> bool:
        """Budgets are not shared out by demand: a broker falls back, or no plugin runs while budgets exist."""
        needed = self.budgets > 0 or self.groups > 0 or self.exempt > 0
        return self.state == FALLBACK or (self.state in (OFF, UNKNOWN) and needed)

    @property
    def reason(self) -> str:
        """What the state means for this cluster, in a sentence an operator can act on."""
        n = f"{self.budgets} cluster-wide value{'s' if self.budgets != 1 else ''}"
        if self.state == COORDINATED:
            return (f"Every broker's budget plugin took its shares within the last {LEASE_MS // 1000} s: {n} shared "
                    "out by demand.")
        if self.state == FALLBACK:
            late = sorted(b for b, ago in self.rounds_ago_ms.items() if ago > LEASE_MS)
            missing = self.brokers - len(self.rounds_ago_ms)
            who = []
            if late:
                who.append(f"broker{'s' if len(late) > 1 else ''} {', '.join(map(str, late))} last reported "
                           f"{max(self.rounds_ago_ms[b] for b in late) // 1000} s ago")
            if missing > 0:
                who.append(f"{missing} registered broker{'s' if missing > 1 else ''} never reported")
            return (f"{'; '.join(who) or 'a broker is late'} (lease {LEASE_MS // 1000} s): those brokers enforce their "
                    "last shares, then budget / live brokers; check their plugin and its Redis.")
        if self.state == OFF:
            if self.budgets:
                return (f"No broker's budget plugin has reported, so Kafka enforces each of the {n} on every broker "
                        "(up to brokers x the budget): install the plugin (client.quota.callback.class) or make the "
                        "values per_broker.")
            if self.groups or self.exempt:
                return (f"No broker's quota callback has reported, so its {self.groups} group quota(s) and "
                        f"{self.exempt} exempt principal(s) are not enforced (members get Kafka's own quotas): install "
                        "the plugin (client.quota.callback.class) on every broker.")
            return "No broker's budget plugin has reported; the cluster holds no cluster-wide value."
        return f"The Redis of the brokers' rounds could not be read ({self.error})."

    def as_dict(self) -> dict[str, object]:
        return {
            "state": self.state,
            "degraded": self.degraded,
            "cluster_wide_values": self.budgets,
            "groups": self.groups,
            "exempt_principals": self.exempt,
            "brokers": self.brokers,
            "reporting": self.reporting,
            "lease_ms": LEASE_MS,
            "rounds": [{"broker": b, "ms_ago": ago} for b, ago in sorted(self.rounds_ago_ms.items())],
            "reason": self.reason,
        }


def has_budgets(cluster: Cluster) -> bool:
    """Whether the cluster can hold budget scopes: a Kafka cluster, or an engine cluster of per-broker namespaces."""
    return cluster.connector == ConnectorKind.KAFKA or cluster.scope == QuotaScope.PER_BROKER


def rounds_url(cluster: Cluster, engine_urls: Iterable[str] = ()) -> str:
    """The Redis holding the cluster's budget rounds: the budget Redis for Kafka, the brokers' engine Redis else."""
    if cluster.connector == ConnectorKind.KAFKA:
        return budget_redis_url(settings)
    own = next((u for u in engine_urls if u), "")
    return own or settings.QUOTAS_ENGINE_REDIS_URL or settings.QUOTAS_REDIS_URL


def enforcement(cluster: Cluster) -> Enforcement | None:
    """``enforcements`` of one cluster; None for a cluster without budget scopes."""
    found = enforcements([cluster])
    return found[0] if found else None


def enforcements(clusters: Iterable[Cluster] | None = None) -> list[Enforcement]:
    """The enforcement of every cluster that can hold budgets (all of them by default), in name order: a few
    aggregate queries and two Redis calls per cluster, each given at most READ_TIMEOUT_S."""
    chosen = sorted(Cluster.objects.all() if clusters is None else clusters, key=lambda c: c.name)
    chosen = [c for c in chosen if has_budgets(c)]
    if not chosen:
        return []
    pks = [c.pk for c in chosen]
    budgets = dict(
        QuotaValue.objects.filter(entity__cluster_id__in=pks, budget_scope=BudgetScope.CLUSTER_WIDE)
        .values_list("entity__cluster_id").annotate(n=Count("pk")).order_by()
    )
    for cluster_id, n in (GroupValue.objects.filter(group__cluster_id__in=pks, budget_scope=BudgetScope.CLUSTER_WIDE)
                          .values_list("group__cluster_id").annotate(n=Count("pk")).order_by()):
        budgets[cluster_id] = budgets.get(cluster_id, 0) + n  # a group's cluster-wide value is a budget too
    groups = dict(QuotaGroup.objects.filter(cluster_id__in=pks).values_list("cluster_id").annotate(n=Count("pk"))
                  .order_by())
    exempt = dict(ExemptPrincipal.objects.filter(cluster_id__in=pks).values_list("cluster_id")
                  .annotate(n=Count("pk")).order_by())
    brokers: dict[int, list[str]] = {pk: [] for pk in pks}
    for cluster_id, url in Broker.objects.filter(cluster_id__in=pks).values_list("cluster_id", "engine_url"):
        brokers[cluster_id].append(url)
    out = []
    for cluster in chosen:
        n, registered = budgets.get(cluster.pk, 0), len(brokers[cluster.pk])
        try:
            store = BudgetStore(_client(rounds_url(cluster, brokers[cluster.pk])), cluster.name)
            now = store.redis_now_ms()
            state = store.enforcement(now, LEASE_MS, brokers=registered or None)
            ago = {b: max(0, now - t) for b, t in store.broker_rounds().items()}
        except (redis.RedisError, OSError, ValueError) as e:
            out.append(Enforcement(cluster.name, UNKNOWN, n, registered, error=f"{type(e).__name__}: {e}",
                                   groups=groups.get(cluster.pk, 0), exempt=exempt.get(cluster.pk, 0)))
            continue
        out.append(Enforcement(cluster.name, state, n, registered, ago, groups=groups.get(cluster.pk, 0),
                               exempt=exempt.get(cluster.pk, 0)))
    return out
