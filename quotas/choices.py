"""Choice sets of the quota models and API, in one place (NetBox style).

Entity types and quota keys come from the engine, so the portal and the brokers
can never disagree about which names exist.
"""

from django.db import models

from engine.budgets import BUDGET_TYPES
from engine.config import CLIENT_ID, IP, USER
from engine.entities import QUOTA_KEYS, QuotaType


class ConnectorKind(models.TextChoices):
    """How the portal applies a cluster's desired state."""

    ENGINE = "engine", "Quota engine (Redis)"
    KAFKA = "kafka", "Kafka Admin API"


class QuotaScope(models.TextChoices):
    """A cluster's namespaces: Kafka's quotas are per broker; an engine cluster can also keep one namespace for the
    whole cluster (its brokers share every sensor). Not to be confused with ``BudgetScope``, one quota value's."""

    PER_BROKER = "per_broker", "Per broker (as Kafka)"
    CLUSTER_WIDE = "cluster_wide", "Cluster-wide (engine only)"


class BudgetScope(models.TextChoices):
    """What one quota value means: a limit on each broker (Kafka's meaning), or a budget for the sum over the
    cluster's brokers, which the brokers' budget plugin shares out between them (``docs/capabilities/
    cluster-budgets.md``). Not to be confused with ``QuotaScope``, a cluster's namespaces."""

    PER_BROKER = "per_broker", "Per broker (Kafka's meaning)"
    CLUSTER_WIDE = "cluster_wide", "Cluster-wide budget (the sum over brokers)"


#: The quota keys a value may be cluster-wide for: the engine's budget types (produce, fetch, request). A
#: controller-mutation quota is enforced on the controller path and a connection rate per ip: never shared out.
BUDGET_KEYS = tuple(QuotaType(t).config_key for t in BUDGET_TYPES)


class SecurityProtocol(models.TextChoices):
    """How the portal's Kafka connector reaches a cluster (SSL is not supported yet)."""

    PLAINTEXT = "PLAINTEXT", "PLAINTEXT"
    SASL_PLAINTEXT = "SASL_PLAINTEXT", "SASL_PLAINTEXT (SCRAM)"


class SaslMechanism(models.TextChoices):
    """The SASL mechanisms the connector speaks: Kafka's SCRAM."""

    NONE = "", "None"
    SCRAM_SHA_256 = "SCRAM-SHA-256", "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512", "SCRAM-SHA-512"


class EntityType(models.TextChoices):
    """The entity types of Kafka's client quotas, spelled as its protocol spells them."""

    USER = USER, "User principal"
    CLIENT_ID = CLIENT_ID, "Client id"
    IP = IP, "IP address"


class MatchType(models.TextChoices):
    """DescribeClientQuotas filter matching: a name, the default entity, or any non-default name."""

    EXACT = "exact", "Exact name"
    DEFAULT = "default", "The default entity"
    SPECIFIED = "specified", "Any specified (non-default) name"


QuotaKey = models.TextChoices("QuotaKey", [(key, key) for key in QUOTA_KEYS])
QuotaKey.__doc__ = "Kafka's five client-quota config keys (taken from the engine)."
