"""Celery tasks of the quota domain (found by ``app.autodiscover_tasks()``)."""

from __future__ import annotations

from datetime import datetime

from celery import shared_task

from quotas import workflow


@shared_task(name="quotas.tasks.expire_boosts")
def expire_boosts(now: datetime | None = None) -> list[int]:
    """Restore the previous value of every boost whose expiry has come (beat runs it every minute).

    ``now`` is for tests and catch-up runs; beat passes nothing and the current time is used.
    Returns the ids of the requests that expired.
    """
    return workflow.expire_boosts(now)
