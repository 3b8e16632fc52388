"""What would a proposed quota have done to an entity's recorded traffic?

    python -m pipeline.whatif --root R --cluster C [--user U] [--client-id X] --key producer_byte_rate --value V \
        [--advice-target 0.01] [--scope per_broker|cluster_wide]

Reads ``<root>/usage/``: the records of the key's quota type that the entity's quota governs (``pipeline.usage``:
a part left out shares one sensor, a ``<default>`` part gives each client its own), replays them per broker
through the engine's reference model with the proposed quota (``pipeline.replay``, closed loop: a throttled
client waits out its throttle time; see there), and prints JSON: throttle events, total / p99 / max delay (ms),
bytes, the recorded rate and the rate the tenant would have got (bytes over the time it would have taken), the
fraction of time throttled, and the span of history used. Kafka's quotas are per broker, so each broker's
records go through their own sensor, and ``per_broker`` gives each broker's requests, bytes, recorded rate (over the
whole span: they add up to ``recorded_rate``) and throttle events: the rates a per-broker bound applies to. The
figures are computed in the Python workers (``summarize_usage``, the records sent there as numbers only) and one row
comes back; ``replay_usage`` gives the per-record rows instead. A landing area small enough (``fits_driver``: a
preview's usual case) has the entity's records read on the driver (pyarrow, no Spark action) and the same figures
computed there with the same functions (``replayed_on``: ``driver`` or ``executors``; ``--distributed`` forces the
latter); ``stages_s`` says how long each part took.
``--advice-target`` adds ``pipeline.advice``'s right-sizing for the same records. ``--scope cluster_wide`` replays
the value as a cluster-wide budget instead (``pipeline.budget_replay``: each sensor's records on all brokers together,
with shares that follow demand as the broker plugin hands them out) and adds ``delivered_over_budget``. Progress goes
to stderr as JSON lines (``pipeline.progress``).

An entity with no usage records but with samples from Prometheus (a real Kafka cluster: Kafka's own sensors at the
scrape interval, ``pipeline.usage.sampled_usage``) is replayed from those, as even traffic over each sample's
interval. Either way ``resolution`` in the result says what the figures rest on ("per 5 s, from Prometheus") and
what they cannot know at that resolution.

Replayed traffic that Kafka throttled while it was recorded is what Kafka let through, not what the clients asked
for. ``pipeline.recorded`` reads the landed samples of the same sensors over the same span and the result says so:
``recorded_throttled_fraction`` (the share of the time they cover spent throttled; None without samples),
``recorded_quota`` (the quota that applied then) and ``recorded_throttling`` (source, samples, a sentence). The advice
then carries ``lower_bound`` (that share is at least ``MATERIAL_FRACTION``: the smallest quota meeting the target is at
least the figure), ``at_or_below_recorded_quota`` (the figure is not above the quota that was throttling the traffic)
and ``note``, one sentence saying which. Where that share is material, ``demand`` says what the clients asked for
beside what got through (``pipeline.demand``: an estimate from the throttle time Kafka returned, or a producer's
KIP-714 queue time landed under ``telemetry/``, naming its evidence; None otherwise).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import operator
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from engine.budgets import BUDGET_TYPES
from engine.entities import DEFAULT, TYPE_OF_KEY, validate_quota_value
from engine.errors import QuotaValidationError

from .advice import METHOD, advise, advise_usage
from .budget_replay import delivered_over_budget, replay_budget
from .demand import QUEUE_TIME, estimate, queue_demand, queue_growth
from .errors import BadArguments, CorruptInput, NoHistory, PipelineError
from .progress import Progress
from .recorded import advice_caveat, recorded_throttling
from .replay import never_throttled, replay_frame, replay_sorted, summarize
from .session import base_parser, read_dataset, require_local_dataset, run_job
from .usage import (
    SAMPLED_SOURCE,
    check_entity,
    governed,
    load_usage,
    load_usage_if_any,
    resolution,
    sampled_usage,
    share_sensors,
    valid_usage,
)

REPLAY_SCHEMA = (
    "cluster string, broker long, user string, client_id string, seq long, t_ms long, value double, "
    "sent_ms long, throttle_ms long, throttle_ms_long long, measured double"
)


def replay_usage(usage: DataFrame, quota_type: str, quota: float | None, *, samples: int = 11,
                 window_ms: int = 1000, closed: bool = True, per_group: bool = False,
                 entity: tuple[str | None, str | None] | None = None) -> DataFrame:
    """Per (cluster, broker, user, client_id), the records replayed in time order through the model.

    ``entity``: the config entity the quota is set on (``pipeline.usage.governed``), else each group's names.
    ``per_group=True`` takes each group's proposal from its own ``quota``, ``samples`` and ``window_ms``
    columns (many proposals in one job) instead of the arguments.
    """
    fn = functools.partial(_group, quota_type=quota_type, quota=quota, samples=samples, window_ms=window_ms,
                           closed=closed, per_group=per_group, entity=entity)
    cols = [
        F.col("cluster").cast("string"), F.col("broker").cast("long"), F.col("user").cast("string"),
        F.col("client_id").cast("string"), F.col("seq").cast("long"), F.col("t_ms").cast("long"),
        F.col("value").cast("double"),
    ]
    if per_group:
        cols += [F.col("quota").cast("double"), F.col("samples").cast("long"), F.col("window_ms").cast("long")]
    return usage.select(*cols).groupBy("cluster", "broker", "user", "client_id").applyInPandas(fn, REPLAY_SCHEMA)


def _group(pdf, *, quota_type, quota, samples, window_ms, closed, per_group, entity):  # runs on the executors
    if per_group:
        first = pdf.iloc[0]
        quota, samples, window_ms = float(first["quota"]), int(first["samples"]), int(first["window_ms"])
    return replay_frame(pdf, quota_type, quota, samples=samples, window_ms=window_ms, closed=closed, entity=entity)


SUMMARY_SCHEMA = (
    "cluster string, user string, client_id string, requests long, throttle_events long, total_delay_ms long, "
    "p99_delay_ms long, max_delay_ms long, bytes double, recorded_rate double, achieved_rate double, "
    "throttled_fraction double, history_from_ms long, history_to_ms long, brokers long"
)
#: The figures of ``pipeline.replay.summarize``, in its order.
FIGURES = ("requests", "throttle_events", "total_delay_ms", "p99_delay_ms", "max_delay_ms", "bytes", "recorded_rate",
           "achieved_rate", "throttled_fraction")
_NAMES = ("cluster", "user", "client_id")
_KEY_SALTS = 4  # a 64-bit collision among the entities is ~1e-12 likely; a second one in a row means a bug
_ARROW_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
#: shuffle partitions per core for the summaries: the Python workers stay busy, without 200 tasks' overhead
TASKS_PER_CORE = 4

Names = tuple[str | None, str | None, str | None]


def summarize_usage(usage: DataFrame, quota_type: str, quota: float | None, *, samples: int = 11,
                    window_ms: int = 1000, closed: bool = True, entity: tuple[str | None, str | None] | None = None,
                    one_group: bool = False, replay_all: bool = False) -> DataFrame:
    """``summarize``'s figures of the replay without per-record rows: one row per (cluster, user, client_id) entity
    of ``usage`` (one quota type), each broker its own sensor; or, ``one_group=True``, one ``PART_SCHEMA`` row per
    partition that ``figures`` merges into the figures over every record (``summarize_proposal``).

    Python gets only numbers: the records are grouped by a 64-bit hash of the names computed in the JVM, after a
    distinct pass has checked (exactly) that no two entities share a hash; the names each sensor needs to resolve its
    bound go to the workers with the function. A broker's records that provably never reach the bound
    (``pipeline.replay.never_throttled``) are not replayed (the figures are the same) unless ``replay_all``.
    ``entity`` as in ``replay_usage``. Run the action inside ``arrow_batches_by_rows`` (a third less JVM work).
    """
    salt, names = _entity_keys(usage)
    ddl = PART_SCHEMA if one_group else SUMMARY_SCHEMA
    schema = to_arrow_schema(StructType.fromDDL(ddl))
    fn = functools.partial(_summaries, schema=schema, names=names, quota_type=quota_type, quota=quota, samples=samples,
                           window_ms=window_ms, closed=closed, entity=entity, one_group=one_group,
                           replay_all=replay_all)
    keyed = usage.select(
        _entity_key(salt).alias("key"), F.col("broker").cast("long"), F.col("seq").cast("long"),
        F.col("t_ms").cast("long"), F.col("value").cast("double"),
    )
    # a few partitions per core: the Python workers stay busy, without the per-task cost of 200 (measured ~10 %)
    spread = keyed.repartition(TASKS_PER_CORE * usage.sparkSession.sparkContext.defaultParallelism, "key")
    # sorted by the key only: Spark's radix sort; each worker then orders one sensor's few records itself
    return spread.sortWithinPartitions("key").mapInArrow(fn, ddl)


def summarize_proposal(usage: DataFrame, quota_type: str, quota: float | None, *, samples: int = 11,
                       window_ms: int = 1000, closed: bool = True,
                       entity: tuple[str | None, str | None] | None = None) -> dict | None:
    """The figures of one proposal over every record of ``usage`` (all its sensors and brokers: the p99 is over all
    the requests), replayed in parallel and merged on the driver; None without records."""
    spark = usage.sparkSession
    with arrow_batches_by_rows(spark):
        table = summarize_usage(usage, quota_type, quota, samples=samples, window_ms=window_ms, closed=closed,
                                entity=entity, one_group=True).toArrow()
    if not table.num_rows:
        return None
    lists = ["brokers", "broker_requests", "broker_bytes", "broker_throttled", "delays"]
    scalars = table.drop_columns(lists).to_pylist()
    parts = [{**row, **{c: table.column(c)[i].values.to_numpy() for c in lists}} for i, row in enumerate(scalars)]
    return figures(parts, window_ms)


BUDGET_SCHEMA = REPLAY_SCHEMA + ", share double"


def summarize_budget(usage: DataFrame, quota_type: str, budget: float, *, samples: int = 11, window_ms: int = 1000,
                     entity: tuple[str | None, str | None] | None = None) -> dict | None:
    """The figures of a cluster-wide budget over every record of ``usage``: each sensor's records on all brokers
    replayed together with shares that follow demand (``pipeline.budget_replay``); None without records."""
    fn = functools.partial(_budget_group, quota_type=quota_type, budget=budget, samples=samples,
                           window_ms=window_ms, entity=entity)
    cols = [F.col(c).cast(t) for c, t in (("cluster", "string"), ("broker", "long"), ("user", "string"),
                                          ("client_id", "string"), ("seq", "long"), ("t_ms", "long"),
                                          ("value", "double"))]
    rows = usage.select(*cols).groupBy("cluster", "user", "client_id").applyInPandas(fn, BUDGET_SCHEMA).toPandas()
    return budget_figures(rows, budget, window_ms)


def budget_figures(rows: pd.DataFrame, budget: float, window_ms: int) -> dict | None:
    """The figures of a cluster-wide budget's replay rows (``BUDGET_SCHEMA``, every sensor); None without rows."""
    if rows.empty:
        return None
    recorded_s = max(int(rows["t_ms"].max()) - int(rows["t_ms"].min()), window_ms) / 1000.0
    each = {int(b): [len(g), float(g["value"].sum()), int((g["throttle_ms_long"] > 0).sum())]
            for b, g in rows.groupby("broker")}
    return {**summarize(rows, window_ms), "brokers": len(each), "per_broker": per_broker_rows(each, recorded_s),
            "history_from_ms": int(rows["t_ms"].min()), "history_to_ms": int(rows["t_ms"].max()),
            # each sensor is its own budget (a <default> part gives every client one): the busiest of them
            "delivered_over_budget": max(delivered_over_budget(g, budget)
                                         for _, g in rows.groupby(["cluster", "user", "client_id"]))}


