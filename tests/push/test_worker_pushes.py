"""Pushes through a real Celery worker process and real Redis: every broker gets each change, exactly once in effect.

Brokers are engine namespaces; one broker of the cluster lives on a Redis of its own, so it can go down
(or freeze) while the others take pushes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from devtools.redis_server import RedisServer
from engine.config import EntityRef, namespace_for_broker
from engine.desired import NamespaceState
from engine.redis_backend import connect
from quotas.connectors.base import QUOTA, Delta, Item
from quotas.connectors.engine import EngineConnector
from quotas.models import (
    AuditEntry,
    Broker,
    Cluster,
    DesiredStateVersion,
    Drift,
    Push,
)
from quotas.push.address import target_of
from quotas.tasks import heal, reconcile
from tests.brokers import set_quota
from tests.celery_worker import Worker
from tests.redis_keys import delete_matching
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
PBR = "producer_byte_rate"


@pytest.fixture
def lone_redis() -> Iterator[RedisServer]:
    """The Redis of broker 2 only."""
    server = RedisServer(name="push-broker-2").start()
    yield server
    server.stop()


@pytest.fixture
def cluster(redis_url: str, engine_redis_url: str, lone_redis: RedisServer) -> Iterator[Cluster]:
    """Brokers 0 and 1 on the engine's Redis (the portal's own, or with QUOTAS_TEST_REDIS_CLUSTER=1 the session's
    Redis Cluster), broker 2 on a Redis of its own."""
    shared = "" if engine_redis_url == redis_url else engine_redis_url
    engine = connect(engine_redis_url, 5.0) if shared else None
    if engine is not None:
        delete_matching(engine, "qe:{prod.*}*")
    c = Cluster.objects.create(name="prod")
    for i in range(3):
        url = lone_redis.url if i == 2 else shared
        Broker.objects.create(cluster=c, broker_id=i, host=f"b{i}:9092", engine_url=url)
    yield c
    if engine is not None:
        delete_matching(engine, "qe:{prod.*}*")
        engine.close()


def state_of(cluster: Cluster, broker_id: int, url: str) -> NamespaceState:
    return NamespaceState(connect(url, 5.0), namespace_for_broker(cluster.name, broker_id), broker_id)


def urls(cluster: Cluster, redis_url: str) -> dict[int, str]:
    return {b.broker_id: b.engine_url or redis_url for b in cluster.brokers.all()}


def quota_item(user: str) -> tuple[str, str, str]:
    return (QUOTA, EntityRef(user=user).field(), PBR)


def every_broker_at(cluster: Cluster, redis_url: str, version: int) -> Callable[[], bool]:
    def check() -> bool:
        return all(state_of(cluster, b, u).applied_version() == version for b, u in urls(cluster, redis_url).items())

    return check


def assert_each_version_applied_once(state: NamespaceState) -> None:
    """The push log is a chain: each application starts where the previous one ended and moves forward."""
    log = state.history()
    assert log, "nothing was applied"
    for before, after in zip(log, log[1:], strict=False):
        if after.mode == "delta":
            assert after.held == before.version, log
        assert after.version > before.version or after.mode == "force", log


def test_a_change_reaches_every_broker_and_its_request_status_says_so(
    worker_factory: Callable[..., Worker], cluster: Cluster, redis_url: str
) -> None:
    worker_factory()
    v = set_quota(cluster, "alice", 1000)
    wait_for("every broker to hold the change", every_broker_at(cluster, redis_url, v))
    for b, url in urls(cluster, redis_url).items():
        assert state_of(cluster, b, url).read()[1] == {quota_item("alice"): "1000.0"}
    wait_for("the push rows", lambda: not Push.objects.filter(version=v).exclude(state="applied").exists())
    assert sorted(Push.objects.filter(version=v).values_list("broker__broker_id", "state")) == [
        (0, "applied"), (1, "applied"), (2, "applied"),
    ]


def held_script(client: redis.Redis) -> bool:
    """A client of this Redis waits with a script (EVALSHA) that the pause holds back."""
    return any("b" in c["flags"] and c["cmd"].startswith("eval") for c in client.client_list())


def test_a_worker_killed_mid_push_loses_nothing_and_applies_nothing_twice(
    worker_factory: Callable[..., Worker], cluster: Cluster, redis_url: str, lone_redis: RedisServer
) -> None:
    w = worker_factory(QUOTAS_ENGINE_TIMEOUT_S="60")  # the push waits on the frozen broker instead of timing out
    v1 = set_quota(cluster, "alice", 1000)
    wait_for("the first change everywhere", every_broker_at(cluster, redis_url, v1))

    frozen = redis.Redis.from_url(lone_redis.url)
    frozen.execute_command("CLIENT", "PAUSE", 30_000, "WRITE")  # broker 2 reads, but holds the push's script
    v2 = set_quota(cluster, "alice", 2000)
    v3 = set_quota(cluster, "bob", 500)
    wait_for("the worker to be inside the push to broker 2 (its script held by the pause)", lambda: held_script(frozen))
    w.kill()
    frozen.execute_command("CLIENT", "UNPAUSE")
    frozen.close()

    worker_factory()  # the killed worker's unacknowledged message comes back to the new one
    wait_for("every broker at the last version", every_broker_at(cluster, redis_url, v3), timeout=60)
    expected = {quota_item("alice"): "2000.0", quota_item("bob"): "500.0"}
    for b, url in urls(cluster, redis_url).items():
        state = state_of(cluster, b, url)
        assert state.read() == (v3, expected)
        assert_each_version_applied_once(state)
    assert v2 < v3


def test_a_broker_that_is_down_catches_up_when_it_returns(
    worker_factory: Callable[..., Worker], cluster: Cluster, redis_url: str, lone_redis: RedisServer
) -> None:
    worker_factory()
    v1 = set_quota(cluster, "alice", 1000)
    wait_for("the first change everywhere", every_broker_at(cluster, redis_url, v1))
    port = lone_redis.port
    lone_redis.stop()  # broker 2 is down, and comes back without its data

    set_quota(cluster, "alice", 3000)
    last = set_quota(cluster, "carol", 42)
    up = {b: u for b, u in urls(cluster, redis_url).items() if b != 2}
    wait_for("the live brokers", lambda: all(state_of(cluster, b, u).applied_version() == last for b, u in up.items()))
    failing = wait_for(
        "a retried push to broker 2",
        lambda: Push.objects.filter(version=last, broker__broker_id=2, attempts__gte=2).first(),
    )
    assert failing.state == "pending" and failing.error_code == "BROKER_NOT_AVAILABLE"

    back = RedisServer(name="push-broker-2", port=port).start()
    try:
        wait_for("broker 2 to catch up", every_broker_at(cluster, redis_url, last), timeout=60)
        state = state_of(cluster, 2, back.url)
        assert state.read()[1] == {quota_item("alice"): "3000.0", quota_item("carol"): "42.0"}
        assert state.history()[0].mode == "full"  # it had lost everything: the whole state, not a delta
        behind = Push.objects.filter(broker__broker_id=2).exclude(state="applied")
        wait_for("its push rows", lambda: not behind.exists())
    finally:
        back.stop()


def test_an_older_version_arriving_late_is_ignored(cluster: Cluster, redis_url: str, engine_redis: redis.Redis) -> None:
    connector = EngineConnector(redis_url)
    target = target_of(cluster, Broker.objects.get(cluster=cluster, broker_id=0))
    item = Item(*quota_item("alice"))
    assert connector.apply(target, Delta(5, -1, True, {item: "5000.0"})).changed
    late = connector.apply(target, Delta(4, -1, True, {item: "4000.0"}))
    assert (late.changed, late.version) == (False, 5)
    assert connector.describe(target, {})[1] == {item: "5000.0"}
    connector.close()


def test_drift_behind_the_portals_back_is_found_and_healed(
    worker_factory: Callable[..., Worker], cluster: Cluster, redis_url: str
) -> None:
    worker_factory()
    set_quota(cluster, "alice", 1000)
    v = set_quota(cluster, "bob", 500)
    wait_for("every broker at the last version", every_broker_at(cluster, redis_url, v))

    # someone edits broker 1's engine directly: a value changed, one removed, one added
    tampered = state_of(cluster, 1, urls(cluster, redis_url)[1])
    tampered.apply(v, {quota_item("alice"): "9999", quota_item("mallory"): "1e9"}, mode="force")

    outcomes: list[dict[str, Any]] = reconcile.delay().get(timeout=30)
    assert {o["target"]: o["status"] for o in outcomes} == {
        "prod/broker-0": "in-sync", "prod/broker-1": "drift", "prod/broker-2": "in-sync",
    }
    found = {(d.resource, d.status, d.desired, d.actual) for d in Drift.objects.filter(resolved_at=None)}
    assert found == {
        (EntityRef(user="alice").field(), "different", "1000.0", "9999.0"),
        (EntityRef(user="bob").field(), "missing", "500.0", None),
        (EntityRef(user="mallory").field(), "extra", None, "1000000000.0"),
    }
    assert AuditEntry.objects.filter(action="drift_detected").count() == 3

    broker1 = Broker.objects.get(cluster=cluster, broker_id=1)
    heal.delay(cluster.pk, broker1.pk).get(timeout=30)
    assert tampered.read() == (v, {quota_item("alice"): "1000.0", quota_item("bob"): "500.0"})
    assert not Drift.objects.filter(resolved_at=None).exists()
    assert set(Drift.objects.values_list("resolution", flat=True)) == {"healed"}
    assert AuditEntry.objects.filter(action="drift_healed").count() == 3
    assert DesiredStateVersion.objects.get(cluster=cluster).version == v  # healing changes no desired state


def test_a_burst_of_commits_is_drained_by_the_worker_every_version_once_and_in_order(
    worker_factory: Callable[..., Worker], cluster: Cluster, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import quotas.push.dispatch

    w = worker_factory(QUOTAS_PUSH_DRAIN_S="1", QUOTAS_PUSH_GROUPS="1")
    enqueue, enqueued = quotas.push.dispatch.enqueue_pushes, []

    def counting(*args: Any, **kwargs: Any) -> int:  # observes only: the commit's push is enqueued unchanged
        enqueued.append(args)
        return enqueue(*args, **kwargs)

    monkeypatch.setattr(quotas.push.dispatch, "enqueue_pushes", counting)
    # the brokers' first pushes (made as each was added) cleared their flags at different times; commits until 20
    # of them were left to a drain (a commit seeing the worker's lease enqueues nothing), at most 3,000
    commits = 0
    while commits < 200 or commits - len(enqueued) < 20:
        assert commits < 3000, f"no drain: each of {commits} commits enqueued a push\n{w.log.read_text()[-3000:]}"
        last = set_quota(cluster, f"user-{commits:04d}", 1000 + commits)
        commits += 1
    print(f"{len(enqueued)} of {commits} commits enqueued a push; the others were left to a drain")
    wait_for("every broker at the last version", every_broker_at(cluster, redis_url, last), timeout=60)
    expected = {quota_item(f"user-{i:04d}"): repr(float(1000 + i)) for i in range(commits)}
    for b, url in urls(cluster, redis_url).items():
        state = state_of(cluster, b, url)
        assert state.read() == (last, expected)
        assert_each_version_applied_once(state)
    wait_for("every push row", lambda: not Push.objects.filter(cluster=cluster).exclude(state="applied").exists())
    wait_for("the drain lease let go", lambda: DesiredStateVersion.objects.get(cluster=cluster).drain_until is None)
