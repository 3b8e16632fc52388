"""Two portal replicas and two Celery workers on one database and one Redis, as production runs them.

Two uvicorn processes serve ``portal.asgi`` on two ports, the relay fans the samples out, two workers push; all of
them share the session's test database (PostgreSQL under the test command) and the test Redis. A WebSocket client
on replica A sees the live samples and the moves of requests decided through replica B (and by the workers); 200
approvals, half through each replica and both replicas at once, end with every broker holding every version
exactly once, in order (each broker's own push log), and both workers having pushed.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from rest_framework.authtoken.models import Token

from engine.config import namespace_for_broker
from engine.desired import NamespaceState
from engine.monitor import Sampler
from quotas.models import DesiredStateVersion, Push, QuotaRequest
from quotas.workflow import quota_requests
from tests.brokers import cluster_with_brokers
from tests.celery_worker import Worker
from tests.people import make_tenant, roles
from tests.services import Service, Socket, sample, service_env, session_cookie, start_relay, start_server
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        "postgresql" not in settings.DATABASES["default"]["ENGINE"],
        reason="replicas share a PostgreSQL database (scripts/run_tests.sh starts one and sets DATABASE_URL); "
        "SQLite is the quick start's single-process database",
    ),
]
PBR = "producer_byte_rate"
APPROVALS = 200
BROKERS = (0, 1, 2)


@pytest.fixture
def replicas(redis_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The relay and two uvicorn replicas on the test database and Redis; yields their ports and logs."""
    env = service_env(redis_url)
    relay = start_relay(env, tmp_path / "relay.log")
    started: list[Service] = [relay]
    try:
        a, port_a = start_server(env, tmp_path / "replica-a.log")
        started.append(a)
        b, port_b = start_server(env, tmp_path / "replica-b.log")
        started.append(b)
        yield {"a": port_a, "b": port_b, "relay": relay}
    finally:
        for service in reversed(started):
            service.stop()