def _budget_group(pdf, *, quota_type, budget, samples, window_ms, entity):  # runs on the executors
    return replay_budget(pdf, quota_type, budget, samples=samples, window_ms=window_ms, entity=entity)


@contextmanager
def arrow_batches_by_rows(spark: SparkSession) -> Iterator[None]:
    """Within the block, Arrow batches to Python are cut by row count only (``maxRecordsPerBatch`` still bounds
    them): otherwise Spark measures the batch it fills after every row, a third of its work on narrow numeric rows."""
    before = spark.conf.get(_ARROW_BYTES)
    spark.conf.set(_ARROW_BYTES, str(2**31 - 1))
    try:
        yield
    finally:
        spark.conf.set(_ARROW_BYTES, before)


def _entity_key(salt: int) -> Column:
    """The 64-bit key of a record's (cluster, user, client_id): a plain hash of the names, then salted ones."""
    names = [F.col(c).cast("string") for c in _NAMES]
    if not salt:
        return F.xxhash64(*names)
    # a null hashes to nothing: flagged here, or (null, "x") and ("x", null) would collide whatever the salt
    return F.xxhash64(F.lit(salt), *itertools.chain.from_iterable((n.isNull(), n) for n in names))


def _entity_keys(usage: DataFrame) -> tuple[int, dict[int, Names]]:
    """The salt of a key that tells every entity of ``usage`` apart, and the names of each key."""
    entities = usage.select(*(F.col(c).cast("string") for c in _NAMES)).distinct()
    rows = entities.select(_entity_key(0).alias("key"), *_NAMES).collect()  # the one pass over the records
    for salt in range(_KEY_SALTS):
        if salt:  # the previous key collided (~1e-12 likely): the next salt, on the distinct names only
            found = usage.sparkSession.createDataFrame([r[1:] for r in rows], entities.schema)
            rows = found.select(_entity_key(salt).alias("key"), *_NAMES).collect()
        names = {r["key"]: (r["cluster"], r["user"], r["client_id"]) for r in rows}
        if len(names) == len(rows):
            return salt, names
    raise PipelineError(f"{_KEY_SALTS} hashes of the entity names in a row collided; refusing to mix entities.")


