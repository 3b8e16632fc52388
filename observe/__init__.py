"""Observing real clusters through what they already publish: a plain-Python Prometheus client and the source that
turns Kafka's quota sensors (JMX exporter -> Prometheus) into the live monitor's samples. No Django here."""
