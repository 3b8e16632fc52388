"""The Redis engine: decisions executed by one Lua script call per batch.

The script (``lua/decide.lua``) holds the same math as the reference model in
``stats.py``; the conformance traces keep the two equal bit for bit.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from pathlib import Path

import redis
from redis.commands.core import Script
from redis.crc import key_slot

from .decisions import (
    FULL_ANSWER,
    HAS_AUX,
    HAS_BOUND,
    SAMPLED_KINDS,
    SENSOR_EXPIRY_MS,
    SERVER_TIME,
    Decision,
    Kind,
    Op,
    Outcome,
    check_sampling,
)
from .errors import EngineUnavailable, QuotaEngineError
from .stats import MetricConfig, Quota, Rate, Sample, SampleCount, SimpleRate, TokenBucket, WindowedCount, WindowedSum
from .throttle_stats import ThrottleStats

_LUA = Path(__file__).parent / "lua"


def lua_script(name: str) -> str:
    """A script of ``lua/``, with the shared sampled-Rate library (``sampled.lua``) in front."""
    return (_LUA / "sampled.lua").read_text() + "\n" + (_LUA / name).read_text()


DECIDE_LUA = lua_script("decide.lua")
SWEEP_LUA = (_LUA / "sweep.lua").read_text()

_SEGMENT = struct.Struct("<BBHidH")
_CLOCK = struct.Struct("<d")
_SAMPLED_HEADER = struct.Struct("<qBBiiii")
_TOKEN_BUCKET = struct.Struct("<dqdq")
_THROTTLE = struct.Struct("<qddddddd")
_SLOT_CACHE = 1 << 18  # sensor keys whose hash slot is remembered (crc16 in Python costs ~µs a key)
MAX_CALL = 1000  # decisions per script call: keeps Lua's unpack() (stack limit ~8000) far from its limit
_BIG_ENDIAN = sys.byteorder != "little"  # the wire is little endian; arrays are native

#: The exceptions that mean "Redis did not answer": mapped to EngineUnavailable, never a hang.
UNAVAILABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)

#: Redis answers these when it cannot serve writes right now (out of memory, a replica after a
#: failover, a failed save, loading, a cluster without its slots): the engine is unavailable, so
#: the managers' fail policy applies, as when Redis does not answer at all. redis-py turns some
#: prefixes into classes; the others keep their prefix in the message.
_SERVER_STATE_CLASSES = (
    redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError, redis.exceptions.BusyLoadingError,
    redis.exceptions.TryAgainError, redis.exceptions.MasterDownError, redis.exceptions.ClusterDownError,
)
_SERVER_STATE_PREFIXES = ("OOM", "READONLY", "MISCONF", "LOADING", "BUSY", "CLUSTERDOWN", "TRYAGAIN", "MASTERDOWN")


def redis_error(e: redis.exceptions.ResponseError, what: str) -> QuotaEngineError:
    """A typed error for an error reply: EngineUnavailable for Redis's own state, else a script failure."""
    text = str(e)
    if isinstance(e, _SERVER_STATE_CLASSES) or text.split(" ", 1)[0].upper().lstrip("-") in _SERVER_STATE_PREFIXES:
        return EngineUnavailable(f"Redis cannot serve quota decisions now: {text}")
    return QuotaEngineError(f"{what}: {text}")


CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://host:port[,host:port...]``)."""
    return url.startswith(CLUSTER_SCHEMES)


def connect(url: str, timeout_s: float = 0.5) -> redis.Redis:
    """A client whose every call gives up after ``timeout_s``: a decision never hangs on a dead Redis.

    ``redis+cluster://[user:password@]host:port[,host:port...]`` (``rediss+cluster://`` for TLS) gives a
    :class:`redis.cluster.RedisCluster` that finds the slots from any of the nodes named; the engine then
    splits each batch by hash slot (a script call may touch one slot only).
    """
    if is_cluster_url(url):
        return _connect_cluster(url, timeout_s)
    return redis.Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry_on_timeout=False
    )


