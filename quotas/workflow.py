"""The self-service workflow: submit, withdraw, approve, reject, apply and expire quota requests.

Each transition is a plain function running in one transaction, and each moves the request with a
conditional UPDATE (``... WHERE pk = ? AND state = <expected>``): when two admins approve the same
request at the same moment, the database lets exactly one UPDATE match, the other sees 0 rows and
gets CONFLICT. On PostgreSQL the second UPDATE waits for the first's row lock and re-checks the
state; on SQLite the transactions are serialized (``transaction_mode = IMMEDIATE``, see settings).
The one-to-one Approval row is a second guard: the database refuses a second decision.

Refusals are WorkflowError with a code a client branches on: INVALID_REQUEST (the body is wrong),
PERMISSION_DENIED (the caller may not), CONFLICT (the request is no longer in a state that allows it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from engine.config import CLIENT_ID, USER, EntityRef
from engine.entities import validate_quota_key, validate_quota_value
from engine.errors import QuotaEngineError
from engine.units import format_exact, parse_quota_value
from quotas.choices import BudgetScope
from quotas.models import (
    TRANSITIONS,
    Alteration,
    AlterationRejected,
    Approval,
    AuditAction,
    Cluster,
    Decision,
    DesiredStateVersion,
    InvalidBudgetScope,
    Plan,
    PlanRequest,
    PlanStale,
    PlanState,
    Push,
    PushState,
    QuotaOp,
    QuotaRequest,
    QuotaValue,
    RequestState,
    SubscriptionRequest,
    Tenant,
    alter_subscription,
    announce,
    audited_alter,
    check_budget_scope,
    entity_owned_by,
    entity_refusal,
    is_admin,
    is_auditor,
    match_owned_by,
    record,
    tenants_of,
)
from quotas.models.capacity import (  # noqa: F401 (the capacity check, imported from here by its callers)
    CAPACITY_FIELD,
    CapacityCheck,
    DefaultShare,
    Granted,
    capacity_between,
    capacity_check,
    granted_total,
)
from quotas.models.client_metrics import ClientMetricsSubscription, validate
from quotas.models.plans import apply_plan, plan_moved
from quotas.models.requests import DecisionReason
from quotas.models.staleness import Moved, against, request_moved, shown

log = logging.getLogger(__name__)


class WorkflowError(Exception):
    """A refused transition; ``code`` and ``status`` become the API's error body and HTTP status.

    ``field`` names the body field to change, when one is to blame (the API's ``details``, a form's field).
    """

    code = "INVALID_REQUEST"
    status = 400

    #: What the API answers in ``details``, when more than the field is to say (None: the field, if any).
    details: Any = None

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidRequest(WorkflowError):
    pass


class PermissionDenied(WorkflowError):
    code = "PERMISSION_DENIED"
    status = 403


class Conflict(WorkflowError):
    code = "CONFLICT"
    status = 409


class StaleRequest(WorkflowError):
    """The key moved on since the request was submitted: approve with ``confirm_stale``, or reject it as
    superseded (409 STALE_REQUEST; ``details`` say what it was, what it is and what changed it)."""

    code = "STALE_REQUEST"
    status = 409

    def __init__(self, request: QuotaRequest, moved: Moved) -> None:
        super().__init__(
            f"Request #{request.pk} was {moved.sentence}; approving it sets {shown(request.key, request.value)}. "
            "Approve it again with confirm_stale to replace the value now, or reject it as superseded."
        )
        self.moved = moved
        self.details = moved.as_dict()


def _superseded(what: str, moved: list[Moved], comment: str) -> str:
    """The comment of a reject as superseded: what moved, then the admin's words; refused when nothing moved."""
    if not moved:
        raise InvalidRequest(
            f"{what} is not superseded: what it was submitted against has not changed (or was not recorded); "
            "reject it with a comment saying why."
        )
    said = "; ".join(f"{m.entity} {m.key} {m.sentence}" if len(moved) > 1 else m.sentence for m in moved)
    return f"Superseded: {said}." + (f" {comment.strip()}" if comment.strip() else "")


class BudgetScopeRefused(WorkflowError):
    """A budget scope the value cannot have (``quotas.models.check_budget_scope`` says why and what to send)."""

    code = InvalidBudgetScope.code


