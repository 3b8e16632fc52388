"""Models of the desired quota state: the source of truth for what should be applied.

Split by concept (NetBox style): ``clusters`` (clusters, brokers, listeners) and
``quotas`` (quota entities, their values, the desired-state version, and Kafka's
describe/alter/resolve operations over them).
"""

from quotas.models.clusters import Broker, Cluster, Listener
from quotas.models.quotas import (
    Alteration,
    AlterationRejected,
    AlterOutcome,
    DesiredStateVersion,
    EffectiveQuota,
    EntryResult,
    FilterComponent,
    QuotaEntity,
    QuotaOp,
    QuotaValue,
    alter_client_quotas,
    describe_client_quotas,
    effective_client_quotas,
    effective_ip_quota,
)

__all__ = [
    "Alteration",
    "AlterationRejected",
    "AlterOutcome",
    "Broker",
    "Cluster",
    "DesiredStateVersion",
    "EffectiveQuota",
    "EntryResult",
    "FilterComponent",
    "Listener",
    "QuotaEntity",
    "QuotaOp",
    "QuotaValue",
    "alter_client_quotas",
    "describe_client_quotas",
    "effective_client_quotas",
    "effective_ip_quota",
]
