"""The suite's tiers (tests/tiers.py): a test is marked by what it needs, so --fast leaves out what it should."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from _pytest.mark.expression import Expression

ROOT = Path(__file__).resolve().parents[2]
FAST = "not kafka and not spark and not browser and not slow"


def collected(*paths: str) -> dict[str, set[str]]:
    """Each test collected from ``paths``, in order, with its tier markers: one pytest start (a few seconds each)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "tests.architecture.tier_listing", *paths],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode in (0, 5), proc.stdout[-2000:] + proc.stderr[-2000:]
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("TIERS "):
            node, names = line.removeprefix("TIERS ").rsplit(" ", 1)
            found[node] = set(filter(None, names.split(",")))
    assert found, proc.stdout[-2000:]
    return found


def selected(expression: str, tests: dict[str, set[str]], *under: str) -> list[str]:
    """The tests of ``tests`` (those under one of ``under``) that ``-m expression`` runs: pytest's own evaluation."""
    compiled = Expression.compile(expression)
    return [t for t, names in tests.items() if t.startswith(under) and runs(compiled, names)]


def runs(compiled: Expression, names: set[str]) -> bool:
    """Whether a test with these markers is selected by the compiled ``-m`` expression."""
    return compiled.evaluate(lambda name, /, **_kwargs: name in names)


def test_the_fast_tier_leaves_out_kafka_spark_browser_and_server_tests_by_folder_and_by_fixture() -> None:
    heavy = ("tests/kafka", "tests/pipeline", "tests/browser", "tests/replicas")
    every = collected(*heavy, "tests/connectors", "tests/engine/test_budgets.py")
    fast = selected(FAST, every, *heavy, "tests/connectors", "tests/engine/test_budgets.py")
    landing = "tests/pipeline/test_landing.py"  # the one file of these folders that needs no Spark (pyarrow alone)
    assert not [t for t in fast if t.startswith(heavy) and not t.startswith(landing)], \
        "a Kafka, Spark, browser or server test in the fast tier"
    assert [t for t in fast if t.startswith(landing)] == [t for t in every if t.startswith(landing)] != []
    assert [t for t in every if "test_budgets.py" in t] == [t for t in fast if "test_budgets.py" in t] != []
    # the fixture, not the folder: the connectors' real-cluster tests live beside the responder's
    kafka = set(selected("kafka", every, "tests/kafka/test_cluster.py", "tests/connectors"))
    connectors = {t for t in every if t.startswith("tests/connectors")}
    assert any(t.startswith("tests/kafka/") for t in kafka)
    assert kafka & connectors and connectors - kafka and not kafka & set(fast)
