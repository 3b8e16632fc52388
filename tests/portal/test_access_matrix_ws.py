"""Who may watch what over the WebSockets: every WebSocket route and every action of its consumer x every role x
objects of tenant A, of tenant B and shared ones, against one table (issue 20; the HTTP routes are in
``test_access_matrix.py``).

The rows are checked against the WebSocket URL routing (``telemetry_ui.live.routing``) and each consumer's
``ACTIONS``: a route or an action without a row fails ``test_every_websocket_route_and_action_has_a_row``, so a new
consumer or action cannot be left out; add its rows to ``WS_MATRIX``.

Asked over a real server: uvicorn serving ``portal.asgi`` and the relay (``manage.py relay``) on the test database
and Redis, real WebSocket clients with the roles' session cookies. The data are real too: samples published by the
engine's ``Sampler``, telemetry pushes stored by the sink's writers, requests of every kind (quota, KIP-714
subscription, grouped plan) moved through the workflow.

Cells:
  ``see``   the subscription is accepted and its data show the object (its marker is in a data frame)
  ``hide``  accepted, and no data frame shows the object
  ``4401``  the socket is closed with that code (anonymous)
  ``CODE``  an ``error`` frame with that code (the socket stays open)

Whatever the row, a member's socket never carries another tenant's names, nor names no tenant of its owns, in any
data frame (``test_a_members_socket_carries_only_its_tenants_data``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from django.urls import URLPattern, URLResolver
from websockets.exceptions import ConnectionClosed

from quotas.choices import EntityType
from quotas.models import Cluster, OwnedName, Plan, Tenant
from tests.live import TALKS_TO_LIVE_PORTAL, committed_world, live_portal
from tests.people import make_user
from tests.portal.access_matrix import ROLES, Row, differences, parse
from tests.redis_keys import delete_matching
from tests.services import Socket, sample, session_cookie
from tests.waiting import wait_for

pytestmark = TALKS_TO_LIVE_PORTAL

CLUSTER = "wsmx-prod"
#: The object's marker in names: A's names hold "wsa", B's "wsb", and the shared ones (owned by no tenant) "wso".
MARK = {"A": "wsa", "B": "wsb", "shared": "wso"}

WS_MATRIX = """
#path          action                  object  admin      auditor    A                  B                  anon
/ws/monitor/   subscribe               A       see        see        see                PERMISSION_DENIED  4401
/ws/monitor/   subscribe               B       see        see        PERMISSION_DENIED  see                4401
/ws/monitor/   subscribe               shared  see        see        PERMISSION_DENIED  PERMISSION_DENIED  4401
/ws/monitor/   subscribe               gone    NOT_FOUND  NOT_FOUND  NOT_FOUND          NOT_FOUND          4401
/ws/monitor/   unsubscribe             -       NOT_FOUND  NOT_FOUND  NOT_FOUND          NOT_FOUND          4401
/ws/monitor/   subscribe_cluster       A       see        see        see                hide               4401
/ws/monitor/   subscribe_cluster       B       see        see        hide               see                4401
/ws/monitor/   subscribe_cluster       shared  see        see        hide               hide               4401
/ws/monitor/   subscribe_cluster       gone    NOT_FOUND  NOT_FOUND  NOT_FOUND          NOT_FOUND          4401
/ws/monitor/   unsubscribe_cluster     -       NOT_FOUND  NOT_FOUND  NOT_FOUND          NOT_FOUND          4401
/ws/monitor/   subscribe_requests      A       see        see        see                hide               4401
/ws/monitor/   subscribe_requests      B       see        see        hide               see                4401
/ws/monitor/   subscribe_requests      gone    NOT_FOUND  NOT_FOUND  NOT_FOUND          NOT_FOUND          4401
/ws/monitor/   unsubscribe_requests    -       NOT_FOUND  NOT_FOUND  NOT_FOUND          NOT_FOUND          4401
/ws/monitor/   subscribe_telemetry     A       see        see        see                PERMISSION_DENIED  4401
/ws/monitor/   subscribe_telemetry     B       see        see        PERMISSION_DENIED  see                4401
/ws/monitor/   subscribe_telemetry     shared  see        see        PERMISSION_DENIED  PERMISSION_DENIED  4401
/ws/monitor/   subscribe_telemetry     gone    NOT_FOUND  NOT_FOUND  NOT_FOUND          NOT_FOUND          4401
/ws/monitor/   unsubscribe_telemetry   -       NOT_FOUND  NOT_FOUND  NOT_FOUND          NOT_FOUND          4401
"""
#: Frames that carry data (``subscribed`` and ``error`` frames only echo what the client asked for).
DATA_FRAMES = ("backfill", "points", "batch", "request", "telemetry")

ROWS = parse(WS_MATRIX, ("path", "action"))


# ------------------------------------------------------------------ the routes and actions the portal has


def websocket_routes() -> dict[str, tuple[str, ...]]:
    """Every WebSocket route of the routing -> its consumer's actions (``("connect",)`` for one without ACTIONS)."""
    from telemetry_ui.live.routing import websocket_urlpatterns

    found: dict[str, tuple[str, ...]] = {}

    def walk(patterns: list[Any], prefix: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                consumer = getattr(p.callback, "consumer_class", None)
                found["/" + prefix + str(p.pattern)] = tuple(getattr(consumer, "ACTIONS", ("connect",)))

    walk(websocket_urlpatterns, "")
    return found


def test_every_websocket_route_and_action_has_a_row() -> None:
    have = {(r.path, r.action) for r in ROWS}
    missing = [f"{path} {action}" for path, actions in websocket_routes().items() for action in actions
               if (path, action) not in have]
    assert websocket_routes(), "no WebSocket route found: the walk over telemetry_ui.live.routing is broken"
    assert not missing, (
        "These WebSocket routes/actions have no row in the access matrix; add one row per object (A, B, shared, gone, "
        "or - for none) to WS_MATRIX in tests/portal/test_access_matrix_ws.py:\n  " + "\n  ".join(missing)
    )


# ------------------------------------------------------------------ the world, and what each role's socket got


@dataclass
class Seen:
    """One role's socket: the answer to each (action, object), and every frame it received."""

    cells: dict[tuple[str, str], str] = field(default_factory=dict)
    frames: list[dict[str, Any]] = field(default_factory=list)


def _target(action: str, obj: str) -> dict[str, Any]:
    """The frame that asks ``action`` about ``obj`` (``gone``: a cluster that does not exist; ``-``: nothing held)."""
    tag = MARK.get(obj, "wsz")
    cluster = "wsmx-gone" if obj == "gone" else CLUSTER
    if action in ("subscribe", "unsubscribe"):
        return {"action": action, "cluster": cluster, "entity": f"svc-{tag}-1:"}
    if action in ("subscribe_telemetry", "unsubscribe_telemetry"):
        return {"action": action, "cluster": cluster, "instance": f"inst-{tag}"}
    return {"action": action, "cluster": cluster}


def _publish_samples(redis_url: str, t: int) -> None:
    """One broker tick of the engine's sampler with an entity of A, of B and of no tenant."""
    from engine.monitor import Sampler

    client = redis.Redis.from_url(redis_url)
    Sampler(client, CLUSTER, 0, managers={}).publish([sample(CLUSTER, 0, f"svc-{m}-1:", t) for m in MARK.values()], t)
    client.close()


def _store_telemetry(redis_url: str, t: int) -> None:
    """A push of a client instance of A, of B and of no tenant, through the sink's own writers."""
    import redis.asyncio as aioredis

    from telemetry_ui.ingest import telemetry_store as store

    async def write() -> None:
        client = aioredis.Redis.from_url(redis_url)
        for tag in MARK.values():
            instance, client_id = f"inst-{tag}", f"app-{tag}-1"
            record = {**store.new_record(instance), "client_id": client_id, "last_push_ms": t, "pushes": 1}
            await store.save_record(client, CLUSTER, record)
            await store.store_entry(client, store.make_entry(CLUSTER, instance, client_id, [], t))
        await client.aclose()

    asyncio.run(write())


class Watcher:
    """A role's socket that keeps every frame it reads."""

    def __init__(self, socket: Socket, seen: Seen) -> None:
        self.socket, self.seen = socket, seen

    def read(self, timeout: float) -> dict[str, Any] | None:
        try:
            frame = self.socket.recv(timeout)
        except TimeoutError:
            return None
        self.seen.frames.append(frame)
        return frame

    def ask(self, frame: dict[str, Any], answered: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Send ``frame``; the first frame after it that ``answered`` accepts, or an error about it."""
        self.socket.send(frame)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            got = self.read(deadline - time.monotonic())
            if got is not None and (answered(got) or (got.get("type") == "error" and got.get("action") ==
                                                      frame["action"] and got.get("cluster") == frame["cluster"])):
                return got
        raise AssertionError(f"no answer to {frame} within 15 s")


def _shows(frames: list[dict[str, Any]], marker: str) -> bool:
    return any(marker in json.dumps(f) for f in frames if f.get("type") in DATA_FRAMES)


def _anonymous_cell(port: int, row: Row) -> str:
    """An anonymous socket: what it gets when it asks the row's action (the close code, if it is closed)."""
    socket = Socket(port, None)
    try:
        socket.send(_target(row.action, row.obj))
        frame = socket.recv(10)
        return f"frame {frame.get('type')} {frame.get('code', '')}".strip()
    except ConnectionClosed as e:
        return str(e.rcvd.code) if e.rcvd is not None else "closed without a code"
    finally:
        socket.close()


@pytest.fixture(scope="module")
def observed(
    django_db_setup: None, django_db_blocker: Any, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Seen]]:
    """The world (tenants A and B, their entities, telemetry instances and requests, and shared ones), the live
    portal, and what each role's socket answered to every row."""
    from quotas.workflow import plan_requests, quota_requests, subscription_requests

    r = redis.Redis.from_url(redis_url)
    keys = (f"mon:{{{CLUSTER}}}*", f"tel:{{{CLUSTER}}}*")
    delete_matching(r, *keys)
    with committed_world(django_db_blocker, redis_url), \
            live_portal(redis_url, tmp_path_factory.mktemp("wsmx"), relay=True) as live:
        cluster = Cluster.objects.create(name=CLUSTER)
        users = {"admin": make_user("wsmx-root", staff=True), "auditor": make_user("wsmx-audit", groups=("auditors",)),
                 "A": make_user("wsmx-amy"), "B": make_user("wsmx-ben")}
        for obj in ("A", "B"):
            tenant = Tenant.objects.create(name=f"team-{MARK[obj]}")
            tenant.members.add(users[obj])
            OwnedName.objects.create(tenant=tenant, entity_type=EntityType.USER, pattern=f"svc-{MARK[obj]}-*")
            OwnedName.objects.create(tenant=tenant, entity_type=EntityType.CLIENT_ID, pattern=f"app-{MARK[obj]}-*")
        assert live.relay is not None
        relay = live.relay
        wait_for(f"the relay to tail {CLUSTER}", lambda: CLUSTER in relay.text(), 15)
        now = int(time.time() * 1000)
        _publish_samples(redis_url, now - 1000)  # for the backfills
        _store_telemetry(redis_url, now - 1000)

        seen = {role: Seen() for role in ROLES}
        watchers = {role: Watcher(Socket(live.port, session_cookie(users[role])), seen[role]) for role in users}
        live_rows = [row for row in ROWS if row.action in ("subscribe_cluster", "subscribe_requests")
                     and row.obj != "gone"]
        for role, w in watchers.items():
            for row in ROWS:
                if row in live_rows:
                    continue
                frame = _target(row.action, row.obj)
                if row.action.startswith("unsubscribe"):
                    got = w.ask(frame, lambda f: False)
                else:
                    kind = "backfill" if row.action in ("subscribe", "subscribe_telemetry") else "subscribed"
                    got = w.ask(frame, lambda f, kind=kind: f.get("type") in (kind, "subscribed_requests"))
                if got["type"] == "error":
                    seen[role].cells[(row.action, row.obj)] = got["code"]
                elif got["type"] == "backfill":
                    shown = _shows([got], MARK[row.obj]) and bool(got.get("points") or got.get("entries"))
                    seen[role].cells[(row.action, row.obj)] = "see" if shown else "hide"
            for action in ("subscribe_cluster", "subscribe_requests"):
                w.ask({"action": action, "cluster": CLUSTER},
                      lambda f: f.get("type") in ("subscribed", "subscribed_requests") and f.get("entity") is None)
        # Live data after every socket subscribed: a tick of samples, and requests of every kind of each tenant: a
        # quota request, a KIP-714 subscription request (withdrawn) and a grouped plan request (approved).
        _publish_samples(redis_url, now)
        for obj in ("A", "B"):
            quota_requests.submit(users[obj], None, cluster, user=f"svc-{MARK[obj]}-2", client_id=None, reason="wsmx",
                                  key="producer_byte_rate", value=2048)
            asked = {"metrics": "org.apache.kafka.producer.", "interval.ms": 60000,
                     "match": f"client_id=app-{MARK[obj]}-1"}
            sub = subscription_requests.submit_subscription(users[obj], None, cluster, name=f"sub-{MARK[obj]}",
                                                            configs=asked)
            subscription_requests.withdraw_subscription(users[obj], sub.pk)
            plan = Plan.objects.create(cluster=cluster, created_by=users[obj], tenant=Tenant.objects.get(
                name=f"team-{MARK[obj]}"), document="", base_version=0)
            plan_requests.approve_plan(users["admin"], plan_requests.submit_plan(users[obj], plan).pk)

        def admin_has_all() -> bool:
            watchers["admin"].read(0.2)
            frames = seen["admin"].frames
            moved = {(f.get("kind"), f.get("tenant"), f.get("state")) for f in frames if f.get("type") == "request"}
            return all(_shows([f for f in frames if f.get("type") == "batch"], m) for m in MARK.values()) and all(
                (f"team-{MARK[o]}", "plan", "applied") in {(t, k, s) for k, t, s in moved} for o in ("A", "B"))

        wait_for("the admin's socket to get the live batch and every request of both tenants", admin_has_all, 20)
        for w in watchers.values():  # the others got theirs at the same time; a moment more to be sure
            end = time.monotonic() + 1.0
            while (left := end - time.monotonic()) > 0:
                w.read(left)
        for role, w in watchers.items():
            for row in live_rows:
                kind = "batch" if row.action == "subscribe_cluster" else "request"
                frames = [f for f in seen[role].frames if f.get("type") == kind]
                seen[role].cells[(row.action, row.obj)] = "see" if _shows(frames, MARK[row.obj]) else "hide"
            w.socket.close()
        for row in ROWS:
            seen["anon"].cells[(row.action, row.obj)] = _anonymous_cell(live.port, row)
        assert live.server.alive(), live.log()
        yield seen
    delete_matching(r, *keys)
    r.close()


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.action} {r.obj}" for r in ROWS])
def test_every_role_gets_what_the_websocket_table_says(row: Row, observed: dict[str, Seen]) -> None:
    got = {role: observed[role].cells.get((row.action, row.obj), "no answer") for role in ROLES}
    if got != row.expected:
        cells = differences(got, row)
        pytest.fail(f"{row.path} {row.action} {row.obj}: {cells}\nThe WebSocket access matrix is WS_MATRIX in "
                    f"{__file__}; fix the code, or the row when the table was wrong.", pytrace=False)


