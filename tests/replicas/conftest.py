"""The production shape's test runs real Celery workers (``tests.celery_worker``)."""

from tests.celery_worker import celery_queue_clean, worker_factory  # noqa: F401 (fixtures)
