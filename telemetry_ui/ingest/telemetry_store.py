"""Storage of pushed client telemetry (KIP-714), per the contract in ``telemetry_ui/README.md``.

Per cluster, in Redis (hash tag ``{<cluster>}``):

- ``tel:{<cluster>}:all``: a stream, one entry per accepted push, field ``d`` = JSON
  ``{"t", "c", "instance", "client_id", "points": [{"name", "attrs", "t", "value"}]}`` (MAXLEN ~ 1000);
- ``tel:{<cluster>}:i:<instance>``: the same entries of one instance (last 10 minutes, MAXLEN ~ 5000);
- ``tel:{<cluster>}:instances``: hash instance id -> JSON record of the live client instances (``INSTANCE_FIELDS``).

Every accepted push is also written to the landing area (``settings.QUOTAS_LANDING_ROOT``) as JSON lines under
``telemetry/date=YYYY-MM-DD/hour=HH/``: one file per push, written under a dot-prefixed temporary name and
renamed (``os.replace``, atomic on one filesystem) when complete, so the pipeline never reads a partial file.

Writers are async (``redis.asyncio``, used by the sink); readers are sync (``redis.Redis``) for the pages and API:
``instances(cluster)``, ``recent(cluster, instance, since_ms)``, ``by_client(cluster, client_id, since_ms)``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings

ALL_MAXLEN = 1000
INSTANCE_MAXLEN = 5000
INSTANCE_KEEP_MS = 10 * 60 * 1000

INSTANCE_FIELDS = (
    "instance", "client_id", "software_name", "software_version", "source_address", "subscription_id",
    "push_interval_ms", "metrics", "last_get_ms", "last_push_ms", "pushes", "errors", "last_error", "terminated",
    "principal",
)


def all_key(cluster: str) -> str:
    return f"tel:{{{cluster}}}:all"


def instance_key(cluster: str, instance: str) -> str:
    return f"tel:{{{cluster}}}:i:{instance}"


def instances_key(cluster: str) -> str:
    return f"tel:{{{cluster}}}:instances"


def now_ms() -> int:
    return int(time.time() * 1000)


def new_record(instance: str) -> dict[str, Any]:
    """An instance record with every field of the contract at its empty value."""
    return {
        "instance": instance, "client_id": None, "software_name": None, "software_version": None,
        "source_address": None, "subscription_id": None, "push_interval_ms": None, "metrics": [],
        "last_get_ms": None, "last_push_ms": None, "pushes": 0, "errors": 0, "last_error": None, "terminated": False,
        "principal": None,
    }


def make_entry(cluster: str, instance: str, client_id: str | None, points: list[Any], t: int) -> dict[str, Any]:
    """The stream entry of one push; ``points`` are ``kip714.otlp.MetricPoint``s."""
    return {
        "t": t,
        "c": cluster,
        "instance": instance,
        "client_id": client_id,
        "points": [{"name": p.name, "attrs": p.attributes, "t": p.time_ms, "value": p.value} for p in points],
    }


# ------------------------------------------------------------------ writers (async, the sink)

_clients: dict[Any, Any] = {}


def async_client() -> Any:
    """One redis.asyncio client per event loop (uvicorn runs one loop per process)."""
    import redis.asyncio as aioredis

    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        for old in [k for k in _clients if k.is_closed()]:
            _clients.pop(old, None)
        # a blocking pool: 200 concurrent pushes wait a moment for one of 64 connections instead of failing
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.QUOTAS_REDIS_URL, max_connections=64, timeout=5, socket_connect_timeout=2, socket_timeout=5
        )
        client = _clients[loop] = aioredis.Redis(connection_pool=pool)
    return client


async def load_record(client: Any, cluster: str, instance: str) -> dict[str, Any]:
    raw = await client.hget(instances_key(cluster), instance)
    record = new_record(instance)
    if raw:
        try:
            record.update(json.loads(raw))
        except ValueError:
            pass
    return record


async def save_record(client: Any, cluster: str, record: dict[str, Any]) -> None:
    await client.hset(instances_key(cluster), record["instance"], json.dumps(record, separators=(",", ":")))


async def update_record(client: Any, cluster: str, instance: str, **changes: Any) -> dict[str, Any]:
    """Read-modify-write one instance record (``errors_inc`` / ``pushes_inc`` add to the counters)."""
    record = await load_record(client, cluster, instance)
    record["errors"] = int(record.get("errors") or 0) + int(changes.pop("errors_inc", 0))
    record["pushes"] = int(record.get("pushes") or 0) + int(changes.pop("pushes_inc", 0))
    record.update({k: v for k, v in changes.items() if k in INSTANCE_FIELDS})
    await save_record(client, cluster, record)
    return record


async def store_entry(client: Any, entry: dict[str, Any]) -> None:
    """Append one push's entry to the cluster's firehose and to the instance's stream (trimmed to 10 minutes)."""
    cluster, instance = entry["c"], entry["instance"]
    data = json.dumps(entry, separators=(",", ":"))
    ikey = instance_key(cluster, instance)
    async with client.pipeline(transaction=False) as p:
        p.xadd(all_key(cluster), {"d": data}, maxlen=ALL_MAXLEN, approximate=True)
        p.xadd(ikey, {"d": data}, maxlen=INSTANCE_MAXLEN, approximate=True)
        p.xtrim(ikey, minid=f"{max(0, entry['t'] - INSTANCE_KEEP_MS)}-0", approximate=True)
        p.pexpire(ikey, INSTANCE_KEEP_MS)
        await p.execute()


