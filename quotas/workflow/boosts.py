"""Boosts: quota requests with an expiry. When it comes (``expire_boosts``, run by Celery beat), what the boost replaced
comes back, or is handed to a boost applied on top of it.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from engine.units import format_exact
from quotas.choices import BudgetScope
from quotas.models import (
    Approval,
    AuditAction,
    DesiredStateVersion,
    QuotaRequest,
    RequestState,
    announce,
    audited_alter,
    record,
    set_group_values,
)
from quotas.workflow.errors import Conflict
from quotas.workflow.quota_requests import _alteration, _current_value, _load
from quotas.workflow.transitions import _move

log = logging.getLogger(__name__)


def _boosts_applied_after(request: QuotaRequest) -> list[QuotaRequest]:
    """The boosts of the same entity and key applied after ``request`` and not ended, oldest first.

    Applied after: a newer desired-state version, or the same one (a boost asking for the value in force changes
    nothing) approved later.
    """
    approved = Approval.objects.filter(request=request).values_list("pk", flat=True).first() or 0
    after = Q(applied_version__gt=request.applied_version) | Q(
        applied_version=request.applied_version, approval__pk__gt=approved
    )
    rows = QuotaRequest.objects.filter(
        after,
        cluster_id=request.cluster_id,
        user=request.user,
        client_id=request.client_id,
        group_name=request.group_name,
        key=request.key,
        expires_at__isnull=False,
        state__in=(RequestState.APPLYING, RequestState.APPLIED),
    )
    return list(rows.exclude(pk=request.pk).order_by("applied_version", "approval__pk"))


def _shown(request: QuotaRequest, value: float | None) -> str:
    return "no value" if value is None else format_exact(request.key, value)


def expire_boosts(now: datetime | None = None) -> list[int]:
    """Every applied boost whose expiry has come ends; audited. Overlapping boosts of one entity and key stack.

    A boost applied while another was in force replaced that one's value, so ``previous_value`` says what it
    gives back. When a boost ends:

    - if a later boost was applied on top of it (its ``previous_value`` is this boost's value), the later one now
      gives back what this one replaced (its ``previous_value`` is handed down), and the value is left alone; so
      however many boosts overlap, and in whatever order they end, the last to end gives back the value from
      before the first;
    - else, if the value is still the boost's own, its ``previous_value`` comes back (or the key is removed);
    - else someone changed it during the boost (an admin, a request without expiry): that change stands.

    Each boost is expired in its own transaction, under the cluster's version lock (as approvals), so one failure
    does not hold the rest and an approval never reads a value half-way through an expiry.
    """
    now = now or timezone.now()
    due = QuotaRequest.objects.filter(state=RequestState.APPLIED, expires_at__lte=now).order_by("expires_at", "pk")
    expired = []
    for pk in list(due.values_list("pk", flat=True)):
        try:
            with transaction.atomic():
                request = _load(pk)
                DesiredStateVersion.lock(request.cluster)
                _move(request, RequestState.EXPIRED)  # CONFLICT when another worker expired it first
                note = _end_boost(request)
                record(AuditAction.EXPIRED, None, request=request, before="applied", after="expired", comment=note)
                announce(request, RequestState.EXPIRED, None, note)
        except Conflict:
            continue
        except Exception:  # rolled back: the boost stays applied and the next run tries again
            log.exception("Could not expire boost #%s; retrying on the next run", pk)
            continue
        expired.append(pk)
    return expired


def _end_boost(request: QuotaRequest) -> str:
    """Give back what an ending boost replaced, or hand it to the boost on top of it; returns the audit note."""
    later = _boosts_applied_after(request)
    if later:
        above = later[0]
        # (a boost applied before budget scopes existed recorded none: its value alone says)
        if above.previous_value == request.value and above.previous_budget_scope in (None, request.budget_scope):
            QuotaRequest.objects.filter(pk=above.pk).update(
                previous_value=request.previous_value, previous_budget_scope=request.previous_budget_scope
            )
            gives = _shown(request, request.previous_value)
            return f"boost #{above.pk}, applied on top of this one, now gives back {gives} when it ends"
        replaced = _shown(request, above.previous_value)
        return f"value changed after the boost (boost #{above.pk} replaced {replaced}); left as it is"
    current, scope = _current_value(request)
    if (current, scope) != (request.value, request.budget_scope):
        now = f"{current!r}{' cluster-wide' if scope == BudgetScope.CLUSTER_WIDE else ''}"
        return f"value changed since the boost (now {now}); left as it is"
    note = f"boost #{request.pk} expired; previous value restored"
    if request.group_name:  # a group's value: its group gets it back (a deleted group has nothing to restore)
        if request.group is None:
            return f"group {request.group_name} was deleted during the boost; nothing to restore"
        set_group_values(None, request.group, {request.key: (request.previous_value, request.previous_budget_scope)},
                         request=request, comment=note)
        return "previous value restored"
    restore = [_alteration(request, request.previous_value, request.previous_budget_scope)]
    audited_alter(request.cluster, restore, None, request=request, comment=note)
    return "previous value restored"
