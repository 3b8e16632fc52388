"""Per-entity minute and hour rollups of the live-monitor samples.

    python -m pipeline.rollups --root R --out O [--since-ms T] [--master M]

Input ``<root>/samples/``: one row per broker, entity and sample (t ms, c cluster, b broker, q quota type, e sensor
tags "user:client", rate, bound, util, thr_avg, thr_max, thr_frac, tokens; ``src`` and ``res_ms``, the sample's source
and how long it stands for: the engine's and the clients' samples are per second (no ``res_ms``: 1000), the Prometheus
source's per scrape interval, e.g. 5000 ms). Each sample is one slot of its resolution (``floor(t / res_ms)``); first
each slot of an entity is summed over its brokers (a broker with two coarse samples in one slot counts their mean;
per-second samples each count: the rate = sum of the brokers' rates, throttled ms = sum of thr_frac x the slot's
length, throttled fraction = mean of thr_frac, tokens = the lowest); then per minute and per hour: ``bytes`` (the rate
x the slot's length, summed), ``rate_p50/p95/p99`` (exact percentiles, linear interpolation, over the slots, so over
per-second rates or, from Prometheus, over 5 s averages: a burst shorter than a slot is not in them) and ``rate_max``,
``throttle_ms`` (total throttled time), ``throttled_fraction`` (mean over the time covered), ``tokens_min``,
``thr_max``, ``seconds`` (how many seconds the slots cover), ``resolution_ms`` (the coarsest slot in the window) and
``source`` (``prometheus``, ``client`` or ``engine``).
``--since-ms`` rolls up only the samples from T on (the portal passes the start of the newest hour it loaded;
the date/hour partitions before it are not read).
Output: Parquet under ``<out>/granularity=minute`` and ``<out>/granularity=hour`` (overwritten).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from .session import base_parser, read_dataset, require_local_dataset, run_job

ENTITY = ["cluster", "quota_type", "tags"]
GRANULARITY_MS = {"minute": 60_000, "hour": 3_600_000}


#: a sample without ``res_ms`` (the engine's, the clients', files landed before it existed) stands for one second
DEFAULT_RES_MS = 1000


def with_resolution(samples: DataFrame) -> DataFrame:
    """The samples with ``src`` and ``res_ms`` columns, filled in for files landed before they existed."""
    for name, kind in (("src", "string"), ("res_ms", "long")):
        if name not in samples.columns:
            samples = samples.withColumn(name, F.lit(None).cast(kind))
    return samples


def per_second(samples: DataFrame) -> DataFrame:
    """One row per entity and slot of its samples' resolution (``second`` is the slot's start, in seconds; ``dur_s``
    its length), summed over the brokers."""
    samples = with_resolution(samples)
    res = F.coalesce(F.col("res_ms").cast("long"), F.lit(DEFAULT_RES_MS))
    res = F.when(res > 0, res).otherwise(F.lit(DEFAULT_RES_MS))
    s = samples.select(
        F.col("c").cast("string").alias("cluster"), F.col("q").cast("string").alias("quota_type"),
        F.col("e").cast("string").alias("tags"), res.alias("res_ms"),
        F.floor(F.col("t").cast("long") / res).cast("long").alias("slot"), F.col("b").cast("long").alias("broker"),
        F.coalesce(F.col("src").cast("string"), F.lit("engine")).alias("source"),
        F.coalesce(F.col("rate").cast("double"), F.lit(0.0)).alias("rate"),
        F.coalesce(F.col("thr_frac").cast("double"), F.lit(0.0)).alias("thr_frac"),
        F.col("thr_max").cast("double").alias("thr_max"), F.col("tokens").cast("double").alias("tokens"),
    )
    # a broker's coarse samples in one slot (Prometheus polls at the edge of a scrape interval) count as their mean,
    # so a slot is never counted twice: each weighs 1/(their number); per-second samples each stand for their own
    # second, as they always did (one landed late for a second already landed adds to it): each weighs 1. One shuffle:
    # rows are partitioned by slot, and the broker's count (a window) and the slot's sums run on those partitions.
    slot = [*ENTITY, "res_ms", "slot"]
    of_broker = F.count(F.lit(1)).over(Window.partitionBy(*slot, "broker"))
    weighted = s.repartition(*slot).withColumn(
        "_w", F.when(F.col("res_ms") > DEFAULT_RES_MS, 1.0 / of_broker).otherwise(F.lit(1.0))
    )
    frac = F.sum(F.col("thr_frac") * F.col("_w"))
    return weighted.groupBy(*slot).agg(
        F.sum(F.col("rate") * F.col("_w")).alias("rate"),
        (frac * F.first("res_ms")).alias("throttle_ms"),
        (frac / F.sum("_w")).alias("thr_frac"),
        F.max("thr_max").alias("thr_max"),
        F.min("tokens").alias("tokens"),
        F.max("source").alias("source"),
    ).select(
        *ENTITY, "res_ms", (F.col("slot") * F.col("res_ms") / 1000.0).alias("second"),
        (F.col("res_ms") / 1000.0).alias("dur_s"), "rate", "throttle_ms", "thr_frac", "thr_max", "tokens", "source",
    )


def rollup(seconds: DataFrame, granularity: str) -> DataFrame:
    size = GRANULARITY_MS[granularity]
    start = (F.floor(F.col("second") * 1000 / size) * size).cast("long")
    pct = F.percentile(F.col("rate"), F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99)))
    out = seconds.withColumn("window_start_ms", start).groupBy(*ENTITY, "window_start_ms").agg(
        F.sum(F.col("rate") * F.col("dur_s")).alias("bytes"),
        pct.alias("_p"),
        F.max("rate").alias("rate_max"),
        F.sum("throttle_ms").alias("throttle_ms"),
        (F.sum(F.col("thr_frac") * F.col("dur_s")) / F.sum("dur_s")).alias("throttled_fraction"),
        F.max("thr_max").alias("thr_max"),
        F.min("tokens").alias("tokens_min"),
        F.sum("dur_s").alias("_seconds"),
        F.max("res_ms").alias("resolution_ms"),
        F.max("source").alias("source"),
    )
    user_client = F.split(F.col("tags"), ":", 2)
    return out.select(
        *ENTITY, user_client.getItem(0).alias("user"), user_client.getItem(1).alias("client_id"),
        "window_start_ms", F.timestamp_millis("window_start_ms").alias("window_start"), "bytes",
        F.col("_p")[0].alias("rate_p50"), F.col("_p")[1].alias("rate_p95"), F.col("_p")[2].alias("rate_p99"),
        "rate_max", "throttle_ms", "throttled_fraction", "thr_max", "tokens_min",
        F.round("_seconds").cast("long").alias("seconds"), "resolution_ms", "source",
        F.lit(granularity).alias("granularity"),
    )


def rollups(samples: DataFrame) -> DataFrame:
    seconds = per_second(samples).cache()
    return rollup(seconds, "minute").unionByName(rollup(seconds, "hour"))


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = base_parser("Minute and hour rollups of the live-monitor samples, per entity.")
    p.add_argument("--out", required=True, help="output directory (Parquet, partitioned by granularity)")
    p.add_argument("--since-ms", type=int, help="only samples at or after this time (ms since the epoch)")
    args = p.parse_args(argv)
    require_local_dataset(args.root, "samples")
    return args


def job(spark: SparkSession, args: argparse.Namespace) -> dict:
    samples = with_resolution(read_dataset(spark, args.root, "samples", merge_schema=True))
    if args.since_ms is not None:
        since = datetime.fromtimestamp(args.since_ms / 1000, UTC)
        samples = samples.where(  # the partition columns first: Spark skips the older folders unread
            (F.col("date") > since.strftime("%Y-%m-%d"))
            | ((F.col("date") == since.strftime("%Y-%m-%d")) & (F.col("hour").cast("int") >= since.hour))
        ).where(F.col("t") >= args.since_ms)
    out = rollups(samples)
    out.write.mode("overwrite").partitionBy("granularity").parquet(args.out)
    return {"out": args.out, "rows": written_rows(spark, args.out)}


def written_rows(spark: SparkSession, out: str) -> dict[str, int]:
    """Rows written per granularity: from the Parquet footers of a local output (no Spark job to start), else
    read back with Spark."""
    url = urlparse(out)
    if url.scheme in ("", "file"):
        folder = Path(url.path if url.scheme else out)
        return {
            part.name.split("=", 1)[1]: sum(pq.ParquetFile(f).metadata.num_rows for f in part.glob("*.parquet"))
            for part in sorted(folder.glob("granularity=*"))
        }
    written = spark.read.parquet(out)
    return {r["granularity"]: r["count"] for r in written.groupBy("granularity").count().collect()}


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    return run_job(argv, parse, job, spark)


if __name__ == "__main__":
    raise SystemExit(main())
