"""Live samples of what the engine's sensors hold, once a second, into bounded Redis streams.

A broker (here: whoever records usage into a namespace, e.g. the load generator) owns a ``Sampler``.
It is told which clients were active (``touch``) and, once a second, measures their sensors on
copies (looking never changes a decision) and publishes one sample per quota type and sensor:

``{"t": ms, "c": cluster, "b": broker, "q": quota type, "e": sensor tags, "rate", "bound", "util",
"thr_avg", "thr_max", "thr_frac", "tokens"}``

- ``e`` is Kafka's sensor identity ``"<sanitized user>:<client-id>"`` (the tags of the quota level that
  applies; ``"alice:"`` is user alice's own quota). Connection samples use ``q`` ``"connection"`` and
  ``e`` ``"ip:<address>"`` or ``"listener:<name>"`` with ``accept_rate`` and ``count``.
- ``bound`` is null when no quota applies; ``util`` how much of the quota is used (1 = at the bound, above it
  Kafka throttles): rate / bound, and for ``controller_mutation``, a token bucket, the share of its burst spent
  (``bucket_util``); ``tokens`` only for ``controller_mutation`` (negative = throttled);
  ``thr_avg``/``thr_max`` are the throttle times (ms) of the current throttle window (a bucket below zero: the
  throttle a mutation gets now at least); ``thr_frac`` the fraction of the last tick the sensor's clients spent
  throttled: each throttle time given counts for the time it lasts, not all at the tick it was given.

Keys (all of a cluster share one hash tag, so one Redis Cluster slot):

- ``mon:{<cluster>}:all``: every tick of every broker, one entry ``{"d": JSON list of samples}``
  (MAXLEN ~ ``FIREHOSE_LEN`` ticks), what the relay tails;
- ``mon:{<cluster>}:e:<q>:<e>``: one entity's samples, one entry ``{"d": JSON sample}``, kept for
  ``retention_s`` (5 minutes by default; MINID ~ Redis's clock minus the span, read from the id of the sampler's
  previous firehose entry, so memory stays flat whatever the number of brokers) and expiring with its client: what
  a reconnecting chart gets back;
- ``mon:{<cluster>}:m:<q>:<e>``: one entity's minute rollups (``rate_avg``, ``rate_max``, ``thr_avg``,
  ``thr_max``, ``thr_frac``, ``tokens_min``, ``bound``, and a group's ``members`` averaged over the minute), the
  last ``MINUTES_KEPT`` minutes: the 1-hour view;
- ``mon:{<cluster>}:latest``: hash ``<b>|<q>|<e>`` -> the newest sample: the overview's "now" (a sensor no
  longer sampled is removed from it);
- ``mon:{<cluster>}:index``: sorted set (scores 0) of ``<e>|<b>|<q>``, one member per field of the latest hash,
  kept alongside it: a range by the start of the tags (``ZRANGEBYLEX``) finds the fields of the entities a tenant
  may own without reading the whole hash (``index_member``, ``index_field``).

Streams are filtered by each sample's own ``t`` (the broker's clock), never by stream ids (Redis's clock).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

import redis

from .entities import QuotaType
from .javamath import LONG_MAX_AS_DOUBLE
from .managers import ClientQuotaManager
from .monitor_summary import WHERE, WHERE_LUA, BrokerSummary, summary_key, where_changes, where_key
from .redis_backend import decode_state, decode_throttle, is_cluster

FIREHOSE_LEN = 1_000  # broker ticks (each a whole tick's samples): minutes of ticks, all the relay ever needs
MINUTES_KEPT = 120
#: a minute's member row of the members a group's sample summed together (``{"others": k, ...}``)
OTHERS_KEY = "\0others"
MAX_BROKERS = 8  # per-entity streams keep retention_s samples of up to this many brokers
ACTIVE_FOR_MS = 30_000  # an entity keeps being sampled this long after its last usage (its rate decays on the chart)
CONNECTION = "connection"
_DEFAULT = json.JSONEncoder().default  # json.dumps's: a value JSON has no form for raises TypeError
ENTITY_CHUNK = 100  # samples per ENTITY_LUA call: under a ms of Redis each, so other clients wait no longer

# The XADDs of a chunk of samples to their entities' streams: KEYS the streams; ARGV[1], ARGV[2] XADD's trim
# (MINID or MAXLEN, approximate, and its threshold), ARGV[3] a stream's TTL (ms), ARGV[4] per key "1" to set its
# TTL (once a minute per sensor) or "0"; ARGV[4 + i] the JSON of KEYS[i]'s sample. What a pipelined XADD (and
# PEXPIRE) each would write.
ENTITY_LUA = """
local how, at, ttl, fresh = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
for i, key in ipairs(KEYS) do
  redis.call('XADD', key, how, '~', at, '*', 'd', ARGV[i + 4])
  if string.byte(fresh, i) == 49 then redis.call('PEXPIRE', key, ttl) end
