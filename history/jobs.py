"""Running a pipeline job from the portal: in the worker's long-lived Spark session (``run_warm``, the impact
previews), or as ``python -m pipeline.<job>``, as an operator would, in a subprocess (``run``, the rollups, at a
lower CPU priority: ``ROLLUPS_NICE``).

In the warm session (``pipeline.warm``) the JVM and Spark's Python workers outlive the job, so the next preview
starts at once; the first one of a worker process starts them (a cold start, shown as a stage of its progress).
A subprocess keeps the JVM out of the Celery worker (it starts and ends with the job, and a crash takes
only the job down) and runs the same entry point as ``spark-submit`` would. It runs in a session of its own,
so a timeout stops all of it, its JVM included. The job's JSON result is its stdout; its progress
(``pipeline.progress``) and, on failure, its typed error (``pipeline.errors``) are JSON lines on its stderr,
mixed with Spark's own log.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.db import connection

from pipeline import warm
from pipeline.errors import PipelineError
from pipeline.processes import stop_session
from pipeline.progress import parse_line

log = logging.getLogger(__name__)
HEARTBEAT_S = 30.0
#: The niceness the rollups' subprocess (and its JVM and Python workers) runs at: batch work that yields the CPU to
#: a preview's Spark session on the same machine (on 2 cores, a rollup at the same priority doubled a preview's time).
ROLLUPS_NICE = 10


class JobFailed(Exception):
    """The job refused its input or did not finish; ``code`` as pipeline.errors names them."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def run(
    job: str,
    args: Sequence[str],
    on_progress: Callable[[str, float], None] | None = None,
    timeout_s: float | None = None,
    heartbeat: Callable[[], None] | None = None,
    nice: int = 0,
) -> dict[str, Any]:
    """Run ``pipeline.<job>`` with ``args`` (plus ``--master``), report its progress, return its JSON result.

    ``heartbeat`` is called every ``HEARTBEAT_S`` while the job runs (a long step may report no progress). ``nice``:
    added to the subprocess's niceness (its JVM and Spark's Python workers inherit it).
    """
    timeout_s = settings.QUOTAS_PIPELINE_TIMEOUT_S if timeout_s is None else timeout_s
    cmd = [sys.executable, "-m", f"pipeline.{job}", *args, "--master", settings.QUOTAS_SPARK_MASTER]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        cmd, cwd=settings.BASE_DIR, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
        preexec_fn=(lambda: os.nice(nice)) if nice else None,
    )
    errors: list[dict[str, Any]] = []
    tail: list[str] = []
    out: list[str] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        try:
            for raw in proc.stderr:  # read to the end whatever happens, or the job blocks on a full pipe
                line = raw.strip()
                report = parse_line(line)
                if report is None:
                    if line.startswith('{"error"'):
                        try:
                            errors.append(json.loads(line)["error"])
                            continue
                        except (ValueError, KeyError):
                            pass
                    if line:
                        tail[:] = [*tail[-19:], line]
                elif on_progress is not None:
                    try:
                        on_progress(report["stage"], report["fraction"])
                    except Exception:  # progress is best effort; the job goes on
                        log.exception("Recording the progress of pipeline.%s failed", job)
        finally:
            connection.close()  # the one on_progress opened in this thread

    def read_stdout() -> None:
        assert proc.stdout is not None
        out.append(proc.stdout.read())

    readers = [threading.Thread(target=f, name=f"{job}-{f.__name__}", daemon=True) for f in (read_stderr, read_stdout)]
    for reader in readers:
        reader.start()
    started = time.monotonic()
    try:
        while True:
            left = timeout_s - (time.monotonic() - started)
            if left <= 0:
                raise subprocess.TimeoutExpired(cmd, timeout_s)
            try:
                proc.wait(timeout=min(HEARTBEAT_S, left))
                break
            except subprocess.TimeoutExpired:
                if heartbeat is not None and time.monotonic() - started < timeout_s:
                    heartbeat()
    except subprocess.TimeoutExpired:
        stop_session(proc, 5.0)  # the whole session: its JVM too
        raise JobFailed("REQUEST_TIMED_OUT", f"pipeline.{job} did not finish within {timeout_s:.0f} s.") from None
    finally:
        for reader in readers:
            reader.join(30)
    if errors:
        raise JobFailed(str(errors[-1].get("code", "PIPELINE_ERROR")), str(errors[-1].get("message", "")))
    if proc.returncode != 0:
        last = tail[-1] if tail else "no output"
        raise JobFailed(
            "PIPELINE_ERROR",
            f"pipeline.{job} exited with status {proc.returncode} after {time.monotonic() - started:.0f} s: {last}",
        )
    try:
        return json.loads("".join(out))
    except ValueError:
        raise JobFailed("PIPELINE_ERROR", f"pipeline.{job} printed no JSON result.") from None


def run_warm(
    job: str,
    args: Sequence[str],
    on_progress: Callable[[str, float], None] | None = None,
    timeout_s: float | None = None,
    heartbeat: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run ``pipeline.<job>`` in this process's long-lived Spark session (``pipeline.warm``), as ``run`` does.

    The job reports its progress from Spark's threads; one thread of ours hands the newest report to
    ``on_progress`` (so the database is written from one place), beats ``heartbeat`` every ``HEARTBEAT_S`` and,
    past ``timeout_s``, cancels the job's Spark jobs (it then fails with ``REQUEST_TIMED_OUT``).
    """
    timeout_s = settings.QUOTAS_PIPELINE_TIMEOUT_S if timeout_s is None else timeout_s
    newest: list[tuple[str, float] | None] = [None]
    finished, timed_out = threading.Event(), threading.Event()

    def watch() -> None:
        started = beat = time.monotonic()
        try:
            while True:
                stop = finished.wait(0.1)
                report, newest[0] = newest[0], None
                if report is not None and on_progress is not None:
                    try:
                        on_progress(*report)
                    except Exception:  # progress is best effort; the job goes on
                        log.exception("Recording the progress of pipeline.%s failed", job)
                if stop:
                    return
                now = time.monotonic()
                if heartbeat is not None and now - beat >= HEARTBEAT_S:
                    beat = now
                    heartbeat()
                if now - started > timeout_s and not timed_out.is_set():
                    timed_out.set()
                    warm.cancel()
        finally:
            connection.close()  # the one on_progress opened in this thread

    def report(stage: str, fraction: float) -> None:
        newest[0] = (stage, fraction)

    watcher = threading.Thread(target=watch, name=f"{job}-warm-watch", daemon=True)
    watcher.start()
    try:
        return warm.run(job, args, settings.QUOTAS_SPARK_MASTER, report)
    except PipelineError as e:
        if timed_out.is_set():
            raise JobFailed("REQUEST_TIMED_OUT", f"pipeline.{job} did not finish within {timeout_s:.0f} s.") from None
        raise JobFailed(e.code, e.message) from None
    finally:
        finished.set()
        watcher.join(30)
