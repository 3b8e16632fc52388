"""Django app config for history (the pipeline's results in the portal)."""

from django.apps import AppConfig


class HistoryConfig(AppConfig):
    """Registers the history app (models, Celery tasks, API)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "history"
    verbose_name = "History and what-if"
