"""Samples published by the engine's Sampler reach WebSocket clients through the relay, as the contract says."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed

from quotas.choices import EntityType
from quotas.models import OwnedName, Tenant
from telemetry_ui.live.monitoring import WATCHED_KEY, watched_member
from tests.people import make_user
from tests.services import RENEW_S, Socket, sample
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

Open = Callable[[Any], Socket]


def now() -> int:
    return int(time.time() * 1000)


def tenant_member(name: str, users: tuple[str, ...] = (), clients: tuple[str, ...] = ()) -> Any:
    """A user in a tenant owning the given principal and client-id patterns."""
    tenant = Tenant.objects.create(name=f"team-{name}")
    for p in users:
        OwnedName.objects.create(tenant=tenant, entity_type=EntityType.USER, pattern=p)
    for p in clients:
        OwnedName.objects.create(tenant=tenant, entity_type=EntityType.CLIENT_ID, pattern=p)
    user = make_user(name)
    tenant.members.add(user)
    return user


def key(p: dict[str, Any]) -> tuple[int, int, str]:
    return p["t"], p["b"], p["q"]


def test_anonymous_sockets_are_closed_with_4401(sockets: Open) -> None:
    s = sockets(None)
    with pytest.raises(ConnectionClosed) as closed:
        s.recv(5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401


def test_a_published_sample_reaches_a_subscriber_within_a_second(
    sockets: Open, make_cluster: Callable[[], str], publish: Callable[..., Any]
) -> None:
    cluster = make_cluster()
    s = sockets(make_user("root", staff=True))
    assert s.subscribe(cluster, "alice:") == []
    sent = publish(cluster, 1, [sample(cluster, 1, "alice:", now()), sample(cluster, 1, "bob:", now())])
    t0 = time.monotonic()
    frame = s.expect("points", timeout=1.0)
    assert time.monotonic() - t0 < 1.0
    assert frame == {"type": "points", "cluster": cluster, "entity": "alice:", "points": [sent[0]]}
    assert s.frames(0.3) == []  # bob's sample is not alice's


def test_backfill_then_live_without_duplicates(
    sockets: Open, services: dict[str, Any], make_cluster: Callable[[], str], publish: Callable[..., Any]
) -> None:
    cluster = make_cluster()
    t = now()
    old = [publish(cluster, b, [sample(cluster, b, "alice:", t - 3000 + i * 1000, q)])[0]
           for i in range(2) for b in (1, 2) for q in ("produce", "fetch")]
    publish(cluster, 1, [sample(cluster, 1, "alice:", t - 400_000)])  # older than since_ms: not in the backfill
    s = sockets(make_user("audit", groups=("auditors",)))
    s.send({"action": "subscribe_cluster", "cluster": cluster})
    assert s.expect("subscribed") == {"type": "subscribed", "cluster": cluster, "entity": None}

    relay = services["relay"].proc
    os.kill(relay.pid, signal.SIGSTOP)  # the next tick is in the streams before the relay sees it...
    try:
        overlap = publish(cluster, 1, [sample(cluster, 1, "alice:", t)])[0]
        backfill = s.subscribe(cluster, "alice:", since_ms=t - 10_000)  # ...so it is in the backfill
    finally:
        os.kill(relay.pid, signal.SIGCONT)
    assert backfill == sorted([*old, overlap], key=key)

    # The relay now sends the overlapping tick to the cluster and to alice's group: only the batch shows it.
    batch = s.expect("batch", timeout=2)
    assert batch["samples"] == [overlap]
    live = publish(cluster, 1, [sample(cluster, 1, "alice:", t + 1000)])[0]
    frames = [f for f in s.frames(1.0) if f["type"] == "points"]
    assert frames == [{"type": "points", "cluster": cluster, "entity": "alice:", "points": [live]}]


def test_a_tenant_watches_only_what_its_tenants_own(
    sockets: Open, make_cluster: Callable[[], str], publish: Callable[..., Any]
) -> None:
    cluster = make_cluster()
    alice = tenant_member("alice", users=("alice*",), clients=("app-*",))
    tenant_member("bob", users=("bob*",))
    s = sockets(alice)
    for entity in ("bob:", "alice:other", ":other-app", "ip:10.0.0.1", "alicia:"):
        s.send({"action": "subscribe", "cluster": cluster, "entity": entity})
        err = s.expect("error")
        assert err["code"] == "PERMISSION_DENIED" and err["entity"] == entity, err
    # The connection stays usable; the user part is unsanitized (alice@corp is sent as alice%40corp).
    assert s.subscribe(cluster, "alice%40corp:") == []
    assert s.subscribe(cluster, "alice:app-7") == []
    assert s.subscribe(cluster, ":app-1") == []
    publish(cluster, 3, [sample(cluster, 3, "alice%40corp:", now()), sample(cluster, 3, "bob:", now())])
    assert s.expect("points", timeout=2)["entity"] == "alice%40corp:"


def test_malformed_frames_get_error_frames_and_the_socket_stays_open(
    sockets: Open, make_cluster: Callable[[], str]
) -> None:
    cluster = make_cluster()
    s = sockets(make_user("root", staff=True))
    bad: list[tuple[Any, str]] = [
        ("not json", "INVALID_REQUEST"),
        ("[1, 2]", "INVALID_REQUEST"),
        (b"\x00binary", "INVALID_REQUEST"),
        ({"action": "dance"}, "INVALID_REQUEST"),
        ({"cluster": cluster}, "INVALID_REQUEST"),
        ({"action": "subscribe", "entity": "alice:"}, "INVALID_REQUEST"),
        ({"action": "subscribe", "cluster": "no such/cluster", "entity": "alice:"}, "INVALID_REQUEST"),
        ({"action": "subscribe", "cluster": cluster}, "INVALID_REQUEST"),
        ({"action": "subscribe", "cluster": cluster, "entity": 5}, "INVALID_REQUEST"),
        ({"action": "subscribe", "cluster": cluster, "entity": "alice"}, "INVALID_REQUEST"),
        ({"action": "subscribe", "cluster": cluster, "entity": "alice:", "since_ms": "yesterday"}, "INVALID_REQUEST"),
        ({"action": "subscribe", "cluster": cluster, "entity": "alice:", "since_ms": True}, "INVALID_REQUEST"),
        ({"action": "subscribe", "cluster": "nowhere", "entity": "alice:"}, "NOT_FOUND"),
        ({"action": "subscribe_cluster", "cluster": "nowhere"}, "NOT_FOUND"),
        ({"action": "unsubscribe", "cluster": cluster, "entity": "alice:"}, "NOT_FOUND"),
        ({"action": "subscribe", "cluster": cluster, "entity": "x" * 2000 + ":"}, "INVALID_REQUEST"),
    ]
    for frame, code in bad:
        s.send(frame)
        err = s.expect("error")
        assert err["code"] == code, (frame, err)
        assert set(err) >= {"type", "code", "message"} and err["message"]
    assert s.subscribe(cluster, "alice:") == []


def test_admins_see_every_entity_and_connection_samples(
    sockets: Open, make_cluster: Callable[[], str], publish: Callable[..., Any]
) -> None:
    cluster = make_cluster()
    t = now()
    conn = publish(cluster, 1, [sample(cluster, 1, "ip:10.0.0.1", t - 1000, q="connection")])[0]
    s = sockets(make_user("ops", groups=("quota-admins",)))
    assert s.subscribe(cluster, "ip:10.0.0.1") == [conn]
    assert s.subscribe(cluster, "bob:") == []
    s.send({"action": "subscribe_cluster", "cluster": cluster})
    s.expect("subscribed")
    tick = publish(cluster, 2, [sample(cluster, 2, "bob:", t), sample(cluster, 2, "ip:10.0.0.1", t, q="connection")])
    got = s.frames(1.5)
    assert {"type": "batch", "cluster": cluster, "samples": tick} in got
    points = {f["entity"]: f["points"] for f in got if f["type"] == "points"}
    assert points == {"bob:": [tick[0]], "ip:10.0.0.1": [tick[1]]}


def test_cluster_subscriptions_are_filtered_for_tenants(
    sockets: Open, make_cluster: Callable[[], str], publish: Callable[..., Any]
) -> None:
    cluster = make_cluster()
    alice = sockets(tenant_member("alice", users=("alice",)))
    admin = sockets(make_user("root", staff=True))
    for s in (alice, admin):
        s.send({"action": "subscribe_cluster", "cluster": cluster})
        s.expect("subscribed")
    t = now()
    tick = [sample(cluster, 1, "alice:", t), sample(cluster, 1, "bob:", t), sample(cluster, 1, "alice:", t, q="fetch"),
            sample(cluster, 1, "ip:10.0.0.1", t, q="connection"), sample(cluster, 1, "alice:x", t)]
    publish(cluster, 1, tick)
    assert admin.expect("batch", 2)["samples"] == tick
    assert alice.expect("batch", 2)["samples"] == [tick[0], tick[2]]
    # A tick with nothing of hers sends her nothing.
    publish(cluster, 1, [sample(cluster, 1, "bob:", t + 1000)])
    assert admin.expect("batch", 2)["samples"][0]["e"] == "bob:"
    assert alice.frames(0.5) == []
    alice.send({"action": "unsubscribe_cluster", "cluster": cluster})
    publish(cluster, 1, [sample(cluster, 1, "alice:", t + 2000)])
    admin.expect("batch", 2)
    assert alice.frames(0.5) == []


def test_the_watched_set_is_renewed_while_subscribed_and_emptied_after(
    sockets: Open, services: dict[str, Any], make_cluster: Callable[[], str]
) -> None:
    cluster = make_cluster()
    r = services["redis"]
    member = watched_member(cluster, "alice:")
    admin = make_user("root", staff=True)
    a, b = sockets(admin), sockets(admin)
    a.subscribe(cluster, "alice:")
    first = r.zscore(WATCHED_KEY, member)
    assert first is not None and first > now()
    wait_for("a renewal", lambda: (r.zscore(WATCHED_KEY, member) or 0) > first, timeout=RENEW_S * 5)
    b.subscribe(cluster, "alice:")
    a.send({"action": "unsubscribe", "cluster": cluster, "entity": "alice:"})
    time.sleep(0.3)
    assert r.zscore(WATCHED_KEY, member) is not None  # b still watches
    b.close()
    wait_for("the entry to go", lambda: r.zscore(WATCHED_KEY, member) is None, timeout=3)
    a.subscribe(cluster, "alice:")
    a.send({"action": "unsubscribe", "cluster": cluster, "entity": "alice:"})
    wait_for("the entry to go", lambda: r.zscore(WATCHED_KEY, member) is None, timeout=3)


def test_a_quiet_socket_stays_open(sockets: Open, make_cluster: Callable[[], str], publish: Callable[..., Any]) -> None:
    """Nothing for longer than channels_redis' 5 s wait (redis-py's read timeout is 5 s too): still served."""
    cluster = make_cluster()
    s = sockets(make_user("root", staff=True))
    assert s.subscribe(cluster, "alice:") == []
    time.sleep(6.5)
    sent = publish(cluster, 1, [sample(cluster, 1, "alice:", now())])
    assert s.expect("points", timeout=2)["points"] == sent
