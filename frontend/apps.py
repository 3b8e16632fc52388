"""Django app config for the HTML front end."""

from django.apps import AppConfig


class FrontendConfig(AppConfig):
    """Registers the frontend app so its templates and static files are found."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "frontend"
    verbose_name = "Front end"
