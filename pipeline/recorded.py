"""Was the traffic a what-if replays itself throttled while it was recorded? The landed samples of its sensors say.

A replay can only replay what was recorded, and traffic that Kafka (or the engine) throttled while it was recorded is
what Kafka let through, not what the clients asked for: a client muted a share ``f`` of the time sends about
``1 - f`` of what it wants, so its recorded rate understates its demand by about ``f / (1 - f)``. Nothing in the
usage records says so (they hold what was sent: user, client-id, value, time); the live samples do. ``samples/``
holds, per sensor (tags ``e``) and broker, ``thr_frac`` (the share of the sample's interval the sensor spent
throttled) and ``bound`` (the quota that applied), from the engine's sampler (``src`` null), from librdkafka's
statistics of the demo clients (``"client"``) or from Kafka's own sensors through Prometheus (``"prometheus"``, one
sample per scrape interval ``res_ms``, ``thr_frac`` estimated from Kafka's throttle-time average).

``recorded_throttling`` reads the samples of the sensors the replayed clients were counted in (a client's own tags,
its user's, its client-id's: whichever quota level applied then) over the replayed span, and answers the share of
the time they cover that was spent throttled (each sample weighted by the part of its interval inside the span,
summed over sensors and brokers as the replay's own ``throttled_fraction`` is), the quota that applied, and which
source said so (of several, the one that saw the most throttling). ``advice_caveat`` turns it into what the advice
must say: a lower bound when the share is material (``MATERIAL_FRACTION``), and a warning when the advised value is
at or below the quota that was throttling the recorded traffic. Nothing here estimates the demand held back: it
cannot be measured from what Kafka let through.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from engine.entities import sanitize
from engine.units import format_quota_value, quota_key

from .errors import CorruptInput, MissingInput, PipelineError
from .rollups import DEFAULT_RES_MS, with_resolution
from .session import _translate, read_dataset

#: The share of the recorded time spent throttled from which the advice is only a lower bound. A client muted a share
#: f of the time sent about 1 - f of what it wanted, so the recorded rates hide about f / (1 - f) of its demand: below
#: 1 % that is about 1 %, the same order as the advice's own 1 % target and well within the headroom a quota is set
#: with; above it the hidden share grows fast (10 % throttled hides 11 %, 50 % hides as much as was recorded).
MATERIAL_FRACTION = 0.01
#: Up to this many sensor tags are matched with an IN list; more (a ``<default>`` proposal's many clients) through a
#: broadcast table.
IN_LIST_MAX = 1000
#: The longest interval a sample is taken to stand for when choosing the folders to read (a Prometheus scrape).
MAX_RES_S = 3600
#: What each source is, in words (``src`` of a sample; null is the engine's own sampler).
#: Answers kept by a long-lived process (the pipeline worker's warm Spark session), each for one span of one entity's
#: sensors on one state of the landed samples: the previews of one entity with other values ask the same question.
MEMO_SIZE = 64
#: Why the answer is unknown when a samples file cannot be read (the what-if and the advice still answer).
DAMAGED = "the landed samples could not be read (a damaged file)"
_memo: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
SOURCE_WORDS = {"engine": "the engine's sensors", "client": "the clients' statistics",
                "prometheus": "Kafka's own sensors, from Prometheus"}


def sensor_tags(clients: Iterable[tuple[str | None, str | None]]) -> set[str]:
    """The sensor tags (``e``) Kafka may have counted these (user, client-id) pairs under: the pair's own
    ``<user>:<client-id>``, its user's ``<user>:`` and its client-id's ``:<client-id>`` (the user sanitized as Kafka
    does), never ``:`` (the sensor of clients without a quota)."""
    tags: set[str] = set()
    for user, client_id in clients:
        u, c = sanitize(user or ""), client_id or ""
        tags.update((f"{u}:{c}", f"{u}:", f":{c}"))
    tags.discard(":")
    return tags


def _hours(from_ms: int, to_ms: int) -> Column:
    """The landing partitions (``date=``/``hour=``, the UTC hour of each sample's ``t``) that can hold samples of the
    span: Spark then skips the other folders unread."""
    lo = datetime.fromtimestamp(from_ms / 1000, UTC)
    hi = datetime.fromtimestamp(to_ms / 1000 + MAX_RES_S, UTC)
    date, hour = F.col("date").cast("string"), F.col("hour").cast("int")
    after = (date > f"{lo:%Y-%m-%d}") | ((date == f"{lo:%Y-%m-%d}") & (hour >= lo.hour))
    before = (date < f"{hi:%Y-%m-%d}") | ((date == f"{hi:%Y-%m-%d}") & (hour <= hi.hour))
    return after & before


def per_source(samples: DataFrame, cluster: str, quota_type: str, tags: Collection[str], from_ms: int,
               to_ms: int) -> list[dict[str, Any]]:
    """Per source, the figures of the samples of sensors ``tags`` over [from_ms, to_ms]: ``samples``, ``sensors``,
    ``sampled_ms``, ``throttled_ms``, the highest ``bound`` of a throttled sample (``quota_throttled``) and of any
    (``quota``).

    A sample stands for the ``res_ms`` (a second when null) before its ``t``; only the part inside the span counts. A
    broker's coarse samples (over a second) in one interval count as their mean, as in ``pipeline.rollups``: the
    Prometheus source may publish one scrape twice. Two small aggregations, no window and no join (a preview waits
    on this): the tags are an IN list pushed to the Parquet reader, or a broadcast table past ``IN_LIST_MAX``.
    """
    if not tags:
        return []
    samples = _in_hours(samples, from_ms, to_ms)
    rows = samples.where((F.col("c") == cluster) & (F.col("q") == quota_type) & (F.col("t") > from_ms))
    if len(tags) <= IN_LIST_MAX:
        rows = rows.where(F.col("e").isin(sorted(tags)))
    else:
        table = samples.sparkSession.createDataFrame([(t,) for t in sorted(tags)], "e string")
        rows = rows.join(F.broadcast(table), "e", "left_semi")
    rows = rows.withColumn("from_ms", F.lit(from_ms)).withColumn("to_ms", F.lit(to_ms))
    return [r.asDict() for r in _figures(rows, []).collect()]


def per_source_on_driver(root: str, cluster: str, quota_type: str, tags: Collection[str], from_ms: int,
                         to_ms: int) -> list[dict[str, Any]]:
    """``per_source`` read on the driver from a local landing area (pyarrow, no Spark action): the same figures from
    the same samples (tested), for a preview whose records fit the driver. Reads only the hour folders that can hold
    the span; raises ``MissingInput`` without a samples folder and ``CorruptInput`` on an unreadable file."""
    folder = Path(urlparse(root).path if urlparse(root).scheme else root) / "samples"
    if not tags:
        return []
    files = [f for f in _span_files(folder, from_ms, to_ms) if f.suffix == ".parquet"]
    if not folder.is_dir():
        raise MissingInput(f"No landed data at {folder}.")
    if not files:
        return []
    columns = ["t", "c", "b", "q", "e", "src", "res_ms", "thr_frac", "bound"]
    keep = (pc.field("c") == cluster) & (pc.field("q") == quota_type) & (pc.field("t") > from_ms) \
        & pc.field("e").isin(sorted(tags))
    try:
        tables = []
        for f in files:  # a file landed before src / res_ms existed lacks them: nulls, as mergeSchema reads them
            table = pq.read_table(f, filters=None)
            for name, kind in (("src", pa.string()), ("res_ms", pa.int64())):
                if name not in table.column_names:
                    table = table.append_column(name, pa.nulls(table.num_rows, kind))
            tables.append(table.select(columns).cast(pa.schema([
                ("t", pa.int64()), ("c", pa.string()), ("b", pa.int64()), ("q", pa.string()), ("e", pa.string()),
                ("src", pa.string()), ("res_ms", pa.int64()), ("thr_frac", pa.float64()), ("bound", pa.float64())])))
        rows = pa.concat_tables(tables).filter(keep).to_pandas()
    except (pa.ArrowException, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CorruptInput(f"Unreadable Parquet under {folder}: {first[:500]}") from e
    return _figures_on_driver(rows, from_ms, to_ms)


def _span_files(folder: Path, from_ms: int, to_ms: int) -> list[Path]:
    """The files of the hour folders that can hold samples of the span (as ``_hours`` selects them), never one whose
    name starts with ``_`` or ``.`` (being written)."""
    out: list[Path] = []
    hour = datetime.fromtimestamp(from_ms / 1000, UTC).replace(minute=0, second=0, microsecond=0)
    last = datetime.fromtimestamp(to_ms / 1000 + MAX_RES_S, UTC)
    while hour <= last:
        part = folder / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"
        if part.is_dir():
            out += sorted(f for f in part.iterdir() if not f.name.startswith(("_", ".")) and f.is_file())
        hour += timedelta(hours=1)
    return out


def _figures_on_driver(rows: Any, from_ms: int, to_ms: int) -> list[dict[str, Any]]:
    """``_figures`` (no ``by``) in pandas, over sample rows of the wanted sensors."""
    if rows.empty:
        return []
    res = rows["res_ms"].fillna(DEFAULT_RES_MS).astype("int64")
    res = res.where(res > 0, DEFAULT_RES_MS)
    t = rows["t"].astype("int64")
    rows = rows.assign(res=res, source=rows["src"].fillna("engine"), thr=rows["thr_frac"].fillna(0.0).clip(0.0, 1.0))
    rows = rows[(t > from_ms) & (t - res < to_ms)]
    if rows.empty:
        return []
    t, res = rows["t"].astype("int64"), rows["res"]
    inside = np.minimum(t, to_ms) - np.maximum(t - res, from_ms)
    rows = rows.assign(slot=np.floor_divide(t, res), inside=inside, thr_in=inside * rows["thr"],
                       qt=rows["bound"].where(rows["thr"] > 0))
    slots = rows.groupby(["source", "e", "b", "res", "slot"], dropna=False).agg(
        n=("t", "size"), inside=("inside", "sum"), thr_in=("thr_in", "sum"), qt=("qt", "max"), q=("bound", "max"),
    ).reset_index()
    each = np.where(slots["res"] > DEFAULT_RES_MS, 1.0 / slots["n"], 1.0)  # a coarse slot: its mean
    slots = slots.assign(sampled=slots["inside"] * each, throttled=slots["thr_in"] * each)
    out = []
    for source, g in slots.groupby("source"):
        out.append({"source": source, "samples": int(g["n"].sum()), "sensors": int(g["e"].nunique()),
                    "sampled_ms": float(g["sampled"].sum()), "throttled_ms": float(g["throttled"].sum()),
                    "quota_throttled": None if g["qt"].isna().all() else float(g["qt"].max()),
                    "quota": None if g["q"].isna().all() else float(g["q"].max())})
    return out


def _in_hours(samples: DataFrame, from_ms: int, to_ms: int) -> DataFrame:
    """The samples with their resolution, from the hour folders that can hold the span only."""
    samples = with_resolution(samples)
    if {"date", "hour"} <= set(samples.columns):
        samples = samples.where(_hours(from_ms, to_ms))
    return samples


def _figures(rows: DataFrame, by: list[str]) -> DataFrame:
    """``per_source``'s figures per ``by`` and source, of sample rows that carry their span (``from_ms``, ``to_ms``)
    beside ``e``, ``b``, ``t``, ``res_ms``, ``src``, ``thr_frac`` and ``bound``: one aggregation for one entity (the
    what-if) and for every entity at once (the stand-alone advice)."""
    res = F.coalesce(F.col("res_ms").cast("long"), F.lit(DEFAULT_RES_MS))
    res = F.when(res > 0, res).otherwise(F.lit(DEFAULT_RES_MS))
    rows = rows.select(
        *by, F.col("from_ms").cast("long").alias("from_ms"), F.col("to_ms").cast("long").alias("to_ms"),
        F.col("e").cast("string").alias("e"), F.col("b").cast("long").alias("b"), F.col("t").cast("long").alias("t"),
        res.alias("res_ms"), F.coalesce(F.col("src").cast("string"), F.lit("engine")).alias("source"),
        F.least(F.greatest(F.coalesce(F.col("thr_frac").cast("double"), F.lit(0.0)), F.lit(0.0)), F.lit(1.0))
        .alias("thr"),
        F.col("bound").cast("double").alias("bound"),
    ).where((F.col("t") > F.col("from_ms")) & (F.col("t") - F.col("res_ms") < F.col("to_ms")))
    inside = F.least(F.col("t"), F.col("to_ms")) - F.greatest(F.col("t") - F.col("res_ms"), F.col("from_ms"))
    slot = F.floor(F.col("t") / F.col("res_ms")).alias("slot")
    slots = rows.groupBy(*by, "source", "e", "b", "res_ms", slot).agg(
        F.count(F.lit(1)).alias("n"), F.sum(inside).alias("inside"), F.sum(inside * F.col("thr")).alias("thr_in"),
        F.max(F.when(F.col("thr") > 0, F.col("bound"))).alias("qt"), F.max("bound").alias("q"),
    )
    each = F.when(F.col("res_ms") > DEFAULT_RES_MS, 1.0 / F.col("n")).otherwise(F.lit(1.0))  # a coarse slot: its mean
    return slots.groupBy(*by, "source").agg(
        F.sum("n").alias("samples"), F.size(F.collect_set("e")).alias("sensors"),
        F.sum(F.col("inside") * each).alias("sampled_ms"), F.sum(F.col("thr_in") * each).alias("throttled_ms"),
        F.max("qt").alias("quota_throttled"), F.max("q").alias("quota"),
    )


#: The key of an entity of the stand-alone advice: (cluster, quota_type, user, client_id) as recorded.
EntityKey = tuple[str, str, str | None, str | None]
ENTITY_COLUMNS = ["cluster", "quota_type", "user", "client_id"]


def recorded_per_entity(spark: SparkSession, root: str,
                        spans: Mapping[EntityKey, tuple[int, int]]) -> dict[EntityKey, dict[str, Any]]:
    """``recorded_throttling`` of many entities in one query, each over its own span (``spans``: each entity's
    [from_ms, to_ms]), every source considered: the stand-alone advice's caveats for every entity it advises on. Each
    entity's sensors are its own tags, its user's and its client-id's (``sensor_tags``), matched through a broadcast
    table."""
    if not spans:
        return {}
    pairs = [(*key, tag, lo, hi) for key, (lo, hi) in spans.items() for tag in sorted(sensor_tags([key[2:]]))]
    found: dict[EntityKey, list[dict[str, Any]]] = {key: [] for key in spans}
    if pairs:
        try:
            samples = read_dataset(spark, root, "samples", merge_schema=True)
            samples = _in_hours(samples, min(lo for lo, _hi in spans.values()), max(hi for _lo, hi in spans.values()))
            table = spark.createDataFrame(pairs, "cluster string, quota_type string, user string, client_id string, "
                                                 "e string, from_ms long, to_ms long")
            rows = samples.join(F.broadcast(table), (samples["c"] == table["cluster"])
                                & (samples["q"] == table["quota_type"]) & (samples["e"] == table["e"]))
            rows = rows.drop(samples["e"])
            for r in _figures(rows, ENTITY_COLUMNS).collect():
                figures = r.asDict()
                key = tuple(figures.pop(c) for c in ENTITY_COLUMNS)
                if figures["sampled_ms"]:
                    found[key].append(figures)
        except MissingInput:
            pass
        except Exception as e:  # a corrupt file surfaces when the query runs
            error = e if isinstance(e, PipelineError) else _translate(e, root)
            if not isinstance(error, CorruptInput):
                raise
            return {key: report([], key[1], unknown=DAMAGED) for key in spans}
    return {key: report(figures, key[1]) for key, figures in found.items()}


def recorded_throttling(spark: SparkSession, root: str, cluster: str, quota_type: str,
                        clients: Iterable[tuple[str | None, str | None]], from_ms: int, to_ms: int, *,
                        sources: Sequence[str] | None = None, on_driver: bool = False) -> dict[str, Any]:
    """What the landed samples say of how the replayed traffic was throttled while it was recorded: the what-if's
    ``recorded_throttled_fraction`` (None when no sample covers it), ``recorded_quota`` (the quota that applied then,
    None when unknown) and ``recorded_throttling`` (the details and a sentence). ``clients``: the replayed records'
    (user, client_id) pairs; ``sources``: only these ``src`` (``"engine"`` for the engine's), e.g. the Prometheus
    samples a Prometheus-resolution replay rests on.

    An unreadable samples file does not fail the what-if (its figures rest on the usage records): the answer is then
    unknown, and says why; the rollups job, which reads every sample, reports the file.

    The answer does not depend on the proposed value, so a process answering many previews (the warm session) keeps
    it for as long as the landed samples of the span are the files they were (``landed_files``); a landing area that
    is not a local folder is asked every time. ``on_driver``: read on the driver (``per_source_on_driver``, a local
    landing area small enough), not in Spark."""
    tags = sensor_tags(clients)
    files = landed_files(root, from_ms, to_ms)
    key = (root, cluster, quota_type, frozenset(tags), from_ms, to_ms, tuple(sources or ()), files)
    if files is not None and key in _memo:
        _memo.move_to_end(key)
        return copy.deepcopy(_memo[key])
    answer = _recorded_throttling(spark, root, cluster, quota_type, tags, from_ms, to_ms, sources, on_driver)
    if files is not None:
        _memo[key] = copy.deepcopy(answer)
        while len(_memo) > MEMO_SIZE:
            _memo.popitem(last=False)
    return answer


def landed_files(root: str, from_ms: int, to_ms: int) -> tuple[tuple[str, int, int], ...] | None:
    """The samples' files of the hours the span can read (name, size, modification time), as the state of the
    landed samples a memoized answer rests on; None for a landing area that is not a local folder."""
    url = urlparse(root)
    if url.scheme not in ("", "file"):
        return None
    folder = Path(url.path if url.scheme else root) / "samples"
    hour = datetime.fromtimestamp(from_ms / 1000, UTC).replace(minute=0, second=0, microsecond=0)
    last = datetime.fromtimestamp(to_ms / 1000 + MAX_RES_S, UTC)
    found: list[tuple[str, int, int]] = []
    while hour <= last:
        part = folder / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"
        if part.is_dir():
            for entry in sorted(part.iterdir()):
                stat = entry.stat()
                found.append((str(entry), stat.st_size, stat.st_mtime_ns))
        hour += timedelta(hours=1)
    return tuple(found)


def _recorded_throttling(spark: SparkSession, root: str, cluster: str, quota_type: str, tags: set[str],
                         from_ms: int, to_ms: int, sources: Sequence[str] | None, on_driver: bool) -> dict[str, Any]:
    try:
        if on_driver:
            found = per_source_on_driver(root, cluster, quota_type, tags, from_ms, to_ms)
        else:
            samples = read_dataset(spark, root, "samples", merge_schema=True)
            found = per_source(samples, cluster, quota_type, tags, from_ms, to_ms)
    except MissingInput:
        found = []
    except Exception as e:  # a corrupt file surfaces when the query runs
        error = e if isinstance(e, PipelineError) else _translate(e, root)
        if not isinstance(error, CorruptInput):
            raise
        return report([], quota_type, unknown=DAMAGED)
    found = [f for f in found if f["sampled_ms"] and (sources is None or f["source"] in sources)]
    return report(found, quota_type)


def report(found: Sequence[dict[str, Any]], quota_type: str,
           unknown: str = "no live samples of these clients' sensors cover the replayed span") -> dict[str, Any]:
    """The figures of the source that saw the most throttling (then the most samples, then by name), as the what-if
    reports them; ``unknown`` says why there are none."""
    if not found:
        return {"recorded_throttled_fraction": None, "recorded_quota": None, "recorded_throttling": {
            "source": None, "samples": 0, "sensors": 0, "sampled_ms": 0, "throttled_ms": 0, "material": False,
            "threshold": MATERIAL_FRACTION,
            "text": f"{unknown[:1].upper()}{unknown[1:]}: whether Kafka throttled this traffic while it was recorded "
                    "is unknown"}}
    best = max(found, key=lambda f: (f["throttled_ms"] / f["sampled_ms"], f["samples"], f["source"]))  # one answer
    fraction = float(best["throttled_ms"]) / float(best["sampled_ms"])
    quota = best["quota_throttled"] if best["throttled_ms"] > 0 else best["quota"]
    quota = None if quota is None else float(quota)
    words = SOURCE_WORDS.get(best["source"], f"the {best['source']} samples")
    under = f", under a quota of {format_quota_value(quota_type, quota)}" if quota is not None else ""
    text = (f"Kafka throttled this traffic {percent(fraction)} of the time while it was recorded{under} (from "
            f"{words})" if best["throttled_ms"] > 0 else f"Kafka did not throttle this traffic while it was recorded"
            f"{under} (from {words})")
    return {"recorded_throttled_fraction": fraction, "recorded_quota": quota, "recorded_throttling": {
        "source": best["source"], "samples": int(best["samples"]), "sensors": int(best["sensors"]),
        "sampled_ms": round(float(best["sampled_ms"])), "throttled_ms": round(float(best["throttled_ms"])),
        "material": fraction >= MATERIAL_FRACTION, "threshold": MATERIAL_FRACTION, "text": text}}


def percent(fraction: float) -> str:
    """``0.4123`` -> ``41.2%``, ``0.0042`` -> ``0.42%``: as the preview page writes shares of time."""
    return f"{100 * fraction:.3g}%"


def advice_caveat(recorded: dict[str, Any], advised: float, target: float, key: str) -> dict[str, Any]:
    """What the advice must add when the replayed traffic was throttled while it was recorded.

    ``lower_bound``: the recorded share throttled is material, so the smallest quota that keeps throttling under
    ``target`` is at least ``advised`` (the records hold what Kafka let through). ``at_or_below_recorded_quota``: the
    advised value is not above the quota that was throttling the recorded traffic, so the clients asked for more than
    it. ``note``: one sentence saying so (None when neither holds), in the page's units.
    """
    fraction = recorded.get("recorded_throttled_fraction")
    details = recorded.get("recorded_throttling") or {}
    quota = recorded.get("recorded_quota")
    throttled = bool(fraction) and details.get("throttled_ms", 0) > 0
    lower = throttled and bool(details.get("material"))
    below = throttled and quota is not None and advised <= quota
    out: dict[str, Any] = {"lower_bound": lower, "at_or_below_recorded_quota": below, "note": None}
    if not (lower or below):
        return out
    key = quota_key(key)
    value, goal = format_quota_value(key, advised), percent(target)
    held = f"Kafka throttled this traffic {percent(fraction)} of the time while it was recorded"
    if below:
        out["note"] = (
            f"{held} under {format_quota_value(key, quota)}, so the clients asked for more than that: the advised "
            f"{value}, at or below that quota, would throttle them at least as much; the value that keeps throttled "
            f"time under {goal} is above {format_quota_value(key, quota)}, by how much the recorded traffic cannot "
            "tell.")
    else:
        under = f" under {format_quota_value(key, quota)}" if quota is not None else ""
        out["note"] = (
            f"{held}{under}, so the rates recorded are what Kafka let through, not what the clients asked for: "
            f"{value} is a lower bound, and the value that keeps throttled time under {goal} may be well above it.")
    return out
