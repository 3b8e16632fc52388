"""Pages of the history app: the impact preview fragment that the request form and request page poll."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from frontend.pages import not_found, portal_page
from history import services
from history.models import ImpactPreview


@require_GET
@portal_page
def preview_fragment(request: HttpRequest, pk: int) -> HttpResponse:
    """One preview as the pages show it (progress while it runs, figures and advice when done), for polling."""
    preview = ImpactPreview.objects.select_related("cluster").filter(pk=pk).first()
    if preview is None or not services.may_see_preview(request.user, preview):
        raise not_found(f"Impact preview #{pk}")
    return render(request, "frontend/_impact.html", impact_context(preview))


def impact_context(preview: ImpactPreview | None) -> dict[str, object]:
    """What ``_impact.html`` renders: the preview and its summary."""
    return {"preview": preview, "impact": services.summary(preview)}
