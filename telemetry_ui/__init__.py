"""KIP-714 client-metrics subscriptions and ingestion (``ingest``), live charts and their WebSocket consumers
(``live``)."""