def _move(request: QuotaRequest | SubscriptionRequest | PlanRequest, to: str, **fields: object) -> None:
    """Move ``request`` from the state it was read in to ``to``, or CONFLICT when someone moved it first.

    The conditional UPDATE is the race guard: it matches only while the row still holds the state we read.
    """
    if to not in TRANSITIONS[request.state]:
        raise Conflict(f"Request #{request.pk} is {request.state}; it cannot become {to}.")
    now = timezone.now()
    model = type(request)
    moved = model.objects.filter(pk=request.pk, state=request.state).update(state=to, updated=now, **fields)
    if moved != 1:
        current = model.objects.filter(pk=request.pk).values_list("state", flat=True).first()
        raise Conflict(f"Request #{request.pk} was {current} meanwhile (another change came first); reload it.")
    request.state, request.updated = to, now
    for name, value in fields.items():
        setattr(request, name, value)


def _refuse_auditor(actor: AbstractBaseUser) -> None:
    if is_auditor(actor):
        raise PermissionDenied("Auditors read everything and change nothing; use an admin or member account.")


def choose_tenant(
    actor: AbstractBaseUser, tenant: Tenant | None, owns: Callable[[Tenant], bool] | None = None
) -> Tenant:
    """The tenant a request is for: the one named, which the actor must be a member of, else the actor's only one.

    A member of one tenant never has to name it; a member of several is asked to choose, with the choices named
    (and, through ``owns``, which of them own what is asked for), rather than having one picked for them.
    """
    if tenant is not None:
        if not tenants_of(actor).filter(pk=tenant.pk).exists():  # a tenant-scoped access token: that tenant only
            raise PermissionDenied(
                f"You are not a member of tenant {tenant.name!r}; ask one of its members or an admin.", "tenant"
            )
        return tenant
    mine = list(tenants_of(actor).prefetch_related("owned_names").order_by("name"))
    if len(mine) == 1:
        return mine[0]
    if not mine:
        raise PermissionDenied(
            "You are not a member of any tenant; an admin adds you to your team's tenant (/api/tenants/).", "tenant"
        )
    names = ", ".join(t.name for t in mine)
    owners = [t.name for t in mine if owns is not None and owns(t)]
    hint = f"; {', '.join(owners)} {'owns' if len(owners) == 1 else 'own'} what you ask for" if owners else ""
    raise InvalidRequest(
        f"You are a member of {len(mine)} tenants, {names}: name the one this request is for in tenant{hint}.",
        "tenant",
    )


def _load(request_id: int) -> QuotaRequest:
    try:
        return QuotaRequest.objects.select_related("tenant", "cluster", "requested_by").get(pk=request_id)
    except QuotaRequest.DoesNotExist:
        raise InvalidRequest(f"No quota request #{request_id}.") from None


# ------------------------------------------------------------------ submit and withdraw


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
) -> QuotaRequest:
    """A tenant member asks for ``key = value`` on a user/client-id entity its tenant owns.

    The engine's rules judge the entity and the value now, so an admin only ever decides on a change
    that can be applied; a value may be text in a form the key takes (``1.5 MiB/s``, ``engine.units``).
    ``tenant`` None: the actor's only tenant (``choose_tenant``). ``expires_at`` (in the future) makes the
    request a time-boxed boost. ``budget_scope``: per_broker or cluster_wide (``check_budget_scope`` judges it
    now, as an admin's AlterClientQuotas would); None asks for the scope the value has (per_broker for a new one),
    and the request records which, so the approver sees what approving sets.
    """
    _refuse_auditor(actor)
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


# ------------------------------------------------------------------ decisions


def _check_decider(actor: AbstractBaseUser, request: QuotaRequest | SubscriptionRequest | PlanRequest) -> None:
    _refuse_auditor(actor)
    if not is_admin(actor):
        raise PermissionDenied("Only admins (staff or the quota-admins group) approve or reject requests.")
    if request.requested_by_id == actor.pk:
        raise PermissionDenied("Nobody approves or rejects their own request; ask another admin.")


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


# ------------------------------------------------------------------ applying and expiring


def _current(cluster: Cluster, user: str | None, client_id: str | None, key: str) -> tuple[float | None, str | None]:
    """The entity's value of ``key`` and its budget scope; (None, None) when it has none."""
    row = QuotaValue.objects.filter(
        entity__cluster=cluster, entity__user=user, entity__client_id=client_id, entity__ip__isnull=True, key=key,
    ).first()
    return (None, None) if row is None else (row.value, row.budget_scope)


def _current_value(request: QuotaRequest) -> tuple[float | None, str | None]:
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
        change = _alteration(request, request.value, request.budget_scope)
        try:
            with transaction.atomic():
                outcome = audited_alter(request.cluster, [change], actor, request=request)
        except AlterationRejected as e:
            _move(request, RequestState.FAILED, failure=e.message)
            record(AuditAction.FAILED, actor, request=request, before="approved", after="failed", comment=e.message)
            announce(request, RequestState.FAILED, actor, e.message)
            return
        _move(
            request, RequestState.APPLYING, previous_value=previous, previous_budget_scope=previous_scope,
            applied_version=outcome.version,
        )
        record(AuditAction.APPLYING, actor, request=request, before="approved", after="applying",
               comment=f"desired-state version {outcome.version}")
        _settle(request)


