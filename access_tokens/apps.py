"""Django app config for personal access tokens."""

from django.apps import AppConfig


class AccessTokensConfig(AppConfig):
    """Registers the access_tokens app (its model and migrations)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "access_tokens"
    verbose_name = "Access tokens"

    def ready(self) -> None:
        from access_tokens import schema  # noqa: F401 (registers the OpenAPI security scheme)
