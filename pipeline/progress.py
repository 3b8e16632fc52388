"""Progress of a running job as JSON lines on stderr, for whoever waits on it (the portal's Celery task).

Each line is ``{"progress": {"stage": <words>, "fraction": <0..1>}}``. Within a Spark action the fraction
moves with the tasks Spark has completed (its status tracker, polled by a thread), so a long replay shows
movement, not a frozen bar. Lines other than these (Spark's own log) are for people.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

POLL_S = 0.5


def parse_line(line: str) -> dict | None:
    """The progress in one stderr line, or None when the line is not a progress report."""
    if not line.startswith('{"progress"'):
        return None
    try:
        report = json.loads(line)["progress"]
        return {"stage": str(report["stage"]), "fraction": min(1.0, max(0.0, float(report["fraction"])))}
    except (ValueError, KeyError, TypeError):
        return None


class Progress:
    """Reports stages; ``spark_action`` maps a Spark action's task completion onto [lo, hi]."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out
        self._lock = threading.Lock()
        self._last = -1.0

    def report(self, stage: str, fraction: float) -> None:
        fraction = max(self._last, min(1.0, fraction))  # never goes backwards
        self._last = fraction
        with self._lock:
            out = self.out or sys.stderr
            out.write(json.dumps({"progress": {"stage": stage, "fraction": round(fraction, 4)}}) + "\n")
            out.flush()

    @contextmanager
    def spark_action(self, spark: SparkSession, stage: str, lo: float, hi: float) -> Iterator[None]:
        """While the block runs Spark jobs (in job group ``stage``), report lo + (hi-lo) x completed/total tasks."""
        sc = spark.sparkContext
        group = f"progress-{id(self)}-{stage}"
        sc.setJobGroup(group, stage)
        stop = threading.Event()

        def poll() -> None:
            tracker = sc.statusTracker()
            while not stop.wait(POLL_S):
                done = total = 0
                try:
                    for job_id in tracker.getJobIdsForGroup(group):
                        job = tracker.getJobInfo(job_id)
                        for stage_id in job.stageIds if job else []:
                            info = tracker.getStageInfo(stage_id)
                            if info is not None:
                                done += info.numCompletedTasks
                                total += info.numTasks
                except Exception:  # the session is stopping: progress is best effort
                    return
                if total:
                    self.report(stage, lo + (hi - lo) * done / total)

        self.report(stage, lo)
        thread = threading.Thread(target=poll, name="progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(2 * POLL_S)
            sc.setLocalProperty("spark.jobGroup.id", None)
        self.report(stage, hi)
