"""Replay conformance files through the engine and print what it computed.

    python -m conformance.replay FILE.json [--engine model|redis] [--redis-url URL]

Trace files (top-level ``traces``) and vector files (top-level ``cases``) are
replayed step by step on a fresh sensor or manager per trace/case; the output has,
per step, the keys of that step's ``out`` / ``oracle``. The contract is in
``conformance/README.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from conformance import budget_replay
from conformance.pulsar_replay import KINDS as PULSAR_KINDS
from conformance.pulsar_replay import replay_pulsar_case
from engine.decisions import NO_EXPIRY, RAW_STAT, Decision, Kind, Op, Outcome
from engine.entities import QuotaType, normalize_ip
from engine.errors import JavaIllegalArgument, QuotaEngineError, ThrottlingQuotaExceeded
from engine.javamath import LONG_MAX, java_round
from engine.managers import ControllerMutationQuotaManager, UsageRecord, manager_for
from engine.model import ModelBackend
from engine.quota_utils import bounded_throttle_time_ms, throttle_time_ms, token_bucket_throttle_ms

Out = dict[str, Any]


class Unsupported(Exception):
    """A kind or op this engine does not implement yet: reported per case, never fatal."""


# ---------------------------------------------------------------- engines


class EngineFactory:
    """Gives each trace/case a fresh backend (model) or a fresh key namespace (Redis)."""

    def __init__(self, engine: str, redis_url: str | None) -> None:
        self.engine = engine
        self.counter = 0
        self.client = None
        if engine == "redis":
            from engine.redis_backend import RedisBackend, connect

            self.client = connect(redis_url or "redis://127.0.0.1:6379/0", timeout_s=5.0)
            self.backend = RedisBackend(self.client)
            self.run_id = f"replay-{self.client.incr('qe:replay:runs')}"

    def new(self) -> tuple[Any, str]:
        self.counter += 1
        if self.engine == "model":
            return ModelBackend(), f"case-{self.counter}"
        return self.backend, f"{self.run_id}-{self.counter}"

    @contextmanager
    def scope(self) -> Iterator[tuple[Any, str]]:
        backend, ns = self.new()
        try:
            yield backend, ns
        finally:
            if self.client is not None:
                keys = list(self.client.scan_iter(match=f"qe:{{{ns}|*", count=1000))
                if keys:
                    self.client.delete(*keys)
                budget_replay.cleanup(self.client, ns)


# ---------------------------------------------------------------- sensors (traces, sensor_* kinds)


class SensorRun:
    """One sensor driven by the trace/vector ops."""

    def __init__(self, backend: Any, ns: str, kind: Kind, config: dict[str, Any]) -> None:
        self.backend = backend
        self.key = f"qe:{{{ns}|sensor}}"
        self.kind = kind
        self.samples = int(config.get("samples", 2))
        self.window_ms = int(config.get("window_ms", 30_000))
        q = config.get("quota")
        self.bound: float | None = None if q is None else float(q)
        # absent in the unit-test vectors: QuotaUtils is then unbounded
        self.max_throttle_ms = int(config.get("max_throttle_ms", LONG_MAX))

    def run(self, op: Op, value: float, t: int, flags: int = 0) -> Outcome:
        # a bare Sensor never expires (only the quota managers' sensors do)
        d = Decision(
            self.key, self.kind, op, value, t, self.bound, self.samples, self.window_ms, flags=flags | NO_EXPIRY
        )
        return self.backend.execute([d])[0]

    def throttle(self, o: Outcome) -> int:
        if not o.violated or o.throttle_raw is None:
            return 0
        return java_round(o.throttle_raw)

    def step(self, op: str, value: float, t: int) -> Out:
        if op == "set_quota":
            self.bound = float(value)
            return {"ok": True}
        code = {
            "record": Op.RECORD,
            "record_nocheck": Op.RECORD_NOCHECK,
            "strict_record": Op.STRICT,
            "check": Op.CHECK,
            "measure": Op.MEASURE,
        }.get(op)
        if code is None:
            raise Unsupported(f"op {op!r}")
        o = self.run(code, value, t)
        if code == Op.RECORD_NOCHECK:
            return {"ok": True}
        out: Out = {}
        if code != Op.MEASURE:
            out["violated"] = o.violated
            out["throttle_ms"] = self.throttle(o)
            if o.violated:
                out["value"] = o.value
            if code == Op.STRICT:
                out["recorded"] = o.recorded
            if o.violated or code == Op.RECORD:
                out["bounded_throttle_ms"] = min(out["throttle_ms"], self.max_throttle_ms)
        if self.kind == Kind.TOKEN_BUCKET:
            out["tokens"] = o.value
        else:
            out.update(rate=o.value, window_ms=o.window_ms, sum=o.sum)
        return out


def _step_value(step: dict[str, Any]) -> float:
    for name in ("value", "quota"):
        if step.get(name) is not None:
            return float(step[name])
    args = step.get("args") or {}
    for name in ("v", "value", "quota"):
        if name in args and args[name] is not None:
            return float(args[name])
    return 0.0


def replay_trace(factory: EngineFactory, kind: Kind, trace: dict[str, Any]) -> list[Out]:
    with factory.scope() as (backend, ns):
        run = SensorRun(backend, ns, kind, trace["config"])
        return [run.step(s["op"], _step_value(s), int(s["t_ms"])) for s in trace["steps"]]


# ---------------------------------------------------------------- vector kinds


def _sensor_case(kind: Kind) -> Callable[[Any, str, dict[str, Any]], Callable[[dict[str, Any]], Out]]:
    def make(backend: Any, ns: str, config: dict[str, Any]) -> Callable[[dict[str, Any]], Out]:
        k = kind
        if kind == Kind.RATE and config.get("stat") == "WindowedCount":
            k = Kind.RATE_COUNT
        run = SensorRun(backend, ns, k, config)
        return lambda step: run.step(step["op"], _step_value(step), int(step["t_ms"]))

    return make


def _sampled_stat_case(backend: Any, ns: str, config: dict[str, Any]) -> Callable[[dict[str, Any]], Out]:
    kind = {"WindowedSum": Kind.RATE, "WindowedCount": Kind.RATE_COUNT, "SampleCount": Kind.SAMPLE_COUNT}.get(
        config.get("stat", "WindowedSum")
    )
    if kind is None:
        raise Unsupported(f"stat {config.get('stat')!r}")
    run = SensorRun(backend, ns, kind, {**config, "quota": None})

    def step(s: dict[str, Any]) -> Out:
        t = int(s["t_ms"])
        if s["op"] == "record":
            run.run(Op.RECORD_NOCHECK, _step_value(s), t)
            return {"ok": True}
        if s["op"] == "measure":
            return {"value": run.run(Op.MEASURE, 0.0, t, flags=RAW_STAT).sum}
        raise Unsupported(f"op {s['op']!r}")

    return step


def _cumulative_sum_case(backend: Any, ns: str, config: dict[str, Any]) -> Callable[[dict[str, Any]], Out]:
    key = f"qe:{{{ns}|cumulative}}"

    def step(s: dict[str, Any]) -> Out:
        op = {"record": Op.RECORD, "check": Op.CHECK, "measure": Op.MEASURE}.get(s["op"])
        if op is None:
            raise Unsupported(f"op {s['op']!r}")
        d = Decision(
            key,
            Kind.CUMULATIVE_SUM,
            op,
            _step_value(s),
            int(s["t_ms"]),
            bound=config.get("upper"),
            aux=config.get("lower"),
        )
        o = backend.execute([d])[0]
        return {"violated": o.violated, "violated_metric": o.violated_metric, "total": o.value}

    return step


def _quota_utils_case(backend: Any, ns: str, config: dict[str, Any]) -> Callable[[dict[str, Any]], Out]:
    def step(s: dict[str, Any]) -> Out:
        a = s.get("args") or {}
        observed, bound = float(a["observed"]), float(a["bound"])
        if s["op"] == "token_bucket_throttle_time":
            if a.get("measurable", "TokenBucket") != "TokenBucket":
                raise JavaIllegalArgument("ControllerMutationQuotaManager.throttleTimeMs needs a TokenBucket metric")
            return {"throttle_ms": token_bucket_throttle_ms(observed, bound)}
        if s["op"] not in ("throttle_time", "bounded_throttle_time"):
            raise Unsupported(f"op {s['op']!r}")
        if a.get("measurable", "Rate") != "Rate":
            raise JavaIllegalArgument("QuotaUtils needs a Rate metric")
        # a fresh Rate with 1 s windows: its window is the padding alone, (samples - 1) * 1000 ms, at least 1
        window = max((int(a.get("samples", 11)) - 1) * 1000, 1)
        if s["op"] == "throttle_time":
            return {"throttle_ms": throttle_time_ms(observed, bound, window)}
        return {"throttle_ms": bounded_throttle_time_ms(observed, bound, window, int(a["max_ms"]))}

    return step


def _manager_case(backend: Any, ns: str, config: dict[str, Any]) -> Callable[[dict[str, Any]], Out]:
    qtype = QuotaType(config.get("type", "produce"))
    manager = manager_for(
        qtype, backend, samples=int(config.get("samples", 11)), window_s=int(config.get("window_s", 1)), namespace=ns
    )

    def step(s: dict[str, Any]) -> Out:
        a = s.get("args") or {}
        op, t = s["op"], int(s["t_ms"])
        if op == "update_quota":
            q = a.get("quota")
            manager.update_quota(a.get("user"), a.get("client"), None if q is None else float(q))
            return {"ok": True, "quota_types_enabled": manager.overrides.types_enabled}
        if op == "quota":
            bound, tags = manager.quota(a["user"], a["client"])
            return {"bound": bound, "tags": tags}
        if op == "max_value_in_quota_window":
            return {"value": manager.max_value_in_quota_window(a["user"], a["client"])}
        if op == "record":
            # Kafka's managers take any double: the replay skips the portal-facing usage validation
            r = manager.record_many([UsageRecord(a["user"], a["client"], float(a["v"]), t)], validate=False)[0]
            if not r.quotas_enabled:
                return {"throttle_ms": 0, "quotas_enabled": False}
            out: Out = {"throttle_ms": r.throttle_ms}
            if r.violated:
                out.update(throttle_ms_long=r.throttle_ms_long, value=r.observed)
            out.update(tags=r.tags, measured=r.measured)
            return out
        if op == "unrecord":
            manager.unrecord(a["user"], a["client"], float(a["v"]), t, validate=False)
            return {"ok": True}
        if op == "new_quota":
            if not isinstance(manager, ControllerMutationQuotaManager):
                raise Unsupported("new_quota is for controller_mutation managers")
            strict = a.get("strict", a.get("mode", "strict") == "strict")
            return {"kind": manager.new_quota_for(a.get("user", ""), a.get("client", ""), bool(strict)).kind}
        raise Unsupported(f"op {op!r}")

    return step


def _controller_mutation_case(backend: Any, ns: str, config: dict[str, Any]) -> Callable[[dict[str, Any]], Out]:
    manager = ControllerMutationQuotaManager(
        backend, samples=int(config.get("samples", 11)), window_ms=int(config.get("window_ms", 1000)), namespace=ns
    )
    manager.update_quota("user", None, float(config["quota"]))
    quota = manager.new_quota_for("user", "client", strict=config.get("mode", "strict") == "strict")

    def tokens(t: int) -> float | None:
        return manager.measure("user", "client", t).value

    def step(s: dict[str, Any]) -> Out:
        t = int(s["t_ms"])
        if s["op"] == "record":
            thrown = False
            try:
                quota.record(_step_value(s), t)
            except ThrottlingQuotaExceeded:
                thrown = True
            return {
                "throws_throttling_quota_exceeded": thrown,
                "is_exceeded": quota.is_exceeded(),
                "throttle_time": quota.throttle_time(t),
                "tokens": tokens(t),
            }
        if s["op"] == "query":
            return {"is_exceeded": quota.is_exceeded(), "throttle_time": quota.throttle_time(t), "tokens": tokens(t)}
        raise Unsupported(f"op {s['op']!r}")

    return step


def _connection_quotas_case(backend: Any, ns: str, config: dict[str, Any]) -> Callable[[dict[str, Any]], Out]:
    from engine.connections import ConnectionConfig, ModelConnectionQuotas, RedisConnectionQuotas

    props: dict[str, object] = {
        "listeners": config.get("listeners", "PLAINTEXT"),
        "quota.window.num": config.get("samples", 11),
        "quota.window.size.seconds": config.get("window_s", 1),
    }
    names = {
        "inter_broker_listener": "inter.broker.listener.name",
        "max_connections_per_ip": "max.connections.per.ip",
        "max_connections_per_ip_overrides": "max.connections.per.ip.overrides",
        "max_connections": "max.connections",
        "max_connection_creation_rate": "max.connection.creation.rate",
    }
    for key, prop in names.items():
        if config.get(key) is not None:
            props[prop] = config[key]
    for listener, value in (config.get("listener_max_connections") or {}).items():
        props[f"listener.name.{listener}.max.connections"] = value
    for listener, value in (config.get("listener_max_connection_creation_rate") or {}).items():
        props[f"listener.name.{listener}.max.connection.creation.rate"] = value
    cfg = ConnectionConfig.from_props(props)
    if isinstance(backend, ModelBackend):
        quotas: Any = ModelConnectionQuotas(cfg)
    else:
        quotas = RedisConnectionQuotas(backend.client, ns, cfg)

    def admission(a: Any) -> Out:
        out: Out = {"result": a.result}
        if a.result in ("ip_throttled", "blocked"):
            out["throttle_ms"] = a.throttle_ms
        out.update(count=a.count, total=a.total)
        return out

    def step(s: dict[str, Any]) -> Out:
        a, op, t = s.get("args") or {}, s["op"], int(s["t_ms"])
        if op == "inc":
            return admission(quotas.inc(a["listener"], a["ip"], t))
        if op == "inc_after_wait":
            return admission(quotas.inc_after_wait(a["listener"], a["ip"], t))
        if op == "dec":
            return admission(quotas.dec(a["listener"], a["ip"], t))
        if op == "get":
            return {"count": quotas.get(a["ip"])}
        if op == "update_ip_rate":
            quotas.ip_rates.update(a.get("ip"), a.get("rate"))
            return {"ok": True}
        if op == "ip_rate_quota":
            rate = quotas.ip_rates.rate_for(quotas_ip(a["ip"]))
            bound = quotas.ip_sensor_bound(a["ip"])
            return {"rate_for_ip": rate, "rate": rate, "bound": bound, "metric_bound": bound, "quota_bound": bound}
        if op in ("ip_rate_metric", "listener_rate_metric", "broker_rate_metric"):
            which = op.split("_", 1)[0]
            value = quotas.measure(which, a.get("ip") if which == "ip" else a.get("listener"), t)
            return {"rate": value, "value": value, "measured": value}
        if op == "max_connections_exceeded":
            exceeded = quotas.max_connections_exceeded(a["listener"])
            return {"exceeded": exceeded, "result": exceeded, "value": exceeded}
        raise Unsupported(f"op {op!r}")

    return step


def _client_metrics_case(backend: Any, ns: str, config: dict[str, Any]) -> Callable[[dict[str, Any]], Out]:
    # KIP-714 lives in the broker's process (no Redis): both engines run the same implementation
    from kip714.vectors import UnsupportedOp, client_metrics_case

    step_fn = client_metrics_case(config)

    def step(s: dict[str, Any]) -> Out:
        try:
            return step_fn(s)
        except UnsupportedOp as e:
            raise Unsupported(str(e)) from e

    return step


def quotas_ip(ip: str) -> str:
    return normalize_ip(ip)


CASE_KINDS: dict[str, Callable[[Any, str, dict[str, Any]], Callable[[dict[str, Any]], Out]]] = {
    "sensor_rate": _sensor_case(Kind.RATE),
    "sensor_token_bucket": _sensor_case(Kind.TOKEN_BUCKET),
    "sampled_stat": _sampled_stat_case,
    "sensor_cumulative_sum": _cumulative_sum_case,
    "quota_utils": _quota_utils_case,
    "client_quota_manager": _manager_case,
    "controller_mutation_quota": _controller_mutation_case,
    "connection_quotas": _connection_quotas_case,
    "client_metrics": _client_metrics_case,
}


def _budget_case(backend: Any, ns: str, config: dict[str, Any]) -> Callable[[dict[str, Any]], Out]:
    # the model runs without Redis; the Redis engine's backend holds the factory's client
    return budget_replay.budget_case(getattr(backend, "client", None), ns, config)


CASE_KINDS[budget_replay.KIND] = _budget_case

EXCEPTION_NAMES = {JavaIllegalArgument: "IllegalArgumentException"}


def replay_case(factory: EngineFactory, case: dict[str, Any]) -> list[Any] | Out:
    if case.get("kind") in PULSAR_KINDS:
        # the limiter lives in the broker's process: both engines run the same asyncio implementation
        return replay_pulsar_case(case, full=True)
    make = CASE_KINDS.get(case.get("kind", ""))
    if make is None:
        return {"unsupported": f"kind {case.get('kind')!r} is not implemented by this engine yet"}
    with factory.scope() as (backend, ns):
        try:
            step_fn = make(backend, ns, case.get("config") or {})
            outs: list[Any] = []
            for s in case["steps"]:
                n = s.get("repeat")
                results = [_guarded(step_fn, s) for _ in range(int(n or 1))]
                outs.append(results if n is not None else results[0])
            return outs
        except Unsupported as e:
            return {"unsupported": str(e)}


def _guarded(step_fn: Callable[[dict[str, Any]], Out], s: dict[str, Any]) -> Out:
    try:
        return step_fn(s)
    except JavaIllegalArgument:
        return {"exception": "IllegalArgumentException"}


def _restrict(out: Any, expected: Any) -> Any:
    """Keep the keys the file's step lists (the contract: one OUT per step with those keys).

    Pulsar's vectors state only ``expect``; its ``message_contains`` form is answered by ``message``.
    """
    if isinstance(expected, dict) and "message_contains" in expected:
        expected = {**expected, "message": None}
    if isinstance(out, list) and isinstance(expected, list):
        return [_restrict(o, e) for o, e in zip(out, expected, strict=False)]
    if isinstance(out, dict) and isinstance(expected, dict) and "exception" not in out:
        return {k: out[k] for k in expected if k in out}
    return out


def replay(doc: dict[str, Any], engine: str = "model", redis_url: str | None = None) -> dict[str, Any]:
    factory = EngineFactory(engine, redis_url)
    if "traces" in doc:
        description = str((doc.get("schema") or {}).get("description", ""))
        kind = Kind.TOKEN_BUCKET if "TokenBucket" in description else Kind.RATE
        if any("tokens" in s.get("out", {}) for t in doc["traces"] for s in t["steps"]):
            kind = Kind.TOKEN_BUCKET
        traces = []
        for trace in doc["traces"]:
            outs = replay_trace(factory, kind, trace)
            traces.append(
                {
                    "id": trace["id"],
                    "steps": [
                        _restrict(o, s.get("out")) if "out" in s else o
                        for o, s in zip(outs, trace["steps"], strict=True)
                    ],
                }
            )
        return {"traces": traces}
    cases = []
    for case in doc.get("cases", []):
        result = replay_case(factory, case)
        if isinstance(result, dict):
            cases.append({"id": case["id"], "steps": [], **result})
            continue
        steps = [
            _restrict(o, s["oracle"]) if "oracle" in s else _restrict(o, s.get("expect", {}))
            for o, s in zip(result, case["steps"], strict=True)
        ]
        cases.append({"id": case["id"], "steps": steps})
    return {"cases": cases}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("file")
    parser.add_argument("--engine", choices=["model", "redis"], default="model")
    parser.add_argument("--redis-url", default=None, help="Redis for --engine redis (default $QUOTAS_REDIS_URL)")
    args = parser.parse_args(argv)
    import os

    with open(args.file) as f:
        doc = json.load(f)
    try:
        result = replay(doc, args.engine, args.redis_url or os.environ.get("QUOTAS_REDIS_URL"))
    except QuotaEngineError as e:
        print(json.dumps({"error": e.to_dict()}), file=sys.stderr)
        return 2
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
