"""Client telemetry (the KIP-714 sink's streams) reaches WebSocket clients through the relay: subscribe_telemetry.

The sink's storage contract (telemetry_ui/README.md) is written straight to Redis here, as the sink would.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from telemetry_ui.live.monitoring import (
    WATCHED_KEY,
    tel_all_key,
    tel_instance_key,
    tel_instances_key,
    tel_watched_member,
)
from tests.people import make_user
from tests.services import Socket
from tests.telemetry.test_live import tenant_member
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

Open = Callable[[Any], Socket]


def now() -> int:
    return int(time.time() * 1000)


def register(r: Any, cluster: str, client_id: str) -> str:
    """An instance in the cluster's instances hash, as the sink records it on get-subscriptions."""
    instance = uuid.uuid4().hex
    info = {"instance": instance, "client_id": client_id, "software_name": "apache-kafka-java",
            "software_version": "3.9.0", "source_address": "127.0.0.1", "subscription_id": 7,
            "push_interval_ms": 1000, "metrics": ["org.apache.kafka."], "last_get_ms": now(), "last_push_ms": None,
            "pushes": 0, "errors": 0, "last_error": None, "terminated": False}
    r.hset(tel_instances_key(cluster), instance, json.dumps(info))
    return instance


def push(r: Any, cluster: str, instance: str, client_id: str, t: int | None = None, value: float = 1.0
         ) -> dict[str, Any]:
    """One accepted push, in both streams (the firehose the relay tails and the instance's own)."""
    t = t if t is not None else now()
    entry = {"t": t, "c": cluster, "instance": instance, "client_id": client_id,
             "points": [{"name": "org.apache.kafka.producer.record.send.rate", "attrs": {"client_id": client_id},
                         "t": t, "value": value}]}
    d = json.dumps(entry)
    p = r.pipeline(transaction=False)
    p.xadd(tel_all_key(cluster), {"d": d}, maxlen=1000, approximate=True)
    p.xadd(tel_instance_key(cluster, instance), {"d": d}, maxlen=5000, approximate=True)
    p.execute()
    return entry


def subscribe(s: Socket, cluster: str, instance: str, **extra: Any) -> list[dict[str, Any]]:
    s.send({"action": "subscribe_telemetry", "cluster": cluster, "instance": instance, **extra})
    assert s.expect("subscribed") == {"type": "subscribed", "cluster": cluster, "instance": instance}
    backfill = s.expect("backfill")
    assert (backfill["cluster"], backfill["instance"]) == (cluster, instance)
    return backfill["entries"]


def test_backfill_then_live_pushes_without_duplicates(
    sockets: Open, services: dict[str, Any], make_cluster: Callable[[], str]
) -> None:
    r = services["redis"]
    cluster = make_cluster()
    inst = register(r, cluster, "app-1")
    other = register(r, cluster, "app-1")
    t = now()
    old = [push(r, cluster, inst, "app-1", t - 3000), push(r, cluster, inst, "app-1", t - 2000)]
    push(r, cluster, inst, "app-1", t - 11 * 60 * 1000)  # older than the 10 minutes of backfill
    s = sockets(make_user("root", staff=True))
    assert subscribe(s, cluster, inst) == old
    assert r.zscore(WATCHED_KEY, tel_watched_member(cluster, inst)) is not None

    live = push(r, cluster, inst, "app-1", t)
    push(r, cluster, other, "app-1", t)  # another instance: not sent
    t0 = time.monotonic()
    frame = s.expect("telemetry", timeout=2)
    assert time.monotonic() - t0 < 2
    assert frame == {"type": "telemetry", "cluster": cluster, "instance": inst, "entries": [live]}
    assert s.frames(0.5) == []

    s.send({"action": "unsubscribe_telemetry", "cluster": cluster, "instance": inst})
    wait_for("the watched entry to go", lambda: r.zscore(WATCHED_KEY, tel_watched_member(cluster, inst)) is None, 3)
    push(r, cluster, inst, "app-1", t + 1000)
    assert s.frames(0.6) == []


