"""A rolling upgrade without a hand-set flag: the worker of the version before push formats runs beside this one
while commits flow, then retires; nothing is lost, nothing applied twice."""

from __future__ import annotations

import io
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from engine.config import namespace_for_broker
from engine.desired import NamespaceState
from quotas import push_format
from quotas.models import Broker, Cluster, Push
from quotas.tasks import survey_workers
from tests.brokers import set_quota
from tests.celery_worker import ROOT, Worker
from tests.replicas.test_two_replicas import chain
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
BROKERS = (0, 1, 2)


@pytest.fixture(scope="module")
def previous_version(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The code of the commit before push formats came (that version's worker drops a task it does not know and
    ignores the format header), unpacked from git into a directory of its own."""
    try:
        added = subprocess.run(
            ["git", "log", "--diff-filter=A", "--format=%H", "--", "quotas/push_format.py"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout.split()
        archive = subprocess.run(["git", "archive", f"{added[-1]}^"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError, IndexError):
        pytest.skip("not a git checkout with the history of quotas/push_format.py")
    root = tmp_path_factory.mktemp("previous-version")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    assert not (root / "quotas" / "push_format.py").exists()
    return root


@pytest.fixture
def cluster(engine_redis: redis.Redis) -> Cluster:
    c = Cluster.objects.create(name="prod")
    for i in BROKERS:
        Broker.objects.create(cluster=c, broker_id=i, host=f"b{i}:9092")
    return c


def pushes_done(w: Worker) -> int:
    return sum(("push_target[" in line or "push_group[" in line) and "succeeded" in line
               for line in w.log.read_text().splitlines())


def test_the_previous_workers_retire_while_commits_flow_nothing_lost_nothing_applied_twice(
    worker_factory: Callable[..., Worker], previous_version: Path, cluster: Cluster, engine_redis: redis.Redis
) -> None:
    old = worker_factory(root=previous_version)
    new = worker_factory()
    # the new worker's survey found the old one (it has push_group, knows no format): groups, without the header's
    # newer rules
    wait_for("the survey of the new worker", lambda: engine_redis.get(push_format.FLEET_KEY) is not None)
    assert push_format.sendable(engine_redis) == push_format.FORMAT_GROUP
    assert survey_workers() == push_format.FORMAT_GROUP

    last = 0
    for i in range(60):
        last = set_quota(cluster, f"user-{i:03d}", 1000 + i)
    wait_for("the old worker to push", lambda: pushes_done(old) > 0, 30)
    old.stop()  # retired (warm: what it holds goes back to the queue)
    assert survey_workers() == push_format.PUSH_FORMAT  # as reconcile's next round finds
    for i in range(60, 120):
        last = set_quota(cluster, f"user-{i:03d}", 1000 + i)

    def current() -> bool:
        return all(NamespaceState(engine_redis, namespace_for_broker(cluster.name, b), b).applied_version() == last
                   for b in BROKERS)

    wait_for("every broker at the last version", current, 60)
    for b in BROKERS:  # each version applied once, in order, on each broker
        state = NamespaceState(engine_redis, namespace_for_broker(cluster.name, b), b)
        assert chain(state, last) == list(range(1, last + 1)), f"broker {b}"
        assert len(state.read()[1]) == 120
    wait_for("every push row", lambda: not Push.objects.filter(cluster=cluster).exclude(state="applied").exists())
    assert pushes_done(new) > 0
    assert "Received unregistered task" not in old.log.read_text() + new.log.read_text()
