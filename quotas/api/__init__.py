"""The quota API: Kafka-shaped client-quota operations and the clusters they apply to."""
