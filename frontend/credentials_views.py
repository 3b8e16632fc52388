"""The SCRAM credentials page: who has credentials on the Kafka clusters, and forms to create, rotate and delete.

``/credentials/`` follows the API's rules through the same functions (``quotas.scram``): admins and auditors
see every credential the portal made, a member those of the principals its tenants own; members change their
tenants' principals, admins any, auditors none. A new password is rendered straight into the response of the
POST that made it (no redirect, nothing in the session or a message), with ``Cache-Control: no-store``, and is
gone when the person leaves the page.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.debug import sensitive_variables
from django.views.decorators.http import require_http_methods

from frontend.pages import Refused, not_found, page, paginate, portal_page
from quotas import scram
from quotas.choices import ConnectorKind
from quotas.models import Cluster, ScramCredential, is_auditor, member_tenants


def _principals(rows: Iterable[ScramCredential]) -> list[dict[str, Any]]:
    """The rows grouped by cluster and principal, in the order given (cluster, user, mechanism)."""
    grouped: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        entry = grouped.setdefault((row.cluster.name, row.user), {"cluster": row.cluster, "user": row.user,
                                                                  "tenant": row.tenant, "credentials": []})
        entry["credentials"].append(row)
    return list(grouped.values())


def _iterations(text: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    if not text.isdigit():
        raise scram.ScramError("INVALID_REQUEST", f"Iterations are a whole number, not {text!r}.", field="iterations")
    return int(text)


@sensitive_variables()
def _act(request: HttpRequest, cluster: Cluster) -> HttpResponse:
    """Run the posted action: a new password is rendered here and now; a deletion goes back to the list."""
    post, user = request.POST, request.user
    action, principal = post.get("action", ""), post.get("user", "")
    mechanisms = post.getlist("mechanisms") or None
    if action == "delete":
        removed = scram.delete(user, cluster, principal, mechanisms)
        messages.success(request, f"Deleted the {' and '.join(removed)} credentials of {principal} on {cluster.name}.")
        return HttpResponseRedirect(reverse("credentials") + f"?cluster={cluster.name}")
    if action == "create":
        chosen = post.getlist("mechanisms")  # the form's boxes: none ticked is refused, not "both"
        issued = scram.create(user, cluster, principal, chosen, _iterations(post.get("iterations", "")))
        done, status = "created", 201
    elif action == "rotate":
        issued = scram.rotate(user, cluster, principal, mechanisms, _iterations(post.get("iterations", "")))
        done, status = "rotated", 200
    else:
        raise Refused(400, f"Unknown action {action!r}.")
    context = {"issued": issued, "done": done, "warning": scram.NOT_SHOWN_AGAIN}
    response = page(request, "frontend/credentials_issued.html", context, status=status)
    add_never_cache_headers(response)  # no-store: the back button and caches do not bring the password back
    response["Pragma"] = "no-cache"
    return response


@require_http_methods(["GET", "POST"])
@portal_page
def credentials(request: HttpRequest) -> HttpResponse:
    """The credentials the person may see on the Kafka clusters, and the forms it may use."""
    clusters = list(Cluster.objects.filter(connector=ConnectorKind.KAFKA).order_by("name"))
    refusal, status, posted = None, 200, {}
    if request.method == "POST":
        name = request.POST.get("cluster", "")
        cluster = next((c for c in clusters if c.name == name), None)
        if cluster is None:
            raise not_found(f"Kafka cluster {name!r}")
        try:
            return _act(request, cluster)
        except scram.ScramError as e:
            refusal, status = e.message, e.status
            posted = {"cluster": name, "user": request.POST.get("user", ""), "action": request.POST.get("action")}
    chosen = request.GET.get("cluster", "")
    shown = [c for c in clusters if c.name == chosen] if chosen else clusters
    rows = [row for c in shown for row in scram.visible(request.user, c).order_by("user", "mechanism")]
    context = {
        "clusters": clusters,
        "chosen": chosen,
        "page_obj": paginate(request, _principals(rows)),
        "mechanisms": scram.MECHANISMS,
        "default_iterations": scram.DEFAULT_ITERATIONS,
        "min_iterations": scram.MIN_ITERATIONS,
        "max_iterations": scram.MAX_ITERATIONS,
        "can_change": not is_auditor(request.user),
        "owned_patterns": [
            (t.name, [o.pattern for o in t.owned_names.all() if o.entity_type == "user"])
            for t in member_tenants(request.user)
        ],
        "refusal": refusal,
        "posted": posted,
    }
    return page(request, "frontend/credentials.html", context, status=status)
