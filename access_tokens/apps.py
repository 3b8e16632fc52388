"""Django app config for personal access tokens."""

from django.apps import AppConfig


class AccessTokensConfig(AppConfig):
    """Registers the access_tokens app (its model and migrations)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "access_tokens"
    verbose_name = "Access tokens"
