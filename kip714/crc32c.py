"""CRC-32C (Castagnoli), as Kafka's ``Crc32C.compute``: an unsigned 32-bit value."""

from __future__ import annotations

_POLY = 0x82F63B78


def _table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C of ``data`` (continuing from ``crc``), in 0..2**32-1."""
    c = crc ^ 0xFFFFFFFF
    t = _TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
