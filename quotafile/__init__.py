"""Quotas as code: a cluster's quota state as a YAML file, read, checked, written and compared (no Django).

One YAML document per cluster::

    apiVersion: quotas/v1
    kind: ClusterQuotas
    cluster: prod
    quotas:                                   # client quotas, in Kafka's precedence order
      - entity: {user: alice, client-id: app-1}    # keys user, client-id, ip; "<default>" for a default
        producer_byte_rate: 1.5 MiB/s
      - entity: {user: bob}
        producer_byte_rate: {value: 30 MiB/s, budgetScope: cluster_wide}   # a budget for the sum over brokers
    brokerConfigs:                            # dynamic broker configs the portal manages
      "<default>": {max.connection.creation.rate: 100}
      1: {leader.replication.throttled.rate: 10485760}
    topicConfigs:                             # topics' throttled-replica lists
      orders: {leader.replication.throttled.replicas: "0:1,1:2"}
    clientMetrics:                            # KIP-714 subscriptions
      - {name: basic, metrics: [org.apache.kafka.producer.], intervalMs: 60000, match: [client_id=app-1]}
    groups:                                   # group quotas (``quotafile.groups``)
      - {name: payments, tenant: payments, members: {tenant: true}, consumer_byte_rate: 8 MiB/s}
    exemptPrincipals:                         # principals no quota applies to
      - {principal: replicator, reason: MirrorMaker 2}

A section left out of the file is not managed by it (a plan leaves that part of the cluster alone, even with
prune); an empty section (``quotas: []``) with prune removes everything of that part the planner may change.
Values take the units of ``engine.units`` (``1.5 MiB/s``); ``write`` picks the form that reads back to the
same number, so exporting and planning an unchanged file changes nothing. Every error names the line and the key
(``FileError``). ``diff`` answers the changes from one state to another in Kafka's precedence order.

A value is per broker (Kafka's meaning) unless written as ``{value: ..., budgetScope: cluster_wide}``: a budget for
the sum over the cluster's brokers (producer_byte_rate, consumer_byte_rate and request_percentage of user/client-id
entities; whether the cluster takes it is the portal's to say). A change of scope alone is a change of the value.
"""

from __future__ import annotations

from quotafile.common import (
    ADD,
    BROKER,
    BUDGET_SCOPES,
    CHANGE,
    CLIENT_METRICS,
    CLUSTER_WIDE,
    PER_BROKER,
    QUOTA,
    REMOVE,
    TOPIC,
    VALUE_FIELDS,
    Change,
    _number,
    human_value,
)
from quotafile.compare import (
    NAMED_WINNERS,
    OTHER_CLIENT,
    OTHER_USER,
    Removable,
    Shadows,
    apply_changes,
    diff,
    shadow_warnings,
)
from quotafile.groups import EXEMPT, GROUP, Group
from quotafile.reader import (
    budget_scope_error,
    read,
)
from quotafile.schema import (
    json_schema,
)
from quotafile.state import (
    API_VERSION,
    BUDGET_KEYS,
    ENTITY_KEYS,
    INTERVAL,
    KEY_ORDER,
    KIND,
    MATCH,
    MAX_TEXT,
    METRICS,
    SUBSCRIPTION_FIELDS,
    TOP_KEYS,
    FileError,
    InvalidQuotaFile,
    QuotaState,
    Subscription,
    broker_order,
    entity_dict,
    entity_order,
    precedence_level,
)
from quotafile.writer import (
    write,
)

__all__ = [
    "ADD",
    "BROKER",
    "BUDGET_SCOPES",
    "CHANGE",
    "CLIENT_METRICS",
    "CLUSTER_WIDE",
    "PER_BROKER",
    "QUOTA",
    "REMOVE",
    "TOPIC",
    "VALUE_FIELDS",
    "Change",
    "_number",
    "human_value",
    "EXEMPT",
    "GROUP",
    "Group",
    "API_VERSION",
    "KIND",
    "TOP_KEYS",
    "ENTITY_KEYS",
    "KEY_ORDER",
    "METRICS",
    "INTERVAL",
    "MATCH",
    "SUBSCRIPTION_FIELDS",
    "BUDGET_KEYS",
    "MAX_TEXT",
    "FileError",
    "InvalidQuotaFile",
    "Subscription",
    "QuotaState",
    "entity_dict",
    "precedence_level",
    "entity_order",
    "broker_order",
    "read",
    "budget_scope_error",
    "write",
    "Removable",
    "diff",
    "apply_changes",
    "OTHER_USER",
    "OTHER_CLIENT",
    "NAMED_WINNERS",
    "Shadows",
    "shadow_warnings",
    "json_schema",
]
