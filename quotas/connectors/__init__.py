"""Connectors: how desired state reaches a cluster's brokers (the engine in Redis, or Kafka's Admin API).

No Django here: ``quotas.connector_registry`` makes them from the portal's settings.
"""
