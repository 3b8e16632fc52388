"""Views of the HTML pages.

Every page follows the API's access rules, through the same functions (``quotas.models``' roles and
``quotas.workflow``'s transitions): tenant members see their tenants' entities, requests and audit entries
(anything else answers 404, so its existence does not leak), admins and auditors see everything, only
admins decide, and auditors change nothing. A refusal of the workflow is shown to the person with its
message and the HTTP status the API would answer; the workflow runs in one transaction, so nothing is
half-applied.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.db.models import Prefetch, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from engine.entities import DEFAULT
from engine.errors import QuotaEngineError
from frontend import plan_views
from frontend.forms import (
    AuditFilterForm,
    DecisionForm,
    EntitySearchForm,
    QuotaRequestForm,
    ReapplyForm,
    RequestFilterForm,
)
from frontend.monitoring import AROUND_MINUTES, request_effect, request_tags, tags_for
from frontend.pages import (
    Refused,
    View,
    entity_url,
    not_found,
    page,
    paginate,
    portal_page,
    visible_requests,
)
from history import services as history_services
from quotas.models import (
    AuditAction,
    AuditEntry,
    Cluster,
    Drift,
    QuotaEntity,
    QuotaRequest,
    RequestState,
    Tenant,
    effective_client_quotas,
    effective_ip_quota,
    is_admin,
    is_auditor,
    member_tenants,
    owned_by_any,
    sees_everything,
    tenants_of,
)
from quotas.models.capacity import capacity_check
from quotas.models.group_lookup import drift_shadows
from quotas.models.staleness import request_moved, submitted_against
from quotas.models.tenants import quota_visible
from quotas.queries import push_summary, pushes_of_request, visible_entity_pks
from quotas.reapply import REAPPLY_ADMINS_ONLY, enqueue_heal, reapply_target
from quotas.workflow import errors, quota_requests

HISTORY_DAYS = 7  # the entity page's hourly history
#: Audit entries of a value (not of the request's moves): its number and its budget scope.
VALUE_ACTIONS = (AuditAction.QUOTA_ALTERED, AuditAction.BUDGET_SCOPE_ALTERED)


def _safe_next(request: HttpRequest, fallback: str) -> str:
    """Where a form posted from a list goes back to: ``next`` when it is on this site, else ``fallback``."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        return target
    return fallback


# ------------------------------------------------------------------ scoping (the API's rules)


def visible_audit(request: HttpRequest) -> QuerySet[AuditEntry]:
    """The API's scope: admins and auditors read every entry, a member its tenants' entries."""
    rows = AuditEntry.objects.select_related("tenant", "cluster", "request")
    if not sees_everything(request.user):
        rows = rows.filter(tenant__in=tenants_of(request.user))
    return rows


def entity_visible(entity: QuotaEntity, tenants: list[Tenant]) -> bool:
    """A member sees an entity its tenants own and the defaults, as the API's describe (``quota_visible``)."""
    return quota_visible(tenants, entity.user, entity.client_id, entity.ip)


def _member_tenants(request: HttpRequest) -> list[Tenant]:
    return member_tenants(request.user)


def get_request(request: HttpRequest, pk: int) -> QuotaRequest:
    """The quota request, or 404 when it does not exist or is another tenant's."""
    found = visible_requests(request).filter(pk=pk).first()
    if found is None:
        raise not_found(f"Quota request #{pk}")
    return found


# ------------------------------------------------------------------ home


@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """The landing page: what this portal is, where its pages, API and health check are."""
    return page(request, "frontend/home.html")


# ------------------------------------------------------------------ entities


