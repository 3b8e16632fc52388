"""Whether the values a request was submitted against moved on since, and what moved them.

A quota request records what its key held when it was submitted (``QuotaRequest.submitted_against``); a plan
records each value it changes as the change's ``old``. Meanwhile other changes land: another request approved for
the same key, a boost applied or ended, an admin's own change, a value adopted from what a Kafka cluster holds.
Approving then would quietly replace what they set, so the approval says so first (``quotas.workflow``). Values are
compared, not histories: a value changed and changed back is what the request was submitted against again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.units import format_quota_value
from quotas.choices import BudgetScope
from quotas.models.audit import AuditAction, AuditEntry
from quotas.models.quotas import QuotaValue
from quotas.models.requests import QuotaRequest

#: Audit actions that change a value or config a request can be submitted against.
VALUE_CHANGES = (
    AuditAction.QUOTA_ALTERED, AuditAction.BUDGET_SCOPE_ALTERED, AuditAction.CONFIG_ALTERED,
    AuditAction.SUBSCRIPTION_ALTERED,
)
#: How ``apply_plan`` names a plan in its audit entries: ``plan #4 (plan request #2); desired-state version 9``.
_PLAN_NOTE = re.compile(r"plan #(?P<plan>\d+)(?: \(plan request #(?P<request>\d+)\))?")

Held = tuple[Any, str | None]  # (value or None for no value, budget scope or None)


@dataclass(frozen=True)
class ChangedBy:
    """The audit entry that set the value there is now: a request's, a plan's, or someone's own change."""

    audit_id: int
    actor: str
    at: datetime
    request_id: int | None = None
    plan_id: int | None = None
    plan_request_id: int | None = None
    comment: str = ""

    @property
    def label(self) -> str:
        """``#3`` (a quota request), ``plan request #2``, ``plan #4``, else ``audit entry #17 by root``."""
        if self.request_id is not None:
            return f"#{self.request_id}"
        if self.plan_request_id is not None:
            return f"plan request #{self.plan_request_id}"
        if self.plan_id is not None:
            return f"plan #{self.plan_id}"
        adopted = " (adopted from what the cluster holds)" if "adopted" in self.comment else ""
        return f"audit entry #{self.audit_id} by {self.actor}{adopted}"

    def as_dict(self) -> dict[str, Any]:
        return {"audit": self.audit_id, "request": self.request_id, "plan": self.plan_id,
                "plan_request": self.plan_request_id, "actor": self.actor, "at": self.at, "label": self.label}


@dataclass(frozen=True)
class Moved:
    """One key whose value is no longer what the request was submitted against."""

    entity: str
    key: str
    submitted: Held
    now: Held
    changed_by: ChangedBy | None

    @property
    def submitted_text(self) -> str:
        return shown(self.key, *self.submitted)

    @property
    def now_text(self) -> str:
        return shown(self.key, *self.now)

    @property
    def sentence(self) -> str:
        """``submitted against 512 KiB/s; now 2 MiB/s since #3``."""
        since = f" since {self.changed_by.label}" if self.changed_by is not None else ""
        return f"submitted against {self.submitted_text}; now {self.now_text}{since}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "entity": self.entity, "key": self.key,
            "submitted_against": {"value": self.submitted[0], "budget_scope": self.submitted[1]},
            "now": {"value": self.now[0], "budget_scope": self.now[1]},
            "changed_by": self.changed_by.as_dict() if self.changed_by is not None else None,
            "message": self.sentence,
        }


def shown(key: str, value: Any, scope: str | None = None) -> str:
    """A value as the pages show it: ``512 KiB/s``, ``2 MiB/s cluster-wide``, ``50 %``, a config's text, or
    ``no value``."""
    if value is None:
        return "no value"
    if isinstance(value, int | float) and not isinstance(value, bool):
        text = format_quota_value(key, value)
    else:
        text = str(value)
    return f"{text} cluster-wide" if scope == BudgetScope.CLUSTER_WIDE else text


def changed_by(cluster_id: int, entity: str, key: str, since: datetime) -> ChangedBy | None:
    """The newest audited change of ``key`` of ``entity`` since ``since``: what set the value there is now."""
    entry = (
        AuditEntry.objects.filter(cluster_id=cluster_id, entity=entity, key=key, action__in=VALUE_CHANGES,
                                  created__gte=since)
        .order_by("-pk")
        .only("pk", "actor_name", "created", "request_id", "comment")
        .first()
    )
    if entry is None:
        return None
    plan = _PLAN_NOTE.match(entry.comment) if entry.request_id is None else None
    return ChangedBy(
        audit_id=entry.pk, actor=entry.actor_name, at=entry.created, request_id=entry.request_id,
        plan_id=int(plan["plan"]) if plan else None,
        plan_request_id=int(plan["request"]) if plan and plan["request"] else None, comment=entry.comment,
    )


def held_now(request: QuotaRequest) -> Held:
    """What the request's key holds in desired state now: (value, budget scope), (None, None) for no value."""
    if request.group_name:
        from quotas.models.groups import GroupValue

        found = GroupValue.objects.filter(group_id=request.group_id, key=request.key)
        pair = found.values_list("value", "budget_scope").first()
        return (None, None) if pair is None else (pair[0], pair[1])
    row = (
        QuotaValue.objects.filter(
            entity__cluster_id=request.cluster_id, entity__user=request.user, entity__client_id=request.client_id,
            entity__ip__isnull=True, key=request.key,
        )
        .values_list("value", "budget_scope")
        .first()
    )
    return (None, None) if row is None else (row[0], row[1])


def against(held: Held, key: str) -> dict[str, dict[str, Any]]:
    """``submitted_against`` of a request of ``key`` submitted while the key held ``held``."""
    return {key: {"value": held[0], "budget_scope": held[1]}}


def submitted(request: QuotaRequest) -> Held | None:
    """What the request was submitted against; None when not recorded (requests decided before it was kept)."""
    recorded: Mapping[str, Any] | None = (request.submitted_against or {}).get(request.key)
    if recorded is None:
        return None
    return recorded.get("value"), recorded.get("budget_scope")


def submitted_against(request: QuotaRequest) -> str | None:
    """What the request was submitted against, as the pages show it; None when not recorded."""
    then = submitted(request)
    return None if then is None else shown(request.key, *then)


def request_moved(request: QuotaRequest) -> Moved | None:
    """The request's key, when it no longer holds what the request was submitted against (else None, and None when
    nothing was recorded). A budget scope counts only beside a value: no value has none."""
    then = submitted(request)
    if then is None:
        return None
    now = held_now(request)
    if _same(then, now):
        return None
    return Moved(request.entity, request.key, then, now,
                 changed_by(request.cluster_id, request.entity, request.key, request.created))


def _same(a: Held, b: Held) -> bool:
    if a[0] is None or b[0] is None:
        return a[0] is None and b[0] is None
    return float(a[0]) == float(b[0]) and (a[1] or BudgetScope.PER_BROKER) == (b[1] or BudgetScope.PER_BROKER)
