"""What would a proposed quota have done to an entity's recorded traffic?

    python -m pipeline.whatif --root R --cluster C [--user U] [--client-id X] --key producer_byte_rate --value V \
        [--advice-target 0.01] [--scope per_broker|cluster_wide]
    python -m pipeline.whatif --root R --cluster C --group '<GroupSpec JSON>' --key producer_byte_rate --value V

Reads ``<root>/usage/``: the records of the key's quota type that the entity's quota governs (``pipeline.usage``:
a part left out shares one sensor, a ``<default>`` part gives each client its own), replays them per broker
through the engine's reference model with the proposed quota (``pipeline.replay``, closed loop: a throttled
client waits out its throttle time; see there), and prints JSON: throttle events, total / p99 / max delay (ms),
bytes, the recorded rate and the rate the tenant would have got (bytes over the time it would have taken), the
fraction of time throttled, and the span of history used. Kafka's quotas are per broker, so each broker's
records go through their own sensor, and ``per_broker`` gives each broker's requests, bytes, recorded rate (over the
whole span: they add up to ``recorded_rate``) and throttle events: the rates a per-broker bound applies to. The
figures are computed in the Python workers (``pipeline.summaries``, the records sent there as numbers only) and one
row comes back; ``pipeline.summaries.replay_usage`` gives the per-record rows instead. A landing area small enough
(``pipeline.on_driver.fits_driver``: a preview's usual case) has the entity's records read on the driver (pyarrow, no
Spark action) and the same figures computed there with the same functions (``pipeline.figures``; ``replayed_on``:
``driver`` or ``executors``; ``--distributed`` forces the latter); ``stages_s`` says how long each part took.
``--advice-target`` adds ``pipeline.advice``'s right-sizing for the same records. ``--scope cluster_wide`` replays
the value as a cluster-wide budget instead (``pipeline.budget_replay``: each sensor's records on all brokers together,
with shares that follow demand as the broker plugin hands them out) and adds ``delivered_over_budget``. ``--group``
(a group's spec, ``engine.groups.GroupSpec.to_json``) replays a group's value instead of an entity's: the records of
every name in the landing data the spec matches, together through the group's one sensor (``pipeline.group_members``),
per broker or, with ``--scope cluster_wide``, as one budget. Progress goes to stderr as JSON lines
(``pipeline.progress``).

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
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pandas as pd
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from engine.budgets import BUDGET_TYPES
from engine.entities import TYPE_OF_KEY, validate_quota_value
from engine.errors import QuotaValidationError

from .advice import METHOD, advise_usage
from .demand import QUEUE_TIME, estimate, queue_demand, queue_growth
from .errors import BadArguments, NoHistory
from .figures import FIGURES
from .group_members import entity_of, members_frame, members_spark, one_sensor_frame, one_sensor_spark, parse_group
from .on_driver import (
    advise_on_driver,
    budget_on_driver,
    collect_records,
    fits_driver,
    local_folder,
    read_local_usage,
    shared_sensors,
    summarize_on_driver,
    valid_records,
)
from .progress import Progress
from .recorded import advice_caveat, recorded_throttling
from .session import base_parser, read_dataset, require_local_dataset, run_job
from .summaries import summarize_budget, summarize_proposal
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
    p.add_argument("--group", help="a group's spec (JSON): replay its members' records together, instead of an entity")
    p.add_argument("--distributed", action="store_true",
                   help="replay on the executors even when the records fit the driver (see DRIVER_MAX_BYTES)")
    args = p.parse_args(argv)
    if not math.isfinite(args.value):
        raise BadArguments(f"--value must be a finite number, got {args.value!r}.")
    if args.advice_target is not None and not (0.0 <= args.advice_target < 1.0):
        raise BadArguments(f"--advice-target is a fraction in [0, 1), got {args.advice_target!r}.")
    args.group_spec = None
    if args.group is not None:
        if args.user is not None or args.client_id is not None:
            raise BadArguments("Give --group or an entity (--user / --client-id), not both.")
        args.group_spec = parse_group(args.group, args.key)
    else:
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
    if args.group_spec is not None:
        return f"the members of group {args.group_spec.name!r}"
    parts = [f"user {args.user!r}" if args.user is not None else "",
             f"client-id {args.client_id!r}" if args.client_id is not None else ""]
    return ", ".join(p for p in parts if p)


def _entity(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The config entity the proposed value is set on: the entity's, or the group's sensor."""
    return entity_of(args.group_spec) if args.group_spec is not None else (args.user, args.client_id)


def _governed(rows: DataFrame, args: argparse.Namespace) -> DataFrame:
    """The records the proposal governs (Spark), their names kept: the entity's, or the group's members'."""
    if args.group_spec is None:
        return governed(rows, args.cluster, args.quota_type, args.user, args.client_id, blank=False)
    mine = rows.where((F.col("cluster") == args.cluster) & (F.col("quota_type") == args.quota_type))
    return members_spark(mine, args.group_spec)


def _shared(rows: DataFrame, args: argparse.Namespace) -> DataFrame:
    """The governed records grouped by the sensor they share (Spark)."""
    if args.group_spec is not None:
        return one_sensor_spark(rows, args.group_spec)
    return share_sensors(rows, args.user, args.client_id)


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
    entity, group = _entity(args), args.group_spec
    started = time.perf_counter()
    with progress.spark_action(spark, "reading the landed history", 0.02, 0.4):
        rows, basis = read_local_usage(args.root, args.cluster, args.quota_type, args.user, args.client_id,
                                       everyone=group is not None), resolution("usage")
        if rows is not None and group is not None:
            rows = members_frame(rows, group)
        if rows is None or rows.empty:
            # no usage records (a real cluster watched through Prometheus): Kafka's sensors at the scrape interval
            sampled = sampled_usage(spark, args.root, args.cluster, args.quota_type)
            if sampled is not None:
                records, res_ms = sampled
                rows = collect_records(_governed(records, args))
                basis = resolution("prometheus", res_ms)
            elif rows is None:
                load_usage(spark, args.root)  # raises the typed error of the missing usage
    valid = valid_records(rows)
    good = one_sensor_frame(valid, group) if group is not None else shared_sensors(valid, args.user, args.client_id)
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
        selected = _governed(usage, args).cache()
    basis = resolution("usage")
    if selected is None or selected.isEmpty():
        # no usage records (a real cluster watched through Prometheus): Kafka's sensors at the scrape interval
        sampled = sampled_usage(spark, args.root, args.cluster, args.quota_type)
        if sampled is not None:
            if selected is not None:
                selected.unpersist()
            records, res_ms = sampled
            selected = _governed(records, args).cache()
            basis = resolution("prometheus", res_ms)
        elif selected is None:
            load_usage(spark, args.root)  # raises the typed error of the missing usage
    entity = _entity(args)
    good = _shared(valid_usage(selected), args)
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
        "group": args.group_spec.name if args.group_spec is not None else None,
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
