"""The landing area: usage, live samples and client telemetry as Parquet, for the pipeline (``pipeline/``).

Layout under ``settings.QUOTAS_LANDING_ROOT``, partitioned by the UTC hour of each row's own time
(``date=YYYY-MM-DD/hour=HH``):

- ``usage/``: cluster (string), broker (int32), quota_type (string), user (string), client_id (string),
  t_ms (int64), value (float64): every request's usage as recorded (``engine/usage_log.py``);
- ``samples/``: t (int64), c (string), b (int32), q (string), e (string), rate, bound, util, thr_avg, thr_max,
  thr_frac, tokens (float64, nullable), src (string: ``prometheus``, ``client``; null for the engine's), res_ms
  (int64: how long the sample stands for, the Prometheus scrape interval; null = one second): the monitor firehose
  ``mon:{<cluster>}:all`` (other fields of a sample, e.g. the connection samples' ``accept_rate``/``count``, are not
  part of the contract; files landed before ``src``/``res_ms`` existed lack them: read with ``mergeSchema``);
- ``telemetry/``: t (int64), c, instance, client_id, name (string), attrs (JSON text), point_t (int64),
  value (float64): one row per metric point of the sink's JSON-lines files, which share these directories
  until they are landed (read ``*.parquet`` only).

Files: ``part-<...>.parquet``. A file is written as ``_<name>.<token>`` (a name starting with ``_``, which Spark
and pyarrow datasets skip) and renamed (``os.replace``) when complete and fsynced, so a half-written file is
never read. Leftover ``_`` files of a crashed writer are removed after ``QUOTAS_LANDING_STALE_SECONDS``.

Idempotency (a retried task, or two overlapping ones, write no duplicates):

- streams (usage, samples), per (Redis, cluster, source): a checkpoint ``land:{<cluster>}:<source>:ckpt`` (the last
  stream id landed) and an intent ``land:{<cluster>}:<source>:pending`` = the planned range (first id, last id),
  set with NX. A run finishes the pending range if there is one (a crashed or concurrent run's), else plans the
  next one. Each partition's file name is derived from the range (``part-<cluster>-<source id>-<first>-<last>``),
  so writing it again overwrites the same file (a file that exists is complete and is kept). The checkpoint moves
  to ``last`` and the intent is cleared (one script, only if the intent is still this one) after every file of the
  range is renamed; the same script trims the landed entries off the usage log (``XTRIM MINID``), so Redis
  holds only usage not landed yet. ``<source id>`` is a random id kept in that Redis, so two URLs of one server
  share names.
- telemetry: JSON-lines files are claimed by renaming them into a batch directory
  ``_staging/telemetry/date=/hour=/_open-<id>/``, sealed by renaming it to ``<id>``; a sealed batch is written as
  ``telemetry/.../part-tel-<id>.parquet`` (same name on a retry), then moved to ``_landed/telemetry/...`` (kept
  for replay). A rename succeeds once, so a line is claimed by one batch only.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import redis

from engine import usage_log
from engine.monitor import firehose_key

log = logging.getLogger(__name__)

USAGE, SAMPLES, TELEMETRY = "usage", "samples", "telemetry"
HOUR_MS = 3_600_000
DEFAULT_BATCH = 5_000  # stream entries per planned range (a usage entry is a batch of records, a sample entry a tick)
DEFAULT_STALE_S = 3_600

USAGE_SCHEMA = pa.schema([
    ("cluster", pa.string()), ("broker", pa.int32()), ("quota_type", pa.string()), ("user", pa.string()),
    ("client_id", pa.string()), ("t_ms", pa.int64()), ("value", pa.float64()),
])
SAMPLE_FLOATS = ("rate", "bound", "util", "thr_avg", "thr_max", "thr_frac", "tokens")
SAMPLES_SCHEMA = pa.schema(
    [("t", pa.int64()), ("c", pa.string()), ("b", pa.int32()), ("q", pa.string()), ("e", pa.string())]
    + [(name, pa.float64()) for name in SAMPLE_FLOATS]
    + [("src", pa.string()), ("res_ms", pa.int64())]
)
TELEMETRY_SCHEMA = pa.schema([
    ("t", pa.int64()), ("c", pa.string()), ("instance", pa.string()), ("client_id", pa.string()),
    ("name", pa.string()), ("attrs", pa.string()), ("point_t", pa.int64()), ("value", pa.float64()),
])

# the checkpoint moves only if the intent is still the one this run completed
_COMMIT = """
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('DEL', KEYS[2])
  if ARGV[3] ~= '' then
    redis.call('XTRIM', KEYS[3], 'MINID', ARGV[3])
  end
  return 1
