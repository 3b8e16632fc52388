"""Re-applying a cluster's whole desired state to one target: which target a request names, and queueing the heal.

POST /api/clusters/{cluster}/reapply/ and the drift page's button both call these, so both refuse with the same
words. Refusals are the workflow's (``quotas.workflow.WorkflowError``): the API answers them with their code and
status, a page shows their message.
"""

from __future__ import annotations

import kombu.exceptions
import redis
from django.contrib.auth.models import AbstractBaseUser

from quotas.choices import ConnectorKind, QuotaScope
from quotas.models import Broker, Cluster
from quotas.workflow.errors import InvalidRequest, WorkflowError

REAPPLY_ADMINS_ONLY = (
    "Only admins (staff or the quota-admins group; never auditors) re-apply desired state to brokers."
)


class QueueUnreachable(WorkflowError):
    """503 BROKER_NOT_AVAILABLE: the task queue (Redis) could not take the heal; nothing was queued, try again."""

    code = "BROKER_NOT_AVAILABLE"
    status = 503
    details = {"retriable": True}


def reapply_target(cluster: Cluster, broker_id: int | None) -> Broker | None:
    """The target a re-apply names: a broker of a per_broker cluster, or None for a cluster_wide one's namespace.

    InvalidRequest (the API's INVALID_REQUEST, ``details.broker``) says what to send instead.
    """
    if cluster.connector == ConnectorKind.KAFKA:
        if broker_id is not None:
            message = (
                f"Cluster {cluster.name!r} is a Kafka cluster: its quotas and configs live in its metadata, which is "
                "re-applied whole through any broker; send broker null."
            )
            raise InvalidRequest(message, field="broker")
        return None
    if cluster.scope == QuotaScope.CLUSTER_WIDE:
        if broker_id is not None:
            message = (
                f"Cluster {cluster.name!r} is cluster_wide: its brokers share one namespace, which is re-applied "
                "whole; send broker null."
            )
            raise InvalidRequest(message, field="broker")
        return None
    ids = list(cluster.brokers.order_by("broker_id").values_list("broker_id", flat=True))
    known = f"its brokers are {', '.join(map(str, ids))}" if ids else "it has no broker registered"
    if broker_id is None:
        message = (
            f"Cluster {cluster.name!r} is per_broker: each broker holds its own copy, so name the broker to "
            f"re-apply ({known})."
        )
        raise InvalidRequest(message, field="broker")
    broker = cluster.brokers.filter(broker_id=broker_id).first()
    if broker is None:
        message = f"Cluster {cluster.name!r} has no broker {broker_id}; {known}."
        raise InvalidRequest(message, field="broker")
    return broker


def enqueue_heal(cluster: Cluster, broker: Broker | None, actor: AbstractBaseUser) -> str:
    """Queue ``quotas.tasks.heal`` for one target; returns the task id.

    QueueUnreachable (503) when the queue (Redis) cannot be reached: nothing was queued.
    """
    from quotas.tasks import heal

    try:
        # ignore_result: nobody waits for it, and sending it then needs no result-backend subscription (which, with
        # Redis down, retries for 20 s and ends in a RuntimeError instead of failing fast)
        result = heal.apply_async((cluster.pk, broker.pk if broker is not None else None, actor.pk), ignore_result=True)
    except (kombu.exceptions.KombuError, redis.exceptions.RedisError, OSError) as e:
        where = f"broker {broker.broker_id}" if broker is not None else "the cluster-wide namespace"
        message = f"The task queue is unreachable: nothing was queued for {where} of {cluster.name!r}; try again. ({e})"
        raise QueueUnreachable(message) from e
    return str(result.id)
