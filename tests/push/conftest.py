"""The push tests run a real Celery worker (``tests.celery_worker``); the budget-scope tests a Kafka connector in
memory (``tests.push.fake_kafka``)."""

from tests.celery_worker import celery_queue_clean, worker_factory  # noqa: F401 (fixtures)
from tests.push.fake_kafka import budget_redis, kafka  # noqa: F401 (fixtures)
