"""Stopping a process started in a session of its own, all of it: a pipeline job and its JVM (``history.jobs``),
and for the tests and benchmarks a uvicorn or a Celery worker (``devtools.processes`` re-exports it)."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_session(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """SIGTERM to the process's session (a warm shutdown of it and its children), SIGKILL if it lingers past
    ``grace_s``, then SIGKILL to whatever of the session outlived its leader (pool workers)."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
