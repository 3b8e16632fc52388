"""Reconcile without a worker: heal mode, brokers that are behind, cluster-wide namespaces, pushes coalescing, group
pushes that drain the commits made while they run."""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.db import OperationalError
from django.utils import timezone

from engine.config import EntityRef, cluster_namespace, namespace_for_broker
from engine.desired import NamespaceState
from quotas import push_format
from quotas.choices import QuotaScope
from quotas.connectors.base import QUOTA, PushError
from quotas.models import (
    DRAIN_LEASE_S,
    DRAIN_WINDOW_S,
    AuditEntry,
    Broker,
    Cluster,
    DesiredStateVersion,
    Drift,
    Push,
)
from quotas.push import booking, dispatch, flags, group_push, reconcile, target_push
from quotas.workflow import quota_requests
from tests.brokers import queued_push_messages, queued_pushes, set_quota

pytestmark = pytest.mark.django_db
PBR = "producer_byte_rate"


def item(user: str) -> tuple[str, str, str]:
    return (QUOTA, EntityRef(user=user).field(), PBR)


@pytest.fixture
def cluster(engine_redis: redis.Redis) -> Cluster:
    # every live worker reads group messages, as a worker's survey finds when they all run this version
    engine_redis.set(push_format.FLEET_KEY, push_format.PUSH_FORMAT)
    c = Cluster.objects.create(name="prod")
    for i in (1, 2):
        Broker.objects.create(cluster=c, broker_id=i, host=f"b{i}:9092")
    return c


def broker_state(client: redis.Redis, cluster: Cluster, broker_id: int) -> NamespaceState:
    return NamespaceState(client, namespace_for_broker(cluster.name, broker_id), broker_id)


def test_heal_mode_re_applies_a_drifted_broker_at_once(cluster: Cluster, engine_redis: redis.Redis) -> None:
    v = set_quota(cluster, "alice", 1000)
    for b in cluster.brokers.all():
        target_push.push_target(cluster.pk, b.pk)
    state = broker_state(engine_redis, cluster, 2)
    state.apply(v, {item("alice"): "5"}, mode="force")
    outcomes = {o.target: o.status for o in reconcile.reconcile_all(mode="heal")}
    assert outcomes == {"prod/broker-1": "in-sync", "prod/broker-2": "healed"}
    assert state.read() == (v, {item("alice"): "1000.0"})
    assert Drift.objects.get().resolution == "healed"
    detected = AuditEntry.objects.get(action="drift_detected")
    healed = AuditEntry.objects.get(action="drift_healed")
    assert (detected.before, detected.after) == ("1000.0", "5.0") and (healed.before, healed.after) == ("5.0", "1000.0")
    assert healed.actor_name == "system" and "broker 2" in healed.comment


def test_a_broker_behind_desired_state_gets_a_push_not_a_drift_report(
    cluster: Cluster, engine_redis: redis.Redis
) -> None:
    engine_redis.delete("celery")
    set_quota(cluster, "alice", 1000)  # nobody pushed it (no worker, and tests do not run on-commit hooks)
    outcomes = {o.status for o in reconcile.reconcile_all(mode="report")}
    assert outcomes == {"behind"} and not Drift.objects.exists()
    b1, b2 = Broker.objects.filter(cluster=cluster).order_by("broker_id")
    assert sorted(queued_pushes(engine_redis)) == [(cluster.pk, b1.pk), (cluster.pk, b2.pk)]
    engine_redis.delete("celery")


