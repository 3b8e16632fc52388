"""pytest plugin: the suite's tiers as markers, so a part of it can be run (``scripts/run_tests.sh --fast``).

A test is marked by what it needs, told from its fixtures and its folder, so nobody has to remember to mark it:

- ``kafka``: the session's real Apache Kafka cluster (the ``kafka_cluster`` fixture, or a test under tests/kafka/),
  or Kafka's own tools run without one (``kafka_tool``: the jars from Maven Central);
- ``spark``: a Spark session or a pipeline worker that starts one (tests/pipeline/, tests/history/; not
  tests/pipeline/test_landing.py: the landing area is written with pyarrow alone);
- ``browser``: Chromium driven by Playwright (tests/browser/);
- ``slow``: several servers of the portal's own (tests/replicas/, tests/benchmarks/, the live schema fuzzing), real
  Celery workers (the ``worker_factory`` fixture: a worker's start and warm stop are seconds each test), or a Maven
  build (tests/broker_plugins/: the plugins' JUnit tests, over a minute).

The markers are registered in pyproject.toml; ``-m "not kafka and not spark and not browser and not slow"`` is the
fast tier.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
BY_FOLDER = {"kafka": "kafka", "pipeline": "spark", "history": "spark", "browser": "browser", "replicas": "slow",
             "benchmarks": "slow", "broker_plugins": "slow"}
BY_FIXTURE = {"kafka_cluster": "kafka", "kafka_tool": "kafka", "spark": "spark", "prometheus": "kafka",
              "worker_factory": "slow"}
SLOW_FILES = {"test_api_schema_fuzz.py"}
# Files of a marked folder that need none of what the folder's marker stands for (the landing area is pyarrow's).
NOT_BY_FOLDER = {"pipeline/test_landing.py"}


def tiers_of(item: pytest.Item) -> set[str]:
    """The tiers one collected test belongs to."""
    path = Path(str(item.fspath)).resolve()
    found = set()
    try:
        relative = path.relative_to(TESTS)
        folder = relative.parts[0]
    except (ValueError, IndexError):
        relative, folder = Path(), ""
    if folder in BY_FOLDER and relative.as_posix() not in NOT_BY_FOLDER:
        found.add(BY_FOLDER[folder])
    if path.name in SLOW_FILES:
        found.add("slow")
    for name in getattr(item, "fixturenames", ()):
        if name in BY_FIXTURE:
            found.add(BY_FIXTURE[name])
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for tier in sorted(tiers_of(item)):
            item.add_marker(getattr(pytest.mark, tier))
