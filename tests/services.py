"""The portal's own servers as the tests start them: uvicorn, the relay, WebSocket clients and session cookies.

Shared by every folder whose tests need a live portal (live monitoring, the replicas, quotactl, the KIP-714 and
Grafana checks): a module the tests import, not a conftest of one folder. The fixtures that start a module's
servers stay in each folder's conftest (``tests/telemetry/conftest.py``: the relay and uvicorn for the module).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from devtools.processes import stop_session
from devtools.redis_server import free_port
from tests.database import database_url
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
RENEW_S = 0.4
WATCH_TTL_S = 3.0


def point_portal_at(url: str) -> dict[str, object]:
    """Make the portal (Django settings, Celery, Channels) use Redis at ``url``; return the old settings."""
    from portal.celery import app

    names = ("QUOTAS_REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "CHANNEL_LAYERS")
    old = {name: getattr(settings, name) for name in names}
    settings.QUOTAS_REDIS_URL = url
    settings.CELERY_BROKER_URL = url
    settings.CELERY_RESULT_BACKEND = url
    layers = copy.deepcopy(settings.CHANNEL_LAYERS)
    layers["default"]["CONFIG"]["hosts"] = [{**layers["default"]["CONFIG"]["hosts"][0], "address": url}]
    settings.CHANNEL_LAYERS = layers
    app.conf.broker_url = url
    app.conf.result_backend = url
    return old


def service_env(redis_url: str) -> dict[str, str]:
    """The environment of the relay and uvicorn: the test database file and Redis, short watch renewals."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "QUOTAS_REDIS_URL": redis_url,
        "QUOTAS_MONITOR_RENEW_S": str(RENEW_S),
        "QUOTAS_MONITOR_WATCH_TTL_S": str(WATCH_TTL_S),
        "PYTHONUNBUFFERED": "1",
        "DATABASE_URL": database_url(),  # the test database, never the environment's own
    }
    return env


class Service:
    """A subprocess in a session of its own (stopped with all of its children), logging to a file."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path) -> None:
        self.cmd, self.env, self.log = cmd, env, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.cmd, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        stop_session(self.proc, grace_s)
        code = self.proc.returncode
        self.proc = None
        return code


def start_relay(env: dict[str, str], log: Path) -> Service:
    relay = Service([sys.executable, "manage.py", "relay", "--clusters-every", "0.2", "--block-ms", "500"], env, log)
    relay.start()
    wait_for("the relay to start", lambda: "relay started" in relay.text() or not relay.alive(), 30)
    assert relay.alive(), relay.text()[-3000:]
    return relay


def start_server(
    env: dict[str, str], log: Path, port: int | None = None, access_log: bool = False
) -> tuple[Service, int]:
    """uvicorn serving portal.asgi on ``port`` (default: a free one) with ``env``, once it answers /healthz;
    ``access_log``: with uvicorn's access log (at INFO), as ``scripts/run_portal.sh`` serves it."""
    import http.client

    port = port or free_port()
    logging = ["--log-level", "info"] if access_log else ["--no-access-log", "--log-level", "warning"]
    server = Service(
        [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--lifespan", "off", *logging],
        env, log,
    ).start()

    def answers() -> bool:
        assert server.alive(), server.text()[-3000:]
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/healthz")
            c.getresponse().read()
            c.close()
            return True
        except OSError:
            return False

    try:
        wait_for("uvicorn to answer", answers, 30)
    except BaseException:
        server.stop()
        raise
    return server, port


def session_cookie(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


class Socket:
    """A WebSocket client of /ws/monitor/ sending and receiving JSON frames."""

    def __init__(self, port: int, cookie: str | None) -> None:
        headers = {"Cookie": cookie} if cookie else None
        self.ws: ClientConnection = connect(
            f"ws://127.0.0.1:{port}/ws/monitor/", origin=f"http://127.0.0.1:{port}", additional_headers=headers,
            proxy=None, max_size=None, open_timeout=10, legacy=True,
        )

    def send(self, frame: Any) -> None:
        self.ws.send(frame if isinstance(frame, str | bytes) else json.dumps(frame))

    def recv(self, timeout: float = 5.0) -> dict[str, Any]:
        return json.loads(self.ws.recv(timeout=timeout))

    def expect(self, kind: str, timeout: float = 5.0, skip: tuple[str, ...] = ()) -> dict[str, Any]:
        """The next frame, which must be of type ``kind`` (frames of the types in ``skip`` are passed over)."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.recv(max(0.01, deadline - time.monotonic()))
            if frame.get("type") in skip:
                continue
            assert frame.get("type") == kind, frame
            return frame

    def frames(self, seconds: float) -> list[dict[str, Any]]:
        """Every frame received within ``seconds``."""
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                out.append(self.recv(left))
            except TimeoutError:
                break
        return out

    def subscribe(self, cluster: str, entity: str, **extra: Any) -> list[dict[str, Any]]:
        """Subscribe; returns the backfill's points."""
        self.send({"action": "subscribe", "cluster": cluster, "entity": entity, **extra})
        assert self.expect("subscribed") == {"type": "subscribed", "cluster": cluster, "entity": entity}
        backfill = self.expect("backfill")
        assert (backfill["cluster"], backfill["entity"]) == (cluster, entity)
        return backfill["points"]

    def close(self) -> None:
        try:
            self.ws.close()
        except ConnectionClosed:
            pass


def sample(cluster: str, broker: int, tags: str, t: int, q: str = "produce", rate: float = 100.0) -> dict[str, Any]:
    """A sample as the engine's Sampler measures it."""
    bound = 1000.0
    s: dict[str, Any] = {"t": t, "c": cluster, "b": broker, "q": q, "e": tags, "rate": rate, "bound": bound,
                         "util": rate / bound, "thr_avg": 0.0, "thr_max": 0.0, "thr_frac": 0.0}
    if q == "connection":
        s.update(bound=None, util=None, accept_rate=rate, count=3)
    return s

