"""The quota engine: Kafka's quota semantics as a pure-Python reference model and in Redis.

No Django here: brokers, the load generator and Spark jobs import it directly.
"""