class _Figures:
    """``summarize``'s figures accumulated sensor by sensor, from the replay's plain lists."""

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self.delays: list[np.ndarray] = []
        self.values: list[np.ndarray] = []
        self.brokers: dict[int, list] = {}  # broker -> [requests, bytes, throttle events]
        self.start = self.recorded_end = self.achieved_end = None
        self.throttled = self.observed = 0

    def add(self, broker: int, t_ms: np.ndarray, values: np.ndarray, sent: Sequence[int], delays: Sequence[int],
            closed: bool) -> None:
        """One sensor's records on one broker, in replay order (t_ms ascending)."""
        # closed loop: each request waits out the previous one's throttle, so the last one ends last
        end = int(sent[-1] + delays[-1]) if closed else int(max(map(operator.add, sent, delays)))
        d = np.asarray(delays, dtype=np.int64)
        first, last = int(t_ms[0]), int(t_ms[-1])
        self.start = first if self.start is None else min(self.start, first)
        self.recorded_end = last if self.recorded_end is None else max(self.recorded_end, last)
        self.achieved_end = end if self.achieved_end is None else max(self.achieved_end, end)
        self.throttled += int(d.sum())  # time throttled and time observed per sensor: each its own timeline
        self.observed += max(end, last, first + self.window_ms) - first
        mine = self.brokers.setdefault(broker, [0, 0.0, 0])
        mine[0] += len(d)
        mine[1] += float(values.sum())
        mine[2] += int(np.count_nonzero(d))
        self.delays.append(d)
        self.values.append(values)

    def part(self) -> dict:
        """What ``figures`` needs, mergeable with other parts (several entities or partitions): PART_SCHEMA."""
        d = self.delays[0] if len(self.delays) == 1 else np.concatenate(self.delays)
        v = self.values[0] if len(self.values) == 1 else np.concatenate(self.values)
        ids = sorted(self.brokers)
        return {"requests": len(d), "total_delay_ms": int(d.sum()), "max_delay_ms": int(d.max()),
                "bytes": float(v.sum()), "history_from_ms": self.start, "history_to_ms": self.recorded_end,
                "achieved_end_ms": self.achieved_end, "throttled_ms": self.throttled, "observed_ms": self.observed,
                "brokers": ids, "broker_requests": [self.brokers[b][0] for b in ids],
                "broker_bytes": [self.brokers[b][1] for b in ids],
                "broker_throttled": [self.brokers[b][2] for b in ids],
                "delays": d[d != 0]}

    def row(self) -> dict:
        return figures([self.part()], self.window_ms)


