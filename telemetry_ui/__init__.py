"""KIP-714 client-metrics subscriptions and ingestion, live charts and their WebSocket consumers."""
