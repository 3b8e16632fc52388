"""Kafka's settings the oracle runs with, its error and its clock."""

from __future__ import annotations

import sys

from kafka_wire import wall_ms

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


#: Wall-clock milliseconds: the broker's ``time.milliseconds()`` is the same clock on this host, and so are
#: the send and receive times of each exchange (``kafka_wire.Exchange``).
now_ms = wall_ms
