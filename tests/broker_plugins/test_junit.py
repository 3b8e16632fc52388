"""The broker plugins' JUnit tests (broker-plugins/, Maven Surefire), run by the project's test command.

``mvn -o -B -q -f broker-plugins/pom.xml test`` (online once when the offline run fails: a new machine's first run
fetches Maven's own plugins and the dependencies, as devtools/kafka/'s build does), with this session's
``QUOTAS_REDIS_URL`` in its environment: the quota callback's tests run the engine's real ``budget_share.lua`` on that
Redis. Then Surefire's reports say what ran: every test class of the quota callback, none failed, none skipped.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
POM = ROOT / "broker-plugins" / "pom.xml"
MODULES = ("telemetry-exporter", "quota-callback")
REPORTS = [ROOT / "broker-plugins" / m / "target" / "surefire-reports" for m in MODULES]
#: the quota callback's test classes: each must have run
EXPECTED = {
    "quotaportal.kafka.quota.DefaultPrecedenceEquivalenceTest",
    "quotaportal.kafka.quota.DemandEstimatorTest",
    "quotaportal.kafka.quota.GlobTest",
    "quotaportal.kafka.quota.GroupQuotaCallbackTest",
    "quotaportal.kafka.quota.GroupTableTest",
    "quotaportal.kafka.quota.LeaseStateMachineTest",
    "quotaportal.kafka.quota.RealRedisScriptTest",
}


def _maven(offline: bool, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = ["mvn", *(["-o"] if offline else []), "-B", "-q", "-ntp", "-f", str(POM), "test"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=540,
                          stdin=subprocess.DEVNULL, check=False)


def _reports() -> list[ET.Element]:
    return [ET.parse(p).getroot() for d in REPORTS if d.is_dir() for p in sorted(d.glob("TEST-*.xml"))]


@pytest.mark.timeout(600)
def test_the_broker_plugins_junit_tests_pass() -> None:
    if shutil.which("mvn") is None:
        pytest.fail("Maven (mvn) is not installed: run `bash scripts/bootstrap.sh` (ensure_maven)", pytrace=False)
    redis_url = os.environ.get("QUOTAS_REDIS_URL", "")
    if not redis_url:
        pytest.fail("QUOTAS_REDIS_URL is not set: the quota callback's JUnit tests run budget_share.lua on a real "
                    "Redis (scripts/run_tests.sh starts one)", pytrace=False)
    env = {**os.environ, "QUOTAS_REDIS_URL": redis_url}
    lock = ROOT / "broker-plugins" / ".junit.lock"  # two sessions in one work tree share target/
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            for d in REPORTS:  # no report of an earlier run may count
                shutil.rmtree(d, ignore_errors=True)
            proc = _maven(True, env)
            if proc.returncode != 0 and not _reports():  # offline failed before any test: fetch once, online
                proc = _maven(False, env)
            reports = _reports()
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
    failures = []
    for suite in reports:
        for case in suite.iter("testcase"):
            for bad in [*case.findall("failure"), *case.findall("error")]:
                failures.append(f"{case.get('classname')}.{case.get('name')}: {bad.get('message')}\n"
                                f"{(bad.text or '').strip()[:3000]}")
    ran = {suite.get("name") for suite in reports}
    tests = sum(int(s.get("tests", 0)) for s in reports)
    skipped = sum(int(s.get("skipped", 0)) for s in reports)
    print(f"JUnit: {tests} tests in {len(reports)} classes, {len(failures)} failed, {skipped} skipped")
    assert not failures, "JUnit tests failed:\n\n" + "\n\n".join(failures)
    assert proc.returncode == 0, f"mvn test exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert EXPECTED <= ran, f"test classes that did not run: {sorted(EXPECTED - ran)}"
    assert tests >= 15 and skipped == 0, f"{tests} tests, {skipped} skipped"