end
return #KEYS
"""


def firehose_key(cluster: str) -> str:
    return f"mon:{{{cluster}}}:all"


def entity_key(cluster: str, quota_type: str, tags: str) -> str:
    return f"mon:{{{cluster}}}:e:{quota_type}:{tags}"


def minutes_key(cluster: str, quota_type: str, tags: str) -> str:
    return f"mon:{{{cluster}}}:m:{quota_type}:{tags}"


def latest_key(cluster: str) -> str:
    return f"mon:{{{cluster}}}:latest"


def index_key(cluster: str) -> str:
    return f"mon:{{{cluster}}}:index"


def index_member(latest_field: str) -> str:
    """The index's member of a latest-hash field ``<b>|<q>|<e>``: ``<e>|<b>|<q>``, ordered by the tags first."""
    b, q, e = latest_field.split("|", 2)
    return f"{e}|{b}|{q}"


def index_field(member: str) -> tuple[str, str, str]:
    """(tags, quota type, latest-hash field) of an index member (tags may hold ``|``; broker and type do not)."""
    e, b, q = member.rsplit("|", 2)
    return e, q, f"{b}|{q}|{e}"


def bucket_burst(bound: float, samples: int, window_ms: int) -> float:
    """Kafka's ``TokenBucket`` burst: the quota times the whole quota window (``samples`` x ``window_ms``)."""
    return bound * samples * window_ms / 1000.0


def bucket_util(tokens: float | None, bound: float | None, samples: int, window_ms: int) -> float | None:
    """A token bucket's utilization: the share of its burst spent, 1 when empty (above 1: below zero, throttled).

    A bucket throttles on its tokens, not on a rate, so this is what "at the bound" means for it: the same scale
    as rate / bound of the other quota types (100 % = the next request is throttled).
    """
    if tokens is None or not bound or bound <= 0:
        return None
    burst = bucket_burst(bound, samples, window_ms)
    return (burst - tokens) / burst if burst > 0 else None


def bucket_throttle_ms(tokens: float | None, bound: float | None) -> float:
    """The throttle a mutation gets now: the time the bucket needs to climb back to zero (``-tokens / quota``)."""
    if tokens is None or tokens >= 0 or not bound or bound <= 0:
        return 0.0
    return -tokens / bound * 1000.0


def encode_each(samples: list[Mapping[str, Any]]) -> list[str]:
    """Each sample's ``json.dumps`` text (the firehose's entry is them joined: ``json.dumps`` of the list)."""
    if c_make_encoder is None:  # no C accelerator: json.dumps's own Python encoder
        return [json.dumps(s) for s in samples]
    # the encoder json.dumps makes for every call, made once for the tick: a quarter of the time of each sample's
    # text (the arguments are json.dumps's defaults, in c_make_encoder's order)
    encode = c_make_encoder({}, _DEFAULT, encode_basestring_ascii, None, ": ", ", ", False, False, True)
    join = "".join
    return [join(encode(s, 0)) for s in samples]


def split_tags(tags: str) -> tuple[str, str]:
    """(sanitized user, client-id) of sensor tags; the user part never holds ':' (sanitizing encodes it)."""
    user, _, client_id = tags.partition(":")
    return user, client_id


