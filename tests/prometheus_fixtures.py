"""pytest plugin: a real Prometheus scraping the session's Kafka cluster (``prometheus`` fixture).

One project-local Prometheus (Debian's ``prometheus``, started by ``devtools.prometheus``) named ``pytest-<pid>``,
scraping the JMX exporter of every node of the session's ``kafka_cluster`` every 5 s (``IDLE_INTERVAL``), started the
first time a test asks for it (once every target was scraped) and stopped, its folder removed, at the end of the
session. A test that needs fresh samples each second asks for ``fast_prometheus``: 1 s scrapes for that test only
(each scrape of three brokers costs CPU for the rest of the session otherwise). A
cluster without the exporter (an external one, or one started with ``--no-jmx-exporter``) skips the tests that
need it; no ``prometheus`` on the PATH fails them, naming the fix.

Registered from tests/conftest.py (``pytest_plugins``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.kafka import JMX_EXPORTER
from devtools.prometheus import PrometheusError, PrometheusServer

_report: list[str] = []
IDLE_INTERVAL, FAST_INTERVAL = "5s", "1s"


@pytest.fixture(scope="session")
def prometheus(kafka_cluster: Any) -> Iterator[PrometheusServer]:
    """A running Prometheus (``.url``) scraping the session Kafka cluster's exporters every 5 s, with the labels
    ``cluster`` (the cluster's name) and ``broker`` (the node id)."""
    if not any(JMX_EXPORTER in getattr(n, "ports", {}) for n in kafka_cluster.nodes):
        pytest.skip(f"the Kafka cluster {kafka_cluster.name!r} runs without the JMX exporter")
    if shutil.which("prometheus") is None:
        pytest.fail("prometheus is not installed: run `bash scripts/bootstrap.sh` (ensure_prometheus)", pytrace=False)
    server = PrometheusServer(f"pytest-{os.getpid()}", clusters=[kafka_cluster.name], scrape_interval=IDLE_INTERVAL)
    started = time.monotonic()
    try:
        server.start()
        server.wait_targets_up(timeout=60)
    except PrometheusError as e:
        server.stop()
        pytest.fail(f"Prometheus could not be started for the tests:\n{e}", pytrace=False)
    _report.append(
        f"prometheus: {server.url} scraping {len(server.targets)} exporter(s) of {kafka_cluster.name!r}, "
        f"ready in {time.monotonic() - started:.1f}s"
    )
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)


@pytest.fixture
def fast_prometheus(prometheus: PrometheusServer) -> Iterator[PrometheusServer]:
    """The session's Prometheus scraping every second during this test (back to every 5 s after it)."""
    try:
        prometheus.set_scrape_interval(FAST_INTERVAL)
    except PrometheusError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield prometheus
    finally:
        prometheus.set_scrape_interval(IDLE_INTERVAL)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in _report:
        terminalreporter.write_line(line)