def _pushes_settled(request: QuotaRequest | SubscriptionRequest | PlanRequest) -> tuple[str, str] | None:
    """Where the pushes of an ``applying`` request's version stand: (``failed``, why) when a target refused it,
    (``applied``, what) once every target holds it, None while some are still on their way."""
    rows = Push.objects.filter(cluster_id=request.cluster_id, version=request.applied_version)
    failed = rows.filter(state=PushState.FAILED).select_related("broker").first()
    if failed is not None:
        where = f"broker {failed.broker.broker_id}" if failed.broker else "the cluster-wide namespace"
        return RequestState.FAILED, f"{where} refused the push: {failed.error_code}: {failed.error}"
    if not rows.exclude(state=PushState.APPLIED).exists():
        return RequestState.APPLIED, f"desired-state version {request.applied_version} is on every broker"
    return None


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


def _boosts_applied_after(request: QuotaRequest) -> list[QuotaRequest]:
    """The boosts of the same entity and key applied after ``request`` and not ended, oldest first.

    Applied after: a newer desired-state version, or the same one (a boost asking for the value in force changes
    nothing) approved later.
    """
    approved = Approval.objects.filter(request=request).values_list("pk", flat=True).first() or 0
    after = Q(applied_version__gt=request.applied_version) | Q(
        applied_version=request.applied_version, approval__pk__gt=approved
    )
    rows = QuotaRequest.objects.filter(
        after,
        cluster_id=request.cluster_id,
        user=request.user,
        client_id=request.client_id,
        key=request.key,
        expires_at__isnull=False,
        state__in=(RequestState.APPLYING, RequestState.APPLIED),
    )
    return list(rows.exclude(pk=request.pk).order_by("applied_version", "approval__pk"))


def _shown(request: QuotaRequest, value: float | None) -> str:
    return "no value" if value is None else format_exact(request.key, value)


def expire_boosts(now: datetime | None = None) -> list[int]:
    """Every applied boost whose expiry has come ends; audited. Overlapping boosts of one entity and key stack.

    A boost applied while another was in force replaced that one's value, so ``previous_value`` says what it
    gives back. When a boost ends:

    - if a later boost was applied on top of it (its ``previous_value`` is this boost's value), the later one now
      gives back what this one replaced (its ``previous_value`` is handed down), and the value is left alone; so
      however many boosts overlap, and in whatever order they end, the last to end gives back the value from
      before the first;
    - else, if the value is still the boost's own, its ``previous_value`` comes back (or the key is removed);
    - else someone changed it during the boost (an admin, a request without expiry): that change stands.

    Each boost is expired in its own transaction, under the cluster's version lock (as approvals), so one failure
    does not hold the rest and an approval never reads a value half-way through an expiry.
    """
    now = now or timezone.now()
    due = QuotaRequest.objects.filter(state=RequestState.APPLIED, expires_at__lte=now).order_by("expires_at", "pk")
    expired = []
    for pk in list(due.values_list("pk", flat=True)):
        try:
            with transaction.atomic():
                request = _load(pk)
                DesiredStateVersion.lock(request.cluster)
                _move(request, RequestState.EXPIRED)  # CONFLICT when another worker expired it first
                note = _end_boost(request)
                record(AuditAction.EXPIRED, None, request=request, before="applied", after="expired", comment=note)
                announce(request, RequestState.EXPIRED, None, note)
        except Conflict:
            continue
        except Exception:  # rolled back: the boost stays applied and the next run tries again
            log.exception("Could not expire boost #%s; retrying on the next run", pk)
            continue
        expired.append(pk)
    return expired


def _end_boost(request: QuotaRequest) -> str:
    """Give back what an ending boost replaced, or hand it to the boost on top of it; returns the audit note."""
    later = _boosts_applied_after(request)
    if later:
        above = later[0]
        # (a boost applied before budget scopes existed recorded none: its value alone says)
        if above.previous_value == request.value and above.previous_budget_scope in (None, request.budget_scope):
            QuotaRequest.objects.filter(pk=above.pk).update(
                previous_value=request.previous_value, previous_budget_scope=request.previous_budget_scope
            )
            gives = _shown(request, request.previous_value)
            return f"boost #{above.pk}, applied on top of this one, now gives back {gives} when it ends"
        replaced = _shown(request, above.previous_value)
        return f"value changed after the boost (boost #{above.pk} replaced {replaced}); left as it is"
    current, scope = _current_value(request)
    if (current, scope) != (request.value, request.budget_scope):
        now = f"{current!r}{' cluster-wide' if scope == BudgetScope.CLUSTER_WIDE else ''}"
        return f"value changed since the boost (now {now}); left as it is"
    restore = [_alteration(request, request.previous_value, request.previous_budget_scope)]
    note = f"boost #{request.pk} expired; previous value restored"
    audited_alter(request.cluster, restore, None, request=request, comment=note)
    return "previous value restored"