@dataclass(slots=True)
class _Minute:
    start: int
    n: int = 0
    rate_sum: float = 0.0
    rate_max: float = 0.0
    thr_sum: float = 0.0
    thr_max: float = 0.0
    frac_sum: float = 0.0
    tokens_min: float | None = None
    bound: float | None = None
    #: a group's sensor: per member (``"<u>\\0<c>"``, or ``OTHERS``) its principal, client-id, the most members
    #: summed as others, and its requests/s and part summed over the minute's samples
    members: dict[str, dict[str, Any]] | None = None

    def add(self, s: Mapping[str, Any]) -> None:
        # runs for every sample of every tick: each value read once, a maximum by comparison (what max() does)
        get = s.get
        self.n += 1
        rate = get("rate") or 0.0
        self.rate_sum += rate
        if rate > self.rate_max:
            self.rate_max = rate
        self.thr_sum += get("thr_avg") or 0.0
        thr_max = get("thr_max") or 0.0
        if thr_max > self.thr_max:
            self.thr_max = thr_max
        self.frac_sum += get("thr_frac") or 0.0
        tokens = get("tokens")
        if tokens is not None:
            self.tokens_min = tokens if self.tokens_min is None else min(self.tokens_min, tokens)
        self.bound = get("bound")
        members = get("members")
        if isinstance(members, list):
            self._add_members(members)

    def _add_members(self, members: list[Any]) -> None:
        acc = self.members = {} if self.members is None else self.members
        for m in members:
            if not isinstance(m, Mapping):
                continue
            others = m.get("others")
            key = OTHERS_KEY if others is not None else f"{m.get('u') or ''}\0{m.get('c') or ''}"
            a = acc.setdefault(key, {"u": m.get("u"), "c": m.get("c"), "others": 0, "rps": 0.0, "part": 0.0})
            if isinstance(others, int):
                a["others"] = max(a["others"], others)
            a["rps"] += _number(m.get("rps"))
            a["part"] += _number(m.get("part"))

    def row(self) -> dict[str, Any]:
        n = max(self.n, 1)
        row = {
            "t": self.start, "rate_avg": self.rate_sum / n, "rate_max": self.rate_max, "thr_avg": self.thr_sum / n,
            "thr_max": self.thr_max, "thr_frac": self.frac_sum / n, "tokens_min": self.tokens_min,
            "bound": self.bound, "n": self.n,
        }
        if self.members:
            row["members"] = self._member_rows(n)
        return row

    def _member_rows(self, n: int) -> list[dict[str, Any]]:
        """Each member's requests/s and part averaged over the minute's samples (0 in a sample that lacks it),
        busiest first, in the shape of a sample's ``members``."""
        rps = sum(a["rps"] for a in self.members.values()) / n if self.members else 0.0
        rows = []
        for key, a in self.members.items():
            r: dict[str, Any] = {"others": a["others"]} if key == OTHERS_KEY else {"u": a["u"], "c": a["c"]}
            r.update(rps=a["rps"] / n, share=(a["rps"] / n / rps) if rps > 0 else None, part=a["part"] / n)
            rows.append(r)
        rows.sort(key=lambda r: (-r["part"], -r["rps"]))
        return rows


