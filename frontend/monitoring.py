"""What the monitor pages read from the engine's live samples (``engine.monitor``), and who may see what.

The samples name an entity by Kafka's sensor tags ``"<sanitized user>:<client-id>"`` (``telemetry_ui/README.md``).
A tenant member sees the tags whose unsanitized user and client-id one of its tenants owns
(``entity_owned_by``, the rule of the WebSocket consumer and of asking for a quota); admins and auditors see
everything. ``Visibility`` decides once per tags and remembers it for the request, so a page over thousands of
samples makes no query per entity.

The overview reads each cluster's ``latest`` hash (what ``monitor.latest()`` returns). A member's samples are found
in the samplers' index of its fields (``index_key``) by where their tags start (``member_prefixes``) and read by
field, so its page costs what it shows; the hash is read whole for an admin, and for a member when the index does
not hold the hash's fields. Either way a field's name (``<b>|<q>|<e>``) decides before its sample is parsed.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from urllib.parse import unquote

import redis
from django.conf import settings

from engine.entities import TYPE_OF_KEY, sanitize
from engine.groups import tag as group_tag
from engine.monitor import CONNECTION, index_field, index_key, latest_key, minutes, split_tags
from quotas.choices import EntityType
from quotas.models import QuotaRequest, Tenant, group_watchable, member_tenants, owned_by_any, sees_everything
from quotas.models.tenants import TenantPatterns, owned_prefixes

#: A sample older than this is not "now" on the overview.
FRESH_MS = 10_000
#: Rows of the overview's "throttled now" table, and entities per cluster in its heatmap.
TOP_THROTTLED = 25
HEATMAP_ENTITIES = 50
#: The request page compares this many minutes before the change landed with as many after it.
AROUND_MINUTES = 10
#: Longest sensor tags accepted in a URL (a Kafka principal and a client-id, sanitized).
MAX_TAGS = 1024

QUOTA_TYPE_LABELS = {
    "produce": "produce (bytes/s)",
    "fetch": "fetch (bytes/s)",
    "request": "request (% of a thread)",
    "controller_mutation": "controller mutations (/s)",
}


class MonitorUnavailable(Exception):
    """The monitor's Redis could not be read: pages say so instead of failing."""


@lru_cache(maxsize=8)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=2.0)


def monitor_redis() -> redis.Redis:
    """A client of the Redis the engine's samplers publish into (the portal's ``QUOTAS_REDIS_URL``)."""
    return _client(settings.QUOTAS_REDIS_URL)


def now_ms() -> int:
    return int(time.time() * 1000)


# ------------------------------------------------------------------ tags and permissions


def valid_tags(tags: str) -> bool:
    """Sensor tags as the samples carry them: ``user:client-id`` with at least the ``:``."""
    return 0 < len(tags) <= MAX_TAGS and ":" in tags and "\x00" not in tags


def tags_names(tags: str) -> tuple[str | None, str | None]:
    """(principal, client-id) a tenant must own for these tags: the user part unsanitized, empty parts absent."""
    user_tag, client_id = split_tags(tags)
    return (unquote(user_tag) if user_tag else None), (client_id or None)


def tags_for(user: str | None, client_id: str | None) -> str:
    """The sensor tags of a (principal, client-id) entity: what its own quota's sensor is named."""
    return f"{sanitize(user) if user else ''}:{client_id or ''}"


def request_tags(target: QuotaRequest) -> str:
    """The sensor a request's value limits: its entity's, or its group's (``engine.groups.tag``, no client-id)."""
    if target.group_name:
        return f"{group_tag(target.group_name)}:"
    return tags_for(target.user, target.client_id)