def test_commits_enqueue_one_pending_push_per_broker_however_many_they_are(
    cluster: Cluster, engine_redis: redis.Redis, django_capture_on_commit_callbacks
) -> None:
    engine_redis.delete("celery")
    for n in range(5):
        with django_capture_on_commit_callbacks(execute=True):
            set_quota(cluster, f"user-{n}", 1000 + n)
    b1, b2 = Broker.objects.filter(cluster=cluster).order_by("broker_id")
    # one message for both brokers (the first commit claimed them together); the pending push reads the newest state
    assert queued_push_messages(engine_redis) == [(dispatch.PUSH_GROUP_TASK, [cluster.pk, [b1.pk, b2.pk]])]
    outcome = target_push.push_target(cluster.pk, b1.pk)  # the push clears its flag: the next commit enqueues again
    assert (outcome.held, outcome.version, outcome.mode) == (-1, 5, "full")
    with django_capture_on_commit_callbacks(execute=True):
        set_quota(cluster, "user-9", 9)
    # the group still waits; b1's own message carries the new commit (b2's flag is still set: its push is pending)
    assert sorted(queued_pushes(engine_redis)) == [(cluster.pk, b1.pk), (cluster.pk, b1.pk), (cluster.pk, b2.pk)]
    assert target_push.push_target(cluster.pk, b1.pk).mode == "delta"
    assert Push.objects.filter(broker=b1).exclude(state="applied").count() == 0
    engine_redis.delete("celery")


def test_a_cluster_wide_cluster_is_one_namespace_and_one_push_per_version(engine_redis: redis.Redis) -> None:
    shared = Cluster.objects.create(name="shared", scope=QuotaScope.CLUSTER_WIDE)
    for i in (1, 2, 3):
        Broker.objects.create(cluster=shared, broker_id=i, host=f"s{i}:9092")
    v = set_quota(shared, "alice", 3000)
    assert list(Push.objects.filter(cluster=shared).values_list("broker", "version")) == [(None, v)]
    target_push.push_target(shared.pk, None)
    assert NamespaceState(engine_redis, cluster_namespace("shared")).read() == (v, {item("alice"): "3000.0"})
    assert Push.objects.get(cluster=shared).state == "applied"
    assert not engine_redis.exists(f"qe:{{{namespace_for_broker('shared', 1)}}}:desired-version")


def test_one_group_push_brings_each_broker_to_the_version_and_books_them_together(
    cluster: Cluster, engine_redis: redis.Redis
) -> None:
    v = set_quota(cluster, "alice", 1000)
    b1, b2 = Broker.objects.filter(cluster=cluster).order_by("broker_id")
    for b in (b1, b2):
        engine_redis.set(flags._flag(cluster.pk, b.pk), 1)  # what the commit's enqueue left: a push is pending
    results = group_push.push_group(cluster.pk, [b1.pk, b2.pk])
    assert {pk: (o.held, o.version, o.mode) for pk, o in results.items()} == {
        b1.pk: (-1, v, "full"), b2.pk: (-1, v, "full")
    }
    # the flags are cleared: a commit from now on enqueues a new push
    assert not engine_redis.exists(flags._flag(cluster.pk, b1.pk), flags._flag(cluster.pk, b2.pk))
    for broker_id in (1, 2):
        assert broker_state(engine_redis, cluster, broker_id).read() == (v, {item("alice"): "1000.0"})
    assert sorted(Push.objects.filter(cluster=cluster).values_list("broker", "state", "attempts")) == [
        (b1.pk, "applied", 1), (b2.pk, "applied", 1)
    ]


def test_a_group_push_answers_each_brokers_failure_apart_and_lands_the_others(
    cluster: Cluster, engine_redis: redis.Redis
) -> None:
    down = Broker.objects.create(cluster=cluster, broker_id=3, host="b3:9092", engine_url=dead_engine_url())
    v = set_quota(cluster, "alice", 1000)
    pks = list(Broker.objects.filter(cluster=cluster).order_by("broker_id").values_list("pk", flat=True))
    results = group_push.push_group(cluster.pk, pks)
    failed = results[down.pk]
    assert isinstance(failed, PushError) and (failed.code, failed.retriable) == ("BROKER_NOT_AVAILABLE", True)
    assert all(results[pk].version == v for pk in pks if pk != down.pk)
    assert sorted(Push.objects.filter(cluster=cluster).values_list("broker__broker_id", "state", "error_code")) == [
        (1, "applied", ""), (2, "applied", ""), (3, "pending", "BROKER_NOT_AVAILABLE")
    ]


