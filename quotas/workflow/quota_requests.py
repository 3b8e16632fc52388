"""Quota requests: submit, withdraw, approve (applied to the desired state in the same transaction) and reject; and,
after each push, settling the requests whose version every target now holds (``settle_pushed``).
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from engine.config import CLIENT_ID, USER, EntityRef
from engine.entities import validate_quota_key, validate_quota_value
from engine.errors import QuotaEngineError
from engine.groups import GROUP_KEYS
from engine.units import parse_quota_value
from quotas.choices import BudgetScope
from quotas.models import (
    Alteration,
    AlterationRejected,
    Approval,
    AuditAction,
    Cluster,
    Decision,
    DesiredStateVersion,
    InvalidBudgetScope,
    InvalidGroup,
    QuotaGroup,
    QuotaOp,
    QuotaRequest,
    QuotaValue,
    RequestState,
    Tenant,
    announce,
    audited_alter,
    check_budget_scope,
    entity_owned_by,
    entity_refusal,
    record,
    set_group_values,
    tenants_of,
)
from quotas.models.group_changes import check_group_value
from quotas.models.requests import DecisionReason
from quotas.models.staleness import against, request_moved
from quotas.workflow.errors import BudgetScopeRefused, Conflict, InvalidRequest, PermissionDenied, StaleRequest
from quotas.workflow.grouped import PLANS, SUBSCRIPTIONS, _settle_all_grouped
from quotas.workflow.transitions import (
    _check_decider,
    _move,
    _pushes_settled,
    _refuse_auditor,
    _superseded,
    choose_tenant,
)


def _load(request_id: int) -> QuotaRequest:
    try:
        return QuotaRequest.objects.select_related("tenant", "cluster", "requested_by").get(pk=request_id)
    except QuotaRequest.DoesNotExist:
        raise InvalidRequest(f"No quota request #{request_id}.") from None


def submit(
    actor: AbstractBaseUser,
    tenant: Tenant | None,
    cluster: Cluster,
    *,
    user: str | None,
    client_id: str | None,
    key: str,
    value: object,
    reason: str = "",
    expires_at: datetime | None = None,
    now: datetime | None = None,
    budget_scope: str | None = None,
    group: QuotaGroup | None = None,
) -> QuotaRequest:
    """A tenant member asks for ``key = value`` on a user/client-id entity its tenant owns (or of one of its tenant's
    groups, ``group``: ``submit_group``).

    The engine's rules judge the entity and the value now, so an admin only ever decides on a change
    that can be applied; a value may be text in a form the key takes (``1.5 MiB/s``, ``engine.units``).
    ``tenant`` None: the actor's only tenant (``choose_tenant``). ``expires_at`` (in the future) makes the
    request a time-boxed boost. ``budget_scope``: per_broker or cluster_wide (``check_budget_scope`` judges it
    now, as an admin's AlterClientQuotas would); None asks for the scope the value has (per_broker for a new one),
    and the request records which, so the approver sees what approving sets.
    """
    _refuse_auditor(actor)
    if group is not None:
        return submit_group(actor, tenant, group, key=key, value=value, reason=reason, expires_at=expires_at,
                            budget_scope=budget_scope)
    tenant = choose_tenant(actor, tenant, lambda t: entity_owned_by(t, user, client_id) is None)
    if user is None and client_id is None:
        raise InvalidRequest("Name a principal (user), a client-id, or both.", "user")
    # each refusal names the field to change, so a form marks that field and the API's details name it
    field = "user" if user == "" else "client_id" if client_id == "" else None
    try:
        ref = EntityRef.parse({k: v for k, v in ((USER, user), (CLIENT_ID, client_id)) if v is not None})
        field = "key"
        validate_quota_key(key, ref.kind)
        field = "value"
        checked = validate_quota_value(key, parse_quota_value(key, value), ref.kind)
        field = "budget_scope"
        if budget_scope is not None:
            check_budget_scope(cluster, key, budget_scope)
    except InvalidBudgetScope as e:
        raise BudgetScopeRefused(e.message, "budget_scope") from e
    except QuotaEngineError as e:
        raise InvalidRequest(e.message, field) from e
    refusal = entity_refusal(tenant, ref.user, ref.client_id)
    if refusal is not None:
        raise PermissionDenied(*refusal)
    if expires_at is not None and expires_at <= (now or timezone.now()):
        raise InvalidRequest("The boost's end (expires_at) is in the past; a boost must end in the future.",
                             "expires_at")
    with transaction.atomic():
        held = _current(cluster, ref.user, ref.client_id, key)  # what an approval must still find (staleness)
        request = QuotaRequest.objects.create(
            tenant=tenant,
            cluster=cluster,
            requested_by=actor,
            user=ref.user,
            client_id=ref.client_id,
            key=key,
            value=checked,
            budget_scope=budget_scope or held[1] or BudgetScope.PER_BROKER,
            reason=reason,
            expires_at=expires_at,
            submitted_against=against(held, key),
        )
        record(AuditAction.SUBMITTED, actor, request=request, after=RequestState.SUBMITTED, comment=reason)
        announce(request, RequestState.SUBMITTED, actor, reason)
    return request


def submit_group(
    actor: AbstractBaseUser, tenant: Tenant | None, group: QuotaGroup, *, key: str, value: object, reason: str = "",
    expires_at: datetime | None = None, budget_scope: str | None = None,
) -> QuotaRequest:
    """A member of the group's tenant asks for ``key = value`` of the group (per broker or cluster-wide)."""
    tenant = choose_tenant(actor, tenant or group.tenant)
    if tenant.pk != group.tenant_id:
        raise PermissionDenied(f"Group {group.name} belongs to tenant {group.tenant.name}, not {tenant.name}.", "group")
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidRequest("The boost's end (expires_at) is in the past; a boost must end in the future.",
                             "expires_at")
    field = "value"
    try:
        checked = check_group_value(key, parse_quota_value(key, value) if key in GROUP_KEYS else value, budget_scope)
    except InvalidGroup as e:
        raise InvalidRequest(e.message, e.field or field) from e
    except QuotaEngineError as e:
        raise InvalidRequest(e.message, field) from e
    with transaction.atomic():
        held = _group_current(group, key)
        request = QuotaRequest.objects.create(
            tenant=tenant, cluster=group.cluster, requested_by=actor, group=group, group_name=group.name, key=key,
            value=checked, budget_scope=budget_scope or held[1] or BudgetScope.PER_BROKER, reason=reason,
            expires_at=expires_at, submitted_against=against(held, key),
        )
        record(AuditAction.SUBMITTED, actor, request=request, after=RequestState.SUBMITTED, comment=reason)
        announce(request, RequestState.SUBMITTED, actor, reason)
    return request


def withdraw(actor: AbstractBaseUser, request_id: int, comment: str = "") -> QuotaRequest:
    """The requester, or another member of its tenant, takes back a request nobody has decided yet."""
    _refuse_auditor(actor)
    with transaction.atomic():
        request = _load(request_id)
        if request.requested_by_id != actor.pk and not tenants_of(actor).filter(pk=request.tenant_id).exists():
            raise PermissionDenied("Only the requester or a member of the request's tenant can withdraw it.")
        _move(request, RequestState.WITHDRAWN)
        record(AuditAction.WITHDRAWN, actor, request=request, before="submitted", after="withdrawn", comment=comment)
        announce(request, RequestState.WITHDRAWN, actor, comment)
    return request


def approve(
    actor: AbstractBaseUser, request_id: int, comment: str = "", now: datetime | None = None,
    confirm_stale: bool = False,
) -> QuotaRequest:
    """An admin (not the requester) approves; the change is applied to the desired state in the same transaction.

    Exactly one decision counts: the conditional move from ``submitted`` lets one approver through and
    answers CONFLICT to the others. When the key no longer holds what the request was submitted against
    (``request_moved``, read under the cluster's version lock), only ``confirm_stale`` lets it through (else
    STALE_REQUEST, nothing changed); the audit entry of the approval then says what it replaced.
    """
    now = now or timezone.now()
    with transaction.atomic():
        request = _load(request_id)
        _check_decider(actor, request)
        if request.expires_at is not None and request.expires_at <= now and request.state == RequestState.SUBMITTED:
            raise InvalidRequest(f"The boost's expiry ({request.expires_at:%Y-%m-%d %H:%M} UTC) has passed; reject it.")
        _move(request, RequestState.APPROVED)  # first: a rival decision gets CONFLICT, whatever the values say
        DesiredStateVersion.lock(request.cluster)  # no change lands between this check and the apply
        moved = request_moved(request)
        if moved is not None and not confirm_stale:
            raise StaleRequest(request, moved)  # the transaction rolls back: still submitted, nothing changed
        Approval.objects.create(
            request=request, approver=actor, decision=Decision.APPROVED, comment=comment, decided_at=now
        )
        note = comment if moved is None else "; ".join(filter(None, [comment, f"approved although {moved.sentence}"]))
        record(AuditAction.APPROVED, actor, request=request, before="submitted", after="approved", comment=note)
        announce(request, RequestState.APPROVED, actor, comment, now)
        apply(actor, request)
    return request


def reject(
    actor: AbstractBaseUser, request_id: int, comment: str, now: datetime | None = None, superseded: bool = False
) -> QuotaRequest:
    """An admin (not the requester) rejects, saying why (the comment is what the tenant acts on).

    ``superseded``: rejected because the key moved on since the request was submitted; the reason is recorded and
    the comment says what changed (the admin's own words optional). Refused when the key did not move.
    """
    if not superseded and not comment.strip():
        raise InvalidRequest("Say why in the comment: the tenant needs to know what to change.")
    with transaction.atomic():
        request = _load(request_id)
        _check_decider(actor, request)
        if superseded:
            moved = request_moved(request) if request.state == RequestState.SUBMITTED else None
            comment = _superseded(f"Request #{request.pk}", [moved] if moved else [], comment)
        _move(request, RequestState.REJECTED)
        Approval.objects.create(
            request=request,
            approver=actor,
            decision=Decision.REJECTED,
            decision_reason=DecisionReason.SUPERSEDED if superseded else DecisionReason.NONE,
            comment=comment,
            decided_at=now or timezone.now(),
        )
        record(AuditAction.REJECTED, actor, request=request, before="submitted", after="rejected", comment=comment)
        announce(request, RequestState.REJECTED, actor, comment)
    return request


def _current(cluster: Cluster, user: str | None, client_id: str | None, key: str) -> tuple[float | None, str | None]:
    """The entity's value of ``key`` and its budget scope; (None, None) when it has none."""
    row = QuotaValue.objects.filter(
        entity__cluster=cluster, entity__user=user, entity__client_id=client_id, entity__ip__isnull=True, key=key,
    ).first()
    return (None, None) if row is None else (row.value, row.budget_scope)


def _group_current(group: QuotaGroup, key: str) -> tuple[float | None, str | None]:
    row = group.values.filter(key=key).values_list("value", "budget_scope").first()
    return (None, None) if row is None else (row[0], row[1])


def _current_value(request: QuotaRequest) -> tuple[float | None, str | None]:
    if request.group_name:
        return _group_current(request.group, request.key) if request.group is not None else (None, None)
    return _current(request.cluster, request.user, request.client_id, request.key)


def _alteration(request: QuotaRequest, value: float | None, scope: str | None = None) -> Alteration:
    parts = [(t, n) for t, n in ((USER, request.user), (CLIENT_ID, request.client_id)) if n is not None]
    op = QuotaOp(request.key, remove=True) if value is None else QuotaOp(request.key, value, scope=scope)
    return Alteration(parts, [op])


def apply(actor: AbstractBaseUser | None, request: QuotaRequest) -> None:
    """Write an approved request into the cluster's desired state (``alter_client_quotas``, version bumped).

    The request becomes ``applying`` until every broker holds its version (``settle_pushed``), then
    ``applied``; a cluster without brokers has nothing to wait for. If the desired state refuses the change
    (the rules changed since submission), the request is ``failed``.
    """
    with transaction.atomic():
        DesiredStateVersion.lock(request.cluster)  # the value replaced is read under the lock every change takes
        previous, previous_scope = _current_value(request)
        try:
            with transaction.atomic():
                version = _write(actor, request)
        except (AlterationRejected, InvalidGroup) as e:
            _move(request, RequestState.FAILED, failure=e.message)
            record(AuditAction.FAILED, actor, request=request, before="approved", after="failed", comment=e.message)
            announce(request, RequestState.FAILED, actor, e.message)
            return
        _move(
            request, RequestState.APPLYING, previous_value=previous, previous_budget_scope=previous_scope,
            applied_version=version,
        )
        record(AuditAction.APPLYING, actor, request=request, before="approved", after="applying",
               comment=f"desired-state version {version}")
        _settle(request)


def _write(actor: AbstractBaseUser | None, request: QuotaRequest) -> int:
    """Write the request's value into desired state; the version it made (or the current one: nothing changed)."""
    if not request.group_name:
        change = _alteration(request, request.value, request.budget_scope)
        return audited_alter(request.cluster, [change], actor, request=request).version
    if request.group is None:
        raise InvalidGroup(f"Group {request.group_name} was deleted after the request was submitted.", "group")
    version = set_group_values(actor, request.group, {request.key: (request.value, request.budget_scope)},
                               request=request)
    return version if version is not None else DesiredStateVersion.objects.get(cluster=request.cluster).version


def _settle(request: QuotaRequest) -> None:
    """An ``applying`` request whose version is on every target becomes ``applied``; a refused push fails it."""
    settled = _pushes_settled(request)
    if settled is None:
        return
    state, comment = settled
    _move(request, state, **({"failure": comment} if state == RequestState.FAILED else {}))
    record(AuditAction(state), None, request=request, before="applying", after=state, comment=comment)
    announce(request, state, None, comment)


def settle_pushed(cluster: Cluster) -> list[int]:
    """After a push: settle every ``applying`` request of the cluster (quota requests, then subscription
    requests); returns the ids of the quota requests that moved."""
    moved = []
    _settle_all_grouped(SUBSCRIPTIONS, cluster)
    _settle_all_grouped(PLANS, cluster)
    for pk in QuotaRequest.objects.filter(cluster=cluster, state=RequestState.APPLYING).values_list("pk", flat=True):
        try:
            with transaction.atomic():
                request = _load(pk)
                if request.state == RequestState.APPLYING:
                    _settle(request)
                    if request.state != RequestState.APPLYING:
                        moved.append(pk)
        except Conflict:
            continue
    return moved
