"""Django app config for telemetry and live charts."""

from django.apps import AppConfig


class TelemetryUiConfig(AppConfig):
    """Registers the telemetry_ui app."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "telemetry_ui"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        # committed moves of requests of every kind go to the WebSockets of every replica (subscribe_requests)
        from telemetry_ui.live import request_events  # noqa: F401
