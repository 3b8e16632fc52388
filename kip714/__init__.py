"""Client telemetry (KIP-714) as Kafka's broker does it: subscriptions, client instances, push gating,
payload decompression and OTLP decoding. No Django: the portal, brokers and the replay import it."""

from .errors import (
    InvalidRecord,
    InvalidSubscriptionConfig,
    InvalidSubscriptionRequest,
    SubscriptionConfigTypeError,
    SubscriptionValidationError,
    TelemetryError,
    TelemetryTooLarge,
    UnsupportedCompressionType,
)
from .instance import ClientMetricsInstance
from .javautil import KafkaUuid
from .manager import (
    ClientMetricsManager,
    GetTelemetryResponse,
    PushTelemetryResponse,
    RequestContext,
    compute_subscription_id,
)
from .subscriptions import Subscription, canonical_configs, validate_subscription

__all__ = [
    "ClientMetricsInstance",
    "ClientMetricsManager",
    "GetTelemetryResponse",
    "InvalidRecord",
    "InvalidSubscriptionConfig",
    "InvalidSubscriptionRequest",
    "KafkaUuid",
    "PushTelemetryResponse",
    "RequestContext",
    "Subscription",
    "SubscriptionConfigTypeError",
    "SubscriptionValidationError",
    "TelemetryError",
    "TelemetryTooLarge",
    "UnsupportedCompressionType",
    "canonical_configs",
    "compute_subscription_id",
    "validate_subscription",
]
