"""What a notification says: the mail's subject, body and recipients, a webhook's JSON payload and its
signature, for each kind of request (``KINDS``)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

from engine.entities import display_path
from engine.units import format_exact, format_quota_value
from quotas.models import (
    PlanRequest,
    QuotaRequest,
    RequestState,
    SubscriptionRequest,
    admin_users,
)
from quotas.models.webhooks import REQUEST_FIELDS

#: Which moves are mailed to the requester, and which to the admins.
TO_REQUESTER = frozenset({RequestState.APPROVED, RequestState.REJECTED, RequestState.APPLIED, RequestState.FAILED})
TO_ADMINS = frozenset({RequestState.SUBMITTED})
#: What a mail's subject says happened.
HAPPENED = {
    RequestState.SUBMITTED: "waits for approval",
    RequestState.APPROVED: "approved",
    RequestState.REJECTED: "rejected",
    RequestState.APPLIED: "applied",
    RequestState.FAILED: "failed",
    RequestState.WITHDRAWN: "withdrawn",
    RequestState.EXPIRED: "expired",
}

#: The kind a task message without ``kind`` is about: messages queued before there were other kinds, and quota
#: requests' own (left out, so a worker not yet upgraded still takes them).
DEFAULT_KIND = "quota"

AnyRequest = QuotaRequest | SubscriptionRequest | PlanRequest


def request_url(request_id: int) -> str:
    """The page of a quota request."""
    return f"{settings.PORTAL_BASE_URL}/requests/{request_id}/"


def subscription_request_url(request: SubscriptionRequest) -> str:
    """Subscription requests are listed (and decided) on their cluster's client-metrics page; the row has this id."""
    cluster = quote(request.cluster.name, safe="")
    return f"{settings.PORTAL_BASE_URL}/clusters/{cluster}/client-metrics/#subscription-request-{request.pk}"


def plan_request_url(request: PlanRequest) -> str:
    """A plan request is decided on its plan's page (the changes, their impact and the decision form)."""
    return f"{settings.PORTAL_BASE_URL}/plans/{request.plan_id}/"


def event_of(state: str) -> str:
    return f"request.{state}"


def _line(label: str, value: object) -> str:
    """One line of a mail's details, values aligned after a 9-character label."""
    return f"  {label + ':':<9} {value}"


# ---- quota requests


def _quota_summary(request: QuotaRequest) -> str:
    value = format_quota_value(request.key, request.value)
    scope = " (cluster-wide)" if request.cluster_wide else ""
    who = request.display
    return f"{request.key} = {value}{scope} for {who} on {request.cluster.name}"


def _quota_details(request: QuotaRequest) -> list[str]:
    value = request.value
    lines = [
        _line("cluster", request.cluster.name),
        _line("entity", f"{request.display} ({request.entity})"),
        _line("key", request.key),
        _line("value", f"{format_quota_value(request.key, value)} ({format_exact(request.key, value)})"),
        _line("scope", "cluster-wide (a budget for the sum over the brokers)" if request.cluster_wide
              else "per broker"),
        _line("asked by", request.requested_by.get_username()),
    ]
    if request.expires_at is not None:
        lines.append(_line("boost until", f"{request.expires_at:%Y-%m-%d %H:%M} UTC"))
    return lines


def _quota_fields(request: QuotaRequest) -> dict[str, Any]:
    return {
        "entity": request.entity,
        "display": request.display,
        "user": request.user,
        "client_id": request.client_id,
        "group": request.group_name or None,
        "key": request.key,
        "value": request.value,
        "value_human": format_quota_value(request.key, request.value),
        "budget_scope": request.budget_scope,
        "expires_at": request.expires_at.isoformat() if request.expires_at else None,
    }


# ---- client-metrics subscription requests


def _subscription_summary(request: SubscriptionRequest) -> str:
    what = "delete" if request.operation == SubscriptionRequest.DELETE else "create or replace"
    return f"{what} client-metrics subscription {request.name} on {request.cluster.name}"


def _subscription_details(request: SubscriptionRequest) -> list[str]:
    lines = [
        _line("cluster", request.cluster.name),
        _line("entity", request.path),
        _line("operation", request.get_operation_display().lower()),
    ]
    for name, value in (request.configs or {}).items():
        lines.append(_line(name, value))
    return [*lines, _line("asked by", request.requested_by.get_username())]


def _subscription_fields(request: SubscriptionRequest) -> dict[str, Any]:
    return {
        "entity": request.path,
        "subscription": request.name,
        "operation": request.operation,
        "configs": request.configs,
    }


# ---- grouped plan requests

#: The changes of a plan a mail lists (the plan's page has them all).
PLAN_CHANGES_MAILED = 20


def _plan_counts(request: PlanRequest) -> str:
    summary = request.plan.summary or {}
    return ", ".join(f"{summary.get(action, 0)} {action}" for action in ("add", "change", "remove"))


def _plan_summary(request: PlanRequest) -> str:
    return f"plan #{request.plan_id} on {request.cluster.name} ({_plan_counts(request)})"


def _shown(change: dict[str, Any], side: str) -> str:
    value = change.get(f"{side}_display") or change.get(side)
    return "none" if value is None else str(value)