@require_GET
@portal_page
def entity_list(request: HttpRequest) -> HttpResponse:
    """Quota entities with their values, searchable; a member sees the entities its tenants own."""
    form = EntitySearchForm(request.GET)
    rows = QuotaEntity.objects.select_related("cluster").prefetch_related("quota_values").order_by("cluster", "pk")
    if form.is_valid():
        q, cluster = form.cleaned_data["q"], form.cleaned_data["cluster"]
        if q:
            rows = rows.filter(
                Q(user__icontains=q) | Q(client_id__icontains=q) | Q(ip__icontains=q) | Q(cluster__name__icontains=q)
            )
        if cluster:
            rows = rows.filter(cluster__name=cluster)
    else:
        rows = rows.none()
    if not sees_everything(request.user):
        # ownership is by fnmatch pattern, decided over the searched rows' names only; the page then reads its rows
        visible = visible_entity_pks(request.user, rows) if _member_tenants(request) else []  # no tenant: nothing
        rows = rows.filter(pk__in=visible)
    return page(request, "frontend/entity_list.html", {"form": form, "page_obj": paginate(request, rows)})


def _probe(entity: QuotaEntity, request: HttpRequest) -> tuple[str, str, list[str]]:
    """Which connection the effective quota is shown for: the entity's own names; default or absent parts
    stand for any name, so the person may type one (``as_user``, ``as_client_id``)."""
    editable = []
    user = entity.user if entity.user not in (None, DEFAULT) else None
    client_id = entity.client_id if entity.client_id not in (None, DEFAULT) else None
    if user is None:
        editable.append("as_user")
        user = request.GET.get("as_user", "")[:255]
    if client_id is None:
        editable.append("as_client_id")
        client_id = request.GET.get("as_client_id", "")[:255]
    return user, client_id, editable


