"""Models of client-metrics subscriptions and ingested telemetry. None yet."""
