"""The pipeline's jobs, unchanged, on a Spark standalone master with one worker give the figures of ``local[2]``.

The cluster is started by ``devtools.spark_cluster`` (the PySpark installation's own ``spark-daemon.sh``); a driver
process of its own (one SparkContext per process: this one holds the tests' ``local[2]``) builds the jobs' session
with ``master=spark://127.0.0.1:<port>``, as ``QUOTAS_SPARK_MASTER`` makes the portal's jobs do, and runs the rollups
and a what-if through their ``main``; the same calls run here on ``local[2]``, and the answers and the written
rollups must be equal.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from pipeline import rollups, whatif
from pipeline.session import java_binary
from tests.landing_files import write_landing

from .test_jobs import _samples, _usage

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(900)  # four JVMs (master, worker, driver, executor) start on a shared machine

DRIVER = textwrap.dedent("""
    import contextlib, io, json, sys
    from pipeline import rollups, whatif
    from pipeline.session import build_session

    master, rollup_args, whatif_args = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    spark = build_session(master, "quotas-standalone-test")
    sc = spark.sparkContext
    answers = {"master": sc.master}
    for name, job, args in (("rollups", rollups, rollup_args), ("whatif", whatif, whatif_args)):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert job.main(args, spark=spark) == 0
        answers[name] = json.loads(out.getvalue())
    # executors that ran tasks, besides the driver: the work went to the worker
    answers["executors"] = [e.host() for e in sc._jsc.sc().statusTracker().getExecutorInfos()]
    spark.stop()
    print(json.dumps(answers))
""")


@pytest.fixture(scope="module")
def spark_master() -> Iterator[str]:
    if java_binary() is None:
        reason = "the Spark standalone test needs Java (no JAVA_HOME and no java on the PATH)"
        print(f"SKIP: {reason}", file=sys.stderr)
        pytest.skip(reason)
    from devtools.spark_cluster import SparkCluster

    cluster = SparkCluster(name=f"pytest-{id(object())}", cores=1, memory="1g").start()
    try:
        yield cluster.url
    finally:
        cluster.stop()


def _run_local(job, args: list[str], spark, capsys) -> dict:
    assert job.main(args, spark=spark) == 0
    return json.loads(capsys.readouterr().out)


def _rows(path: str | Path) -> pd.DataFrame:
    df = pd.read_parquet(path)
    return df[sorted(df.columns)].sort_values(["tags", "window_start_ms"]).reset_index(drop=True)


def test_rollups_and_a_whatif_on_the_standalone_cluster_equal_local(
    spark, spark_master: str, tmp_path: Path, capsys
) -> None:
    root = tmp_path / "landing"
    write_landing(spark, root, "samples", _samples(), "t")
    write_landing(spark, root, "usage", _usage(), "t_ms")
    whatif_args = ["--root", str(root), "--cluster", "prod", "--user", "alice", "--client-id", "app",
                   "--key", "producer_byte_rate", "--value", "500"]

    local_out, cluster_out = tmp_path / "rollups-local", tmp_path / "rollups-cluster"
    local = {
        "rollups": _run_local(rollups, ["--root", str(root), "--out", str(local_out)], spark, capsys),
        "whatif": _run_local(whatif, whatif_args, spark, capsys),
    }
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, spark_master,
         json.dumps(["--root", str(root), "--out", str(cluster_out)]), json.dumps(whatif_args)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    remote = json.loads(proc.stdout.strip().splitlines()[-1])

    assert remote["master"] == spark_master
    assert len(remote["executors"]) >= 2  # the driver and the worker's executor
    assert remote["rollups"]["rows"] == local["rollups"]["rows"] == {"minute": 2, "hour": 1}
    # the figures, not how long each stage took on each cluster
    assert {**remote["whatif"], "stages_s": None} == {**local["whatif"], "stages_s": None}
    assert remote["whatif"]["stages_s"].keys() == local["whatif"]["stages_s"].keys()
    assert local["whatif"]["throttle_events"] > 0
    for granularity in ("minute", "hour"):
        pd.testing.assert_frame_equal(
            _rows(cluster_out / f"granularity={granularity}"), _rows(local_out / f"granularity={granularity}")
        )