@require_GET
@portal_page
def entity_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One entity: its stored values, the quota that applies per key with the level that supplied it, its history."""
    entity = QuotaEntity.objects.select_related("cluster").prefetch_related("quota_values").filter(pk=pk).first()
    if entity is None or (not sees_everything(request.user) and not entity_visible(entity, _member_tenants(request))):
        raise not_found(f"Quota entity #{pk}")
    context: dict[str, Any] = {"entity": entity, "values": list(entity.quota_values.all())}
    if entity.ip is not None:
        if entity.ip != DEFAULT:
            context["effective"] = [effective_ip_quota(entity.cluster, entity.ip)]
            context["probe"] = {"ip": entity.ip}
    else:
        user, client_id, editable = _probe(entity, request)
        if not sees_everything(request.user) and not owned_by_any(_member_tenants(request), user, client_id or None):
            # a default entity's page: the member probes its own connections only (as GET .../effective-quota)
            context["probe_error"] = (
                f"None of your tenants owns the principal {user!r} with the client-id {client_id!r}; "
                "type one of your tenants' principals and client-ids."
            )
        else:
            try:
                context["effective"] = effective_client_quotas(entity.cluster, user, client_id)
            except QuotaEngineError as e:
                context["probe_error"] = e.message
        context["probe"] = {"user": user, "client_id": client_id, "editable": editable}
    if entity.ip is None and DEFAULT not in (entity.user, entity.client_id):
        # a default part stands for many clients, each its own sensor: only named entities have one chart
        tags = tags_for(entity.user, entity.client_id)
        context["monitor_url"] = _monitor_url(entity.cluster.name, tags)
        context["usage_history"] = {"tags": tags, "days": HISTORY_DAYS,
                                    "series": history_services.entity_history(
                                        entity.cluster.name, tags, HISTORY_DAYS, sees_everything(request.user)),
                                    "resolution": history_services.history_resolution(entity.cluster.name)}
    context["history"] = visible_audit(request).filter(cluster=entity.cluster, entity=entity.path)[:200]
    context["requests"] = visible_requests(request).filter(
        cluster=entity.cluster, user=entity.user, client_id=entity.client_id
    )[:50]
    return page(request, "frontend/entity_detail.html", context)


# ------------------------------------------------------------------ requests


@require_http_methods(["GET", "POST"])
@portal_page
def request_new(request: HttpRequest) -> HttpResponse:
    """Ask for a quota: the API's serializer shapes the body and ``quota_requests.submit`` judges it, as the API
    does."""
    if is_auditor(request.user) and request.method == "GET":
        raise Refused(403, "Auditors read everything and change nothing; use an admin or member account.")
    initial = {k: request.GET[k] for k in ("cluster", "user", "client_id", "key", "budget_scope") if k in request.GET}
    data = request.POST if request.method == "POST" else None
    form = QuotaRequestForm(data, actor=request.user, initial=initial)
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid() and form.validated is not None:
            body = form.validated
            try:
                created = quota_requests.submit(
                    request.user,
                    body["tenant"],
                    body["cluster"],
                    user=body["user"],
                    client_id=body["client_id"],
                    key=body["key"],
                    value=body["value"],
                    reason=body["reason"],
                    expires_at=body["expires_at"],
                    budget_scope=body["budget_scope"],
                )
            except errors.WorkflowError as e:
                # beside the field to change (a member of one tenant sees the tenant's name where the field would be)
                form.add_error(e.field if e.field in form.fields else None, e.message)
                status = e.status
            else:
                messages.success(request, f"Request #{created.pk} submitted; an admin decides on it.")
                return redirect("request-detail", pk=created.pk)
    context = {"form": form, "advice_target_pct": 100 * settings.QUOTAS_ADVICE_TARGET}
    return page(request, "frontend/request_form.html", context, status=status)


@require_GET
@portal_page
def request_list(request: HttpRequest) -> HttpResponse:
    """The requests the person may see, newest first, by state."""
    form = RequestFilterForm(request.GET)
    rows = visible_requests(request)
    if form.is_valid() and form.cleaned_data["state"]:
        rows = rows.filter(state=form.cleaned_data["state"])
    return page(request, "frontend/request_list.html", {"form": form, "page_obj": paginate(request, rows)})


def _request_context(request: HttpRequest, target: QuotaRequest) -> dict[str, Any]:
    user = request.user
    audit = visible_audit(request).filter(request=target).order_by("pk")
    submitted = target.state == RequestState.SUBMITTED
    pushes = pushes_of_request(target)
    preview = _preview(target)
    return {
        "preview": preview,
        "impact": history_services.summary(preview),
        "req": target,
        "approval": getattr(target, "approval", None),
        "transitions": [e for e in audit if e.action not in VALUE_ACTIONS],
        "audit": audit,
        "capacity": _capacity(target),
        "moved": request_moved(target) if submitted else None,
        "submitted_against": submitted_against(target),
        "pushes": pushes,
        "effect": request_effect(target, pushes),
        "effect_minutes": AROUND_MINUTES,
        "monitor_url": _monitor_url(target.cluster.name, request_tags(target)),
        "own": target.requested_by_id == user.pk,
        "can_decide": submitted and is_admin(user) and target.requested_by_id != user.pk,
        "can_withdraw": submitted
        and not is_auditor(user)
        and (target.requested_by_id == user.pk or target.tenant.members.filter(pk=user.pk).exists()),
    }


def _capacity(target: QuotaRequest) -> Any:
    """The request's capacity check (a group's value counts as its one sensor)."""
    return capacity_check(target)


def _preview(target: QuotaRequest, version: str | None = None) -> Any:
    """The request's impact preview (a group's replays its members' traffic together)."""
    return history_services.preview_of_request(target, version)


def _monitor_url(cluster: str, tags: str) -> str:
    """The live monitor page of an entity's sensor tags."""
    return entity_url(cluster, tags)


@require_GET
@portal_page
def request_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A request's whole life: what was asked, the capacity check, every transition and every audit entry."""
    target = get_request(request, pk)
    return page(request, "frontend/request_detail.html", {**_request_context(request, target), "form": DecisionForm()})


