"""The client-metrics subscriptions page of a cluster (KIP-714): list, admins' forms, tenants' requests.

One page, ``/clusters/<name>/client-metrics/``, following the API's rules through the same functions:
everyone signed in reads the cluster's subscriptions; admins create, change and delete them
(``alter_subscription``: validated by Kafka's rules, versioned, pushed, audited); a tenant member asks for one
(``subscription_requests.submit_subscription``); the cluster's subscription requests the person may see are listed with
approve/reject for admins (never their own) and withdraw for the tenant. A refusal is shown with its message
and the API's status.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from engine.errors import QuotaEngineError
from frontend.pages import Refused, not_found, page, portal_page
from quotas.models import (
    ClientMetricsSubscription,
    Cluster,
    RequestState,
    SubscriptionExists,
    SubscriptionNotFound,
    SubscriptionRequest,
    alter_subscription,
    is_admin,
    sees_everything,
    tenants_of,
)
from quotas.models.client_metrics import INTERVAL, MATCH, METRICS
from quotas.queries import visible_subscriptions
from quotas.workflow import errors, subscription_requests

DECISIONS = {
    "approve": (subscription_requests.approve_subscription, "approved"),
    "reject": (subscription_requests.reject_subscription, "rejected"),
    "withdraw": (subscription_requests.withdraw_subscription, "withdrawn"),
}


def _configs(post: Any) -> dict[str, str]:
    configs = {METRICS: post.get("metrics", ""), MATCH: post.get("match", "")}
    if post.get("interval_ms", "").strip():
        configs[INTERVAL] = post["interval_ms"]
    return configs


def _visible_requests(request: HttpRequest, cluster: Cluster) -> Any:
    rows = SubscriptionRequest.objects.filter(cluster=cluster).select_related("tenant", "requested_by", "decided_by")
    return rows if sees_everything(request.user) else rows.filter(tenant__in=tenants_of(request.user))


def _act(request: HttpRequest, cluster: Cluster) -> str:
    """Run the posted action; returns the success message, raises QuotaEngineError / WorkflowError / Refused."""
    action, user, post = request.POST.get("action", ""), request.user, request.POST
    if action in ("save", "delete"):
        if not is_admin(user):
            raise Refused(403, "Only admins change subscriptions; tenants ask for one with the request form.")
        name = post.get("name", "")
        if action == "delete":
            outcome = alter_subscription(cluster, name, None, user)
            return f"Subscription {name} deleted (desired-state version {outcome.version})."
        outcome = alter_subscription(cluster, name, _configs(post), user, create_only=post.get("mode") == "create")
        return f"Subscription {name} saved (desired-state version {outcome.version})."
    if action == "request":
        tenant = None  # not named: the person's only tenant (choose_tenant says so when there are several)
        if post.get("tenant"):
            tenant = tenants_of(user).filter(name=post["tenant"]).first()
            if tenant is None:
                raise Refused(403, "Choose a tenant you are a member of.")
        delete = post.get("operation") == "delete"
        configs = None if delete else _configs(post)
        made = subscription_requests.submit_subscription(
            user, tenant, cluster, name=post.get("name", ""), configs=configs, reason=post.get("reason", "")
        )
        return f"Subscription request #{made.pk} submitted; an admin decides."
    if action in DECISIONS:
        pk = post.get("request_id", "")
        target = _visible_requests(request, cluster).filter(pk=int(pk) if pk.isdigit() else 0).first()
        if target is None:
            raise not_found("The subscription request")
        transition, done = DECISIONS[action]
        transition(user, target.pk, post.get("comment", ""))
        return f"Subscription request #{target.pk} {done}."
    raise Refused(400, f"Unknown action {action!r}.")


@require_http_methods(["GET", "POST"])
@portal_page
def client_metrics(request: HttpRequest, name: str) -> HttpResponse:
    """A cluster's subscriptions, the forms the person may use, and the subscription requests it may see."""
    cluster = Cluster.objects.select_related("desired_state").filter(name=name).first()
    if cluster is None:
        raise not_found(f"Cluster {name!r}")
    refusal, status = None, 200
    if request.method == "POST":
        try:
            done = _act(request, cluster)
        except (SubscriptionNotFound, SubscriptionExists) as e:
            refusal, status = e.message, 404 if isinstance(e, SubscriptionNotFound) else 409
        except QuotaEngineError as e:
            refusal, status = e.message, 400
        except errors.WorkflowError as e:
            refusal, status = e.message, e.status
        else:
            messages.success(request, done)
            return HttpResponseRedirect(reverse("client-metrics", args=[cluster.name]))
    edit = request.GET.get("edit")
    context = {
        "cluster": cluster,
        "subscriptions": visible_subscriptions(request.user, ClientMetricsSubscription.objects.filter(cluster=cluster)),
        "editing": ClientMetricsSubscription.objects.filter(cluster=cluster, name=edit).first()
        if edit and is_admin(request.user) else None,
        "requests": [
            {"r": r, "can_decide": is_admin(request.user) and r.requested_by_id != request.user.pk}
            for r in _visible_requests(request, cluster)[:200]
        ],
        "member_tenants": list(tenants_of(request.user)),
        "pending": RequestState.SUBMITTED,
        "refusal": refusal,
        "posted": request.POST if request.method == "POST" else {},
    }
    return page(request, "frontend/client_metrics.html", context, status=status)
