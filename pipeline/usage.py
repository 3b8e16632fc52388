"""The landed usage records, and which of them a proposed quota on a (user, client-id) entity governs.

Kafka resolves each connection's quota to one config entity and keys its sensor by that entity's
tags, so the records a proposal governs, and how they share sensors, follow from the entity's shape:

- both parts named (``alice`` / ``app``): that client's records, one sensor;
- one part absent (``alice`` / none, or none / ``app``): every record of the named part, all in ONE
  sensor (tags ``alice:`` or ``:app``): the absent part is blanked so the records group together;
- a ``<default>`` part: every record matching the named part, each (user, client-id) its own sensor.

Assumption (said in the preview): the proposed quota is the one that applies to every selected record,
i.e. no more specific quota of the cluster takes precedence for some of them.

A real Kafka cluster watched through Prometheus has no usage records, only its sensors' samples at the scrape
interval (``samples/`` with ``src = "prometheus"`` and ``res_ms``): ``sampled_usage`` turns each into even records
over its interval, so the same replay runs on them, at that resolution (``resolution`` says what it cannot know).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from engine.entities import DEFAULT

from .errors import BadArguments, MissingInput
from .session import read_dataset

#: Records a sample is spread into, this far apart (ms): finer than Kafka's 1 s quota-window samples.
SPREAD_STEP_MS = 100
#: The source whose landed samples stand in for usage records on a cluster without them (a real Kafka cluster
#: observed through Prometheus).
SAMPLED_SOURCE = "prometheus"


def load_usage(spark: SparkSession, root: str) -> DataFrame:
    """The usage records with a ``seq`` that keeps the landed order of records at the same millisecond."""
    df = read_dataset(spark, root, "usage")
    return df.withColumn("seq", F.monotonically_increasing_id())


def valid_usage(df: DataFrame) -> DataFrame:
    """Records the model can replay: a finite value >= 0 at a known time on a known broker (others are counted as
    skipped)."""
    v = F.col("value")
    known = F.col("t_ms").isNotNull() & F.col("broker").isNotNull()
    return df.where(v.isNotNull() & ~F.isnan(v) & (v >= 0) & (v < float("inf")) & known)


def check_entity(user: str | None, client_id: str | None) -> None:
    """Refuse an entity that names nothing (a BadArguments the job reports)."""
    if user is None and client_id is None:
        raise BadArguments("Name a user principal, a client-id, or both (--user / --client-id).")


def governed(usage: DataFrame, cluster: str, quota_type: str, user: str | None, client_id: str | None, *,
             blank: bool = True) -> DataFrame:
    """The records of ``cluster`` and ``quota_type`` that the (user, client-id) entity's quota governs,
    with absent parts blanked (unless not ``blank``: ``share_sensors`` later) so that records sharing one sensor
    share one replay group."""
    check_entity(user, client_id)
    rows = usage.where((F.col("cluster") == cluster) & (F.col("quota_type") == quota_type))
    for column, name in (("user", user), ("client_id", client_id)):
        if name is not None and name != DEFAULT:
            rows = rows.where(F.col(column) == name)
    return share_sensors(rows, user, client_id) if blank else rows


def share_sensors(rows: DataFrame, user: str | None, client_id: str | None) -> DataFrame:
    """The entity's absent parts blanked: every record of the named part then shares one sensor."""
    for column, name in (("user", user), ("client_id", client_id)):
        if name is None:
            rows = rows.withColumn(column, F.lit(""))
    return rows


def load_usage_if_any(spark: SparkSession, root: str) -> DataFrame | None:
    """``load_usage``, or None when nothing was landed under ``usage/`` (a cluster known only by its samples)."""
    try:
        return load_usage(spark, root)
    except MissingInput:
        return None


