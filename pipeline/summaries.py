"""The what-if replay as Spark jobs: per-record rows (``replay_usage``), or only the figures, per entity
(``summarize_usage``), over a whole proposal (``summarize_proposal``) or a cluster-wide budget (``summarize_budget``).
The records go to the Python workers as numbers only; the figures are ``pipeline.figures``'."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from .budget_replay import replay_budget
from .errors import PipelineError
from .figures import PART_SCHEMA, Figures, budget_figures, figures, replay_entity, runs
from .replay import replay_frame

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


def _key_runs(batches: Iterator[pa.RecordBatch]) -> Iterator[dict[str, np.ndarray]]:
    """The records of each key in turn, from batches sorted by key (a key's records may span batches)."""
    pending: list[dict[str, np.ndarray]] = []
    for batch in batches:
        cols = {c: batch.column(c).to_numpy() for c in ("key", "broker", "seq", "t_ms", "value")}
        keys = cols["key"]
        for lo, hi in runs(keys):
            if pending and pending[0]["key"][0] != keys[lo]:
                yield _joined(pending)
                pending = []
            pending.append({c: a[lo:hi] for c, a in cols.items()})
    if pending:
        yield _joined(pending)


def _joined(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return parts[0] if len(parts) == 1 else {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}


def _summaries(batches, *, schema, names, quota_type, quota, samples, window_ms, closed, entity, one_group,
               replay_all):  # runs on the executors
    out: dict[str, list] = {c: [] for c in schema.names}
    part = Figures(window_ms)
    for run in _key_runs(batches):
        cluster, user, client_id = names[int(run["key"][0])]
        order = np.lexsort((run["seq"], run["t_ms"], run["broker"]))  # per broker, by t_ms then landed order
        broker, t_ms, values = run["broker"][order], run["t_ms"][order], run["value"][order]
        mine = part if one_group else Figures(window_ms)
        replay_entity(mine, str(user), str(client_id), broker, t_ms, values, quota_type=quota_type, quota=quota,
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