@dataclass
class Visibility:
    """Which sensor tags a person may watch, decided once per tags for the life of one request."""

    everything: bool
    tenants: list[Tenant]
    _decided: dict[str, bool] = field(default_factory=dict)
    _patterns: list[TenantPatterns] | None = None

    @classmethod
    def of(cls, user: Any, everything: bool | None = None) -> Visibility:
        if sees_everything(user) if everything is None else everything:
            return cls(True, [])
        return cls(False, member_tenants(user))

    def may_see(self, tags: str, cluster: str) -> bool:
        """Whether the sensor with these tags on ``cluster`` is one the person may watch."""
        if self.everything:
            return True
        key = f"{cluster}\x00{tags}"  # a group's name is unique per cluster only
        seen = self._decided.get(key)
        if seen is None:
            if tags.startswith(("ip:", "listener:")) or not self.tenants:
                seen = False
            elif (group := group_watchable(self.tenants, tags, cluster)) is not None:  # a group its tenant owns
                seen = group
            else:
                if self._patterns is None:
                    self._patterns = [TenantPatterns(t) for t in self.tenants]
                user, client_id = tags_names(tags)
                seen = owned_by_any(self._patterns, user, client_id)
            self._decided[key] = seen
        return seen


# ------------------------------------------------------------------ the overview's "now"


@dataclass
class EntityNow:
    """One entity of one cluster, from its freshest samples (every broker and quota type).

    Throttled means what the samples measured: time throttled (``thr_frac``) in the sample's window, which a bucket
    below zero counts too. The throttle times and the utilization shown beside it are those of the quota types it
    is throttled on, so a row never says "100 % of the time throttled" beside a figure of another quota.
    """

    cluster: str
    tags: str
    util: dict[int, float] = field(default_factory=dict)  # broker -> highest utilization over quota types
    util_by_type: dict[str, float] = field(default_factory=dict)  # quota type -> highest utilization over brokers
    thr_frac: float = 0.0
    thr_max: float = 0.0
    thr_avg: float = 0.0
    throttled_types: set[str] = field(default_factory=set)
    throttled_brokers: set[int] = field(default_factory=set)
    brokers: set[int] = field(default_factory=set)
    tokens_min: float | None = None
    newest: int = 0

    def add(self, s: Mapping[str, Any]) -> None:
        b = s.get("b")
        b = int(b) if isinstance(b, int | float) else -1
        q = str(s.get("q"))
        self.brokers.add(b)
        self.newest = max(self.newest, int(s.get("t") or 0))
        util = s.get("util")
        if isinstance(util, int | float):
            self.util[b] = max(self.util.get(b, 0.0), float(util))
            self.util_by_type[q] = max(self.util_by_type.get(q, 0.0), float(util))
        tokens = s.get("tokens")
        if isinstance(tokens, int | float):
            self.tokens_min = tokens if self.tokens_min is None else min(self.tokens_min, tokens)
        frac = float(s.get("thr_frac") or 0.0)
        if frac > 0:
            self.throttled_types.add(q)
            self.throttled_brokers.add(b)
            self.thr_frac = max(self.thr_frac, frac)
            self.thr_max = max(self.thr_max, float(s.get("thr_max") or 0.0))
            self.thr_avg = max(self.thr_avg, float(s.get("thr_avg") or 0.0))

    @property
    def throttled(self) -> bool:
        return bool(self.throttled_types)

    @property
    def util_max(self) -> float | None:
        return max(self.util.values()) if self.util else None

    @property
    def util_throttled(self) -> float | None:
        """The highest utilization of the quota types it is throttled on (None: none of them has a bound)."""
        found = [self.util_by_type[q] for q in self.throttled_types if q in self.util_by_type]
        return max(found) if found else None


@dataclass
class ClusterNow:
    """A cluster's fresh samples the person may see, summed up per entity (tags).

    ``entities`` maps tags to ``[highest utilization or -1, highest thr_frac, highest thr_max of the throttled
    samples, throttled?, samples]``: cheap to build for every entity; the full ``EntityNow`` is made only for the
    few entities a page shows.
    """

    name: str
    brokers: list[int]
    entities: dict[str, list[Any]]
    samples: int
    stale: int
    newest: int
    #: (entities, throttled, with a utilization) of the whole cluster when ``entities`` holds only the candidates
    #: for the tables (``frontend.monitor_summary``); None: counted from ``entities``
    counts: tuple[int, int, int] | None = None

    @property
    def entity_count(self) -> int:
        return self.counts[0] if self.counts is not None else len(self.entities)

    @property
    def throttled_count(self) -> int:
        return self.counts[1] if self.counts is not None else sum(1 for a in self.entities.values() if a[3])

    @property
    def bounded_count(self) -> int:
        return self.counts[2] if self.counts is not None else sum(1 for a in self.entities.values() if a[0] >= 0)

    def entity(self, tags: str) -> EntityNow:
        found = EntityNow(self.name, tags)
        for s in self.entities[tags][4]:
            found.add(s)
        return found


