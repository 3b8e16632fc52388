"""WebSocket entry of the ASGI app (asgiref's communicator: channels.testing needs daphne)."""

import asyncio

import pytest
from asgiref.testing import ApplicationCommunicator


def _communicator(origin: bytes) -> ApplicationCommunicator:
    """A WebSocket connection to portal.asgi from a page at ``origin``."""
    from portal.asgi import application

    scope = {
        "type": "websocket",
        "path": "/ws/anything/",
        "raw_path": b"/ws/anything/",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8000"), (b"origin", origin)],
        "subprotocols": [],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    return ApplicationCommunicator(application, scope)


async def _handshake(origin: bytes) -> dict:
    """Open a WebSocket with ``origin``; return the app's first reply, then hang up."""
    communicator = _communicator(origin)
    await communicator.send_input({"type": "websocket.connect"})
    reply = await communicator.receive_output(timeout=5)
    await communicator.send_input({"type": "websocket.disconnect", "code": 1000})
    await communicator.wait(timeout=5)
    return reply


def test_websocket_from_own_origin_passes_the_origin_check(settings) -> None:
    settings.CHANNEL_LAYERS = {}

    async def connect() -> None:
        communicator = _communicator(b"http://127.0.0.1:8000")
        await communicator.send_input({"type": "websocket.connect"})
        await communicator.wait(timeout=5)

    # No routes yet, so the router refuses the path: proof the origin check let it through.
    with pytest.raises(ValueError, match="No route found"):
        asyncio.run(connect())


def test_websocket_from_foreign_origin_is_refused(settings) -> None:
    # Origin checking needs no channel layer. With the Redis layer, the refusing consumer's pending
    # BZPOPMIN is only given up when its 5 s timeout ends, which would make this test take 5 s.
    settings.CHANNEL_LAYERS = {}
    reply = asyncio.run(_handshake(b"http://evil.example"))
    assert reply["type"] == "websocket.close"
