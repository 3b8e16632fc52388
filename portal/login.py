"""Sign-in throttling, per account and per address, for the portal's login page and the admin's.

Failed sign-ins are counted in Redis (``QUOTAS_REDIS_URL``, so every replica counts the same) in a window that starts
at the first failure: after ``QUOTAS_LOGIN_MAX_FAILURES`` for one username, or ``QUOTAS_LOGIN_MAX_FAILURES_PER_ADDRESS``
from one address, within ``QUOTAS_LOGIN_WINDOW_S``, sign-ins are refused without checking the password until the
window ends (the page says when; 429 with ``Retry-After``). The address limit is higher, since people share NATs. A
success clears its account's count. When Redis is unreachable the throttle lets sign-ins through (logged): an outage
of Redis must not lock every person out. The address is ``REMOTE_ADDR``: behind a proxy, run uvicorn with
``--proxy-headers`` so that it is the client's.
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import Any

import redis
from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse

log = logging.getLogger(__name__)

KEY_PREFIX = "portal:login-failures"

_clients: dict[str, redis.Redis] = {}


def _redis() -> redis.Redis:
    url = settings.QUOTAS_REDIS_URL
    client = _clients.get(url)
    if client is None:
        client = _clients[url] = redis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=1.0)
    return client


def _counters(request: HttpRequest | None, username: str) -> list[tuple[str, int]]:
    """(Redis key, limit) of the account and of the address; the username is hashed (any length, no PII in keys)."""
    account = hashlib.sha256(username.casefold().encode()).hexdigest()[:32]
    counters = [(f"{KEY_PREFIX}:account:{account}", settings.QUOTAS_LOGIN_MAX_FAILURES)]
    address = request.META.get("REMOTE_ADDR", "") if request is not None else ""
    if address:
        counters.append((f"{KEY_PREFIX}:address:{address}", settings.QUOTAS_LOGIN_MAX_FAILURES_PER_ADDRESS))
    return counters


def seconds_blocked(request: HttpRequest | None, username: str) -> int:
    """How long sign-ins for this username from this address stay refused; 0 when they may try."""
    counters = _counters(request, username)
    try:
        with _redis().pipeline(transaction=False) as pipe:
            for key, _ in counters:
                pipe.get(key)
                pipe.pttl(key)
            answers = pipe.execute()
    except (redis.RedisError, OSError) as e:
        log.warning("Sign-in throttle unavailable, not enforced: %s", e)
        return 0
    wait_ms = 0
    for (_, limit), count, ttl in zip(counters, answers[::2], answers[1::2], strict=True):
        if count is not None and int(count) >= limit and ttl > 0:
            wait_ms = max(wait_ms, ttl)
    return math.ceil(wait_ms / 1000)


def record_failure(request: HttpRequest | None, username: str) -> None:
    """Count one failed sign-in for the account and the address (the window starts at the first one)."""
    try:
        with _redis().pipeline(transaction=True) as pipe:
            for key, _ in _counters(request, username):
                pipe.set(key, 0, ex=int(settings.QUOTAS_LOGIN_WINDOW_S), nx=True)
                pipe.incr(key)
            pipe.execute()
    except (redis.RedisError, OSError) as e:
        log.warning("Sign-in throttle unavailable, failure not counted: %s", e)


def clear_account(username: str) -> None:
    """A successful sign-in: its account starts afresh (the address keeps its count)."""
    try:
        _redis().delete(_counters(None, username)[0][0])
    except (redis.RedisError, OSError) as e:
        log.warning("Sign-in throttle unavailable, count not cleared: %s", e)


def wait_words(seconds: int) -> str:
    minutes = math.ceil(seconds / 60)
    return f"{seconds} seconds" if seconds < 60 else f"{minutes} minute{'s' if minutes != 1 else ''}"


class ThrottledFormMixin:
    """``clean`` of an AuthenticationForm, refused while throttled, counting the failures it sees."""

    request: HttpRequest | None
    cleaned_data: dict[str, Any]
    user_cache: Any
    retry_after: int = 0

    def clean(self) -> dict[str, Any]:
        username = str(self.cleaned_data.get("username") or "")
        wait = seconds_blocked(self.request, username)
        if wait:
            self.retry_after = wait
            raise forms.ValidationError(
                "Too many failed sign-ins for this account or from your address; try again in %(wait)s.",
                code="throttled",
                params={"wait": wait_words(wait)},
            )
        try:
            cleaned: dict[str, Any] = super().clean()  # type: ignore[misc]
        except forms.ValidationError as e:
            if any(error.code == "invalid_login" for error in e.error_list):
                record_failure(self.request, username)
            raise
        if self.user_cache is not None:
            clear_account(username)
        return cleaned


class ThrottledAuthenticationForm(ThrottledFormMixin, AuthenticationForm):
    """The portal's login form."""


class ThrottledAdminAuthenticationForm(ThrottledFormMixin, AdminAuthenticationForm):
    """The admin's login form (``admin.site.login_form``): the same counters."""


class ThrottledLoginView(LoginView):
    """Django's LoginView; a throttled attempt answers 429 with ``Retry-After`` and the page saying when."""

    authentication_form = ThrottledAuthenticationForm

    def form_invalid(self, form: Any) -> HttpResponse:
        response = super().form_invalid(form)
        if getattr(form, "retry_after", 0):
            response.status_code = 429
            response["Retry-After"] = str(form.retry_after)
        return response