def _parse_all(values: list[bytes]) -> list[Any]:
    """The JSON samples, parsed as one array (twice as fast as one parse each); one by one if one is bad."""
    if not values:
        return []
    try:
        return json.loads(b"[" + b",".join(values) + b"]")
    except ValueError:
        parsed: list[Any] = []
        for v in values:
            try:
                parsed.append(json.loads(v))
            except ValueError:
                parsed.append(None)
        return parsed


@contextmanager
def no_gc() -> Iterator[None]:
    """Tens of thousands of small dicts at once would trigger the cyclic GC over and over (they hold no cycles)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def cluster_now(client: redis.Redis, cluster: str, brokers: Iterable[int], vis: Visibility, now: int) -> ClusterNow:
    """The fresh samples of one cluster that the person may see, by entity: a member's read by
    field (``member_prefixes``), else the hash whole (one HGETALL, one JSON parse)."""
    with no_gc():
        return _cluster_now(client, cluster, brokers, vis, now)


def _cluster_now(client: redis.Redis, cluster: str, brokers: Iterable[int], vis: Visibility, now: int) -> ClusterNow:
    found = None if vis.everything else _visible_by_index(client, cluster, vis)
    names, values = found if found is not None else _visible_in_hash(client, cluster, vis)
    return summed(cluster, brokers, names, values, now)


def _visible_in_hash(client: redis.Redis, cluster: str, vis: Visibility) -> tuple[list[str], list[bytes]]:
    """The whole latest hash read (one HGETALL), its samples the person may see kept by their field's name."""
    raw = client.hgetall(latest_key(cluster))
    names: list[str] = []
    values: list[bytes] = []
    connection = CONNECTION.encode()
    for name, value in raw.items():
        parts = name.split(b"|", 2)
        if len(parts) != 3 or parts[1] == connection:
            continue
        e = parts[2].decode("utf-8", "replace")
        if vis.everything or vis.may_see(e, cluster):
            names.append(e)
            values.append(value)
    return names, values


def member_prefixes(vis: Visibility) -> set[str]:
    """Where the tags a member may see start (a superset: ``may_see`` decides): an owned principal's sanitized
    pattern start, ``:`` and an owned client-id's pattern start (no principal), or an owned group's sensor."""
    prefixes = {sanitize(p) for p in owned_prefixes(vis.tenants, EntityType.USER)}
    prefixes |= {":" + p for p in owned_prefixes(vis.tenants, EntityType.CLIENT_ID)}
    prefixes |= {f"{group_tag(g.name)}:" for t in vis.tenants for g in t.quota_groups.all()}
    return prefixes


def _visible_by_index(client: redis.Redis, cluster: str, vis: Visibility) -> tuple[list[str], list[bytes]] | None:
    """A member's samples read by field (HMGET) after finding them in the cluster's index (``engine.monitor``) by
    where their tags start: what it costs follows what the member may see. None when the index does not hold the
    hash's fields (written by something other than the samplers): then the hash is read whole."""
    prefixes = member_prefixes(vis)
    with client.pipeline(transaction=False) as p:
        p.zcard(index_key(cluster))
        p.hlen(latest_key(cluster))
        for prefix in sorted(prefixes):
            start = prefix.encode()
            p.zrangebylex(index_key(cluster), b"[" + start, b"(" + start + b"\xff")
        indexed, fields, *ranges = p.execute()
    if indexed != fields:
        return None
    fields_of: dict[str, list[str]] = {}  # tags -> their fields: each tags decided once, not once per field
    for member in {m for found in ranges for m in found}:
        e, q, name = index_field(member.decode("utf-8", "replace"))
        if q != CONNECTION:
            fields_of.setdefault(e, []).append(name)
    names: list[str] = []
    wanted: list[str] = []
    for e, found in fields_of.items():
        if vis.may_see(e, cluster):
            names += [e] * len(found)
            wanted += found
    values = client.hmget(latest_key(cluster), wanted) if wanted else []
    kept = [(e, v) for e, v in zip(names, values, strict=True) if v is not None]  # gone since the index was read
    return [e for e, _v in kept], [v for _e, v in kept]


