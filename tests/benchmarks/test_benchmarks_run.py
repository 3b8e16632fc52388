"""The benchmarks run end to end and report every figure their issues ask for.

Only the shape of its output is checked here: timings belong to the benchmark, not to tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.session import java_binary

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = {
    "rate_ratio", "token_bucket_ratio", "rate_server_us", "token_bucket_server_us",
    "p99_latency_ratio", "bytes_per_rate_entity",
}


def test_quick_run_ends_with_one_json_line_of_figures(redis_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/engine_bench.py", "--quick", "--redis-url", redis_url,
         "--seconds", "0.3", "--memory-entities", "5000", "--latency-n", "50"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert REQUIRED <= summary.keys()
    assert all(summary[k] > 0 for k in REQUIRED)
    assert summary["degraded"] == 0


def test_connection_benchmark_quick_run_reports_its_ratio(redis_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/connection_bench.py", "--quick", "--redis-url", redis_url,
         "--seconds", "0.3", "--scale-ips", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["admission_ratio"] > 0 and summary["admissions_per_s"] > 0


def test_limiter_benchmark_quick_run_reports_its_overhead() -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/limiter_bench.py", "--quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["pairs_per_s"] > 0 and summary["baseline_pairs_per_s"] > 0 and summary["overhead_ratio"] > 0


def test_api_benchmark_quick_run_reports_its_ratios() -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/api_bench.py", "--quick", "--seconds", "0.5", "--entities", "500"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["describe_ratio"] > 0 and summary["effective_ratio"] > 0 and summary["baseline_rps"] > 0


def test_push_benchmark_quick_run_reports_its_ratio() -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/push_bench.py", "--quick", "--changes", "120", "--batch", "40"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["changes"] == 120 and summary["verified"] is True
    assert summary["raw_changes_per_s"] > 0 and summary["push_changes_per_s"] > 0 and summary["push_ratio"] > 0
    assert summary["latency_p99_ms"] >= summary["latency_p50_ms"]
    assert summary["batch_ratio"] > 0 and summary["worker_concurrency"] >= 1
    assert summary["paced_changes"] == 100 and summary["paced_latency_p99_ms"] >= summary["paced_latency_p50_ms"] > 0


@pytest.mark.timeout(300)
def test_kafka_push_benchmark_quick_run_reports_its_ratio(kafka_cluster) -> None:  # type: ignore[no-untyped-def]
    proc = subprocess.run(
        [sys.executable, "benchmarks/kafka_push_bench.py", "--quick", "--bootstrap", kafka_cluster.bootstrap(),
         "--changes", "10", "--batches", "2", "--batch", "10"],
        cwd=ROOT, capture_output=True, text=True, timeout=280, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:] + proc.stdout[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["changes"] == 10 and summary["bare_changes"] == 10 and summary["verified"] is True
    assert summary["kafka_push_ratio"] > 0 and summary["portal_changes_per_s"] > 0 and summary["bare_changes_per_s"] > 0
    assert summary["kafka_push_p99_ms"] >= summary["kafka_push_p50_ms"] > 0
    assert summary["bare_p99_ms"] >= summary["bare_p50_ms"] > 0
    assert summary["batch_changes"] == 20 and summary["batch_p99_ms"] >= summary["batch_p50_ms"] > 0
    assert summary["kafka_push_batch_ratio"] > 0 and "target_met" in summary


def test_monitor_benchmark_quick_run_reports_its_delays() -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/monitor_bench.py", "--quick", "--seconds", "1.5", "--warmup", "0.5"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["p99_ms"] >= summary["p50_ms"] > 0 and summary["baseline_p99_ms"] > 0
    assert summary["p99_ratio"] > 0 and summary["relay_cpu_cores"] >= 0 and summary["uvicorn_cpu_cores"] >= 0
    for phase in ("echo_cluster", "echo_entities", "relay_cluster", "relay_entities", "relay_members"):
        assert summary[phase]["received"] > 0, phase


def test_overview_benchmark_quick_run_reports_its_ratio() -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/overview_bench.py", "--quick", "--entities", "500", "--requests", "3",
         "--warmup", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["admin_median_ms"] > 0 and summary["member_median_ms"] > 0 and summary["trivial_median_ms"] > 0
    assert summary["admin_ratio"] > 0 and summary["admin_entities_shown"] == 500


def test_telemetry_benchmark_quick_run_reports_its_ratio() -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/telemetry_bench.py", "--quick", "--clients", "8", "--seconds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["pushes_per_s"] > 0 and summary["trivial_per_s"] > 0 and summary["push_ratio"] > 0
    assert summary["pushes_failed"] == 0 and summary["payload_bytes"] >= 10_000 and summary["server_rss_max_mb"] > 0


@pytest.mark.timeout(300)
def test_pipeline_benchmark_quick_run_reports_its_figures() -> None:
    if java_binary() is None:
        reason = "the pipeline benchmark needs Java for Spark (no JAVA_HOME and no java on the PATH)"
        print(f"SKIP: {reason}", file=sys.stderr)
        pytest.skip(reason)
    proc = subprocess.run(
        [sys.executable, "benchmarks/pipeline_bench.py", "--records", "2000", "--entities", "10", "--seconds", "100",
         "--driver-memory", "2g"],
        cwd=ROOT, capture_output=True, text=True, timeout=280, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    figures = {"whatif_s", "udf_s", "whatif_speedup", "kernel_us_per_record", "model_us_per_record", "kernel_speedup",
               "total_throttle_ms", "throttled_entities", "rollup_s", "rollup_rows", "rollup_target_s",
               "rollup_baseline_s", "rollup_ratio"}
    assert figures <= summary.keys()
    assert all(summary[k] > 0 for k in figures)
    assert summary["rollup_out_rows"]["minute"] > 0 and summary["rollup_out_rows"]["hour"] > 0


@pytest.mark.timeout(600)
def test_preview_benchmark_quick_run_reports_the_first_and_warm_previews_in_the_demo() -> None:
    if java_binary() is None:
        reason = "the preview benchmark needs Java for Spark (no JAVA_HOME and no java on the PATH)"
        print(f"SKIP: {reason}", file=sys.stderr)
        pytest.skip(reason)
    proc = subprocess.run(
        [sys.executable, "benchmarks/preview_bench.py", "--quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=580, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    figures = {"first_preview_s", "first_asked_after_s", "warm_median_s", "warm_p90_s", "warm_max_s"}
    assert figures <= summary.keys() and all(summary[k] > 0 for k in figures)
    assert summary["warm_previews"] == len(summary["warm_s"]) == 2 and summary["requests_replayed"] > 0
    assert summary["rollups_sent"] >= 1 and summary["lane_ratio"] is None  # --quick measures no baseline


def test_prometheus_benchmark_quick_run_reports_its_lag() -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/prometheus_bench.py", "--quick", "--entities", "50", "--seconds", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "prometheus_lag_p99_ms" in proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["series"] == 150 and summary["samples_per_poll_min"] == 150
    assert summary["prometheus_lag_p99_ms"] >= summary["prometheus_lag_p50_ms"] > 0
    assert summary["lags_counted"] > 0 and "target_met" in summary


def test_otlp_benchmark_quick_run_reports_its_ratio() -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/otlp_bench.py", "--quick", "--clients", "2", "--seconds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["otlp_per_s"] > 0 and summary["trivial_per_s"] > 0 and summary["otlp_ratio"] > 0
    assert summary["otlp_failed"] == 0 and summary["otlp_partial"] == 0 and summary["payload_bytes"] > 500