def _transition(name: str, done: str, flags: tuple[str, ...] = ()) -> View:
    """A POST view running ``quota_requests.<name>`` on a visible request, as the API's ``/requests/<id>/<name>/``;
    ``flags``: the form's checkboxes and buttons it passes on (``confirm_stale``, ``superseded``)."""
    transition = getattr(quota_requests, name)

    @require_POST
    @portal_page
    def view(request: HttpRequest, pk: int) -> HttpResponse:
        target = get_request(request, pk)  # 404 for a request the person may not see, as the API
        form = DecisionForm(request.POST)
        valid = form.is_valid()
        comment = form.cleaned_data["comment"] if valid else ""
        passed = {flag: bool(form.cleaned_data[flag]) for flag in flags} if valid else {}
        try:
            transition(request.user, target.pk, comment, **passed)
        except errors.WorkflowError as e:
            target = get_request(request, pk)  # as it is now (the transition rolled back whole)
            refusal = e.message
            if isinstance(e, errors.StaleRequest):  # the API's message names its field; the page its checkbox
                refusal = (f"Request #{target.pk} was {e.moved.sentence}. Tick “Approve #{target.pk} although the "
                           "value changed” to approve it anyway, or reject it as superseded.")
            context = {**_request_context(request, target), "form": form, "refusal": refusal}
            return page(request, "frontend/request_detail.html", context, status=e.status)
        messages.success(request, f"Request #{target.pk} {done}.")
        return HttpResponseRedirect(_safe_next(request, reverse("request-detail", args=[target.pk])))

    view.__name__ = view.__qualname__ = f"request_{name}"
    view.__doc__ = (f"POST: {name} the request through quotas.workflow.quota_requests.{name}; a refusal is shown with "
                    "its message.")
    return view


request_approve = _transition("approve", "approved", ("confirm_stale",))
request_reject = _transition("reject", "rejected", ("superseded",))
request_withdraw = _transition("withdraw", "withdrawn")


@require_GET
@portal_page
def approval_queue(request: HttpRequest) -> HttpResponse:
    """Requests waiting for a decision, oldest first, each with its capacity check (admins decide, auditors read)."""
    if not sees_everything(request.user):
        raise Refused(403, "The approval queue is for admins (who decide) and auditors (who read).")
    pending = visible_requests(request).filter(state=RequestState.SUBMITTED).order_by("pk")
    version = history_services.usage_version()
    rows = []
    for r in pending[:200]:
        preview = _preview(r, version)
        rows.append({
            "req": r,
            "moved": request_moved(r),
            "capacity": _capacity(r),
            "preview": preview,
            "impact": history_services.summary(preview),
            "can_decide": is_admin(request.user) and r.requested_by_id != request.user.pk,
        })
    context = {"rows": rows, "more": pending.count() > len(rows), "plan_rows": plan_views.pending_rows(request)}
    return page(request, "frontend/approval_queue.html", context)


# ------------------------------------------------------------------ audit, clusters, tenants


@require_GET
@portal_page
def audit_log(request: HttpRequest) -> HttpResponse:
    """Every change the person may see, newest first, filtered as the API filters (request, tenant) plus cluster."""
    form = AuditFilterForm(request.GET)
    rows = visible_audit(request).select_related("actor")
    if form.is_valid():
        data = form.cleaned_data
        if data["request"]:
            rows = rows.filter(request_id=data["request"])
        if data["tenant"]:
            rows = rows.filter(tenant__name=data["tenant"])
        if data["cluster"]:
            rows = rows.filter(cluster__name=data["cluster"])
    return page(request, "frontend/audit_log.html", {"form": form, "page_obj": paginate(request, rows)})


@require_GET
@portal_page
def cluster_list(request: HttpRequest) -> HttpResponse:
    """Clusters (anyone signed in reads them, as the API); admins change them in the admin site."""
    clusters = Cluster.objects.select_related("desired_state").prefetch_related("brokers")
    return page(request, "frontend/cluster_list.html", {"clusters": clusters})