#: One part of a proposal's figures (``_Figures.part``): a partition's sensors, merged on the driver by ``figures``.
PART_SCHEMA = (
    "requests long, total_delay_ms long, max_delay_ms long, bytes double, history_from_ms long, history_to_ms long, "
    "achieved_end_ms long, throttled_ms long, observed_ms long, brokers array<long>, broker_requests array<long>, "
    "broker_bytes array<double>, broker_throttled array<long>, delays array<long>"
)


def figures(parts: Sequence[dict], window_ms: int) -> dict:
    """``summarize``'s figures (and the span and brokers) of the parts together: sums, extremes, and the p99 over
    every request (nearest rank; only the non-zero delays travel, the zeros are counted)."""
    n = sum(int(p["requests"]) for p in parts)
    nonzero = np.concatenate([np.asarray(p["delays"], dtype=np.int64) for p in parts])
    zeros, rank = n - len(nonzero), max(0, math.ceil(0.99 * n) - 1)
    p99 = 0 if rank < zeros else int(np.partition(nonzero, rank - zeros)[rank - zeros])
    start = min(int(p["history_from_ms"]) for p in parts)
    recorded_end = max(int(p["history_to_ms"]) for p in parts)
    achieved_end = max(int(p["achieved_end_ms"]) for p in parts)
    total = math.fsum(float(p["bytes"]) for p in parts)
    recorded_s = max(recorded_end - start, window_ms) / 1000.0
    achieved_s = max(achieved_end - start, recorded_end - start, window_ms) / 1000.0
    observed = sum(int(p["observed_ms"]) for p in parts)
    each: dict[int, list] = {}
    for p in parts:
        for b, n_b, bytes_b, thr_b in zip(p["brokers"], p["broker_requests"], p["broker_bytes"], p["broker_throttled"],
                                          strict=True):
            mine = each.setdefault(int(b), [0, 0.0, 0])
            mine[0], mine[1], mine[2] = mine[0] + int(n_b), mine[1] + float(bytes_b), mine[2] + int(thr_b)
    return {
        "requests": n, "throttle_events": len(nonzero), "total_delay_ms": sum(int(p["total_delay_ms"]) for p in parts),
        "p99_delay_ms": p99, "max_delay_ms": max(int(p["max_delay_ms"]) for p in parts), "bytes": total,
        "recorded_rate": total / recorded_s, "achieved_rate": total / achieved_s,
        "throttled_fraction": sum(int(p["throttled_ms"]) for p in parts) / observed if observed else 0.0,
        "history_from_ms": start, "history_to_ms": recorded_end,
        "brokers": len(each), "per_broker": per_broker_rows(each, recorded_s),
    }


def per_broker_rows(each: dict[int, list], recorded_s: float) -> list[dict]:
    """Per broker (ascending id): its requests, bytes, throttle events of the replay, and its recorded rate over the
    whole recorded span (so the brokers' rates add up to ``recorded_rate``): what its own sensor saw."""
    return [{"broker": b, "requests": int(n), "bytes": float(v), "recorded_rate": float(v) / recorded_s,
             "throttle_events": int(t)} for b, (n, v, t) in sorted(each.items())]


def _key_runs(batches: Iterator[pa.RecordBatch]) -> Iterator[dict[str, np.ndarray]]:
    """The records of each key in turn, from batches sorted by key (a key's records may span batches)."""
    pending: list[dict[str, np.ndarray]] = []
    for batch in batches:
        cols = {c: batch.column(c).to_numpy() for c in ("key", "broker", "seq", "t_ms", "value")}
        keys = cols["key"]
        for lo, hi in _runs(keys):
            if pending and pending[0]["key"][0] != keys[lo]:
                yield _joined(pending)
                pending = []
            pending.append({c: a[lo:hi] for c, a in cols.items()})
    if pending:
        yield _joined(pending)


def _runs(a: np.ndarray) -> Iterator[tuple[int, int]]:
    """(start, end) of each run of equal values in ``a``."""
    return itertools.pairwise([0, *(np.flatnonzero(a[1:] != a[:-1]) + 1).tolist(), len(a)]) if len(a) else iter(())


def _joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return parts[0] if len(parts) == 1 else {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}


def _summaries(batches, *, schema, names, quota_type, quota, samples, window_ms, closed, entity, one_group,
               replay_all):  # runs on the executors
    out: dict[str, list] = {c: [] for c in schema.names}
    part = _Figures(window_ms)
    for run in _key_runs(batches):
        cluster, user, client_id = names[int(run["key"][0])]
        order = np.lexsort((run["seq"], run["t_ms"], run["broker"]))  # per broker, by t_ms then landed order
        broker, t_ms, values = run["broker"][order], run["t_ms"][order], run["value"][order]
        mine = part if one_group else _Figures(window_ms)
        _replay_entity(mine, str(user), str(client_id), broker, t_ms, values, quota_type=quota_type, quota=quota,
                       samples=samples, window_ms=window_ms, closed=closed, entity=entity, replay_all=replay_all)
        if not one_group:
            for c, x in zip(_NAMES, (cluster, user, client_id), strict=True):
                out[c].append(x)
            for c, x in mine.row().items():
                if c in out:  # the per-broker rows are the proposal's (one_group), not a summary row's
                    out[c].append(x)
    if one_group and part.delays:
        for c, x in part.part().items():
            out[c].append(x)
    if out["requests"]:  # list columns: numpy arrays and lists both convert
        yield pa.RecordBatch.from_pydict(out, schema=schema)


