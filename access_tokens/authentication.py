"""``Authorization: Bearer <token>`` for the API (DRF), beside session and DRF token authentication.

Every refusal is 401 AUTHENTICATION_FAILED with a sentence saying what to do (the API's error shape). A token
scoped to a tenant marks the request's user (``quotas.models.tenants.TOKEN_TENANT_ATTR``), so every role and
ownership check of the portal sees a member of that one tenant and nothing more.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from access_tokens.models import AccessToken, digest_of
from quotas.models.tenants import TOKEN_TENANT_ATTR, sees_everything

KEYWORD = "Bearer"
#: ``last_used`` is written at most this often per token: a busy CI job does not write on every call.
LAST_USED_EVERY = timedelta(seconds=30)


def _fail(message: str) -> exceptions.AuthenticationFailed:
    return exceptions.AuthenticationFailed(message)


class AccessTokenAuthentication(BaseAuthentication):
    """Personal access tokens (``access_tokens.models.AccessToken``), sent as ``Authorization: Bearer <token>``."""

    def authenticate(self, request: Request) -> tuple[Any, AccessToken] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != KEYWORD.lower().encode():
            return None
        if len(parts) != 2:
            raise _fail("Send the token as 'Authorization: Bearer <token>', one token and no spaces in it.")
        try:
            text = parts[1].decode()
        except UnicodeError:
            raise _fail("The bearer token is not text; copy it again from where it was shown.") from None
        token = AccessToken.objects.select_related("user", "tenant").filter(digest=digest_of(text)).first()
        if token is None:
            raise _fail("Unknown access token; create one with POST /api/tokens/ (it is shown once).")
        if token.revoked_at is not None:
            raise _fail(
                f"The access token {token.prefix}… ({token.name!r}) was revoked on "
                f"{token.revoked_at:%Y-%m-%d %H:%M} UTC; create a new one with POST /api/tokens/."
            )
        if token.expired():
            raise _fail(
                f"The access token {token.prefix}… ({token.name!r}) expired on {token.expires_at:%Y-%m-%d %H:%M} "
                "UTC; create a new one with POST /api/tokens/."
            )
        user = token.user
        if not user.is_active:
            raise _fail("The access token's account is disabled.")
        if token.tenant_id is not None:
            if not token.tenant.members.filter(pk=user.pk).exists():
                raise _fail(
                    f"The access token acts in tenant {token.tenant.name!r}, which {user.get_username()!r} is no "
                    "longer a member of; ask an admin to add the account back or create a token for another tenant."
                )
            setattr(user, TOKEN_TENANT_ATTR, token.tenant_id)
        elif not sees_everything(user):
            raise _fail(
                f"The access token acts with all of {user.get_username()!r}'s rights, which only admins and auditors "
                "may hold; create a token scoped to your tenant."
            )
        now = timezone.now()
        if token.last_used is None or now - token.last_used >= LAST_USED_EVERY:
            AccessToken.objects.filter(pk=token.pk).update(last_used=now)
            token.last_used = now
        return user, token

    def authenticate_header(self, request: Request) -> str:
        return f'{KEYWORD} realm="api"'
