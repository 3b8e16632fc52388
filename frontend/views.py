"""Views of the HTML pages."""

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def home(request: HttpRequest) -> HttpResponse:
    """The landing page: what this portal is and where its API and health check are."""
    return render(request, "frontend/home.html", {"portal_name": settings.PORTAL_NAME})
