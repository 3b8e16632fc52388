"""Secrets the portal must read back, stored encrypted: a column holds ``fernet:<token>``, Python sees the text.

A webhook's signing key is a shared secret: the portal needs it in clear to sign every body (a hash would not do),
so it is sealed at rest instead, with Fernet (AES-128-CBC and HMAC-SHA256, from ``cryptography``): a copy of the
database, a backup or a replica's dump does not give anyone the keys that sign what chat tools trust.

The keys are ``QUOTAS_SECRETS_KEYS`` (settings; comma-separated Fernet keys, e.g. from ``python -c "from
cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"``): the first seals, every one opens, so a
key is rotated by putting the new one first and keeping the old one until every row was saved again
(``manage.py reseal``). Unset, one key is derived from ``SECRET_KEY`` (development; a deployment sets its own, since
changing ``SECRET_KEY`` would otherwise make every sealed value unreadable).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import models

PREFIX = "fernet:"

_cache: dict[tuple[str, ...], MultiFernet] = {}


class SealedValueError(ValueError):
    """A sealed value that the configured keys cannot open (or a column value that was never sealed)."""


def derived_key(secret_key: str) -> str:
    """The development key: a Fernet key derived from Django's ``SECRET_KEY`` (SHA-256 of a labelled copy)."""
    digest = hashlib.sha256(b"quotas.sealed:" + secret_key.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode()


def keys() -> tuple[str, ...]:
    """The keys in use: ``QUOTAS_SECRETS_KEYS``, else the one derived from ``SECRET_KEY``."""
    configured = tuple(getattr(settings, "QUOTAS_SECRETS_KEYS", ()) or ())
    return configured or (derived_key(settings.SECRET_KEY),)


def _fernet() -> MultiFernet:
    current = keys()
    box = _cache.get(current)
    if box is None:
        box = _cache[current] = MultiFernet([Fernet(k.encode()) for k in current])
    return box


def seal(text: str) -> str:
    """``text`` encrypted with the first key, as a column stores it."""
    return PREFIX + _fernet().encrypt(text.encode()).decode()


def unseal(stored: str) -> str:
    """The text of a sealed column value; SealedValueError (never the value itself) when no key opens it."""
    if not stored.startswith(PREFIX):
        raise SealedValueError("A secret in the database is not sealed; run the migrations (manage.py migrate).")
    try:
        return _fernet().decrypt(stored[len(PREFIX):].encode()).decode()
    except InvalidToken:
        raise SealedValueError(
            "A sealed secret cannot be opened with QUOTAS_SECRETS_KEYS: the key that sealed it is not among them "
            "(was QUOTAS_SECRETS_KEYS or SECRET_KEY changed? Put the old key back after the new one)."
        ) from None


class SealedTextField(models.TextField):
    """A text column kept sealed: written with :func:`seal`, read with :func:`unseal`. Not for lookups (each
    sealing of the same text differs)."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> str | None:
        return None if value is None else unseal(value)

    def get_prep_value(self, value: Any) -> str | None:
        value = super().get_prep_value(value)
        return None if value is None else seal(value)
