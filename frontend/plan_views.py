"""Pages of quotas as code: a plan (its changes with impact, capacity and warnings) and the decisions on a tenant's
grouped plan request, which the approval queue lists beside single requests."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from frontend.forms import DecisionForm
from frontend.pages import Refused, View, not_found, page, portal_page
from history.models import ImpactPreview
from history.services import summary
from plans import services
from quotas.models import Plan, PlanRequest, RequestState, is_admin, sees_everything, tenants_of
from quotas.models.plans import current_state, plan_moved
from quotas.workflow import errors, plan_requests


def plan_context(plan: Plan) -> dict[str, Any]:
    """A plan as the pages show it: each change with its preview (for ``_impact.html``), the capacity check of
    each byte-rate key once (the whole plan counted), and the warnings."""
    ids = [c["impact"]["preview"] for c in plan.changes if c.get("impact")]
    previews = {p.pk: p for p in ImpactPreview.objects.select_related("cluster").filter(pk__in=ids)}
    rows, capacities = [], {}
    for c in plan.changes:
        preview = previews.get(c["impact"]["preview"]) if c.get("impact") else None
        rows.append({"c": c, "preview": preview, "impact": summary(preview)})
        if c.get("capacity"):
            capacities.setdefault(c["capacity"]["key"], c["capacity"])
    return {"plan": plan, "rows": rows, "capacities": list(capacities.values())}


def pending_rows(request: HttpRequest) -> list[dict[str, Any]]:
    """The grouped plan requests waiting for a decision, oldest first, for the approval queue (its caller lets
    only admins and auditors in)."""
    pending = PlanRequest.objects.select_related("plan", "plan__cluster", "tenant", "requested_by").filter(
        state=RequestState.SUBMITTED
    ).order_by("pk")
    admin = is_admin(request.user)
    states: dict[int, Any] = {}  # each cluster's desired state read once, however many of its plans wait
    rows = []
    for r in pending[:50]:
        state = states.get(r.cluster_id) or states.setdefault(r.cluster_id, current_state(r.plan.cluster))
        rows.append({"req": r, **plan_context(r.plan), "moved": plan_moved(r.plan, state),
                     "can_decide": admin and r.requested_by_id != request.user.pk})
    return rows


def _plan(request: HttpRequest, pk: int) -> Plan:
    plan = Plan.objects.select_related("cluster", "tenant", "created_by").filter(pk=pk).first()
    if plan is None or not services.may_see_plan(request.user, plan):
        raise not_found(f"Plan #{pk}")
    return plan


@require_GET
@portal_page
def plan_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A plan with its changes in Kafka's precedence order, their impact previews and the capacity check."""
    plan = _plan(request, pk)
    grouped = PlanRequest.objects.filter(plan=plan).select_related("requested_by", "decided_by").first()
    can_decide = (
        grouped is not None and grouped.state == RequestState.SUBMITTED and is_admin(request.user)
        and grouped.requested_by_id != request.user.pk
    )
    waiting = grouped is not None and grouped.state == RequestState.SUBMITTED
    context = {**plan_context(plan), "grouped": grouped, "can_decide": can_decide,
               "moved": plan_moved(plan) if waiting else []}
    return page(request, "frontend/plan_detail.html", context)


def _decide(name: str, done: str) -> View:
    transition = getattr(plan_requests, name)

    @require_POST
    @portal_page
    def view(request: HttpRequest, pk: int) -> HttpResponse:
        grouped = PlanRequest.objects.filter(pk=pk).first()
        visible = grouped is not None and (
            sees_everything(request.user) or tenants_of(request.user).filter(pk=grouped.tenant_id).exists()
        )
        if grouped is None or not visible:
            raise not_found(f"Plan request #{pk}")
        form = DecisionForm(request.POST)
        valid = form.is_valid()
        comment = form.cleaned_data["comment"] if valid else ""
        passed = {"superseded": True} if name == "reject_plan" and valid and form.cleaned_data["superseded"] else {}
        try:
            transition(request.user, grouped.pk, comment, **passed)
        except errors.WorkflowError as e:
            raise Refused(e.status, e.message) from e
        messages.success(request, f"Plan request #{grouped.pk} {done}.")
        fallback = reverse("plan-detail", args=[grouped.plan_id])
        target = request.POST.get("next") or fallback
        if not target.startswith("/") or target.startswith("//"):
            target = fallback
        return HttpResponseRedirect(target)

    view.__name__ = view.__qualname__ = f"plan_request_{name}"
    view.__doc__ = (f"POST: {name} the grouped request through quotas.workflow.plan_requests.{name}; a refusal is an "
                    "error page.")
    return view


plan_request_approve = _decide("approve_plan", "approved")
plan_request_reject = _decide("reject_plan", "rejected")