# ------------------------------------------------------------------ client-metrics subscription requests
#
# A tenant member asks for a KIP-714 subscription (create/replace, or delete) selecting its own clients; an admin
# other than the requester approves (applied through ``alter_subscription``: versioned, pushed, audited) or rejects.
# Same states, race guard and notifications as quota requests; the decision is kept on the request row.


@dataclass(frozen=True)
class _GroupedKind:
    """A request kind decided on its own row (subscription and plan requests): what differs between them is the
    model, its name in messages and audits, and the rows it reads with it; the life cycle around it is shared."""

    model: type[SubscriptionRequest] | type[PlanRequest]
    label: str
    related: tuple[str, ...]

    def load(self, request_id: int) -> SubscriptionRequest | PlanRequest:
        try:
            return self.model.objects.select_related(*self.related).get(pk=request_id)
        except self.model.DoesNotExist:
            raise InvalidRequest(f"No {self.label} #{request_id}.") from None

    def audit(
        self,
        action: str,
        actor: AbstractBaseUser | None,
        request: SubscriptionRequest | PlanRequest,
        before: str | None,
        after: str,
        comment: str,
    ) -> None:
        record(
            action,
            actor,
            tenant=request.tenant,
            cluster=request.cluster,
            entity=request.path,
            key="",
            before=before,
            after=after,
            comment=f"{self.label} #{request.pk}" + (f": {comment}" if comment else ""),
        )


SUBSCRIPTIONS = _GroupedKind(SubscriptionRequest, "subscription request", ("tenant", "cluster", "requested_by"))
PLANS = _GroupedKind(PlanRequest, "plan request", ("tenant", "cluster", "requested_by", "plan"))


def _withdraw_grouped(kind: _GroupedKind, actor: AbstractBaseUser, request_id: int, comment: str) -> Any:
    """The requester, or another member of its tenant, takes back a request nobody decided yet."""
    _refuse_auditor(actor)
    with transaction.atomic():
        request = kind.load(request_id)
        if request.requested_by_id != actor.pk and not tenants_of(actor).filter(pk=request.tenant_id).exists():
            raise PermissionDenied("Only the requester or a member of the request's tenant can withdraw it.")
        _move(request, RequestState.WITHDRAWN)
        kind.audit(AuditAction.WITHDRAWN, actor, request, "submitted", "withdrawn", comment)
        announce(request, RequestState.WITHDRAWN, actor, comment)
    return request


def _reject_grouped(
    kind: _GroupedKind, actor: AbstractBaseUser, request_id: int, comment: str, now: datetime | None,
    moved: Callable[[Any], list[Moved]] | None = None,
) -> Any:
    """An admin (not the requester) rejects, saying why; the decision is kept on the request's row.

    ``moved`` (a request's values that moved on since it was submitted): a reject as superseded, as ``reject``'s.
    """
    if moved is None and not comment.strip():
        raise InvalidRequest("Say why in the comment: the tenant needs to know what to change.")
    with transaction.atomic():
        request = kind.load(request_id)
        _check_decider(actor, request)
        if moved is not None:
            found = moved(request) if request.state == RequestState.SUBMITTED else []
            comment = _superseded(f"{kind.label.capitalize()} #{request.pk}", found, comment)
        reason = {"decision_reason": DecisionReason.SUPERSEDED} if moved is not None else {}  # plan requests' field
        _move(request, RequestState.REJECTED, decided_by=actor, decision_comment=comment,
              decided_at=now or timezone.now(), **reason)
        kind.audit(AuditAction.REJECTED, actor, request, "submitted", "rejected", comment)
        announce(request, RequestState.REJECTED, actor, comment)
    return request


def _settle_grouped(kind: _GroupedKind, request: SubscriptionRequest | PlanRequest) -> None:
    """As ``_settle``: applied once every target holds the version; failed when a target refused the push.

    A change that was already the desired state (nothing to push) keeps the version it found, whose pushes
    are the ones to wait for."""
    settled = _pushes_settled(request)
    if settled is None:
        return
    state, comment = settled
    _move(request, state, **({"failure": comment} if state == RequestState.FAILED else {}))
    kind.audit(AuditAction(state), None, request, "applying", state, comment)
    announce(request, state, None, comment)


