"""Right-sizing advice: per entity, the smallest quota that keeps its throttled time under a target.

    python -m pipeline.advice --root R [--target 0.01] [--cluster C]

Method: a binary search on the quota (integers, as producer/consumer_byte_rate are Java longs) using the
what-if replay (``pipeline.replay``, closed loop, every broker with its own sensor) of the entity's whole
recorded usage: the answer is the smallest quota whose replay spends at most ``target`` of the observed
time throttled (``throttled_fraction``: throttled ms over observed ms, summed over brokers). It assumes the
throttled fraction does not grow with the quota (true up to the closed loop's shifting of request times).
``peak_rate`` is the highest rate the engine measured for the entity (its sampled Rate over the quota window,
replayed with a quota that never binds); ``headroom`` = quota - peak_rate (bytes/s; negative when the
advice accepts throttling at the peak), ``headroom_pct`` = headroom / quota.
Entities are (cluster, quota_type, user, client_id) as recorded; the advice is for the (user, client-id) entity.
Each entity's advice also carries what the landed samples of its sensors say of how Kafka throttled it while it was
recorded (``recorded_throttled_fraction``, ``recorded_quota``, ``recorded_throttling``) and what that makes of the
advice (``lower_bound``, ``at_or_below_recorded_quota``, ``note``), as the what-if's advice does
(``pipeline.recorded``).
"""

from __future__ import annotations

import argparse
import functools
import math
from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from engine.entities import QuotaType

from .errors import BadArguments, NoHistory
from .kernel import Replayed
from .recorded import ENTITY_COLUMNS, advice_caveat, recorded_per_entity
from .replay import replay_sorted
from .session import base_parser, run_job
from .usage import load_usage, valid_usage

METHOD = "binary search on the quota with the closed-loop what-if replay"
ADVICE_SCHEMA = (
    "cluster string, quota_type string, user string, client_id string, key string, quota double, "
    "throttled_fraction double, peak_rate double, headroom double, headroom_pct double, requests long, "
    "brokers long, recorded_rate double"
)


Entity = tuple[str | None, str | None] | None


class Replays:
    """One entity's records (all brokers, one user and client-id), each broker's put in replay order once, replayed
    under any quota: the same numbers as ``throttled_fraction`` and the ``measured`` maximum of ``replay_frame``'s rows
    (the same ``replay_sorted`` on the same arrays, tested), without building a DataFrame per replay of the search."""

    def __init__(self, pdf: pd.DataFrame, quota_type: str, samples: int, window_ms: int, entity: Entity) -> None:
        self.quota_type, self.samples, self.window_ms, self.entity = quota_type, samples, window_ms, entity
        self.parts = []
        for _, g in pdf.groupby("broker"):
            order = np.lexsort((g["seq"].to_numpy(), g["t_ms"].to_numpy()))  # by t_ms, then seq, as replay_frame
            t, v = g["t_ms"].to_numpy()[order].astype(np.int64), g["value"].to_numpy()[order].astype(np.float64)
            self.parts.append((str(g["user"].to_numpy()[order][0]), str(g["client_id"].to_numpy()[order][0]), t, v))

    def _each(self, quota: float) -> Iterator[tuple[np.ndarray, Replayed]]:
        for user, client_id, t, v in self.parts:
            yield t, replay_sorted(user, client_id, self.quota_type, quota, t, v, samples=self.samples,
                                   window_ms=self.window_ms, entity=self.entity)

    def throttled_fraction(self, quota: float) -> float:
        """``pipeline.replay.throttled_fraction`` of the closed-loop replay under ``quota``."""
        throttled = observed = 0
        for t, r in self._each(quota):
            thr = np.asarray(r.throttle_ms_long, dtype=np.int64)
            start = int(t.min())
            end = max(int((np.asarray(r.sent_ms, dtype=np.int64) + thr).max()), int(t.max()), start + self.window_ms)
            throttled += int(thr.sum())
            observed += end - start
        return throttled / observed if observed else 0.0

    def peak(self, quota: float) -> float:
        """The highest rate the sensors measured in the replay under ``quota`` (NaN when none was measured)."""
        measured = np.concatenate([np.asarray(r.measured, dtype=np.float64) for _t, r in self._each(quota)])
        return float(np.nanmax(measured)) if not np.isnan(measured).all() else math.nan


