"""Template tags of the impact previews (``frontend/_impact.html``)."""

from __future__ import annotations

from django import template

from history import services
from history.models import ImpactPreview

register = template.Library()


@register.simple_tag
def preview_waiting(preview: ImpactPreview | None) -> str:
    """What a queued preview waits for (``history.services.waiting_for``), asked only while it is queued."""
    return services.waiting_for(preview)