def _connect_cluster(url: str, timeout_s: float) -> redis.Redis:
    from urllib.parse import unquote, urlsplit

    from redis.backoff import NoBackoff
    from redis.cluster import ClusterNode, RedisCluster
    from redis.retry import Retry

    scheme, _, rest = url.partition("://")
    auth, _, hosts = rest.rpartition("@")
    hosts = hosts.split("/", 1)[0].split("?", 1)[0]
    nodes = []
    for part in hosts.split(","):
        where = urlsplit("//" + part.strip())
        if not where.hostname:
            raise ValueError(f"{url!r}: each node is host:port, separated by commas")
        nodes.append(ClusterNode(where.hostname, where.port or 6379))
    user, _, password = auth.partition(":") if auth else ("", "", "")
    return RedisCluster(
        startup_nodes=nodes, username=unquote(user) or None, password=unquote(password) or None,
        ssl=scheme.startswith("rediss"), socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 1),
    )


def is_cluster(client: object) -> bool:
    """Whether ``client`` talks to a Redis Cluster (its script calls must stay within one slot)."""
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)


def _le(a: array) -> bytes:
    if _BIG_ENDIAN:
        a.byteswap()
    return a.tobytes()


def _from_le(code: str, raw: bytes) -> array:
    a = array(code)
    a.frombytes(raw)
    if _BIG_ENDIAN:
        a.byteswap()
    return a


def pack_segment(
    op: Op, kind: Kind, flags: int, samples: int, window_ms: int, aux: float, key_indexes: Sequence[int],
    ts: Sequence[float], values: Sequence[float], bounds: Sequence[float],
) -> bytes:
    """One segment: a header, then the decisions as columns (key indexes, clocks, values, bounds)."""
    return b"".join((
        _SEGMENT.pack(op * 16 + kind, flags, samples, window_ms, aux, len(key_indexes)),
        _le(array("H", key_indexes)), _le(array("d", ts)), _le(array("d", values)), _le(array("d", bounds)),
    ))


def pack_batch(decisions: Sequence[Decision], full: bool = True) -> tuple[list[str], bytes, list[int]]:
    """KEYS (each sensor once), the packed segments, and the size of each segment."""
    index: dict[str, int] = {}
    parts = []
    sizes = []
    i = 0
    extra = FULL_ANSWER if full else 0
    while i < len(decisions):
        d = decisions[i]
        head = (d.op, d.kind, d.packed_flags() | extra, d.samples, d.window_ms, d.aux)
        j = i
        kis, ts, vs, bs = [], [], [], []
        while j < len(decisions):
            e = decisions[j]
            if (e.op, e.kind, e.packed_flags() | extra, e.samples, e.window_ms, e.aux) != head:
                break
            ki = index.get(e.key)
            if ki is None:
                ki = index[e.key] = len(index) + 1
            kis.append(ki)
            ts.append(float(e.t))
            vs.append(e.value)
            bs.append(0.0 if e.bound is None else e.bound)
            j += 1
        parts.append(pack_segment(d.op, d.kind, head[2], d.samples, d.window_ms, d.aux or 0.0, kis, ts, vs, bs))
        sizes.append(j - i)
        i = j
    return list(index), b"".join(parts), sizes


def unpack_columns(
    raw: bytes, sizes: Sequence[int], full: bool
) -> tuple[bytes, list[int], list[float], list[float], list[float], bytes]:
    """The script's answer as columns: bits, window sizes (full only), values, sums (full only), throttles."""
    bits, windows, values, sums, throttles = bytearray(), [], [], [], []
    pos = 0
    for n in sizes:
        bits += raw[pos : pos + n]
        pos += n
        if full:
            windows += _from_le("i", raw[pos : pos + 4 * n])
            pos += 4 * n
        values += _from_le("d", raw[pos : pos + 8 * n])
        pos += 8 * n
        if full:
            sums += _from_le("d", raw[pos : pos + 8 * n])
            pos += 8 * n
        throttles += _from_le("d", raw[pos : pos + 8 * n])
        pos += 8 * n
    return bytes(bits), windows, values, sums, throttles, raw[pos:]


