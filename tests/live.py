"""The portal served over HTTP by uvicorn for tests that must talk to it as its clients do (schemathesis over the
network, WebSocket clients), on the test database and Redis.

What such a test needs in the database must be committed (the server is another process): ``committed_world``
lets a module-scoped fixture write it outside pytest-django's transaction and empties the database afterwards (as
pytest-django's transactional tests do), so nothing it or the server wrote reaches the next test.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.celery_worker import CELERY_KEYS
from tests.redis_keys import delete_matching
from tests.services import Service, service_env, start_relay, start_server

#: The mark of a test that only talks to a live portal: pytest-django creates the test database for marked tests only
#: (a session-scoped fixture's request is not enough), and a test transaction would hold SQLite's write lock against
#: the server. ``transaction=True`` leaves the test outside any transaction; ``available_apps`` of an app without
#: tables makes its end flush nothing (the module's committed world lives on until ``committed_world`` ends).
TALKS_TO_LIVE_PORTAL = pytest.mark.django_db(transaction=True, available_apps=["drf_spectacular"])


@dataclass
class LivePortal:
    """uvicorn serving ``portal.asgi`` (and the relay beside it when asked for)."""

    port: int
    server: Service
    relay: Service | None = None
    logs: dict[str, Path] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return "\n".join(f"--- {name}\n{path.read_text(errors='replace')[-3000:]}" for name, path in self.logs.items()
                         if path.exists())


@contextmanager
def live_portal(redis_url: str, logs: Path, relay: bool = False) -> Iterator[LivePortal]:
    """uvicorn on a free port (with ``python manage.py relay`` when ``relay``); both stopped on exit."""
    env = service_env(redis_url)
    paths = {"uvicorn": logs / "uvicorn.log"}
    started: list[Service] = []
    try:
        relay_service = None
        if relay:
            paths["relay"] = logs / "relay.log"
            relay_service = start_relay(env, paths["relay"])
            started.append(relay_service)
        server, port = start_server(env, paths["uvicorn"])
        started.append(server)
        yield LivePortal(port, server, relay_service, paths)
    finally:
        for service in reversed(started):
            service.stop()


@contextmanager
def committed_world(django_db_blocker: Any, redis_url: str) -> Iterator[None]:
    """Database writes inside are committed (a server process reads them); on exit the database is flushed and the
    Celery messages the server queued (pushes, heals) are dropped."""
    from django.core.management import call_command
    from django.db import connection

    with django_db_blocker.unblock():
        assert "test" in str(connection.settings_dict["NAME"]), connection.settings_dict["NAME"]
        try:
            yield
        finally:
            call_command("flush", interactive=False, verbosity=0)
            client = redis.Redis.from_url(redis_url)
            delete_matching(client, *CELERY_KEYS)
            client.close()
