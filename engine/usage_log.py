"""A bounded log of per-request usage, per cluster, in one Redis stream (no Django).

Whoever records usage into the engine (the load generator; a broker) appends each ``record_many`` batch as
one stream entry, so the cost is one XADD per batch, not per request:

- key ``usage:{<cluster>}:log`` (the cluster's hash tag, the same Redis Cluster slot as its monitor keys),
  MAXLEN ~ ``LOG_LEN`` entries (batches);
- fields ``b`` (broker id), ``q`` (quota type) and ``d``: compact JSON columns
  ``{"u": [user...], "i": [client_id...], "v": [value...], "t": [t_ms...]}`` (one position per record),
  or ``"t": <t_ms>`` (one int) when every record of the batch has the same time, as a tick's batch does.

``read(client, cluster, after_id, count)`` returns the entries after a stream id, decoded into ``UsageBatch``es;
``pipeline/landing.py`` drains it into Parquet.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

LOG_LEN = 200_000  # batches; a tick writes (brokers x quota types) of them, so hours of load at demo scale


def log_key(cluster: str) -> str:
    return f"usage:{{{cluster}}}:log"


def _pack(records: Sequence[Any]) -> str:
    """Columns of ``(user, client_id, value, t)`` records (``managers.UsageRecord`` or plain tuples)."""
    users = [r[0] for r in records]
    clients = [r[1] for r in records]
    values = [r[2] for r in records]
    times = [r[3] for r in records]
    first = times[0]
    t: int | list[int] = first if all(x == first for x in times) else times
    return json.dumps({"u": users, "i": clients, "v": values, "t": t}, separators=(",", ":"))


def append(
    client: Any, cluster: str, broker: int, quota_type: str, records: Sequence[Any], maxlen: int = LOG_LEN
) -> bytes | None:
    """Append one batch of ``(user, client_id, value, t)`` records (one XADD); an empty batch writes nothing.

    ``client`` may be a pipeline: the XADD is queued and its id comes with the pipeline's results.
    """
    if not records:
        return None
    fields = {"b": str(int(broker)), "q": str(quota_type), "d": _pack(records)}
    return client.xadd(log_key(cluster), fields, maxlen=maxlen, approximate=True)


def append_many(
    client: redis.Redis, cluster: str, broker: int, batches: Iterable[tuple[str, Sequence[Any]]],
    maxlen: int = LOG_LEN,
) -> int:
    """Append several batches ``(quota_type, records)`` in one round trip (one XADD each); returns how many."""
    n = 0
    with client.pipeline(transaction=False) as p:
        for quota_type, records in batches:
            if records:
                append(p, cluster, broker, quota_type, records, maxlen)
                n += 1
        if n:
            p.execute()
    return n


@dataclass(frozen=True)
class UsageBatch:
    """One stream entry: a batch of records of one broker and quota type."""

    id: str
    cluster: str
    broker: int
    quota_type: str
    users: list[str]
    client_ids: list[str]
    values: list[float]
    times: list[int]

    def __len__(self) -> int:
        return len(self.users)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def decode(cluster: str, entry_id: Any, fields: dict[Any, Any]) -> UsageBatch:
    get = {_text(k): v for k, v in fields.items()}
    d = json.loads(get["d"])
    users = d["u"]
    t = d["t"]
    times = [int(t)] * len(users) if isinstance(t, int) else [int(x) for x in t]
    return UsageBatch(
        id=_text(entry_id), cluster=cluster, broker=int(get["b"]), quota_type=_text(get["q"]), users=users,
        client_ids=d["i"], values=[float(v) for v in d["v"]], times=times,
    )


def read(client: redis.Redis, cluster: str, after_id: str | None = None, count: int | None = None,
         until_id: str | None = None) -> list[UsageBatch]:
    """The batches after ``after_id`` (exclusive; from the start when None) up to ``until_id`` (inclusive)."""
    start = f"({after_id}" if after_id else "-"
    rows = client.xrange(log_key(cluster), min=start, max=until_id or "+", count=count)
    return [decode(cluster, entry_id, fields) for entry_id, fields in rows]
