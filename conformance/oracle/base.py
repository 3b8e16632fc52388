"""Kafka's settings the oracle runs with, its error and its clock."""

from __future__ import annotations

import sys
import time

#: Kafka's defaults (``quota.window.num``, ``quota.window.size.seconds``), which the cluster runs with.
SAMPLES = 11
WINDOW_S = 1
#: The goal: decisions agree, and throttles are within the bound, on at least this fraction.
MIN_AGREEMENT = 0.99
#: Seconds of traffic: ``--quick`` (the test) and the default.
QUICK_S = 12.0
DEFAULT_S = 30.0

THROTTLING_QUOTA_EXCEEDED = 89
PRODUCE_KEY = "producer_byte_rate"
MUTATION_KEY = "controller_mutation_rate"
PRINCIPAL_PLAINTEXT = "ANONYMOUS"
#: Highest versions used: Produce v13 names topics by id; CreateTopics v6+ is strict (KIP-599).
MAX_PRODUCE_VERSION = 12
MAX_CREATE_TOPICS_VERSION = 7
MIN_CREATE_TOPICS_VERSION = 6


class OracleError(RuntimeError):
    """The run could not be carried out (cluster unreachable, a request refused): no verdict."""


def log(message: str) -> None:
    """Progress goes to stderr: stdout's last line is the JSON verdict."""
    print(f"kafka_oracle: {message}", file=sys.stderr, flush=True)


def now_ms() -> float:
    """Wall-clock milliseconds: the broker's ``time.milliseconds()`` is the same clock on this host."""
    return time.time_ns() / 1e6