def post(port: int, path: str, token: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


class Collector(threading.Thread):
    """Reads every frame of a socket as it comes (a client that stops reading would make the server drop frames)."""

    def __init__(self, socket: Socket) -> None:
        super().__init__(daemon=True)
        self.socket, self.frames, self.stopping = socket, [], False
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stopping:
            try:
                frame = self.socket.recv(0.2)
            except TimeoutError:
                continue
            except Exception:  # closed
                return
            with self.lock:
                self.frames.append(frame)

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [f for f in self.frames if f.get("type") == kind]


def chain(state: NamespaceState, last: int) -> list[int]:
    """The versions one broker's push log applied, each once and in order (fails otherwise)."""
    log = state.history()
    assert log, "nothing was applied"
    applied: list[int] = []
    held = log[0].held
    assert held <= 0, log[0]
    for entry in log:
        assert entry.mode in ("full", "delta"), entry
        assert entry.held == held and entry.version > held, (entry, "not where the previous push ended")
        applied.extend(range(max(held, 0) + 1, entry.version + 1))
        held = entry.version
    assert held == last, (held, last)
    return applied


# a hang guard, not a timing: two replicas, two workers and 200 approvals on 2 cores (54 s in CI, over the
# session's 120 s guard on a loaded machine)
@pytest.mark.timeout(300)
def test_two_replicas_and_two_workers_share_the_database_and_redis(
    replicas: dict[str, Any], worker_factory: Callable[..., Worker], engine_redis: redis.Redis, redis_url: str
) -> None:
    people = roles()
    tenant = make_tenant("team-r", people["alice"], users=["svc-r-*"])
    name = f"rep-{uuid.uuid4().hex[:8]}"
    cluster = cluster_with_brokers(BROKERS, name=name)
    wait_for(f"the relay to tail {name}", lambda: name in replicas["relay"].text(), 10)
    workers = [worker_factory(), worker_factory()]
    tokens = {who: Token.objects.get_or_create(user=people[who])[0].key for who in ("admin", "admin2", "alice")}

    watcher = Socket(replicas["a"], session_cookie(people["admin"]))
    collector = Collector(watcher)
    try:
        # live samples: through replica A, whichever process published them
        watcher.send({"action": "subscribe_requests", "cluster": name})
        assert watcher.expect("subscribed_requests") == {"type": "subscribed_requests", "cluster": name}
        assert watcher.subscribe(name, "svc-r-0:") == []
        collector.start()
        t = int(time.time() * 1000)
        Sampler(redis.Redis.from_url(redis_url), name, 1, managers={}).publish([sample(name, 1, "svc-r-0:", t)], t)
        wait_for("replica A to stream the sample", lambda: collector.of("points"), 10)
        assert [p["t"] for f in collector.of("points") for p in f["points"]] == [t]

        # a request submitted and approved through replica B: replica A's socket sees it move
        status, body = post(replicas["b"], "/api/requests/", tokens["alice"],
                            {"tenant": "team-r", "cluster": name, "user": "svc-r-0", "key": PBR, "value": 1000})
        assert status == 201, body
        first = body["id"]
        status, body = post(replicas["b"], f"/api/requests/{first}/approve/", tokens["admin2"], {"comment": "via B"})
        assert status == 200, body

        def moves(pk: int) -> list[str]:
            return [f["state"] for f in collector.of("request") if f["request_id"] == pk]

        wait_for("replica A to show the request applied", lambda: "applied" in moves(first), 30)
        assert moves(first) == ["submitted", "approved", "applied"], moves(first)

        # 200 approvals: half through each replica, both at once
        pks = [
            quota_requests.submit(people["alice"], tenant, cluster, user=f"svc-r-{i}", client_id=None, key=PBR,
                                  value=2000 + i).pk
            for i in range(1, APPROVALS)
        ]
        answers: dict[int, int] = {}

        def approve_through(port: int, token: str, mine: list[int]) -> None:
            for pk in mine:
                answers[pk] = post(port, f"/api/requests/{pk}/approve/", token, {"comment": "spread"})[0]

        threads = [
            threading.Thread(target=approve_through, args=(replicas["a"], tokens["admin"], pks[0::2])),
            threading.Thread(target=approve_through, args=(replicas["b"], tokens["admin2"], pks[1::2])),
        ]
        for th in threads:
            th.start()
        began = time.monotonic()
        for th in threads:
            th.join(timeout=120)
        print(f"{len(pks)} approvals through two replicas: {time.monotonic() - began:.1f} s")
        assert sorted(answers.values()) == [200] * len(pks), {pk: s for pk, s in answers.items() if s != 200}

        last = DesiredStateVersion.objects.get(cluster=cluster).version
        assert last == APPROVALS
        began = time.monotonic()
        wait_for("every request to be applied", lambda: not QuotaRequest.objects.filter(
            cluster=cluster).exclude(state="applied").exists(), 60, 0.25)
        print(f"then every request applied after {time.monotonic() - began:.1f} s")
        assert not Push.objects.filter(cluster=cluster).exclude(state="applied").exists()
        for b in BROKERS:
            state = NamespaceState(engine_redis, namespace_for_broker(name, b), b)
            assert chain(state, last) == list(range(1, last + 1)), f"broker {b}"
            quotas = {resource: value for (_, resource, key), value in state.read()[1].items() if key == PBR}
            assert len(quotas) == APPROVALS and {v for v in quotas.values()} == {
                repr(float(1000))} | {repr(float(2000 + i)) for i in range(1, APPROVALS)}
        wait_for("replica A to see the last request applied", lambda: "applied" in moves(pks[-1]), 15)
        assert moves(pks[1]) == ["submitted", "approved", "applied"], moves(pks[1])  # decided through B
        pushed = [sum(("push_target[" in line or "push_group[" in line) and "succeeded" in line
                      for line in w.log.read_text().splitlines()) for w in workers]
        assert all(n > 0 for n in pushed), f"a worker did no push: {pushed}"
        print(f"pushes done per worker: {pushed}")
    finally:
        collector.stopping = True
        watcher.close()
