"""Client-metrics subscription requests.

A tenant member asks for a KIP-714 subscription (create/replace, or delete) selecting its own clients; an admin other
than the requester approves (applied through ``alter_subscription``: versioned, pushed, audited) or rejects. Same
states, race guard and notifications as quota requests; the decision is kept on the request row.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from engine.errors import QuotaEngineError
from quotas.models import (
    AuditAction,
    Cluster,
    RequestState,
    SubscriptionRequest,
    Tenant,
    alter_subscription,
    announce,
    match_owned_by,
)
from quotas.models.client_metrics import ClientMetricsSubscription, validate
from quotas.workflow.errors import InvalidRequest, PermissionDenied
from quotas.workflow.grouped import SUBSCRIPTIONS, _reject_grouped, _settle_grouped, _withdraw_grouped
from quotas.workflow.transitions import _check_decider, _move, _refuse_auditor, choose_tenant


def _check_subscription_owner(tenant: Tenant, cluster: Cluster, name: str, match: str | None) -> None:
    """The tenant must own the clients the new match selects, and those the existing subscription selects."""
    if match is not None:
        why_not = match_owned_by(tenant, match)
        if why_not is not None:
            raise PermissionDenied(why_not)
    current = ClientMetricsSubscription.objects.filter(cluster=cluster, name=name).first()
    if current is not None and match_owned_by(tenant, current.match) is not None:
        raise PermissionDenied(
            f"The subscription {name!r} of cluster {cluster.name!r} selects clients tenant {tenant.name!r} does not "
            "own; choose another name or ask an admin."
        )


def submit_subscription(
    actor: AbstractBaseUser,
    tenant: Tenant | None,
    cluster: Cluster,
    *,
    name: str,
    configs: dict[str, object] | None,
    reason: str = "",
) -> SubscriptionRequest:
    """A tenant member asks to create or replace (``configs``) or delete (``configs`` None) a subscription.

    Kafka's rules judge the configs now (so an admin only decides on a change that can be applied), and the
    match must select only the tenant's own client-ids (``match_owned_by``); deleting needs the existing
    subscription to be the tenant's. ``tenant`` None: the actor's only tenant (``choose_tenant``).
    """
    _refuse_auditor(actor)
    asked = None if configs is None else configs.get("match")
    tenant = choose_tenant(
        actor, tenant, lambda t: isinstance(asked, str) and bool(asked) and match_owned_by(t, asked) is None
    )
    if configs is None:
        if not ClientMetricsSubscription.objects.filter(cluster=cluster, name=name).exists():
            raise InvalidRequest(f"Cluster {cluster.name!r} has no client-metrics subscription {name!r} to delete.")
        metrics, interval, match, operation = "", 300_000, None, SubscriptionRequest.DELETE
    else:
        try:
            metrics, interval, match = validate(name, configs)
        except QuotaEngineError as e:
            raise InvalidRequest(e.message) from e
        operation = SubscriptionRequest.SET
    _check_subscription_owner(tenant, cluster, name, match)
    with transaction.atomic():
        request = SubscriptionRequest.objects.create(
            tenant=tenant,
            cluster=cluster,
            requested_by=actor,
            name=name,
            operation=operation,
            metrics=metrics,
            interval_ms=interval,
            match=match or "",
            reason=reason,
        )
        SUBSCRIPTIONS.audit(AuditAction.SUBMITTED, actor, request, None, RequestState.SUBMITTED, reason)
        announce(request, RequestState.SUBMITTED, actor, reason)
    return request


def withdraw_subscription(actor: AbstractBaseUser, request_id: int, comment: str = "") -> SubscriptionRequest:
    """The requester, or another member of its tenant, takes back a subscription request nobody decided yet."""
    return _withdraw_grouped(SUBSCRIPTIONS, actor, request_id, comment)


def approve_subscription(
    actor: AbstractBaseUser, request_id: int, comment: str = "", now: datetime | None = None
) -> SubscriptionRequest:
    """An admin (not the requester) approves; the subscription is written in the same transaction
    (``alter_subscription``: a new desired-state version, pushed to every broker) and the request is
    ``applying`` until every broker holds it. If Kafka's rules or the name's state refuse it now, it is ``failed``."""
    now = now or timezone.now()
    with transaction.atomic():
        request = SUBSCRIPTIONS.load(request_id)
        _check_decider(actor, request)
        _move(request, RequestState.APPROVED, decided_by=actor, decision_comment=comment, decided_at=now)
        SUBSCRIPTIONS.audit(AuditAction.APPROVED, actor, request, "submitted", "approved", comment)
        announce(request, RequestState.APPROVED, actor, comment, now)
        try:
            with transaction.atomic():
                outcome = alter_subscription(
                    request.cluster,
                    request.name,
                    request.configs,
                    actor,
                    audit={"tenant": request.tenant, "comment": f"subscription request #{request.pk}"},
                )
        except QuotaEngineError as e:
            _move(request, RequestState.FAILED, failure=e.message)
            SUBSCRIPTIONS.audit(AuditAction.FAILED, actor, request, "approved", "failed", e.message)
            announce(request, RequestState.FAILED, actor, e.message)
            return request
        _move(request, RequestState.APPLYING, applied_version=outcome.version)
        SUBSCRIPTIONS.audit(
            AuditAction.APPLYING, actor, request, "approved", "applying", f"desired-state version {outcome.version}"
        )
        _settle_grouped(SUBSCRIPTIONS, request)
    return request


def reject_subscription(
    actor: AbstractBaseUser, request_id: int, comment: str, now: datetime | None = None
) -> SubscriptionRequest:
    """An admin (not the requester) rejects, saying why."""
    return _reject_grouped(SUBSCRIPTIONS, actor, request_id, comment, now)
