"""Models of the desired quota state: the source of truth for what should be applied.

Split by concept (NetBox style): ``clusters`` (clusters, brokers, listeners),
``quotas`` (quota entities, their values, the desired-state version, and Kafka's
describe/alter/resolve operations over them), ``tenants`` (teams, what they own, roles),
``requests`` (self-service requests and approvals), ``audit`` (the audit trail) and
``broker_configs`` (dynamic broker and topic configs: connection limits, replication throttles) and
``client_metrics`` (KIP-714 client-metrics subscriptions and tenants' requests for them) and
``pushes`` (the change log by version, the push status per broker, and drift found on brokers) and
``scram`` (which SASL/SCRAM credentials the portal made on Kafka clusters; never a password) and
``webhooks`` (tenants' outgoing webhooks and their delivery log; ``quotas.notify`` sends them) and
``plans`` (plans of quota files against desired state, and tenants' grouped requests to apply them).
"""

from quotas.models.audit import AuditAction, AuditEntry, audited_alter, record
from quotas.models.broker_configs import (
    BrokerConfig,
    ConfigOp,
    ConfigOutcome,
    ConfigResource,
    InvalidConfig,
    TopicConfig,
    alter_configs,
)
from quotas.models.client_metrics import (
    ClientMetricsSubscription,
    SubscriptionExists,
    SubscriptionNotFound,
    SubscriptionOutcome,
    SubscriptionRequest,
    alter_subscription,
    match_owned_by,
)
from quotas.models.clusters import Broker, Cluster, Listener, push_wanted
from quotas.models.plans import Plan, PlanRequest, PlanStale, PlanState
from quotas.models.pushes import (
    DesiredChange,
    DesiredStateVersion,
    Drift,
    DriftResolution,
    DriftStatus,
    Push,
    PushState,
    push_targets,
)
from quotas.models.quotas import (
    Alteration,
    AlterationRejected,
    AlterOutcome,
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
from quotas.models.requests import (
    TRANSITIONS,
    Approval,
    Decision,
    QuotaRequest,
    RequestState,
    announce,
    request_changed,
)
from quotas.models.scram import ScramCredential
from quotas.models.tenants import (
    ADMINS_GROUP,
    AUDITORS_GROUP,
    OwnedName,
    Tenant,
    admin_users,
    entity_owned_by,
    is_admin,
    is_auditor,
    member_tenants,
    owned_by_any,
    owning_tenant,
    sees_everything,
    tenants_of,
)
from quotas.models.webhooks import (
    REQUEST_EVENTS,
    DeliveryState,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
)

__all__ = [
    "ADMINS_GROUP",
    "AUDITORS_GROUP",
    "REQUEST_EVENTS",
    "TRANSITIONS",
    "AlterOutcome",
    "Alteration",
    "AlterationRejected",
    "Approval",
    "AuditAction",
    "AuditEntry",
    "Broker",
    "BrokerConfig",
    "ClientMetricsSubscription",
    "Cluster",
    "ConfigOp",
    "ConfigOutcome",
    "ConfigResource",
    "Decision",
    "DeliveryState",
    "DesiredChange",
    "DesiredStateVersion",
    "Drift",
    "DriftResolution",
    "DriftStatus",
    "EffectiveQuota",
    "EntryResult",
    "FilterComponent",
    "InvalidConfig",
    "Listener",
    "OwnedName",
    "Plan",
    "PlanRequest",
    "PlanStale",
    "PlanState",
    "Push",
    "PushState",
    "QuotaEntity",
    "QuotaOp",
    "QuotaRequest",
    "QuotaValue",
    "RequestState",
    "ScramCredential",
    "SubscriptionExists",
    "SubscriptionNotFound",
    "SubscriptionOutcome",
    "SubscriptionRequest",
    "Tenant",
    "TopicConfig",
    "Webhook",
    "WebhookDelivery",
    "WebhookEvent",
    "alter_client_quotas",
    "alter_configs",
    "alter_subscription",
    "announce",
    "audited_alter",
    "describe_client_quotas",
    "effective_client_quotas",
    "effective_ip_quota",
    "entity_owned_by",
    "member_tenants",
    "owned_by_any",
    "admin_users",
    "is_admin",
    "is_auditor",
    "match_owned_by",
    "owning_tenant",
    "push_targets",
    "push_wanted",
    "record",
    "request_changed",
    "sees_everything",
    "tenants_of",
]
