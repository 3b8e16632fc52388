"""Grouped requests of plans (quotas as code).

A tenant member's apply of a plan becomes one PlanRequest: an admin other than the requester approves it (every change
in one transaction and one desired-state version, ``apply_plan``) or rejects it, as a whole. Same states and race guard
as quota requests (and the same notifications); the decision is kept on the row.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from quotas.models import AuditAction, Plan, PlanRequest, PlanStale, PlanState, RequestState, announce, tenants_of
from quotas.models.plans import apply_plan, plan_moved
from quotas.workflow.errors import Conflict, InvalidRequest, PermissionDenied, PlanStaleError
from quotas.workflow.grouped import PLANS, _reject_grouped, _settle_grouped, _withdraw_grouped
from quotas.workflow.transitions import _check_decider, _move, _refuse_auditor


def submit_plan(actor: AbstractBaseUser, plan: Plan, reason: str = "") -> PlanRequest:
    """A tenant member asks for a whole plan (made for its tenant) as one request; the plan is then ``submitted``."""
    _refuse_auditor(actor)
    if plan.tenant is None:
        raise InvalidRequest(f"Plan #{plan.pk} was made by an admin; an admin applies it directly.")
    if not tenants_of(actor).filter(pk=plan.tenant_id).exists():
        raise PermissionDenied(f"You are not a member of tenant {plan.tenant.name!r}, which plan #{plan.pk} is for.")
    with transaction.atomic():
        moved = Plan.objects.filter(pk=plan.pk, state=PlanState.PLANNED).update(
            state=PlanState.SUBMITTED, updated=timezone.now()
        )
        if moved != 1:
            raise Conflict(f"Plan #{plan.pk} was applied or submitted already; plan the file again for a new one.")
        plan.state = PlanState.SUBMITTED
        request = PlanRequest.objects.create(
            plan=plan, tenant=plan.tenant, cluster=plan.cluster, requested_by=actor, reason=reason
        )
        PLANS.audit(AuditAction.SUBMITTED, actor, request, None, RequestState.SUBMITTED, reason)
        announce(request, RequestState.SUBMITTED, actor, reason)
    return request


def approve_plan(
    actor: AbstractBaseUser, request_id: int, comment: str = "", now: datetime | None = None
) -> PlanRequest:
    """An admin (not the requester) approves the whole plan: applied in the same transaction as one desired-state
    version, then ``applying`` until every target holds it. Values the plan changes that moved on since it was
    made refuse the approval (PLAN_STALE; the request stays submitted, to be rejected); other clusters' changes
    landing meanwhile do not."""
    now = now or timezone.now()
    with transaction.atomic():
        request = PLANS.load(request_id)
        _check_decider(actor, request)
        _move(request, RequestState.APPROVED, decided_by=actor, decision_comment=comment, decided_at=now)
        PLANS.audit(AuditAction.APPROVED, actor, request, "submitted", "approved", comment)
        announce(request, RequestState.APPROVED, actor, comment, now)
        try:
            version, _changed = apply_plan(
                request.plan, actor, strict=False, tenant=request.tenant, comment=f"plan request #{request.pk}"
            )
        except PlanStale as e:
            error = PlanStaleError(e.message)
            error.details = {"moved": [m.as_dict() for m in e.items]} if e.items else None
            raise error from e
        _move(request, RequestState.APPLYING, applied_version=version)
        PLANS.audit(AuditAction.APPLYING, actor, request, "approved", "applying", f"desired-state version {version}")
        _settle_grouped(PLANS, request)
    return request


def reject_plan(
    actor: AbstractBaseUser, request_id: int, comment: str, now: datetime | None = None, superseded: bool = False
) -> PlanRequest:
    """An admin (not the requester) rejects the whole plan, saying why; ``superseded``: because values it changes
    moved on since it was made (recorded as the reason; refused when none did)."""
    moved = (lambda r: plan_moved(r.plan)) if superseded else None
    return _reject_grouped(PLANS, actor, request_id, comment, now, moved)


def withdraw_plan(actor: AbstractBaseUser, request_id: int, comment: str = "") -> PlanRequest:
    """The requester, or another member of its tenant, takes back a plan request nobody decided yet."""
    return _withdraw_grouped(PLANS, actor, request_id, comment)
