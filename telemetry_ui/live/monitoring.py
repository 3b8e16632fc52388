"""What the relay, the WebSocket consumer and the monitor API share: group names, the watched set, who sees what.

See ``telemetry_ui/README.md`` (the contract) and ``engine/monitor.py`` (the samples and their keys).

- ``cluster_group(c)`` = ``mon.cluster.<c>``: every broker tick of the cluster, as ``mon.batch`` messages;
- ``entity_group(c, tags)`` = ``mon.entity.<digest>``: one entity's points, as ``mon.points`` messages, sent by the
  relay only while ``<c>\\x1f<tags>`` is in the sorted set ``mon:watched`` (score = expiry, ms since the epoch);
- ``Viewer``: what one user may see (admins and auditors everything; a tenant member the client entities its
  tenants own, never connection samples, which name hosts and listeners, not a tenant's principals).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from engine.entities import QuotaType
from engine.monitor import CONNECTION, entity_key, split_tags

#: Every quota type a sample may carry (``q``): the client quota types and the connection samples.
QUOTA_TYPES: tuple[str, ...] = (*(str(q) for q in QuotaType), CONNECTION)

#: Sorted set of the entities someone watches: member ``<cluster>\x1f<tags>``, score = expiry (ms since the epoch).
WATCHED_KEY = "mon:watched"
WATCH_SEP = "\x1f"

#: A subscription's entry in ``mon:watched`` lives this long unless renewed; consumers renew it every RENEW_S.
WATCH_TTL_S = float(os.environ.get("QUOTAS_MONITOR_WATCH_TTL_S", "60"))
RENEW_S = float(os.environ.get("QUOTAS_MONITOR_RENEW_S", "30"))

#: Default backfill: the last 5 minutes (what the per-entity streams keep).
BACKFILL_MS = 5 * 60 * 1000

MAX_TAGS_LEN = 1024


def cluster_group(cluster: str) -> str:
    """The Channels group of a cluster's batches (cluster names are valid group-name characters)."""
    return f"mon.cluster.{cluster}"


def requests_group(cluster: str) -> str:
    """The Channels group of the moves of a cluster's requests, of every kind (``telemetry_ui.live.request_events``)."""
    return f"req.cluster.{cluster}"


def entity_group(cluster: str, tags: str) -> str:
    """The Channels group of one entity's points: tags may hold any character, group names may not, so a digest."""
    digest = hashlib.blake2b(f"{cluster}{WATCH_SEP}{tags}".encode(), digest_size=16).hexdigest()
    return f"mon.entity.{digest}"


def watched_member(cluster: str, tags: str) -> str:
    return f"{cluster}{WATCH_SEP}{tags}"


def parse_watched(member: bytes | str) -> tuple[str, str]:
    text = member.decode() if isinstance(member, bytes) else member
    cluster, _, tags = text.partition(WATCH_SEP)
    return cluster, tags


def now_ms() -> int:
    return int(time.time() * 1000)


def entity_parts(tags: str) -> tuple[str | None, str | None]:
    """(user, client-id) of sensor tags as ``entity_owned_by`` takes them: the user unsanitized, absent parts None."""
    user, client_id = split_tags(tags)
    return (unquote(user) if user else None), (client_id or None)


def check_tags(value: Any) -> str | None:
    """Why ``value`` is not an entity's sensor tags (``"<sanitized user>:<client-id>"``), or None."""
    if not isinstance(value, str) or not value:
        return "'entity' must be an entity's sensor tags, '<user>:<client-id>' (e.g. 'alice:' or 'alice:app-1')."
    if len(value) > MAX_TAGS_LEN:
        return f"'entity' is longer than {MAX_TAGS_LEN} characters."
    if value[0] < " ":
        return "'entity' may not start with a control character."
    if ":" not in value:
        return f"{value[:80]!r} is not sensor tags: '<user>:<client-id>' (e.g. 'alice:' or ':app-1')."
    return None


# ------------------------------------------------------------------ who sees what


@dataclass
class Viewer:
    """What one user may see, decided once per tags (the tenants and their patterns are loaded up front)."""

    everything: bool
    tenants: list[Any] = field(default_factory=list)  # Tenant rows with owned_names prefetched
    _cache: dict[str, bool] = field(default_factory=dict)

    def may_watch(self, tags: str, cluster: str) -> bool:
        """Whether the user may subscribe to the entity with these sensor tags on ``cluster``."""
        if self.everything:
            return True
        key = f"{cluster}\x00{tags}"  # a group's name is unique per cluster only
        seen = self._cache.get(key)
        if seen is None:
            from quotas.models.groups import group_watchable
            from quotas.models.tenants import owned_by_any

            user, client_id = entity_parts(tags)
            group = group_watchable(self.tenants, tags, cluster)  # a group's shared sensor: a group its tenant owns
            seen = owned_by_any(self.tenants, user, client_id) if group is None else group
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[key] = seen
        return seen

    def may_see(self, sample: dict[str, Any], cluster: str) -> bool:
        """Whether one sample (or minute row with its ``q``) of ``cluster`` may be shown to the user."""
        if self.everything:
            return True
        return sample.get("q") != CONNECTION and self.may_watch(str(sample.get("e", "")), cluster)

    def may_see_type(self, quota_type: str) -> bool:
        return self.everything or quota_type != CONNECTION


