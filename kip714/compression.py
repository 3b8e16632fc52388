"""PushTelemetry payload compression, with Kafka's compression type ids and stream formats.

====  ======  =====================================================================
id    name    format (what Kafka's clients write)
====  ======  =====================================================================
0     none    the bytes as they are
1     gzip    a gzip stream
2     snappy  snappy-java's framed stream (``\\x82SNAPPY\\x00``, two ints, then
              int-length-prefixed raw blocks); a stream without that header is read
              as one raw snappy block, as snappy-java does
3     lz4     an LZ4 frame
4     zstd    a zstd frame
====  ======  =====================================================================

``decompress(type_id, data, max_bytes)`` raises :class:`InvalidRecord` for data that does not
decompress and :class:`TelemetryTooLarge` when the output would exceed ``max_bytes``.
"""

from __future__ import annotations

import struct
import zlib

from .errors import InvalidRecord, TelemetryTooLarge, UnsupportedCompressionType

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
IDS = {v: k for k, v in NAMES.items()}
# what a broker offers in GetTelemetrySubscriptions, preferred first
SUPPORTED_COMPRESSION_TYPES = (ZSTD, LZ4, GZIP, SNAPPY)

_SNAPPY_MAGIC = b"\x82SNAPPY\x00"
_SNAPPY_BLOCK = 32 * 1024


def is_known_compression_type(type_id: int) -> bool:
    """``CompressionType.forId`` succeeds (0..4; ``none`` included)."""
    return type_id in NAMES


def _check(type_id: int) -> None:
    if not is_known_compression_type(type_id):
        raise UnsupportedCompressionType(f"Unknown compression type id: {type_id}")


def compress(type_id: int, data: bytes) -> bytes:
    _check(type_id)
    if type_id == NONE:
        return bytes(data)
    if type_id == GZIP:
        import gzip

        return gzip.compress(data)
    if type_id == SNAPPY:
        import cramjam

        out = bytearray(_SNAPPY_MAGIC + struct.pack(">ii", 1, 1))
        for i in range(0, len(data), _SNAPPY_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[i : i + _SNAPPY_BLOCK]))
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if type_id == LZ4:
        import lz4.frame

        return lz4.frame.compress(data)
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


def _too_large(max_bytes: int) -> TelemetryTooLarge:
    return TelemetryTooLarge(f"Decompressed telemetry payload is larger than the maximum allowed size [{max_bytes}]")


def decompress(type_id: int, data: bytes, max_bytes: int = 64 * 1024 * 1024) -> bytes:
    _check(type_id)
    try:
        out = _decompress(type_id, bytes(data), max_bytes)
    except (TelemetryTooLarge, UnsupportedCompressionType):
        raise
    except Exception as e:  # noqa: BLE001 - every codec has its own error classes
        raise InvalidRecord(f"Telemetry payload does not decompress as {NAMES[type_id]}: {e}") from e
    if len(out) > max_bytes:
        raise _too_large(max_bytes)
    return out


def _decompress(type_id: int, data: bytes, max_bytes: int) -> bytes:
    if type_id == NONE:
        return data
    if type_id == GZIP:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = d.decompress(data, max_bytes + 1)
        if len(out) > max_bytes:
            raise _too_large(max_bytes)
        if not d.eof:
            raise ValueError("truncated gzip stream")
        return out
    if type_id == SNAPPY:
        import cramjam

        if not data.startswith(_SNAPPY_MAGIC):
            return bytes(cramjam.snappy.decompress_raw(data))
        pos, parts, size = len(_SNAPPY_MAGIC) + 8, [], 0
        if len(data) < pos:
            raise ValueError("truncated snappy header")
        while pos < len(data):
            if pos + 4 > len(data):
                raise ValueError("truncated snappy block length")
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if n < 0 or pos + n > len(data):
                raise ValueError("truncated snappy block")
            block = bytes(cramjam.snappy.decompress_raw(data[pos : pos + n]))
            pos += n
            size += len(block)
            if size > max_bytes:
                raise _too_large(max_bytes)
            parts.append(block)
        return b"".join(parts)
    if type_id == LZ4:
        import lz4.frame

        dec = lz4.frame.LZ4FrameDecompressor()
        out = dec.decompress(data, max_length=max_bytes + 1)
        if len(out) > max_bytes:
            raise _too_large(max_bytes)
        if not dec.eof:
            raise ValueError("truncated lz4 frame")
        return out
    import zstandard

    dobj = zstandard.ZstdDecompressor().decompressobj()
    out = dobj.decompress(data)
    if len(out) > max_bytes:
        raise _too_large(max_bytes)
    if not dobj.eof:
        raise ValueError("truncated zstd frame")
    return out