@pytest.mark.parametrize("role", ["admin", "auditor", "A", "B"])
def test_every_kind_of_request_moves_on_the_socket_as_quota_requests_do(role: str, observed: dict[str, Seen]) -> None:
    """Quota, subscription and plan requests each move live (issue 29), to whoever may see them: a member its own
    tenants' only, admins and auditors every tenant's."""
    moves: dict[tuple[str, str], list[str]] = {}
    for f in observed[role].frames:
        if f.get("type") == "request":
            assert f.get("cluster") == CLUSTER and isinstance(f.get("request_id"), int) and f.get("at"), f
            moves.setdefault((f["tenant"], f["kind"]), []).append(f["state"])
    tenants = [f"team-{MARK[o]}" for o in ("A", "B") if role in ("admin", "auditor", o)]
    expected = {}
    for tenant in tenants:
        expected |= {(tenant, "quota"): ["submitted"], (tenant, "subscription"): ["submitted", "withdrawn"],
                     (tenant, "plan"): ["submitted", "approved", "applied"]}
    assert moves == expected


@pytest.mark.parametrize("role", ["A", "B"])
def test_a_members_socket_carries_only_its_tenants_data(role: str, observed: dict[str, Seen]) -> None:
    data = [f for f in observed[role].frames if f.get("type") in DATA_FRAMES]
    assert _shows(data, MARK[role]), f"the member of {role} got none of its own data: the check below proves nothing"
    foreign = [m for o, m in MARK.items() if o != role]
    leaked = [f for f in data if any(m in json.dumps(f) for m in foreign)]
    assert not leaked, f"the member of {role} received data of others: {leaked[:3]}"
