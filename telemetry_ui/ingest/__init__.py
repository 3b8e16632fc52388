"""Client telemetry ingestion: the KIP-714 sink (``sink``), the OTLP/HTTP receiver (``otlp_receiver``) and the
storage both write (``telemetry_store``)."""