def summed(cluster: str, brokers: Iterable[int], names: list[str], values: list[bytes], now: int) -> ClusterNow:
    """The fresh samples (``values``, of the tags ``names``) by entity, with the cluster's counts."""
    entities: dict[str, list[Any]] = {}
    seen_brokers = set(brokers)
    samples = stale = newest = 0
    oldest_fresh = now - FRESH_MS
    for e, s in zip(names, _parse_all(values), strict=True):
        try:  # the engine's samples: numbers or null where numbers are (anything else is skipped)
            t = s["t"]
            if t < oldest_fresh:
                stale += 1
                newest = max(newest, t)
                continue
            a = entities.get(e)
            if a is None:
                a = entities[e] = [-1.0, 0.0, 0.0, False, []]
            u, f = s.get("util"), s.get("thr_frac") or 0.0
            if u is not None and u > a[0]:
                a[0] = u
            if f > 0:  # throttled now: time throttled in the sample's window (EntityNow)
                a[3] = True
                if f > a[1]:
                    a[1] = f
                m = s.get("thr_max") or 0.0
                if m > a[2]:
                    a[2] = m
            b = s.get("b")
            if b not in seen_brokers and isinstance(b, int):
                seen_brokers.add(b)
        except (TypeError, KeyError):
            continue
        a[4].append(s)
        samples += 1
        if t > newest:
            newest = t
    return ClusterNow(cluster, sorted(seen_brokers), entities, samples, stale, int(newest))


def top_throttled(clusters: Iterable[ClusterNow], limit: int = TOP_THROTTLED) -> tuple[list[EntityNow], int]:
    """The most throttled entities now (time throttled, then the longest throttle), and how many are throttled."""
    clusters = list(clusters)
    throttled = [(c, tags, a) for c in clusters for tags, a in c.entities.items() if a[3]]
    throttled.sort(key=lambda x: (-x[2][1], -x[2][2], -x[2][0], x[0].name, x[1]))
    return [c.entity(tags) for c, tags, _a in throttled[:limit]], sum(c.throttled_count for c in clusters)


def heatmap(c: ClusterNow, limit: int = HEATMAP_ENTITIES) -> dict[str, Any] | None:
    """Utilization by entity (rows, most utilized first, at most ``limit``) and broker (columns) for Plotly."""
    rows = [(tags, a[0]) for tags, a in c.entities.items() if a[0] >= 0]
    if not rows:
        return None
    rows.sort(key=lambda x: (-x[1], x[0]))
    shown = [c.entity(tags) for tags, _u in rows[:limit]]
    brokers = sorted({b for e in shown for b in e.util} | set(c.brokers))
    return {
        "cluster": c.name,
        "entities": [e.tags for e in shown],
        "brokers": [f"broker {b}" for b in brokers],
        "z": [[round(e.util[b], 4) if b in e.util else None for b in brokers] for e in shown],
        "total": c.bounded_count,
    }


# ------------------------------------------------------------------ a request's effect


@dataclass
class Period:
    label: str
    start: datetime | None
    end: datetime | None
    minutes: int = 0
    rate_avg: float | None = None
    rate_max: float | None = None
    bound: float | None = None
    tokens_min: float | None = None
    thr_avg: float | None = None
    thr_max: float | None = None
    thr_frac: float | None = None


