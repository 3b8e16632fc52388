"""Typed errors of client telemetry (KIP-714); ``code`` is Kafka's error name, ``java_class`` its exception."""

from __future__ import annotations

from engine.errors import QuotaEngineError, QuotaValidationError


class SubscriptionValidationError(QuotaValidationError):
    """A client-metrics subscription Kafka would refuse (ClientMetricsConfigs.validate); nothing changed."""

    code = "INVALID_REQUEST"
    java_class = "InvalidRequestException"

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    def to_dict(self) -> dict[str, str]:
        out = super().to_dict()
        if self.key is not None:
            out["key"] = self.key
        return out


class InvalidSubscriptionRequest(SubscriptionValidationError):
    """Empty name, unknown key, interval out of range: Kafka's InvalidRequestException."""


class InvalidSubscriptionConfig(SubscriptionValidationError):
    """A malformed ``match`` entry or regex: Kafka's InvalidConfigurationException."""

    code = "INVALID_CONFIG"
    java_class = "InvalidConfigurationException"


class SubscriptionConfigTypeError(SubscriptionValidationError):
    """A value that does not parse as its type (``interval.ms`` not an int): Kafka's ConfigException."""

    code = "INVALID_CONFIG"
    java_class = "ConfigException"


class TelemetryError(QuotaEngineError):
    """A PushTelemetry payload problem; ``code`` is what the response carries."""

    java_class = "ApiException"


class InvalidRecord(TelemetryError):
    """A payload that does not decompress or decode as OTLP MetricsData."""

    code = "INVALID_RECORD"
    java_class = "InvalidRecordException"


class TelemetryTooLarge(TelemetryError):
    code = "TELEMETRY_TOO_LARGE"
    java_class = "TelemetryTooLargeException"


class UnsupportedCompressionType(TelemetryError):
    code = "UNSUPPORTED_COMPRESSION_TYPE"
    java_class = "UnsupportedCompressionTypeException"