def _plan_details(request: PlanRequest) -> list[str]:
    changes = request.plan.changes or []
    lines = [
        _line("cluster", request.cluster.name),
        _line("plan", f"#{request.plan_id}: {_plan_counts(request)}" + (", prune" if request.plan.prune else "")),
    ]
    for change in changes[:PLAN_CHANGES_MAILED]:
        where = f"{display_path(change.get('path', ''))} {change.get('key', '')}".strip()
        lines.append(_line(change.get("action", ""), f"{where}: {_shown(change, 'old')} -> {_shown(change, 'new')}"))
    if len(changes) > PLAN_CHANGES_MAILED:
        lines.append(f"  ... and {len(changes) - PLAN_CHANGES_MAILED} more changes")
    return [*lines, _line("asked by", request.requested_by.get_username())]


def _plan_fields(request: PlanRequest) -> dict[str, Any]:
    return {"plan_id": request.plan_id, "summary": request.plan.summary, "prune": request.plan.prune}


@dataclass(frozen=True)
class Kind:
    """What differs between the kinds of requests that are notified: the model, how one is named, linked and
    described. Who is told, when, and how (mails, signed webhooks, the delivery log) is the same for all."""

    name: str  # the webhook body's "kind" and the task's argument
    model: type[QuotaRequest] | type[SubscriptionRequest] | type[PlanRequest]
    title: str  # what a mail's body calls it
    subject_title: str  # and its subject
    related: tuple[str, ...]  # read with it
    url: Callable[[Any], str]
    summary: Callable[[Any], str]  # what it asks for, in a subject
    details: Callable[[Any], list[str]]  # and in a mail's body
    fields: Callable[[Any], dict[str, Any]]  # and in a webhook's body

    @property
    def delivery_field(self) -> str:
        """``WebhookDelivery``'s foreign key to a request of this kind."""
        return REQUEST_FIELDS[self.name]


KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind("quota", QuotaRequest, "Quota request", "Request", ("tenant", "cluster", "requested_by"),
             lambda r: request_url(r.pk), _quota_summary, _quota_details, _quota_fields),
        Kind("subscription", SubscriptionRequest, "Subscription request", "Subscription request",
             ("tenant", "cluster", "requested_by"), subscription_request_url, _subscription_summary,
             _subscription_details, _subscription_fields),
        Kind("plan", PlanRequest, "Plan request", "Plan request", ("tenant", "cluster", "requested_by", "plan"),
             plan_request_url, _plan_summary, _plan_details, _plan_fields),
    )
}


def kind_of(request: AnyRequest) -> Kind:
    """The kind of a request, by its model."""
    for kind in KINDS.values():
        if isinstance(request, kind.model):
            return kind
    raise TypeError(f"{type(request).__name__} is not a kind of request that is notified")


def request_payload(
    request: AnyRequest, state: str, actor: AbstractBaseUser | None, comment: str, at: datetime
) -> dict[str, Any]:
    """The webhook body of one move: what moved (its kind, and what it asks for), to what, by whom, why and when.

    A quota request's body keeps the fields it always had (values as numbers and as read) and gains ``kind``."""
    kind = kind_of(request)
    return {
        "event": event_of(state),
        "kind": kind.name,
        "request_id": request.pk,
        "state": state,
        "tenant": request.tenant.name,
        "cluster": request.cluster.name,
        **kind.fields(request),
        "actor": actor.get_username() if actor is not None else "system",
        "comment": comment,
        "time": at.isoformat(),
        "url": kind.url(request),
    }


def encode(payload: dict[str, Any]) -> str:
    """The body's exact text: compact and key-sorted, so the signed bytes are the stored bytes."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True)


def signature(secret: str, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 of the raw body under the webhook's secret (the X-Quotas-Signature header)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def mail_subject(request: AnyRequest, state: str) -> str:
    """``[portal] <Kind> #<id> <what happened>: <what it asks for>``."""
    kind = kind_of(request)
    happened = HAPPENED.get(state, state)
    return f"[{settings.PORTAL_NAME}] {kind.subject_title} #{request.pk} {happened}: {kind.summary(request)}"


def mail_body(request: AnyRequest, state: str, actor: AbstractBaseUser | None, comment: str) -> str:
    """What happened and by whom, what the request asks for, the comment (reason, decision, why it failed), and the
    link to decide on it or see it."""
    kind = kind_of(request)
    who = actor.get_username() if actor is not None else "the portal"
    lines = [
        f"{kind.title} #{request.pk} of tenant {request.tenant.name} {HAPPENED.get(state, state)}"
        + ("." if state == RequestState.SUBMITTED else f" ({who})."),
        "",
        *kind.details(request),
    ]
    if comment:
        label = {RequestState.SUBMITTED: "reason", RequestState.FAILED: "why"}.get(state, "comment")
        lines.append(_line(label, comment))
    lines += ["", f"{'Decide' if state == RequestState.SUBMITTED else 'See it'} at {kind.url(request)}"]
    return "\n".join(lines) + "\n"


def recipients(request: AnyRequest, state: str) -> list[str]:
    """Whom a move is mailed to: the requester, or the admins other than the requester; only those with an email."""
    if state in TO_REQUESTER:
        who = request.requested_by
        return [who.email] if who.is_active and who.email else []
    if state in TO_ADMINS:
        admins = admin_users().exclude(pk=request.requested_by_id).exclude(email="")
        return sorted(set(admins.values_list("email", flat=True)))
    return []