end
return 0
"""


def checkpoint_key(cluster: str, source: str) -> str:
    return f"land:{{{cluster}}}:{source}:ckpt"


def pending_key(cluster: str, source: str) -> str:
    return f"land:{{{cluster}}}:{source}:pending"


def source_id_key(cluster: str) -> str:
    return f"land:{{{cluster}}}:src"


def partition(t_ms: int) -> str:
    when = datetime.fromtimestamp(t_ms / 1000, UTC)
    return f"date={when:%Y-%m-%d}/hour={when:%H}"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]", "_", name)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# ------------------------------------------------------------------ files


def write_parquet(table: pa.Table, final: Path) -> bool:
    """Write ``table`` to ``final`` via a ``_``-prefixed temporary file and an atomic rename.

    A ``final`` that exists was renamed complete by this range's earlier (or concurrent) writer: kept, False.
    """
    if final.exists():
        return False
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f"_{final.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        with tmp.open("wb") as out:
            pq.write_table(table, out, compression="zstd")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return True


def sweep_stale(directory: Path, stale_s: float, now: float | None = None) -> int:
    """Remove ``_`` files a crashed writer left in ``directory`` (older than ``stale_s``)."""
    now = time.time() if now is None else now
    n = 0
    if not directory.is_dir():
        return 0
    for p in directory.iterdir():
        if p.name.startswith("_") and p.is_file():
            try:
                if now - p.stat().st_mtime > stale_s:
                    p.unlink()
                    n += 1
            except FileNotFoundError:
                pass
    return n


# ------------------------------------------------------------------ rows of each source


def usage_tables(rows: Sequence[tuple[Any, dict[Any, Any]]], cluster: str) -> dict[str, pa.Table]:
    """Usage stream entries -> one table per partition."""
    cols: dict[str, dict[str, list[Any]]] = defaultdict(lambda: {n: [] for n in USAGE_SCHEMA.names})
    for entry_id, fields in rows:
        b = usage_log.decode(cluster, entry_id, fields)
        n = len(b)
        if not n:
            continue
        lo, hi = min(b.times), max(b.times)
        if lo - lo % HOUR_MS == hi - hi % HOUR_MS:  # the usual case: the whole batch in one hour
            c = cols[partition(lo)]
            c["cluster"] += [cluster] * n
            c["broker"] += [b.broker] * n
            c["quota_type"] += [b.quota_type] * n
            c["user"] += b.users
            c["client_id"] += b.client_ids
            c["t_ms"] += b.times
            c["value"] += b.values
            continue
        for user, client_id, value, t in zip(b.users, b.client_ids, b.values, b.times, strict=True):
            c = cols[partition(t)]
            c["cluster"].append(cluster)
            c["broker"].append(b.broker)
            c["quota_type"].append(b.quota_type)
            c["user"].append(user)
            c["client_id"].append(client_id)
            c["t_ms"].append(t)
            c["value"].append(value)
    return {part: pa.table(c, schema=USAGE_SCHEMA) for part, c in cols.items()}


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


def sample_tables(rows: Sequence[tuple[Any, dict[Any, Any]]], cluster: str) -> dict[str, pa.Table]:
    """Firehose entries (a tick's samples each) -> one table per partition of each sample's own ``t``."""
    cols: dict[str, dict[str, list[Any]]] = defaultdict(lambda: {n: [] for n in SAMPLES_SCHEMA.names})
    for _entry_id, fields in rows:
        data = fields.get(b"d", fields.get("d"))
        if data is None:
            continue
        for s in json.loads(data):
            t = int(s["t"])
            c = cols[partition(t)]
            c["t"].append(t)
            c["c"].append(s.get("c", cluster))
            c["b"].append(int(s["b"]))
            c["q"].append(s.get("q"))
            c["e"].append(s.get("e"))
            for name in SAMPLE_FLOATS:
                c[name].append(_float(s.get(name)))
            c["src"].append(s.get("src"))
            res = s.get("res_ms")
            c["res_ms"].append(None if res is None else int(res))
    return {part: pa.table(c, schema=SAMPLES_SCHEMA) for part, c in cols.items()}


def telemetry_table(lines: Iterable[str]) -> pa.Table:
    """The sink's JSON lines (one push each) -> one row per metric point."""
    cols: dict[str, list[Any]] = {n: [] for n in TELEMETRY_SCHEMA.names}
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            log.warning("Skipping a malformed telemetry line: %.200s", line)
            continue
        for p in entry.get("points") or []:
            cols["t"].append(int(entry["t"]))
            cols["c"].append(entry.get("c"))
            cols["instance"].append(entry.get("instance"))
            cols["client_id"].append(entry.get("client_id"))
            cols["name"].append(p.get("name"))
            cols["attrs"].append(json.dumps(p.get("attrs") or {}, separators=(",", ":"), sort_keys=True))
            cols["point_t"].append(None if p.get("t") is None else int(p["t"]))
            cols["value"].append(_float(p.get("value")))
    return pa.table(cols, schema=TELEMETRY_SCHEMA)


# ------------------------------------------------------------------ streams


@dataclass
class Landed:
    """What one run landed (for the task's result and the tests)."""

    files: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    ranges: int = 0
    lost: list[str] = field(default_factory=list)  # sources whose stream was trimmed past the checkpoint

    def as_dict(self) -> dict[str, Any]:
        return {"files": len(self.files), "rows": dict(self.rows), "ranges": self.ranges, "lost": self.lost}


def _source_id(client: redis.Redis, cluster: str) -> str:
    key = source_id_key(cluster)
    client.set(key, uuid.uuid4().hex[:8], nx=True)
    return _text(client.get(key))


def _stream_key(source: str, cluster: str) -> str:
    return usage_log.log_key(cluster) if source == USAGE else firehose_key(cluster)


def _plan(client: redis.Redis, cluster: str, source: str, batch: int) -> dict[str, str] | None:
    """The pending range (a crashed or concurrent run's), or a new one after the checkpoint; None when caught up."""
    pkey = pending_key(cluster, source)
    raw = client.get(pkey)
    if raw is not None:
        return json.loads(raw)
    after = client.get(checkpoint_key(cluster, source))
    after_s = _text(after) if after is not None else ""
    rows = client.xrange(_stream_key(source, cluster), min=f"({after_s}" if after_s else "-", max="+", count=batch)
    if not rows:
        return None
    plan = {"after": after_s, "first": _text(rows[0][0]), "last": _text(rows[-1][0])}
    if not client.set(pkey, json.dumps(plan, sort_keys=True), nx=True):  # another run planned first: finish its range
        raw = client.get(pkey)
        return json.loads(raw) if raw is not None else None
    return plan


def _after(entry_id: str) -> str:
    """The smallest stream id after ``entry_id`` (XTRIM MINID keeps ids >= it)."""
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


def _trimmed_past(client: redis.Redis, key: str, after: str) -> bool:
    """True when the stream dropped entries newer than ``after`` (MAXLEN trimming outran the landing)."""
    if not after:
        return False
    try:
        info = client.xinfo_stream(key)
    except redis.ResponseError:
        return False
    deleted = info.get("max-deleted-entry-id")
    if deleted is None:
        return False
    d_ms, _, d_seq = _text(deleted).partition("-")
    a_ms, _, a_seq = after.partition("-")
    return (int(d_ms), int(d_seq or 0)) > (int(a_ms), int(a_seq or 0))


def land_stream(
    client: redis.Redis, cluster: str, source: str, root: Path, batch: int = DEFAULT_BATCH,
    max_ranges: int = 100, stale_s: float = DEFAULT_STALE_S, result: Landed | None = None,
    crash_before_commit: bool = False,
) -> Landed:
    """Land one cluster's stream (``usage`` or ``samples``) of one Redis, range by range, until caught up.

    ``crash_before_commit`` (tests) stops after the first range's files are renamed, before the checkpoint moves.
    """
    result = result if result is not None else Landed()
    key = _stream_key(source, cluster)
    src = _source_id(client, cluster)
    commit = client.register_script(_COMMIT)
    for _ in range(max_ranges):
        plan = _plan(client, cluster, source, batch)
        if plan is None:
            break
        if _trimmed_past(client, key, plan["after"]):
            log.warning("Landing %s of %s: the stream was trimmed past the checkpoint; records were lost", source,
                        cluster)
            result.lost.append(f"{cluster}/{source}")
        rows = client.xrange(key, min=plan["first"], max=plan["last"])
        tables = usage_tables(rows, cluster) if source == USAGE else sample_tables(rows, cluster)
        name = f"part-{_safe(cluster)}-{src}-{plan['first']}-{plan['last']}.parquet"
        for part, table in sorted(tables.items()):
            directory = root / source / part
            final = directory / name
            if write_parquet(table, final):
                result.files.append(str(final))
                result.rows[source] += table.num_rows
            sweep_stale(directory, stale_s)
        if crash_before_commit:
            return result
        # landed usage leaves Redis with the checkpoint (the Parquet files are its record from now on): the log
        # then holds only what is not landed yet, not LOG_LEN batches of history. The samples firehose stays as
        # it is, capped: the relay tails it
        trim = _after(plan["last"]) if source == USAGE else ""
        commit(keys=[checkpoint_key(cluster, source), pending_key(cluster, source), key],
               args=[json.dumps(plan, sort_keys=True), plan["last"], trim])
        result.ranges += 1
    return result


# ------------------------------------------------------------------ telemetry files


def _claim(hour_dir: Path, staging: Path) -> Path | None:
    """Move the hour's finished JSON-lines files into a new batch directory and seal it; None when there were none."""
    files = sorted(p for p in hour_dir.glob("*.jsonl") if not p.name.startswith((".", "_")))
    if not files:
        return None
    batch_id = uuid.uuid4().hex[:16]
    opened = staging / f"_open-{batch_id}"
    opened.mkdir(parents=True, exist_ok=True)
    moved = 0
    for p in files:
        try:
            os.rename(p, opened / p.name)
            moved += 1
        except FileNotFoundError:  # claimed by an overlapping run
            pass
    if not moved:
        opened.rmdir()
        return None
    sealed = staging / batch_id
    os.rename(opened, sealed)
    return sealed


def _land_batch(batch: Path, root: Path, part: str, result: Landed, archive: bool = True) -> None:
    """Write a sealed batch as one Parquet file (named after the batch) and archive its JSON lines."""
    final = root / TELEMETRY / part / f"part-tel-{batch.name}.parquet"
    try:
        lines = [line for p in sorted(batch.glob("*.jsonl")) for line in p.read_text(encoding="utf-8").splitlines()]
    except FileNotFoundError:  # an overlapping run landed and archived it meanwhile
        return
    table = telemetry_table(lines)
    if table.num_rows and write_parquet(table, final):
        result.files.append(str(final))
        result.rows[TELEMETRY] += table.num_rows
    if not archive:
        return
    archived = root / "_landed" / TELEMETRY / part
    archived.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(batch, archived / batch.name)
    except FileNotFoundError:  # archived by an overlapping run
        pass


def land_telemetry(root: Path, stale_s: float = DEFAULT_STALE_S, result: Landed | None = None,
                   crash_before_archive: bool = False) -> Landed:
    """Land the sink's JSON-lines files (every cluster: each row has its ``c``), once each.

    ``crash_before_archive`` (tests) stops after the first batch's Parquet file is renamed, before it is archived.
    """
    result = result if result is not None else Landed()
    src = root / "_incoming" / TELEMETRY  # the sink's JSON lines (telemetry_ui.ingest.telemetry_store.landing_dir)
    staging_root = root / "_staging" / TELEMETRY
    parts = {f"{p.parent.name}/{p.name}" for p in src.glob("date=*/hour=*") if p.is_dir()}
    parts |= {f"{p.parent.name}/{p.name}" for p in staging_root.glob("date=*/hour=*") if p.is_dir()}
    now = time.time()
    for part in sorted(parts):
        staging = staging_root / part
        if staging.is_dir():  # an open batch of a run that died while claiming, long ago: seal what it holds
            for p in list(staging.iterdir()):
                if p.name.startswith("_open-") and now - p.stat().st_mtime > stale_s:
                    os.rename(p, staging / p.name.removeprefix("_open-"))
        if (src / part).is_dir():
            _claim(src / part, staging)
        # every sealed batch: this run's, and those an earlier run claimed but did not finish
        batches = sorted(p for p in staging.iterdir() if not p.name.startswith("_")) if staging.is_dir() else []
        for batch in batches:
            _land_batch(batch, root, part, result, archive=not crash_before_archive)
            if crash_before_archive:
                return result
        sweep_stale(src / part, stale_s)
    return result


# ------------------------------------------------------------------ the task's entry point


def land_all(sources: Iterable[tuple[redis.Redis, str]], root: Path, batch: int = DEFAULT_BATCH,
             stale_s: float = DEFAULT_STALE_S) -> Landed:
    """Land usage and samples of every (Redis, cluster), then the telemetry files."""
    result = Landed()
    for client, cluster in sources:
        for source in (USAGE, SAMPLES):
            try:
                land_stream(client, cluster, source, root, batch=batch, stale_s=stale_s, result=result)
            except (redis.RedisError, OSError) as e:
                log.warning("Landing %s of %s failed (it resumes on the next run): %s", source, cluster, e)
    land_telemetry(root, stale_s=stale_s, result=result)
    return result
