"""Push messages carry their format: the portal sends the newest one every live worker reads, a worker sends back a
message in a format newer than its own (for a worker that reads it), and reads the messages of an older portal."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest
import redis
from celery import current_app

from engine.config import namespace_for_broker
from engine.desired import NamespaceState
from quotas import push_format
from quotas.models import Broker, Cluster
from quotas.push import dispatch
from quotas.tasks import survey_workers
from tests.brokers import set_quota
from tests.celery_worker import Worker
from tests.push.test_worker_pushes import assert_each_version_applied_once
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cluster(engine_redis: redis.Redis) -> Cluster:
    c = Cluster.objects.create(name="prod")
    for i in range(3):
        Broker.objects.create(cluster=c, broker_id=i, host=f"b{i}:9092")
    return c


def version_of(client: redis.Redis, cluster: Cluster, broker_id: int) -> int:
    return NamespaceState(client, namespace_for_broker(cluster.name, broker_id), broker_id).applied_version()


def queued(client: redis.Redis) -> list[tuple[str, object, list[object]]]:
    """(task, format header, arguments) of each message waiting in Celery's queue and its unacknowledged ones."""
    raws = list(client.lrange("celery", 0, -1)) + [json.loads(v)[0] for v in client.hvals("unacked")]
    out = []
    for raw in raws:
        message = json.loads(raw) if isinstance(raw, bytes | str) else raw
        args = json.loads(base64.b64decode(message["body"]))[0]
        out.append((message["headers"]["task"], message["headers"].get(push_format.HEADER), args))
    return out


def test_the_format_follows_the_live_workers_and_a_newer_one_waits_for_a_worker_that_reads_it(
    worker_factory: Callable[..., Worker], cluster: Cluster, engine_redis: redis.Redis
) -> None:
    b0, b1, b2 = Broker.objects.filter(cluster=cluster).order_by("broker_id")
    # no survey yet (no worker answered one): the oldest format, one message per broker, which every version reads
    v1 = set_quota(cluster, "alice", 1000)
    assert sorted(queued(engine_redis)) == [
        (dispatch.PUSH_TASK, push_format.FORMAT_TARGET, [cluster.pk, pk]) for pk in (b0.pk, b1.pk, b2.pk)
    ]
    engine_redis.delete("celery")
    # a message from a portal newer than the worker, and one from a portal from before formats (no header)
    current_app.send_task(dispatch.PUSH_TASK, (cluster.pk, b0.pk, "a newer argument"), ignore_result=True,
                          headers=push_format.headers(99))
    current_app.send_task(dispatch.PUSH_TASK, (cluster.pk, b1.pk), ignore_result=True)

    w = worker_factory()
    wait_for("the older portal's message to be pushed", lambda: version_of(engine_redis, cluster, 1) == v1)
    wait_for("the newer message sent back twice", lambda: "'rounds': 2" in w.log.read_text(), timeout=60)
    assert version_of(engine_redis, cluster, 0) == -1  # never run by a worker that cannot read it
    # the worker answered the survey it made when it started: every live worker reads this format
    assert push_format.sendable(engine_redis) == push_format.PUSH_FORMAT
    assert survey_workers() == push_format.PUSH_FORMAT

    v2 = set_quota(cluster, "bob", 500)
    dispatch.enqueue_pushes(cluster.pk, force=True)  # brokers 0 and 2 still hold the flags of the deleted messages
    at_v2 = lambda: all(version_of(engine_redis, cluster, b) == v2 for b in range(3))  # noqa: E731
    wait_for("every broker at the last version", at_v2)
    assert "quotas.tasks.push_group[" in w.log.read_text()  # one group message, now every worker reads groups
    for b in range(3):
        assert_each_version_applied_once(NamespaceState(engine_redis, namespace_for_broker(cluster.name, b), b))

    w.stop()  # the newer message is not lost: it waits, as it came, for a worker that reads it
    waiting = [m for m in queued(engine_redis) if m[1] == 99]
    assert waiting == [(dispatch.PUSH_TASK, 99, [cluster.pk, b0.pk, "a newer argument"])]
