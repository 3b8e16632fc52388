"""A real Celery worker process for the tests, on the test Redis and the test database.

The worker is a separate process group started with the same settings module, on the session's test
database (``tests.database.database_url``: the SQLite file, or ``test_<name>`` on PostgreSQL); the tests
commit their data (``transaction=True``), so the worker sees it. Retries and the redelivery of
a killed worker's message are shortened by settings (environment) so the tests wait seconds, not minutes.
Tests use the fixtures ``worker_factory`` and ``celery_queue_clean`` (a conftest imports them).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from devtools.processes import stop_session
from tests.database import database_url
from tests.redis_keys import keys_cleared
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
CELERY = str(Path(sys.executable).with_name("celery"))


class Worker:
    """A `celery worker` subprocess: start, stop (warm), kill (SIGKILL of its whole process group)."""

    def __init__(
        self, redis_url: str, database_url: str, log: Path, queues: str = "celery", name: str = "test",
        root: Path = ROOT, **env: str
    ) -> None:
        self.redis_url = redis_url
        self.root = root  # the code it runs: this checkout, or another version's (the same virtualenv)
        self.name = name  # the node name's prefix: workers started side by side need distinct names
        self.queues = queues  # "celery" (pushes, beat tasks); "pipeline" the rollups; "previews" the impact previews
        self.log = log
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "QUOTAS_REDIS_URL": redis_url,
            "DATABASE_URL": database_url,
            "QUOTAS_VISIBILITY_TIMEOUT_S": "3",
            "QUOTAS_UNACKED_RESTORE_S": "1",
            "QUOTAS_PUSH_RETRY_BASE_S": "0.2",
            "QUOTAS_PUSH_RETRY_MAX_S": "1",
            **env,
        }
        if root != ROOT:  # that version's packages before the editable install's finder (which points here)
            self.env["PYTHONPATH"] = str(root)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Worker:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [CELERY, "-A", "portal", "worker", "--pool", "prefork", "-c", "1",
                 "-n", f"{self.name}-{os.getpid()}@%h", "-Q", self.queues,
                 "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"],
                cwd=self.root, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        wait_for("the worker to be ready", lambda: b"ready." in self.log.read_bytes() or self._died(), 60)
        assert self.proc.poll() is None, self.log.read_text()[-3000:]
        return self

    def _died(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def kill(self) -> None:
        """SIGKILL the worker and its pool child at once: no warm shutdown, no acknowledgement."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            stop_session(self.proc, 20.0)
            self.proc = None


#: Celery's keys in Redis: the queue, the unacknowledged messages, kombu's bindings and the results.
CELERY_KEYS = ("celery", "pipeline", "previews", "unacked*", "_kombu.*", "celery-task-meta-*")


@pytest.fixture
def celery_queue_clean(redis_url: str) -> Iterator[None]:
    """No Celery message left over from another test (nor left behind for the next one)."""
    with keys_cleared(redis_url, *CELERY_KEYS):
        yield


@pytest.fixture
def worker_factory(
    redis_url: str, engine_redis: redis.Redis, celery_queue_clean: None, tmp_path: Path, transactional_db: None
) -> Iterator[Callable[..., Worker]]:
    """Start workers on the test Redis and the test database; every one is stopped at the end."""
    url = database_url()
    started: list[Worker] = []

    def make(queues: str = "celery", root: Path = ROOT, **env: str) -> Worker:
        n = len(started)  # each worker its own log and node name (a restarted one must not read the last "ready.")
        w = Worker(redis_url, url, tmp_path / f"worker-{n}.log", queues, f"test{n}", root, **env)
        started.append(w)
        return w.start()

    yield make
    for w in started:
        w.stop()
