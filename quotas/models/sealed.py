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
from django.db.models.query_utils import DeferredAttribute

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


class Sealed(str):
    """A column value as the database holds it (``fernet:<token>``): carried around unopened, and written back
    as it is, so loading or saving a row never needs the key; only reading the attribute opens it."""


class SealedAttribute(DeferredAttribute):
    """The model attribute: the text, opened from the stored value when it is read (so a row whose secret no key
    opens can still be listed, changed or deleted; only what signs with it fails, saying why)."""

    def __get__(self, instance: Any, cls: Any = None) -> Any:
        value = super().__get__(instance, cls)
        return unseal(value) if isinstance(value, Sealed) else value

    def __set__(self, instance: Any, value: Any) -> None:
        """A data descriptor, so that reading goes through ``__get__`` even once the value is in the instance."""
        instance.__dict__[self.field.attname] = value


class SealedTextField(models.TextField):
    """A text column kept sealed: written with :func:`seal`, read with :func:`unseal` when the attribute is read.
    Not for lookups (each sealing of the same text differs); ``values()`` gives the stored (sealed) values."""

    descriptor_class = SealedAttribute

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Sealed | None:
        return None if value is None else Sealed(value)

    def pre_save(self, model_instance: Any, add: bool) -> Any:
        return model_instance.__dict__.get(self.attname)  # as held: a loaded row's value is saved back unopened

    def get_prep_value(self, value: Any) -> str | None:
        if value is None or isinstance(value, Sealed):
            return None if value is None else str(value)
        return seal(super().get_prep_value(value))

    def value_to_string(self, obj: Any) -> str:
        """Serialized (``dumpdata``) as stored: sealed."""
        stored = obj.__dict__.get(self.attname)
        return str(stored) if isinstance(stored, Sealed) else seal(stored or "")

    def to_python(self, value: Any) -> Any:
        """A serialized value (``loaddata``) that is sealed stays sealed."""
        if isinstance(value, str) and not isinstance(value, Sealed) and value.startswith(PREFIX):
            return Sealed(value)
        return super().to_python(value)
