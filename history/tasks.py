"""Celery tasks of the history app (found by ``app.autodiscover_tasks()``)."""

from __future__ import annotations

import threading
from typing import Any

import redis
from celery import current_app, shared_task
from celery.signals import worker_process_init
from django.conf import settings
from redis.exceptions import LockError

from history import services
from pipeline import warm

ROLLUPS_LOCK = services.ROLLUPS_LOCK


@shared_task(bind=True, name="history.tasks.preview", acks_late=True, ignore_result=True, max_retries=None)
def preview(self: Any, preview_id: int) -> dict[str, Any]:
    """Run one impact preview (pipeline.whatif with advice, in the preview worker's Spark session); progress and
    outcome go to its row. Routed to the previews' own queue (``CELERY_TASK_ROUTES``): never behind the rollups.

    Acknowledged late: a worker killed mid-run leaves the message to be delivered again, and the preview
    runs again from the start (it writes nothing but its own row). A message for a preview another worker is
    running comes back later, to take it over should that worker die (its heartbeat stops).
    """
    outcome = services.run_preview(preview_id)
    if outcome.get("running_elsewhere"):
        raise self.retry(countdown=services.CLAIM_STALE_S)
    return outcome


@shared_task(name="history.tasks.rollups", acks_late=True, ignore_result=True)
def rollups() -> dict[str, Any]:
    """Beat (every QUOTAS_ROLLUPS_SECONDS): roll the landed samples up per entity and hour, load the hours.

    One run at a time (a Redis lock): the job rewrites its output folder before the load reads it. On the
    ``pipeline`` queue, in a subprocess at a lower CPU priority (``history.jobs.ROLLUPS_NICE``): previews, on their
    own queue and worker, never wait for it and get the CPU first.
    """
    client = redis.Redis.from_url(settings.QUOTAS_REDIS_URL, socket_connect_timeout=2, socket_timeout=10)
    lock = client.lock(ROLLUPS_LOCK, timeout=settings.QUOTAS_PIPELINE_TIMEOUT_S + 60, blocking=False)
    if not lock.acquire():
        return {"skipped": "another rollups run holds the lock"}
    try:
        return services.refresh_rollups()
    finally:
        try:
            lock.release()
        except LockError:  # it expired meanwhile: the run's own outcome matters more
            pass
        client.close()


def consumes_previews() -> bool:
    """Whether this worker takes the previews' queue (``-Q previews``): only a preview worker needs a Spark session
    of its own; the rollups' worker starts one per run, in a subprocess."""
    try:
        return services.PREVIEWS_QUEUE in current_app.amqp.queues.consume_from
    except Exception:  # no consumer set up (a plain import): nothing to warm
        return False


@worker_process_init.connect
def prewarm_spark(**_: Any) -> None:
    """With ``QUOTAS_SPARK_PREWARM`` (run_portal.sh sets it), each new process of a worker that takes the previews'
    queue starts its Spark session in the background and runs a tiny replay in it, so even the first preview finds
    it warm (one asked meanwhile waits for the start, its progress bar in the "starting Spark" stage)."""
    if settings.QUOTAS_SPARK_PREWARM and settings.QUOTAS_SPARK_WARM and consumes_previews():
        threading.Thread(target=warm.prewarm, args=(settings.QUOTAS_SPARK_MASTER, str(settings.QUOTAS_LANDING_ROOT)),
                         daemon=True, name="spark-prewarm").start()
