"""The Django project: settings, URLs, ASGI/WSGI entry points and the Celery app.

The Celery app is imported here so that ``@shared_task`` in any app binds to it
as soon as Django starts (the layout Celery documents for Django).
"""

from .celery import app as celery_app

__all__ = ("celery_app",)
