"""What every page is made of: rendering with the person's roles, login and refusals, pagination, the API's
scoping of requests, and the link to an entity's live charts. The page modules import it; it imports none of
them."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from quotas.models import QuotaRequest, roles, sees_everything, tenants_of
from quotas.outages import REDIS_DOWN

PAGE_SIZE = 50
LOGIN_PAGE = "/login/"

View = Callable[..., HttpResponse]


class Refused(Exception):
    """A page the person may not see or an object that is not theirs: rendered as an error page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def not_found(what: str) -> Refused:
    return Refused(404, f"{what} does not exist, or it is not one you may see.")


def page(request: HttpRequest, template: str, context: dict[str, Any] | None = None, status: int = 200) -> HttpResponse:
    """Render a page with the person's roles, which the navigation and the forms depend on."""
    held = roles(request.user)
    base = {
        "portal_name": settings.PORTAL_NAME,
        "is_admin": held.is_admin,
        "is_auditor": held.is_auditor,
        "sees_everything": held.sees_everything,
    }
    return render(request, template, {**base, **(context or {})}, status=status)


def portal_page(view: View) -> View:
    """Login required (to the portal's own login page, whatever LOGIN_URL says); Refused becomes an error page."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path(), LOGIN_PAGE)
        try:
            return view(request, *args, **kwargs)
        except Refused as e:
            return page(request, "frontend/error.html", {"status": e.status, "message": e.message}, status=e.status)
        except REDIS_DOWN as e:  # a page that needs Redis while it is down: say so, never a 500 or a stack trace
            message = (
                f"The portal's Redis cannot be reached right now ({type(e).__name__}), so this page cannot be shown. "
                "Reload in a few seconds; the health check (/healthz) says when it is back."
            )
            response = page(request, "frontend/error.html", {"status": 503, "message": message}, status=503)
            response["Retry-After"] = "5"
            return response

    return wrapper


def paginate(request: HttpRequest, rows: QuerySet[Any] | list[Any]) -> Page:
    """One page of rows; a page number out of range shows the last page rather than an error."""
    return Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))


# ------------------------------------------------------------------ scoping (the API's rules)


def visible_requests(request: HttpRequest, everything: bool | None = None) -> QuerySet[QuotaRequest]:
    """The API's scope: admins and auditors see every request, a member its tenants' requests (``everything``: the
    caller's ``sees_everything``, when it has it)."""
    rows = QuotaRequest.objects.select_related("tenant", "cluster", "requested_by", "approval__approver")
    if not (sees_everything(request.user) if everything is None else everything):
        rows = rows.filter(tenant__in=tenants_of(request.user))
    return rows


def entity_url(cluster: str, tags: str) -> str:
    """The live-monitoring page of one entity (``/monitor/<cluster>/entity/?e=<tags>``)."""
    return reverse("monitor-entity", args=[cluster]) + "?" + urlencode({"e": tags}, safe=":")
