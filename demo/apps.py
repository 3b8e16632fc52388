"""Django app config for the demo's management commands."""

from django.apps import AppConfig


class DemoConfig(AppConfig):
    """Registers the demo app: management commands only, no models."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "demo"
    verbose_name = "Demo"
