"""Live monitoring end to end: the relay and the portal under uvicorn as real processes, real WebSocket clients.

One relay (``python manage.py relay``) and one uvicorn serve the whole module, on the test Redis and the test
database file; the tests commit their users and clusters (``transaction=True``) so both processes see them.
Every test names its own cluster, so nothing it publishes reaches another test (or another run on the same Redis).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from engine.monitor import Sampler
from tests.services import Service, Socket, service_env, session_cookie, start_relay, start_server
from tests.waiting import wait_for


@pytest.fixture(scope="module")
def services(
    redis_url: str, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The relay and uvicorn for the module; yields {"relay", "server", "port", "redis"}."""
    logs = tmp_path_factory.mktemp("monitor")
    env = service_env(redis_url)
    relay = start_relay(env, logs / "relay.log")
    server, port = start_server(env, logs / "uvicorn.log")
    try:
        client = redis.Redis.from_url(redis_url)
        yield {"relay": relay, "server": server, "port": port, "redis": client}
        client.close()
    finally:
        t0 = time.monotonic()
        server.stop()
        stop_s = time.monotonic() - t0
        code = relay.stop()
        assert code == 0, f"the relay did not stop cleanly ({code}):\n{relay.text()[-3000:]}"
        assert "relay stopped" in relay.text()
        assert stop_s < 5, f"uvicorn took {stop_s:.1f} s to stop: a consumer outlived its socket"


@pytest.fixture
def make_cluster(services: dict[str, Any], transactional_db: None) -> Callable[[], str]:
    """Create a cluster with a name of its own and wait until the relay tails its firehose."""
    from quotas.models import Cluster

    def make() -> str:
        name = f"mon-{uuid.uuid4().hex[:10]}"
        Cluster.objects.create(name=name)
        relay: Service = services["relay"]
        wait_for(f"the relay to tail {name}", lambda: name in relay.text(), 10)
        return name

    return make


@pytest.fixture
def sockets(services: dict[str, Any]) -> Iterator[Callable[[Any], Socket]]:
    """Open sockets as a user (None = anonymous); all closed at the end."""
    opened: list[Socket] = []

    def open_as(user: Any) -> Socket:
        s = Socket(services["port"], session_cookie(user) if user is not None else None)
        opened.append(s)
        return s

    yield open_as
    for s in opened:
        s.close()


@pytest.fixture
def publish(services: dict[str, Any]) -> Callable[..., list[dict[str, Any]]]:
    """publish(cluster, broker, samples, t=None): one broker tick through the engine's Sampler.publish."""
    samplers: dict[tuple[str, int], Sampler] = {}

    def do(cluster: str, broker: int, samples: list[dict[str, Any]], t: int | None = None) -> list[dict[str, Any]]:
        sampler = samplers.setdefault((cluster, broker), Sampler(services["redis"], cluster, broker, managers={}))
        now = t if t is not None else int(time.time() * 1000)
        sampler.publish(samples, now)
        return samples

    return do
