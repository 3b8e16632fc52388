"""What every request's transition does: move it with a conditional UPDATE, check who may decide, choose the tenant,
and see where the pushes of an applying request stand.

Each transition is a plain function running in one transaction, and each moves the request with a conditional UPDATE
(``... WHERE pk = ? AND state = <expected>``): when two admins approve the same request at the same moment, the
database lets exactly one UPDATE match, the other sees 0 rows and gets CONFLICT. On PostgreSQL the second UPDATE waits
for the first's row lock and re-checks the state; on SQLite the transactions are serialized (``transaction_mode =
IMMEDIATE``, see settings). The one-to-one Approval row of a quota request is a second guard: the database refuses a
second decision.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from quotas.models import (
    TRANSITIONS,
    PlanRequest,
    Push,
    PushState,
    QuotaRequest,
    RequestState,
    SubscriptionRequest,
    Tenant,
    is_admin,
    is_auditor,
    tenants_of,
)
from quotas.models.staleness import Moved
from quotas.workflow.errors import Conflict, InvalidRequest, PermissionDenied


def _superseded(what: str, moved: list[Moved], comment: str) -> str:
    """The comment of a reject as superseded: what moved, then the admin's words; refused when nothing moved."""
    if not moved:
        raise InvalidRequest(
            f"{what} is not superseded: what it was submitted against has not changed (or was not recorded); "
            "reject it with a comment saying why."
        )
    said = "; ".join(f"{m.entity} {m.key} {m.sentence}" if len(moved) > 1 else m.sentence for m in moved)
    return f"Superseded: {said}." + (f" {comment.strip()}" if comment.strip() else "")


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


def _check_decider(actor: AbstractBaseUser, request: QuotaRequest | SubscriptionRequest | PlanRequest) -> None:
    _refuse_auditor(actor)
    if not is_admin(actor):
        raise PermissionDenied("Only admins (staff or the quota-admins group) approve or reject requests.")
    if request.requested_by_id == actor.pk:
        raise PermissionDenied("Nobody approves or rejects their own request; ask another admin.")


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