def dead_engine_url() -> str:
    """A Redis URL nothing listens on: a broker that is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{s.getsockname()[1]}/0"


def test_a_group_tries_a_failing_broker_last_after_booking_what_the_others_landed(
    cluster: Cluster, engine_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    down = Broker.objects.create(cluster=cluster, broker_id=3, host="b3:9092", engine_url=dead_engine_url())
    b1, b2 = Broker.objects.filter(cluster=cluster, broker_id__in=(1, 2)).order_by("broker_id")
    set_quota(cluster, "alice", 1000)
    group_push.push_group(cluster.pk, [down.pk, b1.pk, b2.pk])  # its first failure: a pending row with an attempt
    v = set_quota(cluster, "bob", 2000)
    events: list[object] = []
    booked, pushed = booking._applied, target_push._push

    def counted_booking(c: Cluster, landed: list[tuple[Broker, target_push.PushOutcome]], *more: object) -> int | None:
        events.append([b.pk for b, _ in landed])
        return booked(c, landed, *more)

    def pushing(c: Cluster, b: Broker, **kw: object) -> target_push.PushOutcome:
        events.append(b.pk)
        return pushed(c, b, **kw)

    monkeypatch.setattr(booking, "_applied", counted_booking)
    monkeypatch.setattr(target_push, "_push", pushing)
    results = group_push.push_group(cluster.pk, [down.pk, b1.pk, b2.pk])
    assert events == [b1.pk, b2.pk, [b1.pk, b2.pk], down.pk]  # booked before the down broker's connect timeout
    assert [pk for pk, r in results.items() if not isinstance(r, Exception) and r.version == v] == [b1.pk, b2.pk]
    assert isinstance(results[down.pk], PushError)


def test_an_unexpected_error_of_one_broker_leaves_the_others_booked_and_that_one_retried_on_its_own(
    cluster: Cluster, engine_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from quotas.tasks import push_group

    engine_redis.delete("celery")
    b1, b2 = Broker.objects.filter(cluster=cluster).order_by("broker_id")
    v = set_quota(cluster, "alice", 1000)
    read = target_push.desired_state

    def broken_for_b2(c: Cluster, broker: Broker | None) -> object:
        if broker is not None and broker.pk == b2.pk:
            raise RuntimeError("a bug of ours")
        return read(c, broker)

    monkeypatch.setattr(target_push, "desired_state", broken_for_b2)
    answer = push_group(cluster.pk, [b1.pk, b2.pk])  # the task, run here
    assert answer["targets"][str(b1.pk)]["version"] == v and "retry" in answer["targets"][str(b2.pk)]
    assert sorted(Push.objects.filter(cluster=cluster).values_list("broker", "state")) == [
        (b1.pk, "applied"), (b2.pk, "pending")
    ]
    assert queued_push_messages(engine_redis) == [(dispatch.PUSH_TASK, [cluster.pk, b2.pk])]  # with its backoff
    engine_redis.delete("celery")


def lease_of(cluster: Cluster) -> object:
    return DesiredStateVersion.objects.get(cluster=cluster).drain_until


def pushes_enqueued(capture: object, commit: object) -> int:
    """How many push enqueues ``commit()`` left for after its commit (the test's transaction never commits)."""
    with capture(execute=False) as callbacks:  # type: ignore[operator]
        commit()  # type: ignore[operator]
    return len(callbacks)


def test_a_commit_under_a_live_drain_lease_enqueues_no_push_and_one_that_ran_out_does(
    cluster: Cluster, django_capture_on_commit_callbacks: object
) -> None:
    def lease(seconds: float) -> None:
        until = timezone.now() + timedelta(seconds=seconds)
        DesiredStateVersion.objects.filter(cluster=cluster).update(drain_until=until)

    assert pushes_enqueued(django_capture_on_commit_callbacks, lambda: set_quota(cluster, "alice", 1)) == 1
    lease(DRAIN_LEASE_S)
    assert pushes_enqueued(django_capture_on_commit_callbacks, lambda: set_quota(cluster, "bob", 2)) == 0
    lease(-1)  # ran out: its worker died
    assert pushes_enqueued(django_capture_on_commit_callbacks, lambda: set_quota(cluster, "carol", 3)) == 1
    lease(DRAIN_WINDOW_S + 60)  # further ahead than any worker sets it (its clock runs fast): not honoured
    assert pushes_enqueued(django_capture_on_commit_callbacks, lambda: set_quota(cluster, "dave", 4)) == 1


class Drain:
    """Runs ``push_group`` with commits made at chosen sends (the n-th call of the engine's apply), each recording
    how many push enqueues it left for after its commit (0: it was left to the drain)."""

    def __init__(self, cluster: Cluster, monkeypatch: pytest.MonkeyPatch, capture: object) -> None:
        self.cluster, self.capture, self.sends = cluster, capture, 0
        self.at: dict[int, object] = {}  # send number -> what to do before it (a commit, a failure...)
        self.enqueued: list[int] = []
        sent = target_push._send

        def send(*args: object) -> target_push.PushOutcome:
            self.sends += 1
            action = self.at.get(self.sends)
            if action is not None:
                action()  # type: ignore[operator]
            return sent(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(target_push, "_send", send)

    def commit(self, user: str, value: float = 1.0) -> None:
        self.enqueued.append(pushes_enqueued(self.capture, lambda: set_quota(self.cluster, user, value)))


@pytest.fixture
def drain(cluster: Cluster, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: object) -> Drain:
    return Drain(cluster, monkeypatch, django_capture_on_commit_callbacks)


def test_a_draining_group_push_pushes_the_commits_made_during_it_then_lets_go_of_the_lease(
    cluster: Cluster, engine_redis: redis.Redis, drain: Drain
) -> None:
    engine_redis.delete("celery")
    v1 = set_quota(cluster, "alice", 1000)
    b1, b2 = Broker.objects.filter(cluster=cluster).order_by("broker_id")
    drain.at = {1: lambda: drain.commit("bob", 2000), 3: lambda: drain.commit("carol", 3000)}  # rounds 1 and 2
    results = group_push.push_group(cluster.pk, [b1.pk, b2.pk], drain_s=60.0)
    v3 = v1 + 2
    assert drain.enqueued == [1, 0]  # bob's commit came before the lease (it enqueues as usual); carol's under it
    assert {pk: o.version for pk, o in results.items()} == {b1.pk: v3, b2.pk: v3}  # the last round: every target
    assert lease_of(cluster) is None  # nothing newer: commits enqueue their pushes again
    assert queued_push_messages(engine_redis) == []  # and the drain left nothing to send
    held = {item("alice"): "1000.0", item("bob"): "2000.0", item("carol"): "3000.0"}
    for broker_id in (1, 2):
        state = broker_state(engine_redis, cluster, broker_id)
        assert state.read() == (v3, held)
        log = state.history(100)
        assert [r.held for r in log[1:]] == [r.version for r in log[:-1]]  # a chain: no version applied twice
    assert not Push.objects.filter(cluster=cluster).exclude(state="applied").exists()


@pytest.mark.parametrize("end", ["time is up", "a broker failed", "a booking failed"])
def test_a_drain_that_ends_before_the_cluster_is_current_lets_go_and_enqueues_a_push(
    end: str, cluster: Cluster, engine_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch,
    drain: Drain, settings: Any,
) -> None:
    from quotas.tasks import push_group as push_group_task

    engine_redis.delete("celery")
    set_quota(cluster, "alice", 1000)
    b1, b2 = Broker.objects.filter(cluster=cluster).order_by("broker_id")
    drain.at = {1: lambda: drain.commit("bob")}  # round 1: its booking takes the lease
    drain_s = 60.0
    if end == "time is up":
        drain_s = 1e-9
    elif end == "a broker failed":

        def down() -> None:
            raise PushError("BROKER_NOT_AVAILABLE", "down", retriable=True)

        drain.at |= {3: lambda: drain.commit("carol"), 4: down}  # round 2: a commit under the lease, then b2 fails
    else:
        book, calls = booking._bookkeeping, []

        def second_booking_fails(write: object) -> object:
            calls.append(1)
            if len(calls) == 2:  # round 2's booking (the first took the lease): rolled back whole
                raise OperationalError("the database went away")
            return book(write)  # type: ignore[arg-type]

        monkeypatch.setattr(booking, "_bookkeeping", second_booking_fails)
        drain.at |= {3: lambda: drain.commit("carol")}  # round 2: a commit under the lease
    settings.QUOTAS_PUSH_DRAIN_S = drain_s
    answer = push_group_task(cluster.pk, [b1.pk, b2.pk])  # the task, run here
    retried = {pk for pk, outcome in answer["targets"].items() if "retry" in outcome}
    expected = {"time is up": set(), "a broker failed": {b2.pk}, "a booking failed": {b1.pk, b2.pk}}[end]
    assert retried == {str(pk) for pk in expected}
    if end != "time is up":
        assert drain.enqueued == [1, 0]
    assert lease_of(cluster) is None
    # the commits that counted on the drain get a push: the usual way, or a failed target's retry (with backoff)
    assert sorted(queued_pushes(engine_redis)) == [(cluster.pk, b1.pk), (cluster.pk, b2.pk)]
    engine_redis.delete("celery")


def test_a_broker_added_during_a_drain_gets_the_commits_made_under_the_lease(
    cluster: Cluster, engine_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch,
    drain: Drain,
) -> None:
    engine_redis.delete("celery")
    set_quota(cluster, "alice", 1000)
    b1, b2 = Broker.objects.filter(cluster=cluster).order_by("broker_id")
    drain.at = {1: lambda: drain.commit("bob")}  # round 1: its booking takes the lease
    targets, added = group_push.push_target_pks, []

    def targets_then_a_new_broker(c: Cluster) -> list[int | None]:
        known = targets(c)
        if not added:  # round 2 has read its targets: a broker joins, and a commit is made under the lease
            added.append(Broker.objects.create(cluster=cluster, broker_id=3, host="b3:9092"))
            drain.commit("carol")
        return known

    monkeypatch.setattr(group_push, "push_target_pks", targets_then_a_new_broker)
    results = group_push.push_group(cluster.pk, [b1.pk, b2.pk], drain_s=60.0)
    assert drain.enqueued == [1, 0] and set(results) == {b1.pk, b2.pk}
    assert lease_of(cluster) is None
    assert queued_pushes(engine_redis) == [(cluster.pk, added[0].pk)]  # the round did not know it: enqueued
    engine_redis.delete("celery")


def test_a_message_for_part_of_the_cluster_that_clears_an_orphaned_lease_enqueues_the_rest(
    cluster: Cluster, engine_redis: redis.Redis, django_capture_on_commit_callbacks: object
) -> None:
    engine_redis.delete("celery")
    b1, b2 = Broker.objects.filter(cluster=cluster).order_by("broker_id")
    until = timezone.now() + timedelta(seconds=DRAIN_LEASE_S)
    DesiredStateVersion.objects.filter(cluster=cluster).update(drain_until=until)  # its worker died mid-drain
    assert pushes_enqueued(django_capture_on_commit_callbacks, lambda: set_quota(cluster, "alice", 1)) == 0
    results = group_push.push_group(cluster.pk, [b1.pk], drain_s=60.0)  # its message comes back, for broker 1 only
    assert list(results) == [b1.pk] and lease_of(cluster) is None
    assert queued_pushes(engine_redis) == [(cluster.pk, b2.pk)]  # alice's commit reaches broker 2 too
    engine_redis.delete("celery")


def test_a_message_for_part_of_a_current_cluster_sends_no_other(cluster: Cluster, engine_redis: redis.Redis) -> None:
    engine_redis.delete("celery")
    for i in (3, 4):
        Broker.objects.create(cluster=cluster, broker_id=i, host=f"b{i}:9092")
    set_quota(cluster, "alice", 1000)
    pks = list(Broker.objects.filter(cluster=cluster).order_by("broker_id").values_list("pk", flat=True))
    group_push.push_group(cluster.pk, pks, drain_s=60.0)  # every broker current
    group_push.push_group(cluster.pk, pks[:2], drain_s=60.0)  # e.g. two brokers moved to another Redis
    assert queued_push_messages(engine_redis) == []  # the other two hold the version: nothing to send them


def test_a_drain_leaves_a_failing_broker_to_its_retry_and_its_backoff(
    cluster: Cluster, engine_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: object,
) -> None:
    engine_redis.delete("celery")
    down = Broker.objects.create(cluster=cluster, broker_id=3, host="b3:9092", engine_url=dead_engine_url())
    b1, b2 = Broker.objects.filter(cluster=cluster, broker_id__in=(1, 2)).order_by("broker_id")
    set_quota(cluster, "alice", 1000)
    group_push.push_group(cluster.pk, [b1.pk, b2.pk, down.pk])  # down fails: its retry is scheduled, holding its flag
    engine_redis.set(flags._flag(cluster.pk, down.pk), 1)
    set_quota(cluster, "zed", 5)  # a commit whose message could claim b1 and b2 only
    targets: list[object] = []
    pushed = target_push._push

    def pushing(c: Cluster, b: Broker, **kw: object) -> target_push.PushOutcome:
        targets.append(b.pk)
        return pushed(c, b, **kw)

    monkeypatch.setattr(target_push, "_push", pushing)
    drain = Drain(cluster, monkeypatch, django_capture_on_commit_callbacks)  # after the setup's own sends
    drain.at = {1: lambda: drain.commit("bob"), 3: lambda: drain.commit("carol")}
    # a commit's message: down's flag was held
    results = group_push.push_group(cluster.pk, [b1.pk, b2.pk], drain_s=60.0)
    assert drain.enqueued == [1, 0]
    assert down.pk not in targets and set(results) == {b1.pk, b2.pk}  # the drain's rounds never tried it
    assert lease_of(cluster) is None
    assert queued_push_messages(engine_redis) == []  # its retry, still pending, brings it everything when it runs
    engine_redis.delete("celery")


def test_a_commit_that_could_claim_one_brokers_flag_still_sends_a_group_message(
    cluster: Cluster, engine_redis: redis.Redis, django_capture_on_commit_callbacks: object
) -> None:
    engine_redis.delete("celery")
    b1, b2 = Broker.objects.filter(cluster=cluster).order_by("broker_id")
    engine_redis.set(flags._flag(cluster.pk, b2.pk), 1)  # a push to b2 is pending (a retry, a broker added...)
    with django_capture_on_commit_callbacks(execute=True):
        set_quota(cluster, "alice", 1000)
    # a group of one, which can drain the next commits (a push_target message could not)
    assert queued_push_messages(engine_redis) == [(dispatch.PUSH_GROUP_TASK, [cluster.pk, [b1.pk]])]
    engine_redis.delete("celery")


def test_a_booking_that_failed_after_its_lease_committed_goes_on_draining(
    cluster: Cluster, engine_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch,
    drain: Drain,
) -> None:
    engine_redis.delete("celery")
    v1 = set_quota(cluster, "alice", 1000)
    b1, b2 = Broker.objects.filter(cluster=cluster).order_by("broker_id")
    drain.at = {1: lambda: drain.commit("bob")}
    settle = quota_requests.settle_pushed

    def settle_fails_once(c: Cluster) -> object:
        monkeypatch.setattr(quota_requests, "settle_pushed", settle)
        drain.commit("carol")  # under the lease the booking's transaction has just committed
        raise RuntimeError("a bug of ours, after the booking's transaction")

    monkeypatch.setattr(quota_requests, "settle_pushed", settle_fails_once)
    results = group_push.push_group(cluster.pk, [b1.pk, b2.pk], drain_s=60.0)
    assert drain.enqueued == [1, 0]
    assert {pk: o.version for pk, o in results.items()} == {b1.pk: v1 + 2, b2.pk: v1 + 2}
    assert lease_of(cluster) is None and queued_push_messages(engine_redis) == []
