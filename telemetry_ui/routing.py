"""WebSocket routes, mounted by portal.asgi under Channels' auth middleware.

Consumers for the live per-entity charts are added here.
"""

from django.urls import URLPattern, URLResolver

websocket_urlpatterns: list[URLPattern | URLResolver] = []
