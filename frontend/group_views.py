"""The group page, ``/clusters/<cluster>/groups/<name>/``, and the group rows the cluster page lists.

A group is seen by admins and auditors and by the members of its tenant (anyone else gets 404, so its existence does
not leak). A member of its tenant asks for one of its values (``quota_requests.submit`` with ``group``: four-eyes
approval, as any quota); an admin changes its members (``update_members``) or deletes it (``delete_group``, refused
while requests of it are open). A refusal is shown beside the field it names, with everything typed kept.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Prefetch, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods

from frontend.group_forms import ConfirmForm, GroupRequestForm, MembersForm, refuse
from frontend.pages import Refused, not_found, page, portal_page, visible_requests
from quotas.choices import EntityType
from quotas.models import (
    Cluster,
    GroupKind,
    InvalidGroup,
    OwnedName,
    QuotaGroup,
    delete_group,
    is_admin,
    is_auditor,
    sees_everything,
    tenants_of,
    update_members,
)
from quotas.workflow import errors, quota_requests

#: The precedence section of the group-quotas page of the documentation (``QUOTAS_DOCS_URL`` + this).
PRECEDENCE_DOC = "capabilities/group-quotas/#precedence"
#: The precedence of a group's value, in one sentence (docs/capabilities/group-quotas.md says it whole).
PRECEDENCE = (
    "A member's client gets this group's value unless its principal is exempt or a quota names it (its principal, "
    "its client-id or both); the group wins over Kafka's defaults, and of several groups holding a member the first "
    "in order applies: a client-id prefix under its principal, then a tenant or principals group, then a client-id "
    "prefix of any principal."
)


def visible_groups(user: AbstractBaseUser, cluster: Cluster) -> QuerySet[QuotaGroup]:
    """The cluster's groups the person may see: all for admins and auditors, its tenants' groups for a member."""
    patterns = Prefetch("tenant__owned_names", queryset=OwnedName.objects.filter(entity_type=EntityType.USER)
                        .order_by("pattern"), to_attr="user_patterns")
    rows = QuotaGroup.objects.filter(cluster=cluster).select_related("tenant", "cluster")
    rows = rows.prefetch_related("values", patterns)
    return rows if sees_everything(user) else rows.filter(tenant__in=tenants_of(user))


def members_words(group: QuotaGroup) -> str:
    """Who the group holds, in one line; a tenant group names its tenant's principal patterns."""
    if group.kind != GroupKind.TENANT:
        return group.members_text()
    found = getattr(group.tenant, "user_patterns", None)
    patterns = [o.pattern for o in found] if found is not None else list(
        group.tenant.owned_names.filter(entity_type=EntityType.USER).order_by("pattern")
        .values_list("pattern", flat=True))
    if not patterns:
        return f"the principals tenant {group.tenant.name} owns (none yet)"
    return f"the principals tenant {group.tenant.name} owns: {', '.join(patterns)}"


def group_rows(groups: QuerySet[QuotaGroup]) -> list[dict[str, Any]]:
    """Each group with its members in words and its values (key, value, budget scope)."""
    return [{"group": g, "members": members_words(g), "values": list(g.values.all())} for g in groups]


def _group(request: HttpRequest, cluster: str, name: str) -> QuotaGroup:
    """The group, or 404 when it does not exist or is another tenant's."""
    cluster_row = Cluster.objects.filter(name=cluster).first()
    group = visible_groups(request.user, cluster_row).filter(name=name).first() if cluster_row else None
    if group is None:
        raise not_found(f"Group {name!r} of cluster {cluster!r}")
    return group


def _may_request(user: AbstractBaseUser, group: QuotaGroup) -> bool:
    return not is_auditor(user) and tenants_of(user).filter(pk=group.tenant_id).exists()