def unpack_outcomes(raw: bytes, decisions: Sequence[Decision], sizes: Sequence[int], full: bool) -> list[Outcome]:
    """Decode the script's reply; a trailing double is the engine clock used by SERVER_TIME decisions."""
    bits, windows, values, sums, throttles, rest = unpack_columns(raw, sizes, full)
    server_now = int(_CLOCK.unpack(rest)[0]) if rest else None
    outcomes = []
    for i, d in enumerate(decisions):
        b = bits[i]
        violated = bool(b & 1)
        o = Outcome(
            violated=violated,
            recorded=bool(b & 2),
            value=values[i],
            throttle_raw=throttles[i] if violated else None,
            violated_metric="upper" if b & 4 else ("lower" if b & 8 else None),
            now_ms=server_now if d.flags & SERVER_TIME else d.t,
        )
        if d.op == Op.RECORD_NOCHECK:
            o.value = None
        elif full and d.kind in SAMPLED_KINDS:
            o.window_ms, o.sum = windows[i], sums[i]
        outcomes.append(o)
    return outcomes


class RedisBackend:
    """Executes decisions in Redis. Connection failures raise :class:`EngineUnavailable`."""

    def __init__(self, client: redis.Redis, expiry_ms: int = SENSOR_EXPIRY_MS) -> None:
        self.client = client
        self.expiry_ms = expiry_ms
        self.script = client.register_script(DECIDE_LUA)
        self._sweep = client.register_script(SWEEP_LUA)
        self.cluster = is_cluster(client)
        self._slots: dict[str | bytes, int] = {}

    # ---- Redis Cluster: a script call may touch one hash slot, so batches are split by slot ----

    def _slot(self, key: str | bytes) -> int:
        slot = self._slots.get(key)
        if slot is None:
            if len(self._slots) >= _SLOT_CACHE:
                self._slots.clear()
            slot = self._slots[key] = key_slot(key.encode() if isinstance(key, str) else key)
        return slot

    def by_slot(self, keys: Sequence[str | bytes], slots: Sequence[int] | None = None) -> list[list[int]]:
        """The positions of ``keys`` grouped by hash slot, each group in its original order (one group when
        the client is not a cluster's). A sensor's keys share one slot, so its decisions stay in sequence.
        ``slots``, when the caller has them cached (the managers do), spares computing them here."""
        if not self.cluster:
            return [list(range(len(keys)))]
        if slots is None:
            slots = [self._slot(k) for k in keys]
        groups: dict[int, list[int]] = {}
        for i, slot in enumerate(slots):
            group = groups.get(slot)
            if group is None:
                groups[slot] = [i]
            else:
                group.append(i)
        return list(groups.values())

    def _pipelined(
        self, script: Script, calls: Sequence[tuple[list, list]], slots: Sequence[int] | None = None
    ) -> list:
        """Script calls, each within one slot, as one pipeline per node: a round trip per node, not per call, and
        the round trips to the nodes overlap (every node's calls are written before any answer is read).

        A call that a node did not run (NOSCRIPT after a restart, MOVED or ASK while slots move) is run again on
        its own through the cluster client, which loads the script or follows the redirection; the calls that
        ran are never repeated.
        """
        if len(calls) == 1:
            return [script(keys=calls[0][0], args=calls[0][1])]
        nodes = self.client.nodes_manager
        by_node: dict[str, tuple[redis.ConnectionPool, list[int]]] = {}
        for i, (keys, _) in enumerate(calls):
            node = nodes.get_node_from_slot(self._slot(keys[0]) if slots is None else slots[i])
            by_node.setdefault(node.name, (node.redis_connection.connection_pool, []))[1].append(i)
        results: list = [None] * len(calls)
        sent: list[tuple[redis.ConnectionPool, redis.Connection, list[int]]] = []
        try:
            for pool, idx in by_node.values():
                conn = pool.get_connection()
                sent.append((pool, conn, idx))
                conn.send_packed_command(conn.pack_commands(
                    [("EVALSHA", script.sha, len(calls[i][0]), *calls[i][0], *calls[i][1]) for i in idx]
                ))
            for _, conn, idx in sent:
                for i in idx:
                    try:
                        results[i] = conn.read_response()
                    except redis.exceptions.ResponseError as e:  # an error reply: the connection stays in step
                        results[i] = e
        except BaseException:
            for _, conn, _ in sent:  # answers may be left unread: such a connection must not be reused
                conn.disconnect()
            raise
        finally:
            for pool, conn, _ in sent:
                pool.release(conn)
        for i, r in enumerate(results):
            if isinstance(r, (redis.exceptions.NoScriptError, redis.exceptions.AskError)):
                results[i] = script(keys=calls[i][0], args=calls[i][1])
            elif isinstance(r, Exception):
                raise r
        return results

    def sweep(self, pattern: str, now_ms: int, chunk: int = 500) -> int:
        """Delete the sensors matching ``pattern`` that went a whole expiry without a record.

        Decisions already ignore such sensors; this gives their memory back. Run it
        periodically (Kafka's broker does every 30 s); it scans, so it never blocks Redis long.
        """
        deleted = 0
        batch: list[bytes] = []
        try:
            for key in self.client.scan_iter(match=pattern, count=chunk):
                if key.endswith(b":t"):
                    continue
                batch.append(key)
                if len(batch) >= chunk:
                    deleted += self._sweep_keys(batch, now_ms)
                    batch = []
            if batch:
                deleted += self._sweep_keys(batch, now_ms)
        except UNAVAILABLE as e:
            raise EngineUnavailable(f"Redis is unreachable for the sensor sweep: {e}") from e
        except redis.exceptions.ResponseError as e:
            raise redis_error(e, "The sensor sweep failed") from e
        return deleted

    def _sweep_keys(self, keys: list[bytes], now_ms: int) -> int:
        calls = [([keys[i] for i in group], [now_ms, self.expiry_ms]) for group in self.by_slot(keys)]
        return sum(int(n) for n in self._pipelined(self._sweep, calls))

    def execute(self, decisions: Sequence[Decision], full: bool = True) -> list[Outcome]:
        """Any mix of decisions, in order: one script call per 1,000. ``full=False`` skips window and sum."""
        if self.cluster:
            return self._execute_by_slot(decisions, full)
        outcomes: list[Outcome] = []
        for i in range(0, len(decisions), MAX_CALL):
            chunk = decisions[i : i + MAX_CALL]
            for d in chunk:
                check_sampling(d.samples, d.window_ms)
            keys, packed, sizes = pack_batch(chunk, full)
            outcomes += unpack_outcomes(self._call(keys, packed), chunk, sizes, full)
        return outcomes

    def _execute_by_slot(self, decisions: Sequence[Decision], full: bool) -> list[Outcome]:
        """On a cluster: one script call per slot (per 1,000 decisions of it), all in one pipeline."""
        for d in decisions:
            check_sampling(d.samples, d.window_ms)
        calls, parts = [], []
        for group in self.by_slot([d.key for d in decisions]):
            for i in range(0, len(group), MAX_CALL):
                idx = group[i : i + MAX_CALL]
                chunk = [decisions[j] for j in idx]
                keys, packed, sizes = pack_batch(chunk, full)
                calls.append((keys, [packed, self.expiry_ms]))
                parts.append((idx, chunk, sizes))
        outcomes: list[Outcome | None] = [None] * len(decisions)
        for raw, (idx, chunk, sizes) in zip(self._run(calls), parts, strict=True):
            for j, o in zip(idx, unpack_outcomes(raw, chunk, sizes, full), strict=True):
                outcomes[j] = o
        return outcomes  # type: ignore[return-value]

    def record_columns(
        self, op: Op, kind: Kind, flags: int, samples: int, window_ms: int, aux: float | None,
        keys: Sequence[str | bytes], ts: Sequence[float], values: Sequence[float], bounds: Sequence[float],
        slots: Sequence[int] | None = None,
    ) -> tuple[bytes, Sequence[float], Sequence[float]]:
        """The hot path: one op on many sensors, as columns; answers the bits, values and raw throttles.

        One script call per 1,000 decisions, in order (a sensor's decisions stay in sequence); on a cluster one
        per slot, grouped by ``slots`` (each key's hash slot) when the caller has them cached.
        """
        check_sampling(samples, window_ms)
        if aux is not None:
            flags |= HAS_AUX
        flags |= HAS_BOUND
        if self.cluster:
            return self._record_by_slot(op, kind, flags, samples, window_ms, aux, keys, ts, values, bounds, slots)
        if len(keys) <= MAX_CALL:
            return self._record_call(op, kind, flags, samples, window_ms, aux, keys, ts, values, bounds)
        bits, vals, throttles = bytearray(), [], []
        for i in range(0, len(keys), MAX_CALL):
            s = slice(i, i + MAX_CALL)
            b, v, th = self._record_call(op, kind, flags, samples, window_ms, aux, keys[s], ts[s], values[s], bounds[s])
            bits += b
            vals += v
            throttles += th
        return bytes(bits), vals, throttles

    def _record_call(
        self, op: Op, kind: Kind, flags: int, samples: int, window_ms: int, aux: float | None,
        keys: Sequence[str | bytes], ts: Sequence[float], values: Sequence[float], bounds: Sequence[float],
    ) -> tuple[bytes, Sequence[float], Sequence[float]]:
        sensors, segment = _record_segment(op, kind, flags, samples, window_ms, aux, keys, ts, values, bounds)
        bits, _, vals, _, throttles, _ = unpack_columns(self._call(sensors, segment), [len(keys)], False)
        return bits, vals, throttles

    def _record_by_slot(
        self, op: Op, kind: Kind, flags: int, samples: int, window_ms: int, aux: float | None,
        keys: Sequence[str | bytes], ts: Sequence[float], values: Sequence[float], bounds: Sequence[float],
        slots: Sequence[int] | None,
    ) -> tuple[bytes, Sequence[float], Sequence[float]]:
        """``record_columns`` on a cluster: a segment per slot, a pipeline per node, answers put back in order."""
        calls, parts, call_slots = [], [], []
        for group in self.by_slot(keys, slots):
            for i in range(0, len(group), MAX_CALL):
                idx = group[i : i + MAX_CALL]
                sensors, segment = _record_segment(
                    op, kind, flags, samples, window_ms, aux, [keys[j] for j in idx], [ts[j] for j in idx],
                    [values[j] for j in idx], [bounds[j] for j in idx],
                )
                calls.append((sensors, [segment, self.expiry_ms]))
                parts.append(idx)
                call_slots.append(slots[idx[0]] if slots is not None else self._slot(sensors[0]))
        n = len(keys)
        bits, vals, throttles = bytearray(n), [0.0] * n, [0.0] * n
        for raw, idx in zip(self._run(calls, call_slots), parts, strict=True):
            b, _, v, _, th, _ = unpack_columns(raw, [len(idx)], False)
            for pos, j in enumerate(idx):
                bits[j], vals[j], throttles[j] = b[pos], v[pos], th[pos]
        return bytes(bits), vals, throttles

    def _call(self, keys: list, packed: bytes) -> bytes:
        return self._run([(keys, [packed, self.expiry_ms])])[0]

    def _run(self, calls: Sequence[tuple[list, list]], slots: Sequence[int] | None = None) -> list[bytes]:
        try:
            return self._pipelined(self.script, calls, slots)
        except UNAVAILABLE as e:
            raise EngineUnavailable(f"Redis did not answer a quota decision (its outcome is unknown): {e}") from e
        except redis.exceptions.ResponseError as e:
            raise redis_error(e, "The quota script failed") from e

    def execute_one(self, d: Decision) -> Outcome:
        return self.execute([d])[0]

    # ---- read-only views for live charts (no Lua: decode and measure a copy) ----

    def peek(self, key: str, kind: Kind, samples: int, window_ms: int, t: int) -> dict[str, float | None]:
        """What a sensor holds at ``t``, measured on a copy so that looking never changes a decision."""
        try:
            raw, thr = self.client.get(key), self.client.get(key + ":t")
        except UNAVAILABLE as e:
            raise EngineUnavailable(f"Redis is unreachable: {e}") from e
        view: dict[str, float | None] = {"value": None}
        if raw:
            view.update(decode_state(kind, raw, samples, window_ms, t))
        stats = decode_throttle(thr) if thr else ThrottleStats()
        view.update(
            throttle_avg_ms=(stats.total / stats.count) if stats.count else 0.0,
            throttle_max_ms=stats.max,
            throttle_prev_avg_ms=(stats.prev_total / stats.prev_count) if stats.prev_count else 0.0,
            throttle_prev_max_ms=stats.prev_max,
            throttled_ms_total=stats.throttled_ms,
        )
        return view