def advise(pdf: pd.DataFrame, target: float, samples: int = 11, window_ms: int = 1000,
           entity: Entity = None) -> pd.DataFrame:
    """One entity's usage (all brokers) → one row of advice; ``entity`` as in ``replay_frame``."""
    qt = str(pdf["quota_type"].iloc[0])
    # no rate can exceed a broker's total bytes (the window is at least (samples-1) windows long)
    hi = float(math.ceil(pdf.groupby("broker")["value"].sum().max()) + 1)
    replays = Replays(pdf, qt, samples, window_ms, entity)
    peak = replays.peak(hi)
    frac = replays.throttled_fraction

    lo_q, hi_q = 1.0, hi  # frac(hi) == 0 <= target
    if frac(lo_q) <= target:
        hi_q = lo_q
    while hi_q - lo_q > 1:
        mid = float(math.floor((lo_q + hi_q) / 2))
        if frac(mid) <= target:
            hi_q = mid
        else:
            lo_q = mid
    f = frac(hi_q)
    span_s = max(int(pdf["t_ms"].max()) - int(pdf["t_ms"].min()), window_ms) / 1000.0
    return pd.DataFrame([{
        "cluster": str(pdf["cluster"].iloc[0]), "quota_type": qt, "user": str(pdf["user"].iloc[0]),
        "client_id": str(pdf["client_id"].iloc[0]), "key": QuotaType(qt).config_key, "quota": hi_q,
        "throttled_fraction": f, "peak_rate": peak, "headroom": hi_q - peak, "headroom_pct": (hi_q - peak) / hi_q,
        "requests": len(pdf), "brokers": int(pdf["broker"].nunique()),
        "recorded_rate": float(pdf["value"].sum()) / span_s,
    }])


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = base_parser("Per entity, the quota that keeps the throttled fraction of time under a target.")
    p.add_argument("--target", type=float, default=0.01, help="allowed fraction of time throttled (default 0.01)")
    p.add_argument("--cluster", help="only this cluster")
    p.add_argument("--samples", type=int, default=11)
    p.add_argument("--window-ms", type=int, default=1000)
    args = p.parse_args(argv)
    if not (0.0 <= args.target < 1.0):
        raise BadArguments(f"--target is a fraction in [0, 1), got {args.target!r}.")
    return args


def advise_usage(usage: DataFrame, target: float, samples: int = 11, window_ms: int = 1000,
                 entity: Entity = None) -> DataFrame:
    """One advice row per (cluster, quota_type, user, client_id) of the usage records (run on the executors);
    ``entity``: the config entity a proposal sets (``pipeline.usage.governed``), else each group's own names."""
    fn = functools.partial(_group, target=target, samples=samples, window_ms=window_ms, entity=entity)
    typed = usage.select(
        F.col("cluster").cast("string"), F.col("quota_type").cast("string"), F.col("broker").cast("long"),
        F.col("user").cast("string"), F.col("client_id").cast("string"), F.col("seq").cast("long"),
        F.col("t_ms").cast("long"), F.col("value").cast("double"),
    )
    return typed.groupBy("cluster", "quota_type", "user", "client_id").applyInPandas(fn, ADVICE_SCHEMA)


def job(spark: SparkSession, args: argparse.Namespace) -> dict:
    usage = valid_usage(load_usage(spark, args.root))
    if args.cluster:
        usage = usage.where(F.col("cluster") == args.cluster)
    usage = usage.where(F.col("quota_type").isin([str(q) for q in QuotaType]))
    rows = advise_usage(usage, args.target, args.samples, args.window_ms)
    out = rows.orderBy("cluster", "quota_type", "user", "client_id").toPandas()
    if out.empty:
        raise NoHistory("No recorded usage to advise on" + (f" for cluster {args.cluster!r}." if args.cluster else "."))
    entities = out.to_dict(orient="records")
    # each entity's recorded span, over which its sensors' samples say how Kafka throttled it (a window at least, as
    # the what-if reads it): advice on traffic that was held back is a lower bound, and says so
    first_last = usage.groupBy(*ENTITY_COLUMNS).agg(F.min("t_ms").alias("lo"), F.max("t_ms").alias("hi")).collect()
    # by the names advise() gives its rows (str), the entity as recorded (a null stays null: no sensor of "None")
    recorded_as = {tuple(str(r[c]) for c in ENTITY_COLUMNS): tuple(r[c] for c in ENTITY_COLUMNS) for r in first_last}
    spans = {tuple(r[c] for c in ENTITY_COLUMNS): (int(r["lo"]), max(int(r["hi"]), int(r["lo"]) + args.window_ms))
             for r in first_last}
    keys = [recorded_as[(e["cluster"], e["quota_type"], e["user"], e["client_id"])] for e in entities]
    recorded = recorded_per_entity(spark, args.root, {key: spans[key] for key in keys})
    for entity, key in zip(entities, keys, strict=True):
        entity.update(recorded[key])
        entity.update(advice_caveat(recorded[key], float(entity["quota"]), args.target, entity["key"]))
    return {"target": args.target, "method": METHOD, "entities": entities}


def _group(pdf, *, target, samples, window_ms, entity):  # runs on the executors
    return advise(pdf, target, samples, window_ms, entity)


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    return run_job(argv, parse, job, spark)


if __name__ == "__main__":
    raise SystemExit(main())
