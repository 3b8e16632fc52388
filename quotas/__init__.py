"""The quota domain: models, API, approval workflow, push tasks and connectors.

``engine`` (the token-bucket/rate engine in Redis) lives inside this
package but must not import Django, so brokers and Spark jobs can use it.
"""
