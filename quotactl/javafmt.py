"""What Java prints, for output that must match ``kafka-configs.sh`` byte for byte.

``java_double``: ``Double.toString`` (``1024.0``, ``1.048576E7``, ``1.0E-4``). ``hash_order``: the iteration order of
a ``java.util.HashMap`` built the way Kafka's admin client builds its describe answers (``new HashMap<>(n)`` then
one ``put`` per entry), from ``String.hashCode`` and the map's table growth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")
_MASK = 0xFFFFFFFF


def java_double(value: float) -> str:
    """``java.lang.Double.toString``: shortest digits that read back (JDK 19+ and, for these values, JDK 17);
    plain decimal in [1e-3, 1e7), else computerized scientific notation ``d.dddE±n``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    digits, exponent = _shortest(magnitude)  # value = 0.d1d2... * 10**exponent
    if 1e-3 <= magnitude < 1e7:
        if exponent <= 0:
            return f"{sign}0.{'0' * -exponent}{digits}"
        whole, frac = digits[:exponent].ljust(exponent, "0"), digits[exponent:]
        return f"{sign}{whole}.{frac or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent - 1}"


def _shortest(value: float) -> tuple[str, int]:
    """Python's repr digits (shortest round-trip) as (digits without leading zeros, decimal exponent)."""
    text = repr(value)
    if "e" in text:
        mantissa, _, exp = text.partition("e")
        digits = mantissa.replace(".", "").rstrip("0") or "0"
        return digits, int(exp) + 1
    whole, _, frac = text.partition(".")
    frac = frac.rstrip("0") if frac != "0" else ""
    if whole != "0":
        digits = (whole + frac).rstrip("0") or "0"
        return digits, len(whole)
    stripped = frac.lstrip("0")
    return stripped.rstrip("0") or "0", -(len(frac) - len(stripped))


def string_hash(text: str) -> int:
    """``String.hashCode``: s[0]*31^(n-1) + ... over UTF-16 code units, as a 32-bit int (unsigned here)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK
    return h


def entity_hash(entity: dict[str, str | None]) -> int:
    """``ClientQuotaEntity.hashCode``: ``Objects.hash(entries)``, 31 + the map's hash (the sum of
    ``key.hashCode() ^ value.hashCode()``, null: 0)."""
    total = 31
    for key, value in entity.items():
        total = (total + (string_hash(key) ^ (0 if value is None else string_hash(value)))) & _MASK
    return total


def _table_size(n: int) -> int:
    """The table length of ``new HashMap<>(n)`` after n puts (tableSizeFor, then doubling past 0.75 full)."""
    cap = 1
    while cap < n:
        cap <<= 1
    size = 0
    for _ in range(n):
        size += 1
        if size > int(cap * 0.75):
            cap <<= 1
    return cap


def hash_order(items: Sequence[T], hash_of: Callable[[T], int]) -> list[T]:
    """``items`` in the order a ``HashMap`` sized for them iterates them: by bucket, and within a bucket in the
    order they were put (``items``' order; table growth keeps it).

    For several entities in one bucket the put order is the order the broker answered them in, which follows the
    broker's own map of every entity of the cluster; the portal cannot know it, so such ties keep ``items``' order.
    """
    cap = _table_size(len(items))

    def bucket(item: T) -> int:
        h = hash_of(item)
        return (h ^ (h >> 16)) & (cap - 1)

    return sorted(items, key=bucket)  # stable: put order within a bucket


#: The order a broker answers a quota entity's values in (its own map, sized 16: by bucket there); the client's
#: HashMap receives them in this order, which decides the order within its own buckets.
def broker_value_order(keys: Iterable[str]) -> list[str]:
    listed = list(keys)
    return sorted(listed, key=lambda k: (string_hash(k) ^ (string_hash(k) >> 16)) & 15)
