"""Entities as people read them (``engine.entities.display_name``), Kafka's own name on hover.

    {% load entity_names %}
    {{ entity|entity_name }}  -> <span class="entity-name" title="/config/users/svc-a">svc-a (all client-ids)</span>
    {{ req|entity_name }}          -> the same for anything with user, client_id (and ip) attributes; a group's
                                      request: group <name> (/groups/<name> on hover)
    {{ "svc-a:app"|entity_name }}  -> a sensor's tags: <span ... title="svc-a:app">svc-a, client-id app</span>
    {{ "/config/clients/1"|entity_name }} -> a config path: client-id 1 (any principal)
    {{ "/groups/g"|entity_name }}  -> group g; "/users/svc-a" (an exempt principal): principal svc-a
    {{ entity|entity_text }}       -> the words alone (a page title, an attribute)
"""

from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from engine.entities import display_name, display_path, display_tags, entity_path
from frontend.templatetags.quota_units import breakable

register = template.Library()


def named(value: object) -> tuple[str, str]:
    """(the words, Kafka's name) of an entity, a sensor's tags or a config path."""
    if isinstance(value, str):
        # a group's path and an exempt principal's (the audit's and the capacity check's names for them)
        if value.startswith("/groups/"):
            return f"group {value.removeprefix('/groups/')}", value
        if value.startswith("/users/"):
            return f"principal {value.removeprefix('/users/')}", value
        if value.startswith("/"):
            return display_path(value), value
        return display_tags(value), value
    group = getattr(value, "group_name", "")
    if group:  # a group's request: no principal nor client-id of its own
        return f"group {group}", f"/groups/{group}"
    user, client_id, ip = (getattr(value, f, None) for f in ("user", "client_id", "ip"))
    return display_name(user, client_id, ip), entity_path(user, client_id, ip)


@register.filter
def entity_name(value: object) -> SafeString | str:
    """The entity in words, its Kafka name (config path or sensor tags) in the ``title``; a path of something else
    (a broker's or a topic's config) as the path, breakable after each ``/`` and ``.``."""
    if value is None or value == "":
        return ""
    words, raw = named(value)
    if words == raw:
        return format_html('<code class="breakable">{}</code>', breakable(raw))
    return format_html('<span class="entity-name" title="{}">{}</span>', raw, words)


@register.filter
def entity_text(value: object) -> str:
    """The entity in words, as plain text."""
    return "" if value is None or value == "" else named(value)[0]
