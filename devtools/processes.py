"""Stopping a service the tests or benchmarks started in a session of its own (uvicorn, a Celery worker).

The shipped code needs the same (a pipeline job and its JVM), so it lives in ``pipeline.processes``.
"""

from pipeline.processes import stop_session

__all__ = ["stop_session"]
