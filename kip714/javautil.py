"""The few pieces of Java behaviour the subscription id and its metric list depend on.

- ``java_string_hash``: ``String.hashCode`` (UTF-16 code units, int arithmetic).
- ``java_hash_set_order``: the iteration order of a ``java.util.HashSet`` after the given insertions
  (buckets by ``(h ^ h >>> 16) & (capacity - 1)``, insertion order within a bucket, which a resize keeps).
- ``KafkaUuid``: ``org.apache.kafka.common.Uuid`` (base64url text without padding, its ``hashCode``).
"""

from __future__ import annotations

import base64
import uuid as _uuid
from collections.abc import Iterable
from dataclasses import dataclass


def to_int32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def to_int64(x: int) -> int:
    x &= 0xFFFFFFFFFFFFFFFF
    return x - (1 << 64) if x & (1 << 63) else x


def java_string_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return to_int32(h)


def _spread(h: int) -> int:
    u = h & 0xFFFFFFFF
    return u ^ (u >> 16)


def _table_size_for(cap: int) -> int:
    n = 1
    while n < cap:
        n <<= 1
    return max(n, 1)


def java_hash_set_order(items: Iterable[str], initial_capacity: int | None = None) -> list[str]:
    """Iteration order of a HashSet/HashMap keyed by strings, after inserting ``items`` in order.

    ``initial_capacity`` as passed to the constructor (``new HashSet<>(c)`` passes
    ``max((int) (c.size() / .75f) + 1, 16)``); ``None`` is the default 16. Tree bins
    (8+ collisions in a table of 64+) are not modelled.
    """
    seen: dict[str, int] = {}
    for s in items:
        if s not in seen:
            seen[s] = len(seen)
    cap = _table_size_for(initial_capacity) if initial_capacity else 16
    size = 0
    for _ in seen:
        size += 1
        if size > int(cap * 0.75):
            cap <<= 1
    return sorted(seen, key=lambda s: (_spread(java_string_hash(s)) & (cap - 1), seen[s]))


def hash_set_from_list(items: list[str]) -> list[str]:
    """``new HashSet<>(list)`` iteration order."""
    return java_hash_set_order(items, max(int(len(items) / 0.75) + 1, 16))


def java_set_to_string(items: Iterable[str]) -> str:
    """``AbstractCollection.toString``: ``[a, b]``."""
    return "[" + ", ".join(items) + "]"


@dataclass(frozen=True, order=True)
class KafkaUuid:
    """Kafka's Uuid: two signed longs; text is 22 chars of URL-safe base64 without padding."""

    msb: int
    lsb: int

    @classmethod
    def from_string(cls, text: str) -> KafkaUuid:
        """``Uuid.fromString``; raises ValueError (Java's IllegalArgumentException) for bad text."""
        if not isinstance(text, str) or len(text) > 24:
            raise ValueError(f"Input string with prefix `{str(text)[:24]}` is too long to be decoded as a base64 UUID")
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (ValueError, TypeError) as e:
            raise ValueError(f"Invalid base64 UUID {text!r}") from e
        if len(raw) != 16:
            raise ValueError(f"Unexpected length {len(raw)} of decoded base64 UUID {text!r}, expected 16")
        return cls.from_bytes(raw)

    @classmethod
    def from_bytes(cls, raw: bytes) -> KafkaUuid:
        return cls(to_int64(int.from_bytes(raw[:8], "big")), to_int64(int.from_bytes(raw[8:], "big")))

    @classmethod
    def random(cls) -> KafkaUuid:
        """``Uuid.randomUuid``: a random (v4) UUID that is neither reserved nor starts with '-' in text."""
        while True:
            u = cls.from_bytes(_uuid.uuid4().bytes)
            if not u.is_reserved() and not str(u).startswith("-"):
                return u

    def to_bytes(self) -> bytes:
        return (self.msb & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big") + (self.lsb & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")

    def __str__(self) -> str:
        return base64.urlsafe_b64encode(self.to_bytes()).decode("ascii").rstrip("=")

    def java_hash_code(self) -> int:
        """``Uuid.hashCode``: ``(int) (hilo >> 32) ^ (int) hilo`` with ``hilo = msb ^ lsb``."""
        hilo = (self.msb ^ self.lsb) & 0xFFFFFFFFFFFFFFFF
        return to_int32((hilo >> 32) ^ (hilo & 0xFFFFFFFF))

    def is_reserved(self) -> bool:
        """ZERO_UUID and ONE_UUID (``Uuid.RESERVED``)."""
        return self.msb == 0 and self.lsb in (0, 1)


ZERO_UUID = KafkaUuid(0, 0)
ONE_UUID = KafkaUuid(0, 1)
