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
import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

import kombu.exceptions
import redis
from celery import current_app
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.mail import EmailMessage, get_connection
from django.db import IntegrityError, transaction
from django.utils import timezone

from quotas.models import (
    Webhook,
    WebhookDelivery,
    WebhookEvent,
    request_changed,
)
from quotas.notify.delivery import (
    SIGNATURE_HEADER,
    Attempt,
    attempt,
    backoff_s,
    post,
    retriable,
)
from quotas.notify.messages import (
    DEFAULT_KIND,
    KINDS,
    AnyRequest,
    encode,
    event_of,
    kind_of,
    mail_body,
    mail_subject,
    recipients,
    request_payload,
    signature,
)

__all__ = [
    "Attempt",
    "DEFAULT_KIND",
    "KINDS",
    "Notified",
    "SIGNATURE_HEADER",
    "attempt",
    "backoff_s",
    "fan_out",
    "kind_of",
    "mail_body",
    "mail_subject",
    "notify",
    "ping",
    "post",
    "request_payload",
    "retriable",
    "send_mails",
    "signature",
]

log = logging.getLogger(__name__)

#: The Celery tasks, sent by name: the tasks sit above this module and call into it.
NOTIFY_TASK = "quotas.tasks.notify"
DELIVER_TASK = "quotas.tasks.deliver_webhook"
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
