"""KIP-714 client-metrics subscriptions of a cluster, and tenants' requests for them.

Kafka keeps a subscription as the dynamic configs of a ``client-metrics`` resource (IncrementalAlterConfigs
resource type 16): ``metrics`` (comma-separated metric-name prefixes, ``*`` = all), ``interval.ms`` (the push
interval, 100..3600000, default 300000) and ``match`` (comma-separated ``key=regex`` client selectors, each an
anchored regex; empty = every client). The rules are Kafka's ``ClientMetricsConfigs``, implemented once in
``kip714.subscriptions.validate_subscription``; this module stores what passed them.

A subscription changes only through ``alter_subscription``: validated, written, versioned (one desired-state
version, with an item per key: ``Item("client-metrics", name, key)``, None = removed), pushed to every broker
by the usual Celery path and audited, in one transaction, as ``alter_configs`` does for broker configs.
An empty ``metrics`` or ``match`` is Kafka's default (no metrics / every client), so it is not sent as an item:
the broker holds the key only when it has a value. ``interval.ms`` is always sent, so a subscription always
exists on a broker while it exists here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import models, transaction
from django.db.models import Q

from engine.errors import QuotaValidationError
from quotas.choices import EntityType
from quotas.connectors.base import CLIENT_METRICS, Item
from quotas.models.audit import AuditAction, record
from quotas.models.clusters import Cluster
from quotas.models.pushes import DesiredStateVersion
from quotas.models.requests import RequestState
from quotas.models.tenants import Tenant, owned_patterns

METRICS, INTERVAL, MATCH = "metrics", "interval.ms", "match"
SUBSCRIPTION_KEYS = (METRICS, INTERVAL, MATCH)
DEFAULT_INTERVAL_MS = 300_000
#: Kafka's resource names are at most this long in practice (the engine refuses '|' in them: its field separator).
NAME_MAX = 255
CLIENT_ID_SELECTOR = "client_id"


class ClientMetricsSubscription(models.Model):
    """One KIP-714 client-metrics subscription of a cluster, as Kafka stores it (``/config/client-metrics/<name>``)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="client_metrics")
    name = models.CharField(max_length=NAME_MAX)
    metrics = models.TextField(blank=True, help_text="Comma-separated metric-name prefixes; '*' = all; empty = none.")
    interval_ms = models.PositiveIntegerField(default=DEFAULT_INTERVAL_MS, help_text="Push interval, 100..3600000.")
    match = models.TextField(blank=True, help_text="Comma-separated key=regex client selectors; empty = every client.")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="quotas_client_metrics_unique_name"),
            models.CheckConstraint(
                condition=Q(interval_ms__gte=100) & Q(interval_ms__lte=3_600_000),
                name="quotas_client_metrics_interval_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}:{self.path}"

    @property
    def path(self) -> str:
        return subscription_path(self.name)

    @property
    def configs(self) -> dict[str, str]:
        """The subscription as Kafka's configs (empty values are Kafka's defaults and left out)."""
        return subscription_configs(self.metrics, self.interval_ms, self.match)

    @property
    def match_entries(self) -> list[tuple[str, str]]:
        return match_entries(self.match)


def subscription_path(name: str) -> str:
    return f"/config/client-metrics/{name}"


def _list_text(value: str | None) -> str:
    """A Kafka LIST config as Kafka parses it: entries split on commas and trimmed, empty entries dropped."""
    if value is None:
        return ""
    return ",".join(part.strip() for part in str(value).split(",") if part.strip())


def subscription_configs(metrics: str, interval_ms: int, match: str) -> dict[str, str]:
    configs = {INTERVAL: str(interval_ms)}
    if metrics:
        configs[METRICS] = metrics
    if match:
        configs[MATCH] = match
    return configs


def match_entries(match: str) -> list[tuple[str, str]]:
    """``key=regex`` entries of a (validated) match list, split at the first '='."""
    out = []
    for entry in _list_text(match).split(","):
        if entry:
            key, _, regex = entry.partition("=")
            out.append((key.strip(), regex.strip()))
    return out


def validate(name: str, configs: Mapping[str, Any]) -> tuple[str, int, str]:
    """Kafka's ClientMetricsConfigs rules (``kip714``); returns (metrics, interval_ms, match) as stored."""
    from kip714.subscriptions import validate_subscription

    if not isinstance(name, str) or not name:
        raise QuotaValidationError("Subscription name can't be empty")
    if "|" in name or len(name) > NAME_MAX:
        raise QuotaValidationError(
            f"A subscription name has at most {NAME_MAX} characters and no '|', got {name[:40]!r}."
        )
    text: dict[str, str] = {}
    for key, value in configs.items():
        if value is None:
            continue
        text[key] = value if isinstance(value, str) else str(value)
    subscription = validate_subscription(name, text)  # raises QuotaValidationError with Kafka's message
    if subscription.deleted:  # no configs at all: a subscription with Kafka's defaults
        return "", DEFAULT_INTERVAL_MS, ""
    canonical = subscription.to_configs()
    return canonical[METRICS], subscription.interval_ms, canonical[MATCH]


@dataclass
class SubscriptionOutcome:
    """What ``alter_subscription`` did: the subscription after it (None = deleted), the changed keys, the version."""

    version: int
    changed: bool
    subscription: ClientMetricsSubscription | None
    changes: list[tuple[str, str | None, str | None]] = field(default_factory=list)  # (key, before, after)


def alter_subscription(
    cluster: Cluster,
    name: str,
    configs: Mapping[str, Any] | None,
    actor: AbstractBaseUser | None,
    *,
    create_only: bool = False,
    update_only: bool = False,
    audit: Mapping[str, Any] | None = None,
) -> SubscriptionOutcome:
    """Create, replace (``configs``) or delete (``configs`` None) a subscription: the one way to change one.

    Validated by Kafka's rules first; then in one transaction, under the cluster's locked version row: the
    row is written, one desired-state version is bumped with the changed keys (Items of kind client-metrics,
    None = removed; a push to every broker follows the commit), and every changed key is audited
    (SUBSCRIPTION_ALTERED). ``configs`` replaces the whole subscription (a key left out gets Kafka's default).
    ``create_only`` refuses an existing name, ``update_only`` (and delete) a missing one, with NOT_FOUND.
    """
    stored = validate(name, configs) if configs is not None else None
    with transaction.atomic():
        state = DesiredStateVersion.lock(cluster)
        row = ClientMetricsSubscription.objects.filter(cluster=cluster, name=name).first()
        if row is None and (configs is None or update_only):
            raise SubscriptionNotFound(f"Cluster {cluster.name!r} has no client-metrics subscription {name!r}.")
        if row is not None and create_only:
            raise SubscriptionExists(f"Cluster {cluster.name!r} already has a client-metrics subscription {name!r}.")
        before = row.configs if row is not None else {}
        after = subscription_configs(*stored) if stored is not None else {}
        changes = [
            (key, before.get(key), after.get(key)) for key in SUBSCRIPTION_KEYS if before.get(key) != after.get(key)
        ]
        if not changes:
            return SubscriptionOutcome(state.version, False, row, [])
        if stored is None:
            assert row is not None
            row.delete()
            row = None
        else:
            metrics, interval, match = stored
            if row is None:
                row = ClientMetricsSubscription.objects.create(
                    cluster=cluster, name=name, metrics=metrics, interval_ms=interval, match=match
                )
            else:
                row.metrics, row.interval_ms, row.match = metrics, interval, match
                row.save(update_fields=["metrics", "interval_ms", "match", "updated"])
        version = state.bump({Item(CLIENT_METRICS, name, key): new for key, _old, new in changes})
        extra = dict(audit or {})
        comment = extra.pop("comment", "")
        for key, old, new in changes:
            record(
                AuditAction.SUBSCRIPTION_ALTERED,
                actor,
                cluster=cluster,
                entity=subscription_path(name),
                key=key,
                before=old,
                after=new,
                comment=(f"{comment}; " if comment else "") + f"desired-state version {version}",
                **extra,
            )
    return SubscriptionOutcome(version, True, row, changes)


class SubscriptionNotFound(QuotaValidationError):
    code = "NOT_FOUND"


class SubscriptionExists(QuotaValidationError):
    code = "CONFLICT"


# ------------------------------------------------------------------ tenants' requests


def _literal(regex: str) -> str | None:
    """The one name an anchored regex matches when it has no regex syntax (``app\\.one`` -> ``app.one``), else None."""
    out, i = [], 0
    while i < len(regex):
        c = regex[i]
        if c == "\\":
            if i + 1 >= len(regex) or regex[i + 1].isalnum():
                return None  # a class such as \\d or \\w, or a dangling backslash
            out.append(regex[i + 1])
            i += 2
            continue
        if c in ".^$*+?{}[]|()":
            return None
        out.append(c)
        i += 1
    return "".join(out)


def _prefix_regex(regex: str) -> str | None:
    """The literal prefix of ``<literal>.*`` (every client-id starting with it), else None."""
    if not regex.endswith(".*"):
        return None
    return _literal(regex[:-2])


def _owned_prefix(tenant: Tenant, prefix: str) -> bool:
    """Whether every name starting with ``prefix`` is owned: an owned pattern ``Q*`` (Q literal) with ``prefix``
    starting with Q, e.g. ``svc-a-*`` covers ``svc-a-.*`` and ``svc-a-x.*``."""
    for owned in tenant.owned_names.all():
        if owned.entity_type != EntityType.CLIENT_ID:
            continue
        head = owned.pattern[:-1] if owned.pattern.endswith("*") else None
        if head is not None and not any(c in head for c in "*?[") and prefix.startswith(head):
            return True
    return False


def match_owned_by(tenant: Tenant, match: str) -> str | None:
    """Why a tenant may not ask for a subscription with this (validated) match list, or None when it may.

    A subscription collects metrics of the clients it matches, so a tenant may only select its own clients:
    the match must have a ``client_id`` selector, and it must be either a literal name the tenant owns
    (``app-1``, ``app\\.one``) or ``<prefix>.*`` where the prefix is inside an owned ``<head>*`` pattern
    (``svc-a-.*`` under ``svc-a-*``). Other regexes (alternations, classes) are for admins. The other selectors
    (software name and version, source address and port, instance id) only narrow it further.
    """
    regexes = [regex for key, regex in match_entries(match) if key == CLIENT_ID_SELECTOR]
    if not regexes:
        return (
            "A tenant's subscription must select its own clients: add a client_id=<name> (or client_id=<prefix>.*) "
            "entry to match; a subscription without one collects every tenant's clients and is for admins."
        )
    for regex in regexes:
        name = _literal(regex)
        if name is not None:
            if not tenant.owns(EntityType.CLIENT_ID, name):
                owns = owned_patterns(tenant, EntityType.CLIENT_ID)
                return (f"Tenant {tenant.name!r} does not own the client-id {name!r}; it owns {owns}. Ask an admin "
                        "to add the client-id to the tenant if it is yours.")
            continue
        prefix = _prefix_regex(regex)
        if prefix is not None and _owned_prefix(tenant, prefix):
            continue
        return (
            f"client_id={regex} may match client-ids tenant {tenant.name!r} does not own; use a client-id it owns "
            "or '<prefix>.*' inside one of its '<prefix>*' patterns."
        )
    return None


def subscription_visible(tenants: list[Tenant], match: str) -> bool:
    """Whether a member of ``tenants`` may read a subscription (tenant isolation, issue 20).

    One without a ``client_id`` selector collects every tenant's clients, the member's too: it is shared, like a
    ``<default>`` quota. One that selects client-ids is visible only to a tenant that owns all it selects
    (``match_owned_by``), so a member never reads which client-ids another tenant's subscription names.
    """
    if not any(key == CLIENT_ID_SELECTOR for key, _ in match_entries(match)):
        return True
    return any(match_owned_by(t, match) is None for t in tenants)


class SubscriptionRequest(models.Model):
    """A tenant member's request to create, replace or delete a client-metrics subscription; an admin decides.

    It moves through the states of quota requests (``RequestState``): submitted -> approved -> applying ->
    applied (every broker holds ``applied_version``) or failed; or withdrawn / rejected. The decision is kept
    on the row (one per request: the conditional state move lets exactly one decision through).
    """

    SET, DELETE = "set", "delete"
    OPERATIONS = [(SET, "Create or replace"), (DELETE, "Delete")]

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="subscription_requests")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="subscription_requests")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="subscription_requests"
    )
    name = models.CharField(max_length=NAME_MAX)
    operation = models.CharField(max_length=8, choices=OPERATIONS, default=SET)
    metrics = models.TextField(blank=True)
    interval_ms = models.PositiveIntegerField(default=DEFAULT_INTERVAL_MS)
    match = models.TextField(blank=True)
    reason = models.TextField(blank=True)
    state = models.CharField(max_length=16, choices=RequestState.choices, default=RequestState.SUBMITTED)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="subscription_decisions",
    )
    decision_comment = models.TextField(blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    applied_version = models.PositiveBigIntegerField(null=True, blank=True)
    failure = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-pk"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=RequestState.values), name="quotas_subreq_known_state"),
            models.CheckConstraint(condition=Q(operation__in=["set", "delete"]), name="quotas_subreq_known_op"),
        ]

    def __str__(self) -> str:
        return f"subscription request #{self.pk} {self.cluster.name}:{self.path} {self.operation} ({self.state})"

    @property
    def path(self) -> str:
        return subscription_path(self.name)

    @property
    def configs(self) -> dict[str, str] | None:
        """What the subscription becomes (None: deleted)."""
        if self.operation == self.DELETE:
            return None
        return subscription_configs(self.metrics, self.interval_ms, self.match)
