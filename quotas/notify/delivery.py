"""Delivering one webhook call: signed, sent without redirects to an allowed destination, and retried with
exponential backoff and jitter (``attempt``, run by ``quotas.tasks.deliver_webhook``)."""

from __future__ import annotations

import logging
import random
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from datetime import timedelta
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from quotas.models import (
    DeliveryState,
    WebhookDelivery,
    WebhookEvent,
)
from quotas.models.sealed import SealedValueError
from quotas.models.webhook_destinations import ForbiddenDestination, check_url
from quotas.models.webhook_destinations import opener as destination_opener
from quotas.notify.messages import signature

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Quotas-Signature"

ERROR_BYTES = 512  # of a refusing receiver's answer kept as the delivery's last error


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
