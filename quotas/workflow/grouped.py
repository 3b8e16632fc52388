"""The life cycle shared by the request kinds decided on their own row (subscription and plan requests): loading,
auditing, withdrawing, rejecting and settling them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from quotas.models import (
    AuditAction,
    Cluster,
    PlanRequest,
    RequestState,
    SubscriptionRequest,
    announce,
    record,
    tenants_of,
)
from quotas.models.requests import DecisionReason
from quotas.models.staleness import Moved
from quotas.workflow.errors import Conflict, InvalidRequest, PermissionDenied
from quotas.workflow.transitions import _check_decider, _move, _pushes_settled, _refuse_auditor, _superseded


@dataclass(frozen=True)
class _GroupedKind:
    """A request kind decided on its own row (subscription and plan requests): what differs between them is the
    model, its name in messages and audits, and the rows it reads with it; the life cycle around it is shared."""

    model: type[SubscriptionRequest] | type[PlanRequest]
    label: str
    related: tuple[str, ...]

    def load(self, request_id: int) -> SubscriptionRequest | PlanRequest:
        try:
            return self.model.objects.select_related(*self.related).get(pk=request_id)
        except self.model.DoesNotExist:
            raise InvalidRequest(f"No {self.label} #{request_id}.") from None

    def audit(
        self,
        action: str,
        actor: AbstractBaseUser | None,
        request: SubscriptionRequest | PlanRequest,
        before: str | None,
        after: str,
        comment: str,
    ) -> None:
        record(
            action,
            actor,
            tenant=request.tenant,
            cluster=request.cluster,
            entity=request.path,
            key="",
            before=before,
            after=after,
            comment=f"{self.label} #{request.pk}" + (f": {comment}" if comment else ""),
        )


SUBSCRIPTIONS = _GroupedKind(SubscriptionRequest, "subscription request", ("tenant", "cluster", "requested_by"))
PLANS = _GroupedKind(PlanRequest, "plan request", ("tenant", "cluster", "requested_by", "plan"))


def _withdraw_grouped(kind: _GroupedKind, actor: AbstractBaseUser, request_id: int, comment: str) -> Any:
    """The requester, or another member of its tenant, takes back a request nobody decided yet."""
    _refuse_auditor(actor)
    with transaction.atomic():
        request = kind.load(request_id)
        if request.requested_by_id != actor.pk and not tenants_of(actor).filter(pk=request.tenant_id).exists():
            raise PermissionDenied("Only the requester or a member of the request's tenant can withdraw it.")
        _move(request, RequestState.WITHDRAWN)
        kind.audit(AuditAction.WITHDRAWN, actor, request, "submitted", "withdrawn", comment)
        announce(request, RequestState.WITHDRAWN, actor, comment)
    return request


def _reject_grouped(
    kind: _GroupedKind, actor: AbstractBaseUser, request_id: int, comment: str, now: datetime | None,
    moved: Callable[[Any], list[Moved]] | None = None,
) -> Any:
    """An admin (not the requester) rejects, saying why; the decision is kept on the request's row.

    ``moved`` (a request's values that moved on since it was submitted): a reject as superseded, as ``reject``'s.
    """
    if moved is None and not comment.strip():
        raise InvalidRequest("Say why in the comment: the tenant needs to know what to change.")
    with transaction.atomic():
        request = kind.load(request_id)
        _check_decider(actor, request)
        if moved is not None:
            found = moved(request) if request.state == RequestState.SUBMITTED else []
            comment = _superseded(f"{kind.label.capitalize()} #{request.pk}", found, comment)
        reason = {"decision_reason": DecisionReason.SUPERSEDED} if moved is not None else {}  # plan requests' field
        _move(request, RequestState.REJECTED, decided_by=actor, decision_comment=comment,
              decided_at=now or timezone.now(), **reason)
        kind.audit(AuditAction.REJECTED, actor, request, "submitted", "rejected", comment)
        announce(request, RequestState.REJECTED, actor, comment)
    return request


def _settle_grouped(kind: _GroupedKind, request: SubscriptionRequest | PlanRequest) -> None:
    """As ``_settle``: applied once every target holds the version; failed when a target refused the push.

    A change that was already the desired state (nothing to push) keeps the version it found, whose pushes
    are the ones to wait for."""
    settled = _pushes_settled(request)
    if settled is None:
        return
    state, comment = settled
    _move(request, state, **({"failure": comment} if state == RequestState.FAILED else {}))
    kind.audit(AuditAction(state), None, request, "applying", state, comment)
    announce(request, state, None, comment)


def _settle_all_grouped(kind: _GroupedKind, cluster: Cluster) -> None:
    rows = kind.model.objects.filter(cluster=cluster, state=RequestState.APPLYING)
    for pk in rows.values_list("pk", flat=True):
        try:
            with transaction.atomic():
                request = kind.load(pk)
                if request.state == RequestState.APPLYING:
                    _settle_grouped(kind, request)
        except Conflict:
            continue
