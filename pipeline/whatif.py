"""What would a proposed quota have done to an entity's recorded traffic?

    python -m pipeline.whatif --root R --cluster C --user U --client-id X --key producer_byte_rate --value V

Reads ``<root>/usage/`` (the entity's records of the key's quota type, every broker), replays them per
broker through the engine's reference model with the proposed quota on the (user, client-id) entity
(``pipeline.replay``, closed loop: a throttled client waits out its throttle time; see there), and prints
JSON: throttle events, total / p99 / max delay (ms), bytes, the recorded rate and the rate the tenant
would have got (bytes over the time it would have taken), and the fraction of time throttled.
Kafka's quotas are per broker, so each broker's records go through their own sensor.
"""

from __future__ import annotations

import argparse
import functools
import math
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from quotas.engine.entities import TYPE_OF_KEY, validate_quota_value
from quotas.engine.errors import QuotaValidationError

from .errors import BadArguments, NoHistory
from .replay import replay_frame, summarize
from .session import base_parser, read_dataset, run_job

REPLAY_SCHEMA = (
    "cluster string, broker long, user string, client_id string, seq long, t_ms long, value double, "
    "sent_ms long, throttle_ms long, throttle_ms_long long, measured double"
)


def load_usage(spark: SparkSession, root: str) -> DataFrame:
    """The usage records with a ``seq`` that keeps the landed order of records at the same millisecond."""
    df = read_dataset(spark, root, "usage")
    return df.withColumn("seq", F.monotonically_increasing_id())


def valid_usage(df: DataFrame) -> DataFrame:
    v = F.col("value")
    return df.where(v.isNotNull() & ~F.isnan(v) & (v >= 0) & (v < float("inf")) & F.col("t_ms").isNotNull())


def replay_usage(usage: DataFrame, quota_type: str, quota: float | None, *, samples: int = 11,
                 window_ms: int = 1000, closed: bool = True, per_group: bool = False) -> DataFrame:
    """Per (cluster, broker, user, client_id), the records replayed in time order through the model.

    ``per_group=True`` takes each group's proposal from its own ``quota``, ``samples`` and ``window_ms``
    columns (many proposals in one job) instead of the arguments.
    """
    fn = functools.partial(_group, quota_type=quota_type, quota=quota, samples=samples, window_ms=window_ms,
                           closed=closed, per_group=per_group)
    cols = [
        F.col("cluster").cast("string"), F.col("broker").cast("long"), F.col("user").cast("string"),
        F.col("client_id").cast("string"), F.col("seq").cast("long"), F.col("t_ms").cast("long"),
        F.col("value").cast("double"),
    ]
    if per_group:
        cols += [F.col("quota").cast("double"), F.col("samples").cast("long"), F.col("window_ms").cast("long")]
    return usage.select(*cols).groupBy("cluster", "broker", "user", "client_id").applyInPandas(fn, REPLAY_SCHEMA)


def _group(pdf, *, quota_type, quota, samples, window_ms, closed, per_group):  # runs on the executors
    if per_group:
        first = pdf.iloc[0]
        quota, samples, window_ms = float(first["quota"]), int(first["samples"]), int(first["window_ms"])
    return replay_frame(pdf, quota_type, quota, samples=samples, window_ms=window_ms, closed=closed)


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
    p.add_argument("--user", required=True, help="principal name")
    p.add_argument("--client-id", required=True)
    p.add_argument("--key", required=True, help="producer_byte_rate, consumer_byte_rate, request_percentage, ...")
    p.add_argument("--value", required=True, type=float)
    p.add_argument("--samples", type=int, default=11, help="quota.window.num (default 11)")
    p.add_argument("--window-ms", type=int, default=1000, help="quota.window.size.seconds in ms (default 1000)")
    p.add_argument("--open-loop", action="store_true", help="record at the recorded times (no client back-off)")
    args = p.parse_args(argv)
    if not math.isfinite(args.value):
        raise BadArguments(f"--value must be a finite number, got {args.value!r}.")
    args.quota_type, args.value = check_proposal(args.key, args.value)
    return args


def job(spark: SparkSession, args: argparse.Namespace) -> dict:
    usage = load_usage(spark, args.root)
    mine = usage.where(
        (F.col("cluster") == args.cluster) & (F.col("user") == args.user)
        & (F.col("client_id") == args.client_id) & (F.col("quota_type") == args.quota_type)
    )
    good = valid_usage(mine)
    rows = replay_usage(good, args.quota_type, args.value, samples=args.samples, window_ms=args.window_ms,
                        closed=not args.open_loop).toPandas()
    if rows.empty:
        raise NoHistory(
            f"No recorded {args.quota_type} usage for user {args.user!r}, client-id {args.client_id!r} "
            f"on cluster {args.cluster!r}."
        )
    skipped = mine.count() - len(rows)
    return {
        "cluster": args.cluster, "user": args.user, "client_id": args.client_id, "key": args.key,
        "value": args.value, "quota_type": args.quota_type, "brokers": int(rows["broker"].nunique()),
        "closed_loop": not args.open_loop, "skipped_records": int(skipped), **summarize(rows, args.window_ms),
    }


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    return run_job(argv, parse, job, spark)


if __name__ == "__main__":
    raise SystemExit(main())
