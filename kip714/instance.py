"""One client's telemetry state and its push gating, as Kafka's ClientMetricsInstance.

Both timestamps start at 0 and move only when a request is accepted:

- GetTelemetrySubscriptions is accepted iff ``now - max(last_get, last_push) >= push_interval_ms``;
- PushTelemetry is accepted iff a get came after the last push (``last_get > last_push``: the one
  push a fresh subscription allows at once, whatever the client's jitter) or
  ``now - last_push >= push_interval_ms``.

``retry_after_ms`` tells how long a refused request would have had to wait (Kafka itself answers a
throttled telemetry request with ``throttle_time_ms = 0``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .javautil import KafkaUuid


@dataclass(eq=False)
class ClientMetricsInstance:
    client_instance_id: KafkaUuid | None = None
    subscription_id: int = 0
    subscription_version: int = 0
    metrics: tuple[str, ...] = ()  # HashSet iteration order, as sent to the client
    push_interval_ms: int = 300_000
    attributes: dict[str, str | None] = field(default_factory=dict)
    last_get_ms: int = 0
    last_push_ms: int = 0
    last_known_error: str = "NONE"
    terminating: bool = False
    timer: object | None = None  # the pending expiration task (manager's)

    def maybe_update_get_request_timestamp(self, now_ms: int) -> bool:
        if now_ms - max(self.last_get_ms, self.last_push_ms) >= self.push_interval_ms:
            self.last_get_ms = now_ms
            return True
        return False

    def maybe_update_push_request_timestamp(self, now_ms: int) -> bool:
        accept = self.last_get_ms > self.last_push_ms or now_ms - self.last_push_ms >= self.push_interval_ms
        if accept:
            self.last_push_ms = now_ms
        return accept

    def get_retry_after_ms(self, now_ms: int) -> int:
        return max(0, max(self.last_get_ms, self.last_push_ms) + self.push_interval_ms - now_ms)

    def push_retry_after_ms(self, now_ms: int) -> int:
        if self.last_get_ms > self.last_push_ms:
            return 0
        return max(0, self.last_push_ms + self.push_interval_ms - now_ms)