def sampled_usage(spark: SparkSession, root: str, cluster: str, quota_type: str,
                  source: str = SAMPLED_SOURCE) -> tuple[DataFrame, int] | None:
    """The landed samples of ``source`` for ``cluster`` and ``quota_type`` as usage records, and their resolution
    (the coarsest ``res_ms``); None when there are none.

    A sample says the sensor's rate on a broker over its ``res_ms`` before ``t``: it becomes ``res_ms /
    SPREAD_STEP_MS`` records of ``rate x step`` at even times in that interval (bytes for produce/fetch, request-time
    percentage-seconds for request, mutations for controller mutations: what the engine records). The sensor tags
    name the records (the user URL-decoded, as Kafka sanitized it; a tag Kafka left out is empty).
    """
    try:
        samples = read_dataset(spark, root, "samples", merge_schema=True)
    except MissingInput:
        return None
    if "src" not in samples.columns:  # landed before the sources were recorded: no Prometheus samples
        return None
    res = F.coalesce(F.col("res_ms").cast("long"), F.lit(1000)) if "res_ms" in samples.columns else F.lit(1000)
    rows = samples.where((F.col("c") == cluster) & (F.col("q") == quota_type) & (F.col("src") == source)
                         & F.col("rate").isNotNull() & ~F.isnan("rate") & (F.col("rate") >= 0))
    rows = rows.select(
        F.col("b").cast("int").alias("broker"), F.col("t").cast("long").alias("t"),
        F.col("rate").cast("double").alias("rate"), F.col("e").cast("string").alias("e"),
        F.greatest(res, F.lit(SPREAD_STEP_MS)).alias("res_ms"),
    )
    found = rows.agg(F.count(F.lit(1)).alias("n"), F.max("res_ms").alias("res")).first()
    if found is None or not found["n"]:
        return None
    tags = F.split(F.col("e"), ":", 2)
    user = tags.getItem(0)
    steps = F.sequence(F.lit(1), (F.col("res_ms") / SPREAD_STEP_MS).cast("int"))
    records = rows.select(
        F.lit(cluster).alias("cluster"), "broker", F.lit(quota_type).alias("quota_type"),
        F.coalesce(F.try_url_decode(user), user).alias("user"),
        F.coalesce(tags.getItem(1), F.lit("")).alias("client_id"),
        "t", "res_ms", (F.col("rate") * (SPREAD_STEP_MS / 1000.0)).alias("value"), F.explode(steps).alias("k"),
    ).select(
        "cluster", "broker", "quota_type", "user", "client_id",
        (F.col("t") - F.col("res_ms") + F.col("k") * SPREAD_STEP_MS).alias("t_ms"), "value",
    )
    return records.withColumn("seq", F.monotonically_increasing_id()), int(found["res"])


def seconds_text(ms: int) -> str:
    """``5000`` -> ``"5 s"``, ``1500`` -> ``"1.5 s"``."""
    return f"{ms / 1000:g} s"


def resolution(source: str, res_ms: int | None = None) -> dict:
    """What a replay's figures rest on, in words the preview shows: its resolution and what it cannot know there."""
    if source != SAMPLED_SOURCE or res_ms is None:
        return {"source": "usage", "resolution_ms": None, "text": "per request, as the clients' usage was recorded",
                "cannot_know": []}
    every = seconds_text(res_ms)
    return {
        "source": source, "resolution_ms": res_ms, "step_ms": SPREAD_STEP_MS, "text": f"per {every}, from Prometheus",
        "cannot_know": [
            f"bursts shorter than {every}: each sample's rate is replayed as even traffic over its {every} (and "
            "Kafka's byte-rate is itself a mean over its quota window, 11 s by default)",
            "demand the current quota held back: Kafka's sensors count what it accepted, and a throttled client "
            "sends less, so a higher value's effect is a lower bound",
            "each client's share of a shared sensor: Prometheus has the sensors of the quota level that applies "
            "now (a user's own quota sums all of its client-ids), not single requests or clients",
        ],
    }
