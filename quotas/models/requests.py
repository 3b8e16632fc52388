"""Self-service quota requests and the decisions on them.

The state machine (transitions in ``quotas.workflow``)::

    submitted ──approve──▶ approved ──▶ applying ──▶ applied ──(boost expiry)──▶ expired
        │                     │            └──────▶ failed   (a broker refused the push)
        ├──reject──▶ rejected └──────────────────▶ failed   (desired state refused the change)
        └──withdraw──▶ withdrawn

Approving writes the desired state in the approval's transaction and moves the request to
``applying``; it becomes ``applied`` once every broker holds the desired-state version of the
change (``quotas.push`` records that per broker).

Every move is announced after its commit with ``request_changed`` (``announce``), which the notifications
(``quotas.notify``: email, webhooks) listen to: the models know neither them nor Celery, and a transaction that
rolls back announces nothing. Subscription requests (``client_metrics``) and plan requests (``plans``) go through
the same states and are announced the same way, the signal's sender naming the model.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import models, transaction
from django.db.models import Q
from django.dispatch import Signal
from django.utils import timezone

from engine.entities import display_name, entity_path
from quotas.choices import BudgetScope, QuotaKey
from quotas.models.clusters import Cluster
from quotas.models.tenants import Tenant


class RequestState(models.TextChoices):
    SUBMITTED = "submitted", "Submitted, waiting for an admin"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    WITHDRAWN = "withdrawn", "Withdrawn by the tenant"
    APPLYING = "applying", "Being pushed to the brokers"
    APPLIED = "applied", "Applied"
    FAILED = "failed", "Failed to apply"
    EXPIRED = "expired", "Boost expired, previous value restored"


#: Allowed moves; anything else is a conflict (the request was decided or finished meanwhile).
TRANSITIONS: dict[str, frozenset[str]] = {
    RequestState.SUBMITTED: frozenset({RequestState.APPROVED, RequestState.REJECTED, RequestState.WITHDRAWN}),
    RequestState.APPROVED: frozenset({RequestState.APPLYING, RequestState.APPLIED, RequestState.FAILED}),
    RequestState.APPLYING: frozenset({RequestState.APPLIED, RequestState.FAILED}),
    RequestState.APPLIED: frozenset({RequestState.EXPIRED}),
    RequestState.REJECTED: frozenset(),
    RequestState.WITHDRAWN: frozenset(),
    RequestState.FAILED: frozenset(),
    RequestState.EXPIRED: frozenset(),
}


class QuotaRequest(models.Model):
    """A tenant's request to set one client quota key of one user/client-id entity on a cluster, with the value's
    budget scope (per broker, or a cluster-wide budget; decided when it is submitted: what the tenant asked for, else
    the scope the value has, else per broker).

    ``expires_at`` makes it a time-boxed boost: at expiry ``previous_value`` and ``previous_budget_scope``
    (captured when applied; null = there was no value) come back on their own.

    ``submitted_against`` is what the key held when the request was submitted (``{key: {"value", "budget_scope"}}``,
    both null for no value): approving it once that moved on needs a confirmation (``quotas.models.staleness``).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="quota_requests")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="quota_requests")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="quota_requests")
    group = models.ForeignKey(
        "quotas.QuotaGroup", null=True, blank=True, on_delete=models.SET_NULL, related_name="requests",
        help_text="A group quota's request: the group (user and client_id then null).",
    )
    group_name = models.CharField(max_length=64, blank=True, help_text="The group's name (kept if it is deleted).")
    user = models.CharField(max_length=255, null=True, blank=True, help_text="Principal; '<default>' never.")
    client_id = models.CharField(max_length=255, null=True, blank=True)
    key = models.CharField(max_length=32, choices=QuotaKey.choices)
    value = models.FloatField()
    budget_scope = models.CharField(
        max_length=16,
        choices=BudgetScope.choices,
        default=BudgetScope.PER_BROKER,
        help_text="The value's budget scope once applied: per_broker (Kafka's meaning) or cluster_wide.",
    )
    reason = models.TextField(blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="A boost: the previous value returns then.")
    state = models.CharField(max_length=16, choices=RequestState.choices, default=RequestState.SUBMITTED)
    previous_value = models.FloatField(null=True, blank=True, help_text="The value before applying; null = none.")
    previous_budget_scope = models.CharField(
        max_length=16, choices=BudgetScope.choices, null=True, blank=True,
        help_text="The budget scope of the value before applying; null = no value.",
    )
    applied_version = models.PositiveBigIntegerField(null=True, blank=True)
    failure = models.TextField(blank=True, help_text="Why applying failed.")
    submitted_against = models.JSONField(
        null=True, blank=True,
        help_text='The value it was submitted against: {key: {"value", "budget_scope"}} (both null: no value); '
        "null: not recorded (decided before it was kept).",
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-pk"]
        indexes = [models.Index(fields=["state", "expires_at"], name="quotas_request_due_boosts")]
        constraints = [
            models.CheckConstraint(condition=Q(value__gt=0), name="quotas_request_value_positive"),
            models.CheckConstraint(
                condition=Q(user__isnull=False) | Q(client_id__isnull=False) | ~Q(group_name=""),
                name="quotas_request_names_entity_or_group",
            ),
            models.CheckConstraint(condition=Q(state__in=RequestState.values), name="quotas_request_known_state"),
        ]

    def __str__(self) -> str:
        scope = " cluster-wide" if self.cluster_wide else ""
        return f"#{self.pk} {self.cluster.name}:{self.entity} {self.key}={self.value!r}{scope} ({self.state})"

    @property
    def cluster_wide(self) -> bool:
        return self.budget_scope == BudgetScope.CLUSTER_WIDE

    @property
    def entity(self) -> str:
        """Kafka's config path of the entity, e.g. ``/config/users/alice/clients/app``; a group's ``/groups/<name>``."""
        if self.group_name:
            return f"/groups/{self.group_name}"
        return entity_path(self.user, self.client_id)

    @property
    def display(self) -> str:
        """The entity in words, as pages, mails and webhooks name it: ``svc-a (all client-ids)``, ``group payments``."""
        if self.group_name:
            return f"group {self.group_name}"
        return display_name(self.user, self.client_id)

    @property
    def is_boost(self) -> bool:
        return self.expires_at is not None


class Decision(models.TextChoices):
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"


class DecisionReason(models.TextChoices):
    """Why a decision was made, where the portal knows it (beside the admin's comment)."""

    NONE = "", "—"
    SUPERSEDED = "superseded", "Superseded: the value changed since it was submitted"


class Approval(models.Model):
    """An admin's decision on a request. One per request (the database says so too): exactly one decision counts."""

    request = models.OneToOneField(QuotaRequest, on_delete=models.CASCADE, related_name="approval")
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="quota_approvals")
    decision = models.CharField(max_length=16, choices=Decision.choices)
    decision_reason = models.CharField(max_length=16, choices=DecisionReason.choices, blank=True, default="")
    comment = models.TextField(blank=True)
    decided_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"#{self.request_id} {self.decision} by {self.approver}"


#: Sent after the commit that moved a request (or created it): the sender is its model (``QuotaRequest``,
#: ``SubscriptionRequest`` or ``PlanRequest``: ids are per model, so a receiver checks it), with ``request_id``,
#: ``state`` (the new one), ``actor_id`` (None: the portal itself, e.g. a push), ``comment`` (the reason, the
#: decision's comment, why it failed) and ``at`` (when it moved). ``quotas.notify`` connects to it and queues the
#: notifications.
request_changed = Signal()


def announce(
    request: models.Model, state: str, actor: AbstractBaseUser | None, comment: str = "", at: datetime | None = None
) -> None:
    """Send ``request_changed`` (sender: the request's model) once the current transaction commits (nothing if it
    rolls back).

    Outside a transaction it is sent at once; values are copied now, so later changes of ``request`` do not leak in.
    """
    sent = {
        "request_id": request.pk,
        "state": str(state),
        "actor_id": actor.pk if actor is not None else None,
        "comment": comment,
        "at": at or timezone.now(),
    }
    # send_robust: a notification that cannot be queued must not turn a committed transition into an error
    model = type(request)
    transaction.on_commit(lambda: request_changed.send_robust(sender=model, **sent))
