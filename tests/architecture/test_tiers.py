"""The suite's tiers (tests/tiers.py): a test is marked by what it needs, so --fast leaves out what it should."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAST = "not kafka and not spark and not browser and not slow"


def collected(*args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode in (0, 5), proc.stdout[-2000:] + proc.stderr[-2000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_the_fast_tier_leaves_out_kafka_spark_browser_and_server_tests() -> None:
    assert collected("-m", FAST, "tests/kafka", "tests/pipeline", "tests/browser", "tests/replicas") == []
    assert collected("-m", "kafka", "tests/kafka/test_cluster.py")
    assert collected("-m", "spark", "tests/pipeline/test_budget_replay.py")


def test_a_test_outside_the_kafka_folder_that_asks_for_the_cluster_is_a_kafka_test() -> None:
    # the fixture, not the folder: the connectors' real-cluster tests live beside the responder's
    kafka = set(collected("-m", "kafka", "tests/connectors"))
    everything = set(collected("tests/connectors"))
    assert kafka and kafka < everything
    assert set(collected("-m", FAST, "tests/engine/test_budgets.py")) == set(collected("tests/engine/test_budgets.py"))
