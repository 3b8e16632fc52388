"""WebSocket routes, mounted by portal.asgi under Channels' auth middleware.

``/ws/monitor/``: live quota samples per entity and per cluster (``telemetry_ui/live/consumers.py``; the frames are
in ``telemetry_ui/README.md``).
"""

from django.urls import URLPattern, URLResolver, path

from telemetry_ui.live.consumers import MonitorConsumer

websocket_urlpatterns: list[URLPattern | URLResolver] = [
    path("ws/monitor/", MonitorConsumer.as_asgi(), name="ws-monitor"),
]
