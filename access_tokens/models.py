"""The stored form of a personal access token: its digest, scope and use, never the token itself."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

from quotas.models import Tenant

#: Every token starts with this, so a leaked one is recognisable (secret scanners, logs) and never taken for a
#: DRF token or another service's bearer token.
TOKEN_PREFIX = "qpt_"
#: Characters of the secret part kept in clear (``prefix``), to tell tokens apart in lists.
SHOWN_CHARS = 8


def digest_of(token: str) -> str:
    """SHA-256 of the whole token: the secret has 256 random bits, so a fast hash is as safe as a slow one."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh token: the prefix and 43 URL-safe characters (32 random bytes)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class AccessToken(models.Model):
    """One personal access token. ``tenant`` null: acts with all of its owner's rights (admins and auditors)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="access_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for (a CI job, a script).")
    prefix = models.CharField(max_length=len(TOKEN_PREFIX) + SHOWN_CHARS, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="access_tokens",
        help_text="The tenant the token acts in; null: all the owner's rights (admins, auditors).",
    )
    created = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name}, {self.user})"

    @property
    def scope(self) -> str:
        """``tenant`` (acts as a member of one tenant) or ``all`` (the owner's every right)."""
        return "all" if self.tenant_id is None else "tenant"

    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @classmethod
    def issue(
        cls, user: models.Model, name: str, tenant: Tenant | None, created_by: models.Model, expires_at: object = None
    ) -> tuple[AccessToken, str]:
        """Store a new token and return it with its clear text (the only time the text exists)."""
        token = new_token()
        row = cls.objects.create(
            user=user,
            name=name,
            tenant=tenant,
            created_by=created_by,
            expires_at=expires_at,
            prefix=token[: len(TOKEN_PREFIX) + SHOWN_CHARS],
            digest=digest_of(token),
        )
        return row, token