def _settle_all_grouped(kind: _GroupedKind, cluster: Cluster) -> None:
    rows = kind.model.objects.filter(cluster=cluster, state=RequestState.APPLYING)
    for pk in rows.values_list("pk", flat=True):
        try:
            with transaction.atomic():
                request = kind.load(pk)
                if request.state == RequestState.APPLYING:
                    _settle_grouped(kind, request)
        except Conflict:
            continue


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


# ------------------------------------------------------------------ grouped requests of plans (quotas as code)
#
# A tenant member's apply of a plan becomes one PlanRequest: an admin other than the requester approves it (every
# change in one transaction and one desired-state version, ``apply_plan``) or rejects it, as a whole. Same states
# and race guard as quota requests (and the same notifications); the decision is kept on the row.


class PlanStaleError(WorkflowError):
    """The plan's values moved on since it was made; plan the file again (409 PLAN_STALE)."""

    code = "PLAN_STALE"
    status = 409


def submit_plan(actor: AbstractBaseUser, plan: Plan, reason: str = "") -> PlanRequest:
    """A tenant member asks for a whole plan (made for its tenant) as one request; the plan is then ``submitted``."""
    _refuse_auditor(actor)
    if plan.tenant is None:
        raise InvalidRequest(f"Plan #{plan.pk} was made by an admin; an admin applies it directly.")
    if not tenants_of(actor).filter(pk=plan.tenant_id).exists():
        raise PermissionDenied(f"You are not a member of tenant {plan.tenant.name!r}, which plan #{plan.pk} is for.")
    with transaction.atomic():
        moved = Plan.objects.filter(pk=plan.pk, state=PlanState.PLANNED).update(
            state=PlanState.SUBMITTED, updated=timezone.now()
        )
        if moved != 1:
            raise Conflict(f"Plan #{plan.pk} was applied or submitted already; plan the file again for a new one.")
        plan.state = PlanState.SUBMITTED
        request = PlanRequest.objects.create(
            plan=plan, tenant=plan.tenant, cluster=plan.cluster, requested_by=actor, reason=reason
        )
        PLANS.audit(AuditAction.SUBMITTED, actor, request, None, RequestState.SUBMITTED, reason)
        announce(request, RequestState.SUBMITTED, actor, reason)
    return request


def approve_plan(
    actor: AbstractBaseUser, request_id: int, comment: str = "", now: datetime | None = None
) -> PlanRequest:
    """An admin (not the requester) approves the whole plan: applied in the same transaction as one desired-state
    version, then ``applying`` until every target holds it. Values the plan changes that moved on since it was
    made refuse the approval (PLAN_STALE; the request stays submitted, to be rejected); other clusters' changes
    landing meanwhile do not."""
    now = now or timezone.now()
    with transaction.atomic():
        request = PLANS.load(request_id)
        _check_decider(actor, request)
        _move(request, RequestState.APPROVED, decided_by=actor, decision_comment=comment, decided_at=now)
        PLANS.audit(AuditAction.APPROVED, actor, request, "submitted", "approved", comment)
        announce(request, RequestState.APPROVED, actor, comment, now)
        try:
            version, _changed = apply_plan(
                request.plan, actor, strict=False, tenant=request.tenant, comment=f"plan request #{request.pk}"
            )
        except PlanStale as e:
            error = PlanStaleError(e.message)
            error.details = {"moved": [m.as_dict() for m in e.items]} if e.items else None
            raise error from e
        _move(request, RequestState.APPLYING, applied_version=version)
        PLANS.audit(AuditAction.APPLYING, actor, request, "approved", "applying", f"desired-state version {version}")
        _settle_grouped(PLANS, request)
    return request


def reject_plan(
    actor: AbstractBaseUser, request_id: int, comment: str, now: datetime | None = None, superseded: bool = False
) -> PlanRequest:
    """An admin (not the requester) rejects the whole plan, saying why; ``superseded``: because values it changes
    moved on since it was made (recorded as the reason; refused when none did)."""
    moved = (lambda r: plan_moved(r.plan)) if superseded else None
    return _reject_grouped(PLANS, actor, request_id, comment, now, moved)


def withdraw_plan(actor: AbstractBaseUser, request_id: int, comment: str = "") -> PlanRequest:
    """The requester, or another member of its tenant, takes back a plan request nobody decided yet."""
    return _withdraw_grouped(PLANS, actor, request_id, comment)
