"""The replay command reproduces every conformance file exactly, on both engines.

The files are copies of ../shared/conformance (data, kept in conformance/).
A kind the engine does not implement must be reported as unsupported, never
guessed; every kind in the published files (KIP-714 client metrics included) is
implemented, so none may be. Pulsar's vectors state only test expectations
(``expect``, with forms such as approx or message_contains), checked as such.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.pulsar_replay import check_expect

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "conformance").glob("*.json"))
NOT_YET: set[str] = set()


def canonical(x: object) -> str:
    return json.dumps(x, sort_keys=True)


def run_replay(path: Path, engine: str, redis_url: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.replay", str(path), "--engine", engine, "--redis-url", redis_url],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_conformance_copies_are_here() -> None:
    assert {p.name for p in FILES} >= {
        "rate_traces.json", "token_bucket_traces.json", "kafka_vectors.json", "pulsar_vectors.json"
    }


@pytest.mark.parametrize("engine", ["model", "redis"])
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_replay_reproduces_file_exactly(path: Path, engine: str, engine_redis_url: str) -> None:
    doc = json.loads(path.read_text())
    got = run_replay(path, engine, engine_redis_url)
    mismatches = []
    if "traces" in doc:
        assert [t["id"] for t in got["traces"]] == [t["id"] for t in doc["traces"]]
        for te, tg in zip(doc["traces"], got["traces"], strict=True):
            assert len(tg["steps"]) == len(te["steps"])
            for i, (se, sg) in enumerate(zip(te["steps"], tg["steps"], strict=True)):
                if canonical(se["out"]) != canonical(sg):
                    mismatches.append((te["id"], i, se["out"], sg))
    else:
        assert [c["id"] for c in got["cases"]] == [c["id"] for c in doc["cases"]]
        for ce, cg in zip(doc["cases"], got["cases"], strict=True):
            if "unsupported" in cg:
                assert ce["kind"] in NOT_YET, f"{ce['id']} ({ce['kind']}) must be supported: {cg['unsupported']}"
                continue
            assert ce["kind"] not in NOT_YET
            for i, (se, sg) in enumerate(zip(ce["steps"], cg["steps"], strict=True)):
                if "oracle" in se:
                    if canonical(se["oracle"]) != canonical(sg):
                        mismatches.append((ce["id"], i, se["oracle"], sg))
                elif check_expect(se.get("expect", {}), sg):
                    mismatches.append((ce["id"], i, se.get("expect"), sg))
    assert not mismatches, f"{len(mismatches)} steps differ, first: {mismatches[:3]}"


def test_unsupported_kinds_are_reported_per_case_not_fatal(tmp_path: Path, redis_url: str) -> None:
    doc = {"cases": [
        {"id": "later", "kind": "not_a_kind_yet", "config": {}, "steps": [{"op": "get", "t_ms": 0, "oracle": {}}]},
        {"id": "now", "kind": "quota_utils", "config": {}, "steps": [
            {"op": "throttle_time", "t_ms": 0, "args": {"observed": 55.0, "bound": 50.0, "samples": 2},
             "oracle": {"throttle_ms": 100}}]},
    ]}
    f = tmp_path / "mixed.json"
    f.write_text(json.dumps(doc))
    got = run_replay(f, "model", redis_url)
    assert "unsupported" in got["cases"][0]
    assert got["cases"][1]["steps"] == [{"throttle_ms": 100}]


def test_every_client_metrics_case_is_replayed_and_counted(redis_url: str) -> None:
    path = ROOT / "conformance" / "kafka_vectors.json"
    doc = json.loads(path.read_text())
    expected = [c for c in doc["cases"] if c["kind"] == "client_metrics"]
    assert len(expected) >= 12
    got = {c["id"]: c for c in run_replay(path, "model", redis_url)["cases"]}
    for case in expected:
        out = got[case["id"]]
        assert "unsupported" not in out, case["id"]
        assert [canonical(s["oracle"]) for s in case["steps"]] == [canonical(s) for s in out["steps"]], case["id"]
