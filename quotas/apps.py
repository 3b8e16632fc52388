"""Django app config for the quota domain."""

from django.apps import AppConfig


class QuotasConfig(AppConfig):
    """Registers the quotas app (models, admin, Celery tasks)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "quotas"
    verbose_name = "Quotas"

    def ready(self) -> None:
        # the push layer listens for committed versions (models.pushes.version_committed) and enqueues pushes; the
        # notifications listen for committed moves of requests (models.requests.request_changed) and queue mails and
        # webhook deliveries
        from quotas import notify, push  # noqa: F401