@require_GET
@portal_page
def tenant_list(request: HttpRequest) -> HttpResponse:
    """Tenants with their members and owned patterns; a member sees its own tenants (as the API)."""
    tenants = Tenant.objects.all() if sees_everything(request.user) else tenants_of(request.user)
    # members by name: without an ORDER BY, PostgreSQL returns them in whatever order it finds them
    members = Prefetch("members", queryset=get_user_model().objects.order_by("username"))
    return page(request, "frontend/tenant_list.html", {"tenants": tenants.prefetch_related(members, "owned_names")})


# ------------------------------------------------------------------ pushes and drift

#: The drift page lists at most this many open items (the API pages through all of them).
DRIFT_ITEMS = 1000


def _where(broker_id: int | None) -> str:
    return f"broker {broker_id}" if broker_id is not None else "the cluster-wide namespace"


@require_GET
@portal_page
def drift(request: HttpRequest) -> HttpResponse:
    """Per cluster and target: the desired version against the newest applied one, pending and failed pushes,
    the newest outstanding error and the open drift items; admins re-apply desired state from here."""
    if not sees_everything(request.user):
        raise Refused(403, "Push status and drift are for admins (who re-apply desired state) and auditors (who read).")
    open_rows = Drift.objects.filter(resolved_at__isnull=True).select_related("broker")
    open_rows = open_rows.order_by("cluster_id", "broker__broker_id", "kind", "resource", "key")
    rows = list(open_rows[: DRIFT_ITEMS + 1])
    shadows = drift_shadows(rows[:DRIFT_ITEMS])  # a quota set on Kafka for a group's member takes it out of the group
    items: dict[tuple[int, int | None], list[dict[str, Any]]] = defaultdict(list)
    for row in rows[:DRIFT_ITEMS]:
        broker_id = row.broker.broker_id if row.broker is not None else None
        items[(row.cluster_id, broker_id)].append({"row": row, "entity": row.path, "shadows": shadows.get(row.pk, [])})
    clusters = []
    for cluster in Cluster.objects.select_related("desired_state").order_by("name"):
        summary = push_summary(cluster)
        targets = [
            {**t, "label": _where(t["broker"]), "items": items.get((cluster.pk, t["broker"]), [])}
            for t in summary["targets"]
        ]
        opened = sum(len(t["items"]) for t in targets)
        clusters.append({"cluster": cluster, "summary": summary, "targets": targets, "open": opened})
    context = {"clusters": clusters, "more": len(rows) > DRIFT_ITEMS, "limit": DRIFT_ITEMS}
    return page(request, "frontend/drift.html", context)


@require_POST
@portal_page
def drift_reapply(request: HttpRequest) -> HttpResponse:
    """POST: queue ``quotas.tasks.heal`` for one target, as POST /api/clusters/<name>/reapply/ does (admins)."""
    if not is_admin(request.user):
        raise Refused(403, REAPPLY_ADMINS_ONLY)
    form = ReapplyForm(request.POST)
    if not form.is_valid():
        field, problems = next(iter(form.errors.items()))
        raise Refused(400, f"{field}: {problems[0]}")
    name = form.cleaned_data["cluster"]
    cluster = Cluster.objects.select_related("desired_state").filter(name=name).first()
    if cluster is None:
        raise not_found(f"Cluster {name!r}")
    try:
        broker = reapply_target(cluster, form.cleaned_data["broker"])
        task_id = enqueue_heal(cluster, broker, request.user)
    except errors.WorkflowError as e:
        raise Refused(e.status, e.message) from e
    where = _where(broker.broker_id if broker is not None else None)
    messages.success(
        request,
        f"Re-applying desired-state version {cluster.desired_state.version} to {where} of {cluster.name} "
        f"(task {task_id}); its open drift closes as healed once it lands.",
    )
    return HttpResponseRedirect(_safe_next(request, reverse("drift") + f"#cluster-{cluster.name}"))
