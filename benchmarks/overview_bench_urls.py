"""The portal's URLs plus ``/bench/trivial-page``, the baseline of ``benchmarks/overview_bench.py`` (never deployed)."""

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.http import require_GET

from frontend.pages import page, portal_page
from portal.urls import urlpatterns as portal_urlpatterns


@require_GET
@portal_page
def trivial_page(request: HttpRequest) -> HttpResponse:
    """The base template with no content, behind what every page has: session login, the roles the navigation
    needs (``page``), the middleware. A page's time minus this one's is what its own work costs."""
    return page(request, "frontend/base.html")


urlpatterns = [path("bench/trivial-page", trivial_page, name="bench-trivial-page"), *portal_urlpatterns]
