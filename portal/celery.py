"""The Celery app (``portal.celery:app``) that runs the portal's background work.

Pushes of approved quotas to brokers and periodic reconciles run here, off the
request path. Broker and result backend are the project's Redis
(``QUOTAS_REDIS_URL``); every ``CELERY_*`` Django setting configures it.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
