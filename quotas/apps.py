"""Django app config for the quota domain."""

from django.apps import AppConfig


class QuotasConfig(AppConfig):
    """Registers the quotas app (models, admin, Celery tasks)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "quotas"
    verbose_name = "Quotas"

    def ready(self) -> None:
        # the push layer's dispatch listens for commits that leave targets behind (models.clusters.push_wanted) and
        # enqueues pushes; the notifications listen for committed moves of requests (models.requests.request_changed)
        # and queue mails and webhook deliveries
        from quotas import notify  # noqa: F401
        from quotas.push import dispatch  # noqa: F401