def _number(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


@dataclass
class Sampler:
    """One broker's sampler: measures the sensors of the clients active lately and publishes them each tick."""

    client: redis.Redis
    cluster: str
    broker_id: int
    managers: Mapping[QuotaType, ClientQuotaManager]
    retention_s: int = 300
    #: Where the samples go (None: ``client``). The sensors are read from the engine's Redis (``client``, maybe a
    #: Redis Cluster), the samples published to the Redis the relay and the charts read (the portal's own), so an
    #: engine on a cluster, or on a Redis of its broker's own, still shows on the live charts.
    monitor: redis.Redis | None = None
    _active: dict[tuple[str, str], int] = field(default_factory=dict)
    _throttled_ms: dict[str, float] = field(default_factory=dict)
    #: per sensor: throttle time given but not yet waited, and the avg and max throttle of the window that gave it
    _owed: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    _last_tick: int | None = None
    _minutes: dict[tuple[str, str], _Minute] = field(default_factory=dict)
    _published: set[str] = field(default_factory=set)  # the latest-hash fields this sampler wrote last tick
    _redis_ms: int | None = None  # Redis's clock at this sampler's last firehose entry (its stream id)
    _where: dict[str, set[str]] | None = None  # its memberships in the where hashes (None: not told yet)
    _where_changes: dict[str, list[Any]] | None = None  # found by the tick, written after its pipeline
    _script: Any = None  # ENTITY_LUA registered on the Redis the samples go to

    def touch(self, user: str, client_id: str, t: int) -> None:
        """A client of (user, client-id) was recorded at ``t``: sample its sensors for a while."""
        self._active[(user, client_id)] = t

    def collect(self, now_ms: int) -> list[dict[str, Any]]:
        """Measure every sensor of the recently active clients (two MGETs per quota type)."""
        for key, seen in list(self._active.items()):
            if now_ms - seen > ACTIVE_FOR_MS:
                del self._active[key]
        elapsed = max(1, now_ms - self._last_tick) if self._last_tick is not None else 1000
        self._last_tick = now_ms
        samples: list[dict[str, Any]] = []
        seen_keys: set[str] = set()
        for qt, m in self.managers.items():
            if not m.quotas_enabled:
                continue
            sensors: dict[str, float] = {}  # tags -> bound
            for user, client_id in self._active:
                bound, tags = m.quota(user, client_id)
                sensors[tags] = bound
            if not sensors:
                continue
            tags_list = list(sensors)
            keys = [m.sensor_key(tags) for tags in tags_list]
            if is_cluster(self.client):  # sensors live in many slots: MGET per slot (redis-py splits them)
                states = self.client.mget_nonatomic(keys)
                throttles = self.client.mget_nonatomic([k + ":t" for k in keys])
            else:
                with self.client.pipeline(transaction=False) as p:
                    p.mget(keys)
                    p.mget([k + ":t" for k in keys])
                    states, throttles = p.execute()
            for tags, key, raw, thr in zip(tags_list, keys, states, throttles, strict=True):
                if raw is None:
                    continue
                view = decode_state(m.kind, raw, m.samples, m.window_ms, now_ms)
                bound = sensors[tags]
                sample: dict[str, Any] = {"t": now_ms, "c": self.cluster, "b": self.broker_id, "q": str(qt), "e": tags}
                has_bound = bound < LONG_MAX_AS_DOUBLE
                sample["bound"] = bound if has_bound else None
                bucket_ms = 0.0
                if qt == QuotaType.CONTROLLER_MUTATION:
                    tokens = view.get("tokens")
                    sample["tokens"] = tokens
                    sample["rate"] = None
                    sample["util"] = bucket_util(tokens, bound, m.samples, m.window_ms) if has_bound else None
                    bucket_ms = bucket_throttle_ms(tokens, bound) if has_bound else 0.0
                else:
                    rate = view.get("rate") or 0.0
                    sample["rate"] = rate
                    sample["util"] = rate / bound if has_bound and bound > 0 else None
                stats = decode_throttle(thr) if thr else None
                # the stats roll their window only on a throttle: one older than two windows saw none since
                fresh = stats is not None and now_ms - stats.window_start < 2 * m.window_ms
                thr_avg = (stats.total / stats.count) if fresh and stats.count else 0.0
                thr_max = stats.max if fresh else 0.0
                total = stats.throttled_ms if stats else 0.0
                # a sensor seen for the first time: the throttles of its current window are news too
                before = self._throttled_ms.get(key, total - (stats.total if fresh else 0.0))
                self._throttled_ms[key] = total
                seen_keys.add(key)
                # a throttle of 3 s given now keeps its clients waiting for the next 3 ticks too: spread it over
                # them; throttles of several clients overlap, so what is owed never exceeds the longest one
                owed, owed_avg, owed_max = self._owed.get(key, (0.0, 0.0, 0.0))
                if total > before and fresh:
                    owed, owed_avg, owed_max = min(owed + total - before, max(thr_max, owed)), thr_avg, thr_max
                waited = max(min(owed, elapsed), min(bucket_ms, elapsed))
                owed = max(0.0, owed - waited)
                self._owed[key] = (owed, owed_avg, owed_max)
                if waited > 0:  # while its clients wait, the throttle they wait for is the sensor's throttle now
                    thr_avg, thr_max = max(thr_avg, owed_avg), max(thr_max, owed_max)
                sample["thr_avg"] = thr_avg
                sample["thr_max"] = max(thr_max, bucket_ms)
                sample["thr_frac"] = min(1.0, waited / elapsed)
                samples.append(sample)
        for key in set(self._throttled_ms) - seen_keys:
            del self._throttled_ms[key]
            self._owed.pop(key, None)
        return samples

    def publish(self, samples: Iterable[Mapping[str, Any]], now_ms: int) -> int:
        """One firehose entry for the tick, each sample to its entity's stream, minute rollups, the latest hash."""
        samples = list(samples)
        minute = now_ms - now_ms % 60_000
        # The streams keep a span of time: once Redis's clock is known (the id of this sampler's last firehose
        # entry), entries older than the span go (MINID on Redis's own ids, so the brokers' clocks play no part);
        # before that, a count of up to MAX_BROKERS brokers' entries bounds them
        span = self._span_trim(self.retention_s * 1000, self.retention_s * MAX_BROKERS)
        minute_span = self._span_trim(MINUTES_KEPT * 60_000, MINUTES_KEPT * MAX_BROKERS)
        target = self.monitor or self.client
        ended = []  # minutes that ended, even for clients gone quiet
        for k, acc in list(self._minutes.items()):
            if acc.start != minute:
                ended.append((minutes_key(self.cluster, *k), json.dumps({**acc.row(), "b": self.broker_id})))
                del self._minutes[k]
        texts = encode_each(samples)  # each sample's JSON once: its stream, the latest hash, the firehose
        fields = [f"{s['b']}|{s['q']}|{s['e']}" for s in samples]
        fresh = self._add_minutes(samples, minute)
        if samples:  # first, on its own: what the relay tails is not held up by the rest of the tick
            entry_id = target.xadd(
                firehose_key(self.cluster), {"d": f"[{', '.join(texts)}]"}, maxlen=FIREHOSE_LEN, approximate=True
            )  # the text of json.dumps(samples)
            self._redis_ms = int((entry_id.decode() if isinstance(entry_id, bytes) else entry_id).split("-")[0])
        with target.pipeline(transaction=False) as p:
            for key, row in ended:
                p.xadd(key, {"d": row}, approximate=True, **minute_span)
                p.pexpire(key, MINUTES_KEPT * 60_000)
            self._entities(p, target, samples, texts, fresh, span)
            self._latest(p, dict(zip(fields, texts, strict=True)), dict(zip(fields, samples, strict=True)))
            p.execute()
        self._write_where()
        return len(samples)

    def _add_minutes(self, samples: list[Mapping[str, Any]], minute: int) -> list[str]:
        """Each sample added to its sensor's minute; per sample "1" when that minute starts with it, else "0"."""
        minutes_, fresh = self._minutes, []
        for s in samples:
            k = (s["q"], s["e"])
            acc = minutes_.get(k)
            if acc is None:
                acc = minutes_[k] = _Minute(minute)
                fresh.append("1")
            else:
                fresh.append("0")
            acc.add(s)
        return fresh

    def _entities(
        self, p: Any, target: redis.Redis, samples: list[Any], texts: list[str], fresh: list[str], span: dict[str, Any]
    ) -> None:
        """Each sample's text to its entity's stream; the stream's TTL set with a sensor's first sample of a minute
        (its streams outlive it by their span).

        On a single Redis the XADDs go ``ENTITY_CHUNK`` at a time through ``ENTITY_LUA``: one command per chunk,
        where a pipelined XADD each cost more in redis-py than in Redis. A Redis Cluster's pipeline runs no script:
        there, one XADD each.
        """
        cluster, ttl = self.cluster, self.retention_s * 1000 + 60_000
        keys = [entity_key(cluster, s["q"], s["e"]) for s in samples]
        if is_cluster(target):
            for key, text, new in zip(keys, texts, fresh, strict=True):
                p.xadd(key, {"d": text}, approximate=True, **span)
                if new == "1":
                    p.pexpire(key, ttl)
            return
        if self._script is None or self._script.registered_client is not target:
            self._script = target.register_script(ENTITY_LUA)
        ((how, at),) = span.items()
        for i in range(0, len(keys), ENTITY_CHUNK):
            j = i + ENTITY_CHUNK
            self._script(keys[i:j], [how.upper(), at, ttl, "".join(fresh[i:j]), *texts[i:j]], client=p)

    def publish_latest(self, samples: Iterable[Mapping[str, Any]]) -> None:
        """Only what the overview reads of a tick (the latest hash, its index, the summary), no streams: what a
        benchmark refreshes between page loads."""
        by_field = {f"{s['b']}|{s['q']}|{s['e']}": s for s in samples}
        with (self.monitor or self.client).pipeline(transaction=False) as p:
            self._latest(p, {f: json.dumps(s) for f, s in by_field.items()}, by_field)
            p.execute()
        self._write_where()

    def _latest(self, p: Any, latest: Mapping[str, str], by_field: Mapping[str, Mapping[str, Any]]) -> None:
        """The latest hash's fields of this tick (``latest``, JSON of ``by_field``), those gone since removed, its
        index following them, and the broker's summary."""
        fields = set(latest)
        if latest:
            p.hset(latest_key(self.cluster), mapping=latest)
        gone = self._published - fields
        if gone:
            p.hdel(latest_key(self.cluster), *gone)
            p.zrem(index_key(self.cluster), *(index_member(f) for f in gone))
        added = fields - self._published  # the index follows the hash's fields: only what changed is written
        if added:
            p.zadd(index_key(self.cluster), {index_member(f): 0 for f in added})
        self._published = fields
        self._summarize(p, by_field)

    def _summarize(self, p: Any, by_field: Mapping[str, Mapping[str, Any]]) -> None:
        """This broker's summary and its changes to the where hashes (``engine.monitor_summary``), from the samples
        it leaves in the latest hash."""
        summary = BrokerSummary(fields=len(by_field))
        summary.add_all(s for s in by_field.values() if s["q"] != CONNECTION)
        where = summary.where()
        changes = where_changes(self._where or {}, where, first=self._where is None)
        self._where = where
        if changes:  # a script, which a Redis Cluster's pipeline does not run: on its own, after the pipeline
            self._where_changes = changes
        p.hset(summary_key(self.cluster), str(self.broker_id), summary.to_json())

    def _write_where(self) -> None:
        """The changes to the where hashes ``_summarize`` found, in one script (its keys share the cluster's slot)."""
        changes, self._where_changes = self._where_changes, None
        if changes:
            keys = [where_key(self.cluster, kind) for kind in WHERE]
            (self.monitor or self.client).eval(WHERE_LUA, len(keys), *keys, f",{self.broker_id},", json.dumps(changes))

    def _span_trim(self, span_ms: int, fallback_len: int) -> dict[str, Any]:
        """XADD's trimming for a stream that keeps ``span_ms`` of Redis time (``fallback_len`` entries before the
        first firehose entry told Redis's clock)."""
        if self._redis_ms is None:
            return {"maxlen": fallback_len}
        return {"minid": str(max(0, self._redis_ms - span_ms))}

    def tick(self, now_ms: int | None = None, extra: Iterable[Mapping[str, Any]] = ()) -> int:
        """Collect and publish (plus ``extra`` samples, e.g. connection counts); returns how many were published."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return self.publish([*self.collect(now_ms), *extra], now_ms)


def recent(client: redis.Redis, cluster: str, quota_type: str, tags: str, since_ms: int) -> list[dict[str, Any]]:
    """An entity's samples since ``since_ms`` (every broker), oldest first: the backfill of a chart."""
    rows = [json.loads(f[b"d"]) for _id, f in client.xrange(entity_key(cluster, quota_type, tags))]
    return [r for r in rows if r["t"] >= since_ms]


def minutes(client: redis.Redis, cluster: str, quota_type: str, tags: str, since_ms: int) -> list[dict[str, Any]]:
    """An entity's minute rollups since ``since_ms`` (every broker), oldest first: the hour view."""
    rows = [json.loads(f[b"d"]) for _id, f in client.xrange(minutes_key(cluster, quota_type, tags))]
    return [r for r in rows if r["t"] >= since_ms]


def latest(client: redis.Redis, cluster: str) -> list[dict[str, Any]]:
    """The newest sample of every (broker, quota type, entity) of a cluster: the overview's "now"."""
    return [json.loads(v) for v in client.hvals(latest_key(cluster))]