def test_a_push_already_in_the_backfill_is_not_sent_again(
    sockets: Open, services: dict[str, Any], make_cluster: Callable[[], str]
) -> None:
    r = services["redis"]
    cluster = make_cluster()
    inst = register(r, cluster, "app-1")
    s = sockets(make_user("audit", groups=("auditors",)))
    assert subscribe(s, cluster, inst) == []
    t = now()
    first = push(r, cluster, inst, "app-1", t)
    assert s.expect("telemetry", 2)["entries"] == [first]
    # A second subscription of the same socket backfills again; the relay's copy of a push it held is dropped.
    assert subscribe(s, cluster, inst, since_ms=t - 1000) == [first]
    second = push(r, cluster, inst, "app-1", t + 1000)
    assert [f for f in s.frames(1.0) if f["type"] == "telemetry"] == [
        {"type": "telemetry", "cluster": cluster, "instance": inst, "entries": [second]}]


def test_tenants_watch_only_instances_of_client_ids_they_own(
    sockets: Open, services: dict[str, Any], make_cluster: Callable[[], str]
) -> None:
    r = services["redis"]
    cluster = make_cluster()
    mine = register(r, cluster, "app-7")
    theirs = register(r, cluster, "billing-1")
    anonymous = register(r, cluster, "")
    alice = tenant_member("alice", users=("alice*",), clients=("app-*",))
    s = sockets(alice)
    for inst in (theirs, anonymous):
        s.send({"action": "subscribe_telemetry", "cluster": cluster, "instance": inst})
        err = s.expect("error")
        assert err["code"] == "PERMISSION_DENIED" and err["instance"] == inst, err
    assert subscribe(s, cluster, mine) == []
    entry = push(r, cluster, mine, "app-7")
    push(r, cluster, theirs, "billing-1")
    assert s.expect("telemetry", 2)["entries"] == [entry]
    # An admin watches any of them.
    admin = sockets(make_user("ops", groups=("quota-admins",)))
    assert len(subscribe(admin, cluster, theirs)) == 1


def test_bad_telemetry_frames_get_error_frames_and_the_socket_stays_open(
    sockets: Open, services: dict[str, Any], make_cluster: Callable[[], str]
) -> None:
    r = services["redis"]
    cluster = make_cluster()
    inst = register(r, cluster, "app-1")
    s = sockets(make_user("root", staff=True))
    bad: list[tuple[dict[str, Any], str]] = [
        ({"action": "subscribe_telemetry", "cluster": cluster}, "INVALID_REQUEST"),
        ({"action": "subscribe_telemetry", "cluster": cluster, "instance": 5}, "INVALID_REQUEST"),
        ({"action": "subscribe_telemetry", "cluster": cluster, "instance": "a\nb"}, "INVALID_REQUEST"),
        ({"action": "subscribe_telemetry", "cluster": cluster, "instance": "x" * 300}, "INVALID_REQUEST"),
        ({"action": "subscribe_telemetry", "instance": inst}, "INVALID_REQUEST"),
        ({"action": "subscribe_telemetry", "cluster": cluster, "instance": inst, "since_ms": "now"}, "INVALID_REQUEST"),
        ({"action": "subscribe_telemetry", "cluster": "nowhere", "instance": inst}, "NOT_FOUND"),
        ({"action": "subscribe_telemetry", "cluster": cluster, "instance": "no-such-instance"}, "NOT_FOUND"),
        ({"action": "unsubscribe_telemetry", "cluster": cluster, "instance": inst}, "NOT_FOUND"),
        ({"action": "subscribe", "cluster": cluster, "entity": "\x1etel\x1ex:"}, "INVALID_REQUEST"),
    ]
    for frame, code in bad:
        s.send(frame)
        err = s.expect("error")
        assert err["code"] == code, (frame, err)
        assert err["message"]
    assert subscribe(s, cluster, inst) == []


def test_an_instance_gone_from_the_hash_is_found_by_its_stream(
    sockets: Open, services: dict[str, Any], make_cluster: Callable[[], str]
) -> None:
    r = services["redis"]
    cluster = make_cluster()
    inst = uuid.uuid4().hex
    entry = push(r, cluster, inst, "app-1", now() - 1000)
    s = sockets(tenant_member("alice", clients=("app-*",)))
    assert subscribe(s, cluster, inst) == [entry]
