"""ASGI entry point (``portal.asgi:application``), served by uvicorn.

HTTP goes to Django; WebSockets go to the Channels consumers of telemetry_ui
(live quota charts), with the Django session user attached and the Origin
header checked against ALLOWED_HOSTS so other sites cannot open sockets as
the logged-in user.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

# Django must be set up before anything that imports models (auth middleware, consumers).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from telemetry_ui.live.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
