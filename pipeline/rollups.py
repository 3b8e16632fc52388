"""Per-entity minute and hour rollups of the live-monitor samples.

    python -m pipeline.rollups --root R --out O [--since-ms T] [--master M]

Input ``<root>/samples/``: one row per broker, entity and second (t ms, c cluster, b broker, q quota type,
e sensor tags "user:client", rate, bound, util, thr_avg, thr_max, thr_frac, tokens).
First each second of an entity is summed over its brokers (rate = sum of the brokers' rates, throttled ms
= sum of thr_frac * 1000, throttled fraction = mean of thr_frac, tokens = the lowest); then per minute and
per hour: ``bytes`` (sum of the per-second rate: each sample stands for one second), ``rate_p50/p95/p99``
(exact percentiles, linear interpolation, over the seconds with a sample) and ``rate_max``,
``throttle_ms`` (total throttled time), ``throttled_fraction`` (mean over the seconds), ``tokens_min``,
``thr_max`` and ``seconds`` (how many seconds had a sample).
``--since-ms`` rolls up only the samples from T on (the portal passes the start of the newest hour it loaded;
the date/hour partitions before it are not read).
Output: Parquet under ``<out>/granularity=minute`` and ``<out>/granularity=hour`` (overwritten).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .session import base_parser, read_dataset, run_job

ENTITY = ["cluster", "quota_type", "tags"]
GRANULARITY_MS = {"minute": 60_000, "hour": 3_600_000}


def per_second(samples: DataFrame) -> DataFrame:
    s = samples.select(
        F.col("c").cast("string").alias("cluster"), F.col("q").cast("string").alias("quota_type"),
        F.col("e").cast("string").alias("tags"), (F.col("t").cast("long") / 1000).cast("long").alias("second"),
        F.coalesce(F.col("rate").cast("double"), F.lit(0.0)).alias("rate"),
        F.coalesce(F.col("thr_frac").cast("double"), F.lit(0.0)).alias("thr_frac"),
        F.col("thr_max").cast("double").alias("thr_max"), F.col("tokens").cast("double").alias("tokens"),
    )
    return s.groupBy(*ENTITY, "second").agg(
        F.sum("rate").alias("rate"),
        (F.sum("thr_frac") * 1000.0).alias("throttle_ms"),
        F.avg("thr_frac").alias("thr_frac"),
        F.max("thr_max").alias("thr_max"),
        F.min("tokens").alias("tokens"),
    )


def rollup(seconds: DataFrame, granularity: str) -> DataFrame:
    size = GRANULARITY_MS[granularity]
    start = (F.floor(F.col("second") * 1000 / size) * size).cast("long")
    pct = F.percentile(F.col("rate"), F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99)))
    out = seconds.withColumn("window_start_ms", start).groupBy(*ENTITY, "window_start_ms").agg(
        F.sum("rate").alias("bytes"),
        pct.alias("_p"),
        F.max("rate").alias("rate_max"),
        F.sum("throttle_ms").alias("throttle_ms"),
        F.avg("thr_frac").alias("throttled_fraction"),
        F.max("thr_max").alias("thr_max"),
        F.min("tokens").alias("tokens_min"),
        F.count(F.lit(1)).alias("seconds"),
    )
    user_client = F.split(F.col("tags"), ":", 2)
    return out.select(
        *ENTITY, user_client.getItem(0).alias("user"), user_client.getItem(1).alias("client_id"),
        "window_start_ms", F.timestamp_millis("window_start_ms").alias("window_start"), "bytes",
        F.col("_p")[0].alias("rate_p50"), F.col("_p")[1].alias("rate_p95"), F.col("_p")[2].alias("rate_p99"),
        "rate_max", "throttle_ms", "throttled_fraction", "thr_max", "tokens_min", "seconds",
        F.lit(granularity).alias("granularity"),
    )


def rollups(samples: DataFrame) -> DataFrame:
    seconds = per_second(samples).cache()
    return rollup(seconds, "minute").unionByName(rollup(seconds, "hour"))


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = base_parser("Minute and hour rollups of the live-monitor samples, per entity.")
    p.add_argument("--out", required=True, help="output directory (Parquet, partitioned by granularity)")
    p.add_argument("--since-ms", type=int, help="only samples at or after this time (ms since the epoch)")
    return p.parse_args(argv)


def job(spark: SparkSession, args: argparse.Namespace) -> dict:
    samples = read_dataset(spark, args.root, "samples")
    if args.since_ms is not None:
        since = datetime.fromtimestamp(args.since_ms / 1000, UTC)
        samples = samples.where(  # the partition columns first: Spark skips the older folders unread
            (F.col("date") > since.strftime("%Y-%m-%d"))
            | ((F.col("date") == since.strftime("%Y-%m-%d")) & (F.col("hour").cast("int") >= since.hour))
        ).where(F.col("t") >= args.since_ms)
    out = rollups(samples)
    out.write.mode("overwrite").partitionBy("granularity").parquet(args.out)
    written = spark.read.parquet(args.out)
    counts = {r["granularity"]: r["count"] for r in written.groupBy("granularity").count().collect()}
    return {"out": args.out, "rows": counts}


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    return run_job(argv, parse, job, spark)


if __name__ == "__main__":
    raise SystemExit(main())
