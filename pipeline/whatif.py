"""What would a proposed quota have done to an entity's recorded traffic?

    python -m pipeline.whatif --root R --cluster C [--user U] [--client-id X] --key producer_byte_rate --value V \
        [--advice-target 0.01]

Reads ``<root>/usage/``: the records of the key's quota type that the entity's quota governs (``pipeline.usage``:
a part left out shares one sensor, a ``<default>`` part gives each client its own), replays them per broker
through the engine's reference model with the proposed quota (``pipeline.replay``, closed loop: a throttled
client waits out its throttle time; see there), and prints JSON: throttle events, total / p99 / max delay (ms),
bytes, the recorded rate and the rate the tenant would have got (bytes over the time it would have taken), the
fraction of time throttled, and the span of history used. Kafka's quotas are per broker, so each broker's
records go through their own sensor. ``--advice-target`` adds ``pipeline.advice``'s right-sizing for the same
records. Progress goes to stderr as JSON lines (``pipeline.progress``).
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

from .advice import METHOD, advise_usage
from .errors import BadArguments, NoHistory
from .progress import Progress
from .replay import replay_frame, summarize
from .session import base_parser, run_job
from .usage import check_entity, governed, load_usage, valid_usage

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
    args = p.parse_args(argv)
    if not math.isfinite(args.value):
        raise BadArguments(f"--value must be a finite number, got {args.value!r}.")
    if args.advice_target is not None and not (0.0 <= args.advice_target < 1.0):
        raise BadArguments(f"--advice-target is a fraction in [0, 1), got {args.advice_target!r}.")
    check_entity(args.user, args.client_id)
    args.quota_type, args.value = check_proposal(args.key, args.value)
    return args


def _entity_words(args: argparse.Namespace) -> str:
    parts = [f"user {args.user!r}" if args.user is not None else "",
             f"client-id {args.client_id!r}" if args.client_id is not None else ""]
    return ", ".join(p for p in parts if p)


def job(spark: SparkSession, args: argparse.Namespace, progress: Progress | None = None) -> dict:
    progress = progress or Progress()
    progress.report("reading the landed history", 0.02)
    selected = governed(load_usage(spark, args.root), args.cluster, args.quota_type, args.user, args.client_id)
    entity = (args.user, args.client_id)
    good = valid_usage(selected).cache()
    replay_end = 0.6 if args.advice_target is not None else 0.95
    with progress.spark_action(spark, "replaying the history", 0.05, replay_end):
        rows = replay_usage(good, args.quota_type, args.value, samples=args.samples, window_ms=args.window_ms,
                            closed=not args.open_loop, entity=entity).toPandas()
    if rows.empty:
        good.unpersist()
        raise NoHistory(
            f"No recorded {args.quota_type} usage for {_entity_words(args)} on cluster {args.cluster!r} "
            f"under {args.root}: nothing to replay yet (usage lands every few minutes while clients run)."
        )
    result = {
        "cluster": args.cluster, "user": args.user, "client_id": args.client_id, "key": args.key,
        "value": args.value, "quota_type": args.quota_type, "brokers": int(rows["broker"].nunique()),
        "clients": int(rows[["user", "client_id"]].drop_duplicates().shape[0]),
        "history_from_ms": int(rows["t_ms"].min()), "history_to_ms": int(rows["t_ms"].max()),
        "closed_loop": not args.open_loop, "skipped_records": int(selected.count() - len(rows)),
        **summarize(rows, args.window_ms),
    }
    if args.advice_target is not None:
        with progress.spark_action(spark, "right-sizing", replay_end, 0.98):
            advice = advise_usage(good, args.advice_target, args.samples, args.window_ms, entity)
            found = advice.orderBy("user", "client_id").toPandas()
        result["advice"] = {"target": args.advice_target, "method": METHOD,
                            "entities": found.to_dict(orient="records")}
    good.unpersist()
    progress.report("done", 1.0)
    return result


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    return run_job(argv, parse, job, spark)


if __name__ == "__main__":
    raise SystemExit(main())
