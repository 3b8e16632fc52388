"""The cluster page: its facts, brokers and budgets, its groups and its exempt principals, with the admins' forms.

Everyone signed in reads a cluster and its exempt principals; admins and auditors see every group of it, a member
its tenants' groups. Admins make groups (``create_group``) and exempt principals or stop exempting them
(``set_exempt``); a refusal is shown beside the field it names, with everything typed kept.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_POST

from frontend.group_forms import ConfirmForm, ExemptForm, GroupForm, refuse
from frontend.group_views import group_rows, visible_groups
from frontend.pages import Refused, not_found, page, portal_page
from quotas.budgets import LEASE_MS, enforcement
from quotas.choices import ConnectorKind
from quotas.models import Cluster, ExemptPrincipal, InvalidGroup, create_group, is_admin, set_exempt

ADMINS_ONLY = "Only admins change a cluster's groups and exempt principals; tenants ask for a group's value."


def _cluster(name: str) -> Cluster:
    cluster = Cluster.objects.select_related("desired_state").filter(name=name).first()
    if cluster is None:
        raise not_found(f"Cluster {name!r}")
    return cluster


def _remove_label(principal: str) -> str:
    return f"Stop exempting {principal}: its quotas apply again"


def cluster_page(request: HttpRequest, cluster: Cluster, *, group_form: GroupForm | None = None,
                 exempt_form: ExemptForm | None = None, removing: dict[str, Any] | None = None,
                 status: int = 200) -> HttpResponse:
    """The cluster page, with the forms as posted when one was refused."""
    budgets = enforcement(cluster)
    exempt = ExemptPrincipal.objects.filter(cluster=cluster).select_related("created_by")
    context = {
        "cluster": cluster, "brokers": cluster.brokers.all(), "listeners": cluster.listeners.all(),
        "budgets": budgets, "lease_s": LEASE_MS // 1000,
        "budget_rounds": sorted(budgets.rounds_ago_ms.items()) if budgets else [],
        "kafka": cluster.connector == ConnectorKind.KAFKA,
        "groups": group_rows(visible_groups(request.user, cluster)),
        "group_form": group_form or GroupForm(),
        "exempt": [
            {"row": e, "form": removing["form"] if removing and removing["principal"] == e.principal
             else ConfirmForm(label=_remove_label(e.principal), auto_id=f"remove-{e.pk}-%s")}
            for e in exempt
        ],
        "exempt_form": exempt_form or ExemptForm(auto_id="exempt-%s"),
    }
    return page(request, "frontend/cluster_detail.html", context, status=status)


@require_GET
@portal_page
def cluster_detail(request: HttpRequest, name: str) -> HttpResponse:
    """One cluster: connector, scope, capacity, desired-state version, brokers and listeners, whether its
    cluster-wide budgets are enforced (``quotas.budgets``), its groups and its exempt principals."""
    return cluster_page(request, _cluster(name))


@require_POST
@portal_page
def group_create(request: HttpRequest, name: str) -> HttpResponse:
    """POST (admins): make a group on the cluster; its page is next, to set its values."""
    if not is_admin(request.user):
        raise Refused(403, ADMINS_ONLY)
    cluster = _cluster(name)
    form = GroupForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            group = create_group(request.user, cluster, data["tenant"], data["name"], data["kind"],
                                 principals=data["principals"], client_id_prefix=data["client_id_prefix"].strip(),
                                 prefix_principal=data["prefix_principal"].strip(), description=data["description"])
        except InvalidGroup as e:  # GroupOverlap too
            refuse(form, e.field, e.message)
        else:
            messages.success(request, f"Group {group.name} made on {cluster.name}; it holds nobody back until it has "
                             "a value.")
            return redirect("group-detail", cluster=cluster.name, name=group.name)
    return cluster_page(request, cluster, group_form=form, status=400)


@require_POST
@portal_page
def exempt_change(request: HttpRequest, name: str) -> HttpResponse:
    """POST (admins): exempt a principal (``action=add``) or stop exempting it (``action=remove``, confirmed)."""
    if not is_admin(request.user):
        raise Refused(403, ADMINS_ONLY)
    cluster = _cluster(name)
    if request.POST.get("action") == "remove":
        principal = request.POST.get("principal", "")
        row = ExemptPrincipal.objects.filter(cluster=cluster, principal=principal).first()
        if row is None:
            raise not_found(f"The exemption of {principal!r} on {cluster.name}")
        confirm = ConfirmForm(request.POST, label=_remove_label(principal), auto_id=f"remove-{row.pk}-%s")
        if not confirm.is_valid():
            return cluster_page(request, cluster, removing={"principal": principal, "form": confirm}, status=400)
        set_exempt(request.user, cluster, principal, False)
        messages.success(request, f"{principal} is no longer exempt on {cluster.name}: its quotas apply again.")
        return redirect("cluster-detail", name=cluster.name)
    form = ExemptForm(request.POST, auto_id="exempt-%s")
    if form.is_valid():
        principal = form.cleaned_data["principal"].strip()
        try:
            added = set_exempt(request.user, cluster, principal, True, form.cleaned_data["reason"])
        except InvalidGroup as e:
            refuse(form, e.field, e.message)
        else:
            if added:
                messages.success(request, f"{principal} is exempt from every quota of {cluster.name}.")
                return redirect("cluster-detail", name=cluster.name)
            refuse(form, "principal", f"{principal} is exempt on {cluster.name} already.")
    return cluster_page(request, cluster, exempt_form=form, status=400)