def _replay_entity(part: _Figures, user: str, client_id: str, broker: np.ndarray, t_ms: np.ndarray,
                   values: np.ndarray, *, quota_type: str, quota: float | None, samples: int, window_ms: int,
                   closed: bool, entity: tuple[str | None, str | None] | None, replay_all: bool) -> None:
    """One entity's records (ordered by broker, time, landed order) replayed broker by broker into ``part``; a
    broker's records that provably never reach the bound are added without a replay (unless ``replay_all``)."""
    for lo, hi in _runs(broker):
        t, v = t_ms[lo:hi], values[lo:hi]
        args = (user, client_id, quota_type, quota, t, v)
        if not replay_all and never_throttled(*args, samples=samples, window_ms=window_ms, entity=entity):
            part.add(int(broker[lo]), t, v, t, np.zeros(len(t), dtype=np.int64), closed)
            continue
        r = replay_sorted(*args, samples=samples, window_ms=window_ms, closed=closed, entity=entity)
        part.add(int(broker[lo]), t, v, r.sent_ms, r.throttle_ms_long, closed)


# ------------------------------------------------------------------ one entity on the driver

#: Up to this much landed usage and samples (a local landing area), a preview reads its entity's records and samples
#: on the driver (pyarrow) and computes its figures there (``_on_driver``); above it, or with ``--distributed``, on
#: the executors. A warm local session runs an action in a few hundred ms, and the executors' way is seven of them
#: (the names' pass, the replay's shuffle, the clients, the count, the advice, the samples) for a few thousand records.
DRIVER_MAX_BYTES = 256 * 1024**2
_COLLECTED = [("cluster", "string"), ("broker", "long"), ("quota_type", "string"), ("user", "string"),
              ("client_id", "string"), ("seq", "long"), ("t_ms", "long"), ("value", "double")]


def fits_driver(root: str) -> bool:
    """Whether ``root`` is a local folder whose landed usage and samples add up to at most ``DRIVER_MAX_BYTES``."""
    url = urlparse(root)
    if url.scheme not in ("", "file"):
        return False
    total = 0
    for dataset in ("usage", "samples"):
        for directory, _dirs, files in os.walk(Path(url.path if url.scheme else root) / dataset):
            total += sum(os.stat(os.path.join(directory, f)).st_size for f in files)
            if total > DRIVER_MAX_BYTES:
                return False
    return True


def local_folder(root: str) -> Path | None:
    """The folder of a local landing area (a path or a ``file:`` URI); None for any other URI."""
    url = urlparse(root)
    return Path(url.path if url.scheme else root) if url.scheme in ("", "file") else None