def _record_segment(
    op: Op, kind: Kind, flags: int, samples: int, window_ms: int, aux: float | None,
    keys: Sequence[str | bytes], ts: Sequence[float], values: Sequence[float], bounds: Sequence[float],
) -> tuple[list[str | bytes], bytes]:
    """KEYS (each sensor once, in first-seen order) and the one segment of a ``record_columns`` call."""
    index: dict[str | bytes, int] = dict.fromkeys(keys)
    for i, k in enumerate(index, 1):
        index[k] = i
    kis = [index[k] for k in keys]
    return list(index), pack_segment(op, kind, flags, samples, window_ms, aux or 0.0, kis, ts, values, bounds)


def decode_state(kind: Kind, raw: bytes, samples: int, window_ms: int, t: int) -> dict[str, float | None]:
    """Rebuild the model's stat from the stored bytes and measure it at ``t``."""
    if kind == Kind.TOKEN_BUCKET:
        tokens, last, bound, _ttl = _TOKEN_BUCKET.unpack(raw)
        tb = TokenBucket()
        tb.tokens, tb.last_update_ms = tokens, last
        value = tb.measure(MetricConfig(samples, window_ms, Quota(bound)), t)
        return {"value": value, "tokens": value, "bound": bound}
    base, cur, n, _min_last, _min_start, cur_last, _last_record = _SAMPLED_HEADER.unpack_from(raw)
    n &= 0x7F  # the high bit marks a sensor that never expires
    stat = {Kind.RATE_COUNT: WindowedCount, Kind.SAMPLE_COUNT: SampleCount}.get(kind, WindowedSum)()
    stat.current = cur
    values = struct.unpack_from(f"<{n}d", raw, _SAMPLED_HEADER.size)
    times = struct.unpack_from(f"<{2 * n}i", raw, _SAMPLED_HEADER.size + 8 * n)
    for i in range(n):
        s = Sample(0.0, base + times[2 * i])
        s.last_event_ms, s.value = base + (cur_last if i == cur else times[2 * i + 1]), values[i]
        stat.samples.append(s)
    rate = SimpleRate(stat) if kind == Kind.SIMPLE_RATE else Rate(stat)
    config = MetricConfig(samples, window_ms)
    value = rate.measure(config, t)
    return {"value": value, "rate": value, "window_ms": rate.window_size(config, t)}


def decode_throttle(raw: bytes) -> ThrottleStats:
    ws, c, tot, mx, pc, pt, pm, total = _THROTTLE.unpack(raw)
    return ThrottleStats(ws, c, tot, mx, pc, pt, pm, total)
