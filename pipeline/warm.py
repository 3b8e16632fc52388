"""A long-lived SparkSession for the portal's short jobs (impact previews), reused from one job to the next.

Starting Spark (a JVM, then Python workers that compile the what-if kernel) takes most of a small job's time, so
the pipeline worker keeps one session per process and runs each job in it: the first job of a process pays for
the start (a *cold* start), the next ones find the JVM and the Python workers running (*warm*). The session is
built by ``pipeline.session.build_session`` like the command-line jobs' own, and the job's code is the same
(``<module>.parse`` and ``<module>.job``); only where its result and progress go differs (returned and passed to
a callback instead of printed). A session found stopped or unreachable (its JVM died) is built again.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import BadArguments, PipelineError
from .progress import Progress
from .session import _translate, build_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The share of the progress bar a cold start fills while the JVM starts (it reports nothing meanwhile).
COLD_SHARE = 0.25
#: About how long a cold start takes here (JVM, Spark context): the bar moves towards COLD_SHARE over it.
COLD_EXPECTED_S = 12.0
APP_NAME = "quotas-pipeline-warm"

ProgressFn = Callable[[str, float], None]


@dataclass
class Warm:
    """The process's session: which master it runs on, its application id, and how many jobs it ran."""

    spark: SparkSession
    master: str
    application_id: str
    jobs: int = 0


_lock = threading.Lock()
_warm: Warm | None = None


def _alive(warm: Warm) -> bool:
    """Whether the session's JVM still answers and its SparkContext is running."""
    try:
        jsc = warm.spark.sparkContext._jsc
        return jsc is not None and not jsc.sc().isStopped()
    except Exception:  # py4j: the JVM is gone
        return False


def session(master: str, on_progress: ProgressFn | None = None) -> tuple[Warm, bool]:
    """The process's session on ``master`` and whether it was already running (warm); starts it when not.

    While a cold start runs (this call's or a pre-warming thread's), ``on_progress("starting Spark", f)`` is called
    about twice a second with ``f`` moving from 0 towards ``COLD_SHARE`` (the JVM reports nothing while it starts).
    """
    global _warm
    found = _warm
    if found is not None and found.master == master and _alive(found):
        return found, True
    done = threading.Event()
    ticker = None
    if on_progress is not None:
        ticker = threading.Thread(target=_tick_cold_start, args=(on_progress, done), daemon=True,
                                  name="spark-cold-start")
        ticker.start()
    try:
        with _lock:
            if _warm is not None and _warm.master == master and _alive(_warm):
                return _warm, False  # another thread (pre-warming) started it while this one waited
            if _warm is not None:
                stop()
            # no console progress bar: the worker's log is for people, the progress goes to the preview
            spark = build_session(master, APP_NAME, {"spark.ui.showConsoleProgress": "false"})
            spark.sparkContext.setLogLevel("WARN")
            _warm = Warm(spark, master, str(spark.sparkContext.applicationId))
            return _warm, False
    finally:
        done.set()
        if ticker is not None:
            ticker.join(2)


def prewarm(master: str, root: str | None = None) -> Warm:
    """Start the process's session and run what a preview runs once, so the first real one finds it all loaded (run
    in a thread as a worker process starts): a tiny replay and its advice on the driver (the what-if kernel compiled
    or loaded) and, with ``root``, the reads of a preview of nothing: the landed usage on the driver, the landed
    samples' query in Spark (its Parquet and aggregation paths)."""
    warm, _ = session(master)
    from .on_driver import advise_on_driver, collect_records, read_local_usage, summarize_on_driver
    from .recorded import recorded_throttling

    rows = [("warm-up", 1, "produce", "u", "c", i, 1000 * i, 100.0) for i in range(20)]
    usage = warm.spark.createDataFrame(rows, "cluster string, broker long, quota_type string, user string, "
                                             "client_id string, seq long, t_ms long, value double")
    records = collect_records(usage)
    summarize_on_driver(records, "produce", 50.0, entity=("u", "c"))
    advise_on_driver(records, 0.01, entity=("u", "c"))
    if root is not None:
        nobody = "\x00warm-up"  # no such cluster: nothing comes back, and nothing is kept
        try:
            read_local_usage(root, nobody, "produce", "u", None)
            recorded_throttling(warm.spark, root, nobody, "produce", [("u", None)], 0, 1000)
        except PipelineError:  # nothing landed yet, or a damaged file: the preview will say so itself
            pass
    return warm


def _tick_cold_start(on_progress: ProgressFn, done: threading.Event) -> None:
    started = time.monotonic()
    while True:
        elapsed = time.monotonic() - started
        # approaches COLD_SHARE without reaching it: a start slower than expected still moves
        on_progress("starting Spark", COLD_SHARE * (1 - 0.5 ** (elapsed / (COLD_EXPECTED_S / 2))))
        if done.wait(0.5):
            return


def stop() -> None:
    """Stop the process's session (the next job starts a new one)."""
    global _warm
    warm, _warm = _warm, None
    if warm is not None:
        try:
            warm.spark.stop()
        except Exception:  # the JVM is gone already
            pass


def cancel() -> None:
    """Cancel the Spark jobs running in the process's session (a job past its time); the job then fails."""
    warm = _warm
    if warm is not None:
        try:
            warm.spark.sparkContext.cancelAllJobs()
        except Exception:  # the JVM is gone: the job fails by itself
            pass


class _CallbackProgress(Progress):
    """``pipeline.progress.Progress`` reporting to a function instead of stderr, mapped onto [lo, 1]."""

    def __init__(self, fn: ProgressFn | None, lo: float) -> None:
        super().__init__()
        self.fn, self.lo = fn, lo

    def report(self, stage: str, fraction: float) -> None:
        with self._lock:
            fraction = max(self._last, min(1.0, fraction))  # never goes backwards
            self._last = fraction
        if self.fn is not None:
            self.fn(stage, self.lo + (1.0 - self.lo) * fraction)


def run(job: str, argv: Sequence[str], master: str, on_progress: ProgressFn | None = None) -> dict[str, Any]:
    """Run ``pipeline.<job>`` (whose ``job`` takes a ``progress``) with ``argv`` in the process's session.

    Returns the job's result with ``"spark": {"application_id", "warm", "jobs"}`` (``jobs``: how many jobs the
    session has run, this one included). Raises the job's ``PipelineError`` (a bad argument before Spark starts).
    """
    module = importlib.import_module(f"pipeline.{job}")
    try:
        args = module.parse(argv)
    except SystemExit as e:  # argparse refused the arguments (its message went to stderr): not the worker's exit
        raise BadArguments(f"pipeline.{job} refused its arguments (exit status {e.code}).") from None
    warm, was_warm = session(master, on_progress)
    progress = _CallbackProgress(on_progress, 0.0 if was_warm else COLD_SHARE)
    spark = warm.spark
    try:
        result = module.job(spark, args, progress)
    except PipelineError:
        raise
    except Exception as e:  # a corrupt file surfaces when the job executes
        raise _translate(e, args.root) from e
    finally:
        warm.jobs += 1
        try:
            spark.catalog.clearCache()  # whatever the job cached and did not release (it failed midway)
        except Exception:
            pass
    return {**result, "spark": {"application_id": warm.application_id, "warm": was_warm, "jobs": warm.jobs}}