def _act(request: HttpRequest, group: QuotaGroup, forms: dict[str, Any]) -> HttpResponse | None:
    """Run the posted action; a redirect when done, None when refused (the form holds why)."""
    action, user = request.POST.get("action", ""), request.user
    if action == "request":
        if not _may_request(user, group):
            raise Refused(403, f"Only members of tenant {group.tenant.name} ask for group {group.name}'s values.")
        form = forms["request_form"] = GroupRequestForm(request.POST)
        if not form.is_valid():
            return None
        data = form.cleaned_data
        try:
            made = quota_requests.submit(user, group.tenant, group.cluster, user=None, client_id=None,
                                         key=data["key"], value=data["value"].strip(), reason=data["reason"],
                                         budget_scope=data["budget_scope"] or None, group=group)
        except errors.WorkflowError as e:
            refuse(form, e.field, e.message)
            forms["status"] = e.status
            return None
        messages.success(request, f"Request #{made.pk} submitted; an admin decides on it.")
        return redirect("request-detail", pk=made.pk)
    if action not in ("members", "delete"):
        raise Refused(400, f"Unknown action {action!r}.")
    if not is_admin(user):
        raise Refused(403, "Only admins change or delete a group.")
    if action == "members":
        form = forms["members_form"] = MembersForm(request.POST, kind=group.kind, auto_id="members-%s")
        if not form.is_valid():
            return None
        data = form.cleaned_data
        try:
            update_members(user, group, principals=data.get("principals"),
                           client_id_prefix=data["client_id_prefix"].strip() if "client_id_prefix" in data else None,
                           prefix_principal=data["prefix_principal"].strip() if "prefix_principal" in data else None)
        except InvalidGroup as e:
            refuse(form, e.field, e.message)
            return None
        messages.success(request, f"Group {group.name} now holds {group.members_text()}.")
        return redirect("group-detail", cluster=group.cluster.name, name=group.name)
    form = forms["delete_form"] = ConfirmForm(request.POST, label=_delete_label(group), auto_id="delete-%s")
    if not form.is_valid():
        return None
    try:
        delete_group(user, group)
    except InvalidGroup as e:
        refuse(form, "confirm", e.message)
        forms["status"] = 409
        return None
    messages.success(request, f"Group {group.name} deleted; its members fall back to their own quotas.")
    return redirect("cluster-detail", name=group.cluster.name)


def _delete_label(group: QuotaGroup) -> str:
    return f"Delete group {group.name}: its members fall back to their own quotas"


@require_http_methods(["GET", "POST"])
@portal_page
def group_detail(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    """One group: kind, tenant, members, values, its requests and its place in the precedence; the forms the person
    may use."""
    group = _group(request, cluster, name)
    forms: dict[str, Any] = {"status": 400}
    if request.method == "POST":
        done = _act(request, group, forms)
        if done is not None:
            return done
        group = _group(request, cluster, name)  # as it is now (a refused change rolled back whole)
    initial = {"principals": "\n".join(group.principals), "client_id_prefix": group.client_id_prefix,
               "prefix_principal": group.prefix_principal}
    docs = settings.QUOTAS_DOCS_URL
    context = {
        "group": group,
        "members": members_words(group),
        "values": list(group.values.all()),
        "requests": visible_requests(request).filter(cluster=group.cluster, group_name=group.name)[:50],
        "precedence": PRECEDENCE,
        "precedence_url": f"{docs.rstrip('/')}/{PRECEDENCE_DOC}" if docs else "",
        "may_request": _may_request(request.user, group),
        "request_form": forms.get("request_form") or GroupRequestForm(),
        "members_form": forms.get("members_form") or MembersForm(initial=initial, kind=group.kind,
                                                                 auto_id="members-%s"),
        "delete_form": forms.get("delete_form") or ConfirmForm(label=_delete_label(group), auto_id="delete-%s"),
        "editable_members": group.kind != GroupKind.TENANT,
    }
    status = forms["status"] if request.method == "POST" else 200
    return page(request, "frontend/group_detail.html", context, status=status)