def _summarize(period: Period, rows: list[dict[str, Any]]) -> Period:
    """Weighted by the samples of each broker-minute: per-broker rates against the per-broker bound."""
    weights = [max(int(r.get("n") or 1), 1) for r in rows]
    total = sum(weights)
    period.minutes = len(rows)
    if not rows:
        return period

    def avg(k: str) -> float:
        return sum(float(r.get(k) or 0.0) * w for r, w in zip(rows, weights, strict=True)) / total

    period.rate_avg = avg("rate_avg")
    period.rate_max = max(float(r.get("rate_max") or 0.0) for r in rows)
    period.thr_avg = avg("thr_avg")
    period.thr_max = max(float(r.get("thr_max") or 0.0) for r in rows)
    period.thr_frac = avg("thr_frac")
    bounds = [r["bound"] for r in rows if isinstance(r.get("bound"), int | float)]
    period.bound = bounds[-1] if bounds else None
    tokens = [r["tokens_min"] for r in rows if isinstance(r.get("tokens_min"), int | float)]
    period.tokens_min = min(tokens) if tokens else None
    return period


@dataclass
class Effect:
    """What the requester's clients did before and after the request's version landed on the brokers."""

    tags: str
    quota_type: str
    state: str  # "not-applied" | "pending" | "unavailable" | "missing" | "ok"
    message: str = ""
    first_applied: datetime | None = None
    last_applied: datetime | None = None
    before: Period | None = None
    after: Period | None = None

    @property
    def periods(self) -> list[Period]:
        return [p for p in (self.before, self.after) if p is not None]

    @property
    def is_tokens(self) -> bool:
        return self.quota_type == "controller_mutation"


def request_effect(target: QuotaRequest, pushes: list[Any], client: redis.Redis | None = None) -> Effect:
    """The entity's minute rollups (every broker) in the ``AROUND_MINUTES`` before the first broker applied the
    request's version and after the last one did (``Push.applied_at``)."""
    tags = request_tags(target)
    quota_type = str(TYPE_OF_KEY.get(target.key, "produce"))
    effect = Effect(tags, quota_type, "not-applied")
    if target.applied_version is None:
        effect.message = "The request has not changed the desired state, so there is no before and after."
        return effect
    applied = [p.applied_at for p in pushes if p.applied_at is not None]
    if not pushes or len(applied) < len(pushes):
        effect.state = "pending"
        effect.message = "Not applied on every broker yet: the comparison starts once every broker holds the change."
        if applied:
            effect.first_applied = min(applied)
        return effect
    first, last = min(applied), max(applied)
    effect.first_applied, effect.last_applied = first, last
    first_ms, last_ms = _ms(first), _ms(last)
    # each broker's minutes split at the moment that broker applied it (a cluster-wide push: at the one moment)
    at = {(p.broker.broker_id if p.broker is not None else None): _ms(p.applied_at) for p in pushes}
    since = first_ms - first_ms % 60_000 - AROUND_MINUTES * 60_000
    try:
        rows = minutes(client or monitor_redis(), target.cluster.name, quota_type, tags, since)
    except (redis.RedisError, OSError) as e:
        effect.state = "unavailable"
        effect.message = f"Monitor data could not be read ({e.__class__.__name__})."
        return effect
    after_end = last_ms + AROUND_MINUTES * 60_000
    before, after = [], []
    for r in rows:
        b_at = at.get(r.get("b"), at.get(None))
        if r["t"] + 60_000 <= (first_ms if b_at is None else b_at):
            before.append(r)  # a whole minute before this broker held the change
        elif (last_ms if b_at is None else b_at) <= r["t"] < after_end:
            after.append(r)  # a whole minute after it did; the minute it landed in is neither
    effect.before = _summarize(Period("Before", _dt(since), first), before)
    effect.after = _summarize(Period("After", last, _dt(after_end)), after)
    if not before and not after and now_ms() - last_ms < 2 * 60_000:
        effect.state = "missing"
        effect.message = (
            f"The change landed on every broker at {last:%H:%M:%S} UTC; the comparison needs whole minutes of the "
            "brokers' samples before and after it. Look again in a minute or two, or watch the entity live."
        )
    elif not before and not after:
        effect.state = "missing"
        effect.message = (
            f"No monitor data for the sensor {tags} ({quota_type}) around the time the change landed: its clients "
            "were not active then, or no broker sampled them (minute rollups are kept for 2 hours)."
        )
    else:
        effect.state = "ok"
        if not after:
            effect.message = "No full minute of samples since the change landed yet."
        elif not before:
            effect.message = "No samples from before the change landed."
    return effect


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)