def read_local_usage(root: str, cluster: str, quota_type: str, user: str | None,
                     client_id: str | None) -> pd.DataFrame | None:
    """The records ``governed(load_usage(...), blank=False)`` selects, read on the driver from a local landing area
    (pyarrow: no Spark action, the filters pushed to the files' row groups), ``seq`` their order in the files taken by
    name (the landed order); None when no usage file was landed. Files and folders starting with ``_`` or ``.`` are
    never read, as ``pipeline.session.read_dataset`` reads them."""
    folder = local_folder(root)
    if folder is None or not (folder / "usage").is_dir():
        return None
    check_entity(user, client_id)
    try:
        found = ds.dataset(str(folder / "usage"), format="parquet", partitioning="hive")
        files = sorted(found.files)
        if not files:
            return None
        keep = (pc.field("cluster") == cluster) & (pc.field("quota_type") == quota_type)
        for column, name in (("user", user), ("client_id", client_id)):
            if name is not None and name != DEFAULT:
                keep &= pc.field(column) == name
        table = ds.dataset(files, format="parquet", schema=found.schema, partitioning="hive",
                           partition_base_dir=str(folder / "usage")).to_table(
            columns=[c for c, _t in _COLLECTED if c != "seq"], filter=keep)
    except (pa.ArrowException, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CorruptInput(f"Unreadable Parquet under {folder / 'usage'}: {first[:500]}") from e
    rows = table.to_pandas()
    rows.insert(5, "seq", np.arange(len(rows), dtype=np.int64))
    return rows


def collect_records(records: DataFrame) -> pd.DataFrame:
    """The records (usage rows, or samples spread into records) as pandas, in one Spark action (Arrow)."""
    return records.select(*(F.col(c).cast(t).alias(c) for c, t in _COLLECTED)).toArrow().to_pandas()


def valid_records(rows: pd.DataFrame) -> pd.DataFrame:
    """``pipeline.usage.valid_usage`` on the driver: a finite value >= 0 at a known time on a known broker."""
    v = rows["value"]
    keep = v.notna() & (v >= 0) & np.isfinite(v) & rows["t_ms"].notna() & rows["broker"].notna()
    good = rows[keep]
    return good.astype({"broker": "int64", "seq": "int64", "t_ms": "int64", "value": "float64"})


def shared_sensors(rows: pd.DataFrame, user: str | None, client_id: str | None) -> pd.DataFrame:
    """``pipeline.usage.share_sensors`` on the driver: the entity's absent parts blanked."""
    blank = {c: "" for c, name in (("user", user), ("client_id", client_id)) if name is None}
    return rows.assign(**blank) if blank else rows


def summarize_on_driver(good: pd.DataFrame, quota_type: str, quota: float | None, *, samples: int = 11,
                        window_ms: int = 1000, closed: bool = True,
                        entity: tuple[str | None, str | None] | None = None) -> dict | None:
    """``summarize_proposal``'s figures computed on the driver from collected records (one cluster); None without."""
    if good.empty:
        return None
    part = _Figures(window_ms)
    for (user, client_id), g in good.groupby(["user", "client_id"], sort=False, dropna=False):
        order = np.lexsort((g["seq"].to_numpy(), g["t_ms"].to_numpy(), g["broker"].to_numpy()))
        broker, t_ms, values = (g[c].to_numpy()[order] for c in ("broker", "t_ms", "value"))
        _replay_entity(part, str(user), str(client_id), broker, t_ms, values, quota_type=quota_type, quota=quota,
                       samples=samples, window_ms=window_ms, closed=closed, entity=entity, replay_all=False)
    return figures([part.part()], window_ms)


def budget_on_driver(good: pd.DataFrame, quota_type: str, budget: float, *, samples: int = 11, window_ms: int = 1000,
                     entity: tuple[str | None, str | None] | None = None) -> dict | None:
    """``summarize_budget``'s figures computed on the driver from collected records; None without."""
    if good.empty:
        return None
    rows = pd.concat([replay_budget(g, quota_type, budget, samples=samples, window_ms=window_ms, entity=entity)
                      for _, g in good.groupby(["cluster", "user", "client_id"], sort=False, dropna=False)],
                     ignore_index=True)
    return budget_figures(rows, budget, window_ms)


def advise_on_driver(good: pd.DataFrame, target: float, samples: int = 11, window_ms: int = 1000,
                     entity: tuple[str | None, str | None] | None = None) -> pd.DataFrame:
    """``pipeline.advice.advise_usage`` on the driver: one advice row per (cluster, quota type, user, client-id),
    ordered by user and client-id."""
    rows = [advise(g.reset_index(drop=True), target, samples, window_ms, entity)
            for _, g in good.groupby(["cluster", "quota_type", "user", "client_id"], sort=True, dropna=False)]
    if not rows:
        return pd.DataFrame()
    return pd.concat(rows, ignore_index=True).sort_values(["user", "client_id"], kind="stable")


def check_proposal(key: str, value: float) -> tuple[str, float]:
    """The quota type of a client-quota key and the value as Kafka would accept it."""
    try:
        v = validate_quota_value(key, value, "client")
    except QuotaValidationError as e:
        raise BadArguments(e.message) from e
    return str(TYPE_OF_KEY[key]), v


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = base_parser("Replay an entity's recorded usage under a proposed quota.")
    p.add_argument("--cluster", required=True)
    p.add_argument("--user", help="principal name; left out = every principal (the client-id's own quota)")
    p.add_argument("--client-id", help="client-id; left out = every client-id of the user (one shared sensor)")
    p.add_argument("--key", required=True, help="producer_byte_rate, consumer_byte_rate, request_percentage, ...")
    p.add_argument("--value", required=True, type=float)
    p.add_argument("--samples", type=int, default=11, help="quota.window.num (default 11)")
    p.add_argument("--window-ms", type=int, default=1000, help="quota.window.size.seconds in ms (default 1000)")
    p.add_argument("--open-loop", action="store_true", help="record at the recorded times (no client back-off)")
    p.add_argument("--advice-target", type=float, help="also advise the quota keeping throttled time under this")
    p.add_argument("--scope", choices=["per_broker", "cluster_wide"], default="per_broker",
                   help="per_broker (Kafka's meaning, the default) or cluster_wide (a budget for the sum over brokers)")
    p.add_argument("--distributed", action="store_true",
                   help="replay on the executors even when the records fit the driver (see DRIVER_MAX_BYTES)")
    args = p.parse_args(argv)
    if not math.isfinite(args.value):
        raise BadArguments(f"--value must be a finite number, got {args.value!r}.")
    if args.advice_target is not None and not (0.0 <= args.advice_target < 1.0):
        raise BadArguments(f"--advice-target is a fraction in [0, 1), got {args.advice_target!r}.")
    check_entity(args.user, args.client_id)
    args.quota_type, args.value = check_proposal(args.key, args.value)
    if args.scope == "cluster_wide" and args.quota_type not in BUDGET_TYPES:
        raise BadArguments(f"{args.key} cannot be cluster-wide; only producer_byte_rate, consumer_byte_rate and "
                           "request_percentage budgets can.")
    if args.scope == "cluster_wide" and args.open_loop:
        raise BadArguments("--open-loop replays each broker alone; a cluster-wide budget is replayed closed loop.")
    require_local_dataset(args.root, "usage", "samples")  # the replay reads usage, else Prometheus samples
    return args


def _entity_words(args: argparse.Namespace) -> str:
    parts = [f"user {args.user!r}" if args.user is not None else "",
             f"client-id {args.client_id!r}" if args.client_id is not None else ""]
    return ", ".join(p for p in parts if p)


@dataclass
class _Replayed:
    """What either way of replaying hands the rest of the job: the figures (None without records), the clients
    (user, client-id pairs) behind the sensors, the records skipped as invalid, what the figures rest on, the advice
    (``advise(target)``, ordered by user and client-id) and how to release what the way holds."""

    figures: dict | None
    clients: list[tuple[str | None, str | None]]
    skipped: int
    basis: dict
    advise: Callable[[float], pd.DataFrame]
    release: Callable[[], None] = lambda: None
    #: (client-id, from ms, to ms) -> the bytes of its valid records in [from, to): the queue-time evidence's
    bytes_between: Callable[[str, int, int], float] = lambda client_id, lo, hi: 0.0


def _on_driver(spark: SparkSession, args: argparse.Namespace, progress: Progress,
               stages: dict[str, float]) -> _Replayed:
    """The entity's records read on the driver, and everything computed there (``fits_driver``); Spark only for a
    cluster known by its Prometheus samples alone (spread into records as ``sampled_usage`` does)."""
    entity = (args.user, args.client_id)
    started = time.perf_counter()
    with progress.spark_action(spark, "reading the landed history", 0.02, 0.4):
        rows, basis = read_local_usage(args.root, args.cluster, args.quota_type, args.user, args.client_id), \
            resolution("usage")
        if rows is None or rows.empty:
            # no usage records (a real cluster watched through Prometheus): Kafka's sensors at the scrape interval
            sampled = sampled_usage(spark, args.root, args.cluster, args.quota_type)
            if sampled is not None:
                records, res_ms = sampled
                rows = collect_records(governed(records, args.cluster, args.quota_type, args.user, args.client_id,
                                                blank=False))
                basis = resolution("prometheus", res_ms)
            elif rows is None:
                load_usage(spark, args.root)  # raises the typed error of the missing usage
    valid = valid_records(rows)
    good = shared_sensors(valid, args.user, args.client_id)
    stages["read"] = time.perf_counter() - started
    progress.report("replaying the history", 0.45)
    if args.scope == "cluster_wide":
        s = budget_on_driver(good, args.quota_type, args.value, samples=args.samples, window_ms=args.window_ms,
                             entity=entity)
    else:
        s = summarize_on_driver(good, args.quota_type, args.value, samples=args.samples, window_ms=args.window_ms,
                                closed=not args.open_loop, entity=entity)
    def between(client_id: str, lo: int, hi: int) -> float:
        t = valid["t_ms"]
        return float(valid["value"][(valid["client_id"] == client_id) & (t >= lo) & (t < hi)].sum())

    return _Replayed(
        s, list(dict.fromkeys(zip(valid["user"], valid["client_id"], strict=True))),
        len(rows) - (s["requests"] if s else 0), basis,
        lambda target: advise_on_driver(good, target, args.samples, args.window_ms, entity),
        bytes_between=between)


def _on_executors(spark: SparkSession, args: argparse.Namespace, progress: Progress,
                  stages: dict[str, float]) -> _Replayed:
    """The replay, its clients, its count and its advice as Spark jobs over the landed history."""
    # one scan, cached: the clients behind the sensors, the replay, the advice and the skipped records all read it
    usage = load_usage_if_any(spark, args.root)
    selected = None
    if usage is not None:
        selected = governed(usage, args.cluster, args.quota_type, args.user, args.client_id, blank=False).cache()
    basis = resolution("usage")
    if selected is None or selected.isEmpty():
        # no usage records (a real cluster watched through Prometheus): Kafka's sensors at the scrape interval
        sampled = sampled_usage(spark, args.root, args.cluster, args.quota_type)
        if sampled is not None:
            if selected is not None:
                selected.unpersist()
            records, res_ms = sampled
            selected = governed(records, args.cluster, args.quota_type, args.user, args.client_id,
                                blank=False).cache()
            basis = resolution("prometheus", res_ms)
        elif selected is None:
            load_usage(spark, args.root)  # raises the typed error of the missing usage
    entity = (args.user, args.client_id)
    good = share_sensors(valid_usage(selected), args.user, args.client_id)
    replay_end = 0.6 if args.advice_target is not None else 0.95
    with progress.spark_action(spark, "replaying the history", 0.05, replay_end):
        # the figures (p99 above all) are over every governed record, all clients and brokers together
        if args.scope == "cluster_wide":
            s = summarize_budget(good, args.quota_type, args.value, samples=args.samples, window_ms=args.window_ms,
                                 entity=entity)
        else:
            s = summarize_proposal(good, args.quota_type, args.value, samples=args.samples,
                                   window_ms=args.window_ms, closed=not args.open_loop, entity=entity)
    if s is None:
        return _Replayed(None, [], 0, basis, lambda target: pd.DataFrame(), selected.unpersist)
    # the clients (user, client-id pairs) behind the sensors: a user's own quota puts all of its clients in one
    clients = [(r["user"], r["client_id"]) for r in valid_usage(selected).select("user", "client_id").distinct()
               .collect()]

    def advice(target: float) -> pd.DataFrame:
        found = advise_usage(good, target, args.samples, args.window_ms, entity)
        return found.orderBy("user", "client_id").toPandas()

    def between(client_id: str, lo: int, hi: int) -> float:
        found = valid_usage(selected).where((F.col("client_id") == client_id) & (F.col("t_ms") >= lo)
                                            & (F.col("t_ms") < hi)).agg(F.sum("value")).first()
        return float(found[0] or 0.0)

    return _Replayed(s, clients, int(selected.count() - s["requests"]), basis, advice, selected.unpersist,
                     bytes_between=between)


def job(spark: SparkSession, args: argparse.Namespace, progress: Progress | None = None) -> dict:
    progress = progress or Progress()
    progress.report("reading the landed history", 0.02)
    driver = not args.distributed and fits_driver(args.root)
    stages: dict[str, float] = {}  # seconds spent per stage, for the operator and the benchmark
    started = time.perf_counter()
    replayed = (_on_driver if driver else _on_executors)(spark, args, progress, stages)
    stages["replay"] = time.perf_counter() - started - stages.get("read", 0.0)
    s, basis, clients = replayed.figures, replayed.basis, replayed.clients
    if s is None:
        replayed.release()
        # no landing path and no cadence here: the message reaches people (the portal adds its own cadence)
        raise NoHistory(
            f"No recorded {args.quota_type} usage for {_entity_words(args)} on cluster {args.cluster!r}: nothing to "
            "replay yet. From Prometheus, a sensor carries only the tags of the quota level that applies now, so an "
            "entity more specific than that has no samples of its own."
        )
    replay_end = 0.6 if args.advice_target is not None else 0.95
    result = {
        "cluster": args.cluster, "user": args.user, "client_id": args.client_id, "key": args.key,
        "value": args.value, "quota_type": args.quota_type, "brokers": s["brokers"], "clients": len(clients),
        "history_from_ms": s["history_from_ms"], "history_to_ms": s["history_to_ms"],
        "closed_loop": not args.open_loop, "skipped_records": replayed.skipped, "per_broker": s["per_broker"],
        "resolution": basis, "scope": args.scope, "replayed_on": "driver" if driver else "executors",
        **{name: s[name] for name in FIGURES},
    }
    if args.scope == "cluster_wide":
        result["delivered_over_budget"] = s["delivered_over_budget"]
    # how the samples say the replayed traffic was throttled while it was recorded: over the span the replay observes
    # (a window at least), from Prometheus only the samples it replays. Read in a thread while the advice runs: the
    # advice of one entity is one task, so the query takes the cores it leaves idle instead of adding its time.
    span_to = max(s["history_to_ms"], s["history_from_ms"] + args.window_ms)
    sources = (basis["source"],) if basis["source"] == SAMPLED_SOURCE else None
    with ThreadPoolExecutor(1, thread_name_prefix="recorded") as pool:
        recorded = pool.submit(recorded_throttling, spark, args.root, args.cluster, args.quota_type, clients,
                               s["history_from_ms"], span_to, sources=sources, on_driver=driver)
        if args.advice_target is not None:
            with progress.spark_action(spark, "right-sizing", replay_end, 0.98):
                mark = time.perf_counter()
                found = replayed.advise(args.advice_target)
                stages["advice"] = time.perf_counter() - mark
        with progress.spark_action(spark, "reading how the history was throttled", 0.98, 0.99):
            mark = time.perf_counter()
            result.update(recorded.result())
            stages["recorded_wait"] = time.perf_counter() - mark  # beyond the advice it ran beside
            mark = time.perf_counter()
            result["demand"] = _demand(spark, args, s, result, replayed)
            stages["demand"] = time.perf_counter() - mark
    if args.advice_target is not None:
        entities = found.to_dict(orient="records")
        result["advice"] = {"target": args.advice_target, "method": METHOD, "resolution": basis["text"],
                            "entities": entities}
        if entities:  # the strictest client's advice, the one the pages show
            advised = max(float(e["quota"]) for e in entities)
            result["advice"].update(advice_caveat(result, advised, args.advice_target, args.key))
    replayed.release()
    result["stages_s"] = {name: round(seconds, 3) for name, seconds in stages.items()}
    progress.report("done", 1.0)
    return result


def _demand(spark: SparkSession, args: argparse.Namespace, s: dict, result: dict, replayed: _Replayed) -> dict | None:
    """What the clients asked for beside what Kafka let through (``pipeline.demand``), when the samples say Kafka
    throttled the recorded traffic materially; a producer's queue time (KIP-714) where its clients pushed it."""
    if not (result.get("recorded_throttling") or {}).get("material"):
        return None
    queue = None
    if args.quota_type == "produce" and result["resolution"]["source"] != SAMPLED_SOURCE:
        ids = sorted({c for _u, c in replayed.clients if c})
        growths = queue_time_growths(spark, args.root, args.cluster, ids, s["history_from_ms"], s["history_to_ms"])
        if growths:
            span_s = max(s["history_to_ms"] - s["history_from_ms"], args.window_ms) / 1000.0
            rates = {c: replayed.bytes_between(c, s["history_from_ms"], s["history_to_ms"] + 1) / span_s for c in ids}
            queue = queue_demand(rates, growths, replayed.bytes_between)
    return estimate(args.key, s["recorded_rate"], result, queue)


def queue_time_growths(spark: SparkSession, root: str, cluster: str, client_ids: Sequence[str], from_ms: int,
                       to_ms: int) -> dict[str, list[tuple[int, int, float]]]:
    """Per client-id, how each of its instances' queue time (KIP-714 ``QUEUE_TIME`` pushed to the portal, landed
    under ``telemetry/``) grew over the span (``pipeline.demand.queue_growth``); empty without such points (nothing
    landed, or an unreadable file: the preview stands without this evidence)."""
    folder = local_folder(root)
    if not client_ids or (folder is not None and not (folder / "telemetry").exists()):
        return {}
    wanted = ["client_id", "instance", "point_t", "value"]
    try:
        if folder is not None:  # read on the driver: a few points of a few clients
            found = ds.dataset(str(folder / "telemetry"), format="parquet", partitioning="hive",
                               exclude_invalid_files=True)
            keep = ((pc.field("c") == cluster) & (pc.field("name") == QUEUE_TIME)
                    & pc.field("client_id").isin(list(client_ids)) & (pc.field("point_t") >= from_ms)
                    & (pc.field("point_t") <= to_ms))
            points = found.to_table(columns=wanted, filter=keep).to_pylist()
        else:
            points = [r.asDict() for r in read_dataset(spark, root, "telemetry").where(
                (F.col("c") == cluster) & (F.col("name") == QUEUE_TIME) & F.col("client_id").isin(list(client_ids))
                & (F.col("point_t") >= from_ms) & (F.col("point_t") <= to_ms)).select(*wanted).collect()]
    except Exception:  # missing or damaged: the estimate rests on the throttle time alone
        return {}
    by_instance: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for r in points:
        by_instance.setdefault((r["client_id"], r["instance"]), []).append((r["point_t"], r["value"]))
    out: dict[str, list[tuple[int, int, float]]] = {}
    for (client_id, _instance), pts in by_instance.items():
        growth = queue_growth(pts, from_ms, to_ms)
        if growth is not None:
            out.setdefault(client_id, []).append(growth)
    return out


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    return run_job(argv, parse, job, spark)


if __name__ == "__main__":
    raise SystemExit(main())