def landing_root() -> Path:
    return Path(getattr(settings, "QUOTAS_LANDING_ROOT", Path(settings.BASE_DIR) / ".run" / "landing"))


def landing_dir(t_ms: int, root: Path | None = None) -> Path:
    when = datetime.fromtimestamp(t_ms / 1000, UTC)
    # "_incoming": Spark skips "_" paths, so these JSON lines never mix with the Parquet the landing task makes of them
    return (root or landing_root()) / "_incoming" / "telemetry" / f"date={when:%Y-%m-%d}" / f"hour={when:%H}"


def write_landing(entries: list[dict[str, Any]], root: Path | None = None) -> Path:
    """Write the entries as one JSON-lines file, under a temporary name first, renamed when complete."""
    directory = landing_dir(entries[0]["t"], root)
    directory.mkdir(parents=True, exist_ok=True)
    name = f"part-{entries[0]['t']}-{os.getpid()}-{uuid.uuid4().hex[:12]}.jsonl"
    tmp = directory / f".{name}.tmp"
    final = directory / name
    with tmp.open("w", encoding="utf-8") as out:
        for entry in entries:
            out.write(json.dumps(entry, separators=(",", ":")) + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, final)
    return final


# ------------------------------------------------------------------ readers (sync, pages and API)


_sync_clients: dict[str, Any] = {}


def _sync_client(client: Any = None) -> Any:
    if client is not None:
        return client
    import redis

    url = settings.QUOTAS_REDIS_URL
    found = _sync_clients.get(url)
    if found is None:
        found = _sync_clients[url] = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
    return found


def _decode(rows: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(fields[b"d"]) for _id, fields in rows]


def instances(cluster: str, client: Any = None) -> list[dict[str, Any]]:
    """The client instances of the cluster (records of the contract), by last activity, newest first."""
    raw = _sync_client(client).hgetall(instances_key(cluster))
    out = []
    for instance, data in raw.items():
        record = new_record(instance.decode() if isinstance(instance, bytes) else instance)
        try:
            record.update(json.loads(data))
        except ValueError:
            continue
        out.append(record)
    out.sort(key=lambda r: max(r.get("last_get_ms") or 0, r.get("last_push_ms") or 0), reverse=True)
    return out


def recent(cluster: str, instance: str, since_ms: int, client: Any = None) -> list[dict[str, Any]]:
    """The instance's entries with ``t >= since_ms``, oldest first."""
    rows = _sync_client(client).xrange(instance_key(cluster, instance), min=f"{max(0, since_ms - 60_000)}-0")
    return [e for e in _decode(rows) if e.get("t", 0) >= since_ms]


def by_client(cluster: str, client_id: str, since_ms: int, client: Any = None) -> list[dict[str, Any]]:
    """The entries of every instance with this client id (from the firehose) with ``t >= since_ms``, oldest first."""
    rows = _sync_client(client).xrange(all_key(cluster), min=f"{max(0, since_ms - 60_000)}-0")
    return [e for e in _decode(rows) if e.get("client_id") == client_id and e.get("t", 0) >= since_ms]
