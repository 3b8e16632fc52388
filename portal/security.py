"""The Content-Security-Policy header of every response (Django 5.2 has none of its own).

The portal's pages load scripts and styles from its own static files only, with no inline script, ``<script>``
block, ``style=`` or ``on...=`` attribute (their data travels in ``json_script`` blocks, which are not run), so the
policy is ``'self'`` throughout. What is allowed beyond that is listed in ``QUOTAS_CSP`` with its reason
(``portal/settings.py``): the hash of the one inline ``<style>`` block of a third-party page (Swagger UI's), and
``data:`` images (Swagger UI's icons, plotly's exports). The admin's pages need nothing more (its one inline
``<style>``, in a change list without actions, is never rendered: every admin here has actions).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


def policy_header(directives: dict[str, list[str]]) -> str:
    """``{"default-src": ["'self'"], ...}`` as the header's text."""
    return "; ".join(f"{name} {' '.join(sources)}".strip() for name, sources in directives.items())


class ContentSecurityPolicyMiddleware:
    """Sets ``Content-Security-Policy`` from ``settings.QUOTAS_CSP`` unless the view set one itself."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.header = policy_header(settings.QUOTAS_CSP)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if self.header and not response.has_header("Content-Security-Policy"):
            response["Content-Security-Policy"] = self.header
        return response