def load_viewer(user: Any) -> Viewer:
    """The user's Viewer (sync: it queries the database; from async code use database_sync_to_async)."""
    from quotas.models.tenants import member_tenants, sees_everything

    if sees_everything(user):
        return Viewer(everything=True)
    return Viewer(everything=False, tenants=member_tenants(user))


def cluster_exists(name: str) -> bool:
    from quotas.models import Cluster

    return Cluster.objects.filter(name=name).exists()


# ------------------------------------------------------------------ reading the engine's streams


def _decode_rows(rows: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(fields[b"d"]) for _id, fields in rows]


def sort_points(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Oldest first, then by broker and quota type (a stable order for charts and tests)."""
    points.sort(key=lambda p: (p.get("t", 0), p.get("b", 0), p.get("q", "")))
    return points


#: Stream ids are Redis' clock, sample times (``t``) the broker's: read from this much before ``since_ms``, then
#: keep the samples whose ``t`` is at or after it.
CLOCK_SLACK_MS = 60_000


async def recent_async(client: Any, cluster: str, tags: str, since_ms: int, quota_types: tuple[str, ...] = QUOTA_TYPES
                       ) -> list[dict[str, Any]]:
    """``engine.monitor.recent`` over every quota type of the entity, on a redis.asyncio client, in one round
    trip: the samples with ``t >= since_ms``, oldest first (read from a little earlier by stream id, then filtered
    on ``t``, so a long stream is not read whole)."""
    start = max(0, since_ms - CLOCK_SLACK_MS)
    async with client.pipeline(transaction=False) as p:
        for q in quota_types:
            p.xrange(entity_key(cluster, q, tags), min=f"{start}-0")
        found = await p.execute()
    points: list[dict[str, Any]] = []
    for rows in found:
        points.extend(p for p in _decode_rows(rows) if p.get("t", 0) >= since_ms)
    return sort_points(points)


# ------------------------------------------------------------------ client telemetry (KIP-714 sink's streams)

#: Telemetry instances share ``mon:watched`` with entities: member ``<cluster>\x1f\x1etel\x1e<instance id>`` (an
#: entity's tags never start with \x1e: ``check_tags`` refuses control characters at their start).
TEL_WATCH_PREFIX = "\x1etel\x1e"
#: What the sink keeps of an instance (``tel:{<cluster>}:i:<instance>``): the last 10 minutes.
TEL_BACKFILL_MS = 10 * 60 * 1000
MAX_INSTANCE_LEN = 256


def tel_all_key(cluster: str) -> str:
    return f"tel:{{{cluster}}}:all"


def tel_instance_key(cluster: str, instance: str) -> str:
    return f"tel:{{{cluster}}}:i:{instance}"


def tel_instances_key(cluster: str) -> str:
    return f"tel:{{{cluster}}}:instances"


def tel_cluster_group(cluster: str) -> str:
    return f"tel.cluster.{cluster}"


def tel_instance_group(cluster: str, instance: str) -> str:
    digest = hashlib.blake2b(f"{cluster}{WATCH_SEP}{instance}".encode(), digest_size=16).hexdigest()
    return f"tel.instance.{digest}"


def tel_watched_member(cluster: str, instance: str) -> str:
    return f"{cluster}{WATCH_SEP}{TEL_WATCH_PREFIX}{instance}"


def watched_instance(tags: str) -> str | None:
    """The instance id of a ``mon:watched`` member's tags part when it names a telemetry instance, else None."""
    return tags[len(TEL_WATCH_PREFIX):] if tags.startswith(TEL_WATCH_PREFIX) else None


def check_instance(value: Any) -> str | None:
    """Why ``value`` is not a client instance id, or None."""
    if not isinstance(value, str) or not value:
        return "'instance' must be a client instance id (a non-empty string)."
    if len(value) > MAX_INSTANCE_LEN:
        return f"'instance' is longer than {MAX_INSTANCE_LEN} characters."
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        return "'instance' may not hold control characters."
    return None


def client_tags(client_id: str) -> str:
    """The sensor tags whose ownership decides who sees a client id's telemetry (``entity_owned_by`` with user None)."""
    return f":{client_id}"


def parse_instance(raw: bytes | str | None) -> dict[str, Any] | None:
    """One value of the instances hash, or None when it is not a JSON object."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def decode_entries(rows: list[Any]) -> list[dict[str, Any]]:
    """The ``d`` JSON of stream rows (rows without a valid one are skipped)."""
    out: list[dict[str, Any]] = []
    for _id, fields in rows:
        raw = fields.get(b"d")
        if raw is None:
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out
