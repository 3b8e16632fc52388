"""The push tests run a real Celery worker (``tests.celery_worker``)."""

from tests.celery_worker import celery_queue_clean, worker_factory  # noqa: F401 (fixtures)
