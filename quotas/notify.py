"""Telling people about their requests: email, and signed webhooks for tenants' chat tools.

Three kinds of requests share one life cycle and so one notification path (``KINDS``): quota requests, KIP-714
client-metrics subscription requests and grouped plan requests (quotas as code). The workflow announces every move
of a request after its commit (``quotas.models.request_changed``, the sender naming the model); this module listens
(connected when imported, by ``QuotasConfig.ready``) and queues the Celery task ``quotas.tasks.notify`` by name, so
a transaction that rolls back sends nothing and the request path never waits on a mail server or a receiver. The
task (``notify``) then:

- queues one delivery per active webhook of the request's tenant that hears the event (``request.<state>``): a
  ``WebhookDelivery`` row holding the JSON body, delivered by ``quotas.tasks.deliver_webhook`` (``attempt``), which
  signs it with the webhook's secret and retries with exponential backoff and jitter up to
  ``QUOTAS_WEBHOOK_MAX_ATTEMPTS``; a request's event reaches a webhook once however often the task runs; the body's
  ``kind`` (``quota``, ``subscription``, ``plan``) says which kind of request moved, and ``url`` links its page;
- mails the requester when the request is approved, rejected, applied or failed, and the admins (``admin_users``;
  never the requester, who may not approve it) when it waits. People without an email address get none.

A receiver checks ``X-Quotas-Signature: sha256=<hex>``, the HMAC-SHA256 of the raw body under the secret
(``signature``), and may drop repeats by ``X-Quotas-Delivery``. The secret is never logged, nor is the URL
(for some chat tools it is a credential itself): logs name the webhook and the URL's host only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import random
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, urlsplit

import kombu.exceptions
import redis
from celery import current_app
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.mail import EmailMessage, get_connection
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from engine.entities import display_path
from engine.units import format_exact, format_quota_value
from quotas.models import (
    DeliveryState,
    PlanRequest,
    QuotaRequest,
    RequestState,
    SubscriptionRequest,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
    admin_users,
    request_changed,
)
from quotas.models.sealed import SealedValueError
from quotas.models.webhook_destinations import ForbiddenDestination, check_url
from quotas.models.webhook_destinations import opener as destination_opener
from quotas.models.webhooks import REQUEST_FIELDS

log = logging.getLogger(__name__)

#: The Celery tasks, sent by name: the tasks sit above this module and call into it.
NOTIFY_TASK = "quotas.tasks.notify"
DELIVER_TASK = "quotas.tasks.deliver_webhook"

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
SIGNATURE_HEADER = "X-Quotas-Signature"
#: The kind a task message without ``kind`` is about: messages queued before there were other kinds, and quota
#: requests' own (left out, so a worker not yet upgraded still takes them).
DEFAULT_KIND = "quota"
ERROR_BYTES = 512  # of a refusing receiver's answer kept as the delivery's last error
QUEUE_ERRORS = (kombu.exceptions.OperationalError, redis.exceptions.RedisError, OSError)


def _on_request_changed(
    sender: object, request_id: int, state: str, actor_id: int | None, comment: str, at: datetime, **_: object
) -> None:
    """A committed move of a request: queue its notifications. A queue that is down loses them (logged), never the
    move itself."""
    kind = next((k for k in KINDS.values() if k.model is sender), None)
    if kind is None:  # a model this module does not know: nobody to tell, and its ids are not quota requests'
        log.warning("No notifications for a move of %r #%s (%s): not a kind of request notified", sender,
                    request_id, state)
        return
    kwargs: dict[str, Any] = {"request_id": request_id, "state": state, "actor_id": actor_id, "comment": comment,
                              "at": at.isoformat()}
    if kind.name != DEFAULT_KIND:
        kwargs["kind"] = kind.name
    try:
        current_app.send_task(NOTIFY_TASK, kwargs=kwargs, ignore_result=True)
    except QUEUE_ERRORS as e:
        log.warning("Could not queue the notifications of %s #%s (%s): %s", kind.title.lower(), request_id, state, e)


request_changed.connect(_on_request_changed, dispatch_uid="quotas.notify.enqueue")


# ------------------------------------------------------------------ what is said


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


# ------------------------------------------------------------------ the notify task


@dataclass
class Notified:
    """What one move caused: mails sent, and the webhook deliveries queued (ids)."""

    request_id: int
    state: str
    mailed: list[str] = field(default_factory=list)
    deliveries: list[int] = field(default_factory=list)
    skipped: str = ""
    kind: str = DEFAULT_KIND

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def notify(
    request_id: int, state: str, actor_id: int | None, comment: str, at: str | datetime, kind: str = DEFAULT_KIND
) -> Notified:
    """Queue the webhook deliveries of one move of a request of ``kind`` (``KINDS``), then mail the people it
    concerns.

    Safe to run again (the task is retried when the mail server is down): a delivery is made once per webhook,
    request and event, so only mails may go out twice.
    """
    known = KINDS.get(kind)
    if known is None:
        return Notified(request_id, state, skipped=f"no kind of request {kind!r}", kind=kind)
    request = known.model.objects.select_related(*known.related).filter(pk=request_id).first()
    if request is None:
        return Notified(request_id, state, skipped="the request no longer exists", kind=kind)
    actor = get_user_model().objects.filter(pk=actor_id).first() if actor_id is not None else None
    when = datetime.fromisoformat(at) if isinstance(at, str) else at
    done = Notified(request_id, state, kind=kind)
    done.deliveries = fan_out(request, event_of(state), request_payload(request, state, actor, comment, when))
    done.mailed = send_mails(request, state, actor, comment)
    return done


def send_mails(request: AnyRequest, state: str, actor: AbstractBaseUser | None, comment: str) -> list[str]:
    """One message per recipient (admins do not see each other's addresses), over one connection; SMTP errors
    propagate so the task retries."""
    to = recipients(request, state)
    if not to:
        return []
    subject, body = mail_subject(request, state), mail_body(request, state, actor, comment)
    with get_connection() as connection:
        messages = [EmailMessage(subject, body, settings.DEFAULT_FROM_EMAIL, [address], connection=connection)
                    for address in to]
        connection.send_messages(messages)
    return to


def fan_out(request: AnyRequest, event: str, payload: dict[str, Any]) -> list[int]:
    """A delivery for each active webhook of the request's tenant that hears ``event``, queued after commit; returns
    the ids of the new ones (an event of a request already queued for a webhook makes none: the database's rule,
    one per kind of request)."""
    named = {kind_of(request).delivery_field: request}
    made: list[int] = []
    for hook in Webhook.objects.filter(tenant_id=request.tenant_id, active=True):
        if not hook.hears(event):
            continue
        body = encode(payload)
        try:
            with transaction.atomic():
                delivery = WebhookDelivery.objects.create(
                    webhook=hook, event=event, body=body, **named,
                    body_sha256=hashlib.sha256(body.encode()).hexdigest(),
                )
        except IntegrityError:  # this event of this request was already queued for it (the task ran again)
            continue
        made.append(delivery.pk)
    if made:
        transaction.on_commit(lambda: _queue_deliveries(made))
    return made


def _queue_deliveries(ids: list[int]) -> None:
    for pk in ids:
        try:
            current_app.send_task(DELIVER_TASK, (pk,), ignore_result=True)
        except QUEUE_ERRORS as e:
            log.warning("Could not queue webhook delivery %s: %s", pk, e)


def ping(hook: Webhook, actor: AbstractBaseUser) -> WebhookDelivery:
    """A test delivery to one webhook (inactive or not subscribed to ping: sent all the same, it was asked for)."""
    payload = {"event": WebhookEvent.PING.value, "tenant": hook.tenant.name, "webhook": hook.name,
               "actor": actor.get_username(), "time": timezone.now().isoformat()}
    body = encode(payload)
    delivery = WebhookDelivery.objects.create(
        webhook=hook, event=WebhookEvent.PING, body=body, body_sha256=hashlib.sha256(body.encode()).hexdigest()
    )
    transaction.on_commit(lambda: _queue_deliveries([delivery.pk]))
    return delivery


# ------------------------------------------------------------------ delivering


@dataclass(frozen=True)
class Attempt:
    """One POST of a delivery: ``outcome`` is delivered, retry (after ``retry_in`` s), failed or skipped."""

    delivery: int
    outcome: str
    attempts: int = 0
    status_code: int | None = None
    error: str = ""
    retry_in: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def retriable(status: int | None) -> bool:
    """No answer (refused, timed out), 408, 429 and 5xx are worth another try; other answers will not change."""
    return status is None or status in (408, 429) or status >= 500


def backoff_s(attempts: int, retry_after: float | None = None) -> float:
    """Exponential with jitter: uniform in [high/2, high], high = min(cap, base * 2**(attempts-1)); at least the
    receiver's Retry-After (within the cap)."""
    base, cap = settings.QUOTAS_WEBHOOK_RETRY_BASE_S, settings.QUOTAS_WEBHOOK_RETRY_MAX_S
    high = min(cap, base * 2 ** min(max(attempts - 1, 0), 30))
    wait = random.uniform(high / 2, high)
    return max(wait, min(retry_after, cap)) if retry_after else wait


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer (a 3xx, not retried), never followed: the signed body goes only where it was set."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        return max((parsedate_to_datetime(value) - timezone.now()).total_seconds(), 0.0)
    except (TypeError, ValueError):
        return None


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int | None, str, float | None]:
    """POST once: (status or None when nothing answered, an error text, Retry-After seconds). Only to addresses
    the webhook destination policy allows: ForbiddenDestination otherwise, nothing sent."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    check_url(url)
    try:
        with destination_opener(url, _NoRedirects).open(request, timeout=timeout) as answer:
            return answer.status, "", None
    except ForbiddenDestination:
        raise
    except urllib.error.HTTPError as e:
        try:
            text = e.read(ERROR_BYTES).decode("utf-8", "replace").strip()
        except OSError:
            text = ""
        finally:
            e.close()
        error = f"HTTP {e.code} {e.reason}" + (f": {text}" if text else "")
        return e.code, error, _retry_after(e.headers.get("Retry-After") if e.headers else None)
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = e.reason if isinstance(e, urllib.error.URLError) else e
        return None, f"no answer: {reason}", None


def attempt(delivery_id: int) -> Attempt:
    """Send a pending delivery once and record how it went (attempts, status, error, when the retry is due)."""
    delivery = WebhookDelivery.objects.select_related("webhook__tenant").get(pk=delivery_id)
    if delivery.state != DeliveryState.PENDING:
        return Attempt(delivery.pk, "skipped", delivery.attempts, delivery.status_code, f"already {delivery.state}")
    hook = delivery.webhook
    now = timezone.now()
    if not hook.active and delivery.event != WebhookEvent.PING:
        WebhookDelivery.objects.filter(pk=delivery.pk).update(
            state=DeliveryState.FAILED, last_error="the webhook was deactivated", next_attempt_at=None
        )
        return Attempt(delivery.pk, "failed", delivery.attempts, None, "the webhook was deactivated")
    body = delivery.body.encode()
    try:
        signed = signature(hook.secret, body)
    except SealedValueError as e:  # the key that sealed the secret is gone: no retry can sign it, say why
        WebhookDelivery.objects.filter(pk=delivery.pk, state=DeliveryState.PENDING).update(
            state=DeliveryState.FAILED, last_error=str(e), next_attempt_at=None
        )
        log.error("Webhook %s delivery %s cannot be signed: %s", hook.pk, delivery.pk, e)
        return Attempt(delivery.pk, "failed", delivery.attempts, None, str(e))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "quota-portal-webhooks/1",
        "X-Quotas-Event": delivery.event,
        "X-Quotas-Delivery": str(delivery.uuid),
        SIGNATURE_HEADER: signed,
    }
    try:
        status, error, retry_after = post(hook.url, body, headers, settings.QUOTAS_WEBHOOK_TIMEOUT_S)
    except ForbiddenDestination as e:  # no retry makes the address allowed: refused now, saying why
        refused = f"{e.code}: {e}"
        WebhookDelivery.objects.filter(pk=delivery.pk, state=DeliveryState.PENDING).update(
            state=DeliveryState.FAILED, last_error=refused, next_attempt_at=None
        )
        log.warning("Webhook %s delivery %s refused: %s", hook.pk, delivery.pk, e)
        return Attempt(delivery.pk, "failed", delivery.attempts, None, refused)
    attempts = delivery.attempts + 1
    done = timezone.now()
    fields: dict[str, Any] = {"attempts": F("attempts") + 1, "status_code": status, "last_error": error,
                              "last_attempt_at": now, "next_attempt_at": None}
    if status is not None and 200 <= status < 300:
        outcome, wait = "delivered", 0.0
        fields.update(state=DeliveryState.DELIVERED, delivered_at=done, last_error="")
    elif retriable(status) and attempts < settings.QUOTAS_WEBHOOK_MAX_ATTEMPTS:
        outcome, wait = "retry", backoff_s(attempts, retry_after)
        fields.update(next_attempt_at=done + timedelta(seconds=wait))
    else:
        outcome, wait = "failed", 0.0
        fields.update(state=DeliveryState.FAILED)
        if retriable(status):
            fields["last_error"] = f"{error} (gave up after {attempts} attempts)"
    WebhookDelivery.objects.filter(pk=delivery.pk, state=DeliveryState.PENDING).update(**fields)
    if outcome != "delivered":
        host = urlsplit(hook.url).hostname
        log.info("Webhook %s (%s) delivery %s attempt %s: %s; %s", hook.pk, host, delivery.pk, attempts,
                 error or status, outcome)
    return Attempt(delivery.pk, outcome, attempts, status, fields["last_error"], wait)
