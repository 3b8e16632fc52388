"""Template filters showing quota values in their units (``engine.units``): byte rates in binary units
with the exact figure on hover, the other keys with their own unit.

    {% load quota_units %}
    {{ cluster.capacity_in_bytes_per_s|byte_rate }}    -> <span class="qty" title="10,000 B/s">9.77 KiB/s</span>
    {{ req.value|quota_value:req.key }}                 -> 1.5 MiB/s, or 50 %, 10 mutations/s, 5 connections/s
    {{ entry.after|audit_value:entry.key }}             -> as quota_value for numbers, yes/no, a scope's label, else
                                                           the text (a state)
    {{ entry.entity|breakable }}                        -> /config/users/<wbr>svc-a ... (breaks after / and .)
    {{ sample.thr_frac|percent }}                       -> 37%, <1% (above 0 but rounding to 0), — (None)
"""

from __future__ import annotations

import math

from django import template
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from engine.entities import QUOTA_KEYS
from engine.units import format_byte_rate, format_exact, format_quota_value, is_byte_rate, quota_key
from quotas.choices import BudgetScope

register = template.Library()


def _number(value: object) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, int):
        return value
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


@register.filter
def byte_rate(value: object) -> SafeString | str:
    """A byte rate in the largest binary unit it reaches (``1.5 MiB/s``), the exact bytes/s in its ``title``."""
    number = _number(value)
    if number is None:
        return "" if value is None else str(value)
    return format_html(
        '<span class="qty" title="{}">{}</span>', format_exact("producer_byte_rate", number), format_byte_rate(number)
    )


@register.filter
def quota_value(value: object, key: str) -> SafeString | str:
    """A value of a quota key (or a rate of a quota type: ``produce``, ``request``, ...) in its unit."""
    number = _number(value)
    if number is None:
        return "" if value is None else str(value)
    if is_byte_rate(key):
        return byte_rate(number)
    return format_html('<span class="qty">{}</span>', format_quota_value(quota_key(key), number))


@register.filter
def audit_value(value: object, key: str) -> SafeString | str:
    """An audit entry's before/after: a quota value in its unit, a budget scope by its label, yes/no for a flag (an
    exemption), a group's fields as ``name: value`` pairs (its values in their units); any other text (a state, a
    config text) as it is."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return format_html_join("; ", "{}: {}", ((name, audit_value(v, name)) for name, v in value.items()))
    if key in QUOTA_KEYS and isinstance(value, int | float):
        return quota_value(value, key)
    if value in BudgetScope.values:  # a scope change of a quota value
        return BudgetScope(value).label
    return str(value)


@register.filter
def breakable(value: object) -> SafeString:
    """A long name (an entity path, a config key) that may wrap after each ``/`` and ``.`` (with ``code.breakable``):
    in a wide table it takes two lines instead of pushing the before/after and comment columns off a desktop screen."""
    text = escape("" if value is None else str(value))
    return mark_safe(text.replace("/", "/<wbr>").replace(".", ".<wbr>"))  # escaped above


@register.filter
def percent(value: object) -> str:
    """A share (1.0 = 100 %) as a whole percentage; a share above 0 that rounds to 0 is "<1%", not a 0 that reads
    as none; None is "—"."""
    number = _number(value)
    if number is None:
        return "—"
    if 0 < number < 0.005:
        return "<1%"
    return f"{number * 100:,.0f}%"
