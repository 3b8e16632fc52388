"""A run of the oracle against a cluster, and its command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.oracle.admin import Admin, QuotaEntry, record_batch_bytes
from conformance.oracle.base import DEFAULT_S, QUICK_S, SAMPLES, THROTTLING_QUOTA_EXCEEDED, WINDOW_S, OracleError, log
from conformance.oracle.compare import Comparison, Replay, bound_ms, broker_view, percentile, replay
from conformance.oracle.drivers import ConfluentProducer, Driver, KafkaPythonProducer, Start, TopicCreator, drive
from conformance.oracle.scenarios import Scenario, plan
from conformance.replay import EngineFactory
from kafka_wire import KafkaClientError


@dataclass
class Oracle:
    """One run against one cluster: set up, drive, clean up; then replay and compare."""

    bootstrap: str
    sasl_bootstrap: str | None = None
    redis_url: str | None = None
    duration_s: float = 30.0
    scenarios: list[Scenario] = field(default_factory=list)
    config: list[QuotaEntry] = field(default_factory=list)

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        run = uuid.uuid4().hex[:8]
        self.scenarios = plan(run, sasl=bool(self.sasl_bootstrap))
        admin = Admin(self.bootstrap, f"oracle-{run}-admin")
        ours = [q for s in self.scenarios for q in s.quotas]
        scram_user: str | None = None
        try:
            existing = admin.describe_quotas()
            clash = [e for e in existing if any(e.same_entity(o) for o in ours)]
            if clash:
                raise OracleError(f"the cluster already has quotas at the run's entities: {clash}")
            self.config = existing + ours
            produce = [s for s in self.scenarios if s.kind == "produce"]
            for s in self.scenarios:
                s.topic = f"oracle-{run}-{s.name}"
            leaders = admin.create_topics([s.topic for s in produce])
            for s in produce:
                s.leader = leaders[s.topic]
                admin.produce_one(admin.brokers[s.leader], s.topic)
            for s in self.scenarios:
                if s.sasl:
                    scram_user = s.sasl["username"]
                    self._create_scram_user(s.sasl)
            admin.alter_quotas(ours)
            admin.wait_quotas(ours)
            time.sleep(0.3)  # the controllers apply the same records; give the slowest a moment
            log(f"run {run}: {len(self.scenarios)} scenarios for {self.duration_s:.0f}s "
                f"(brokers {sorted(admin.brokers)}, {len(existing)} quotas already on the cluster)")
            self._drive(admin)
        finally:
            self._clean_up(admin, ours, scram_user)
        failed = [f"{s.name}: {s.error}" for s in self.scenarios if s.error]
        if failed:
            raise OracleError("scenario(s) failed: " + "; ".join(failed))
        log(f"traffic done after {time.monotonic() - started:.1f}s; replaying")
        result = self.evaluate()
        result["run"] = run
        result["elapsed_s"] = round(time.monotonic() - started, 1)
        return result

    def _create_scram_user(self, sasl: dict[str, str]) -> None:
        """A SCRAM-SHA-256 user for the user-level scenario, able to log in on every broker before traffic."""
        from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
        upsert = UserScramCredentialUpsertion(sasl["username"], info, sasl["password"].encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=20)
        for address in (self.sasl_bootstrap or "").split(","):
            deadline = time.monotonic() + 20
            while True:
                probe = AdminClient({
                    "bootstrap.servers": address.strip(), "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": sasl["username"],
                    "sasl.password": sasl["password"], "log_level": 0,
                })
                try:
                    probe.list_topics(timeout=3)
                    break
                except Exception as e:  # KafkaException: this broker does not know the credential yet
                    if time.monotonic() > deadline:
                        raise OracleError(f"SCRAM user {sasl['username']} cannot log in at {address}: {e}") from e
                    time.sleep(0.2)

    def _delete_scram_user(self, user: str) -> None:
        from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)
        for future in admin.alter_user_scram_credentials([deletion]).values():
            future.result(timeout=20)

    def _drive(self, admin: Admin) -> None:
        drivers: list[Driver] = []
        for s in self.scenarios:
            if s.kind == "mutation":
                drivers.append(TopicCreator(s, admin.bootstrap))
            elif s.driver == "confluent-kafka":
                drivers.append(ConfluentProducer(s, (self.sasl_bootstrap if s.sasl else None) or self.bootstrap))
            else:
                drivers.append(KafkaPythonProducer(s, admin.brokers[s.leader]))
        start = Start(len(drivers), self.duration_s)
        old_switch = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)  # client threads wait less for the GIL: tighter time stamps
        try:
            threads = [threading.Thread(target=drive, args=(d, start), name=f"oracle-{d.s.name}", daemon=True)
                       for d in drivers]
            for t in threads:
                t.start()
            for t in threads:
                t.join(self.duration_s + 120)
        finally:
            sys.setswitchinterval(old_switch)
        for s in self.scenarios:
            throttled = sum(ex.throttle_ms > 0 for ex in s.exchanges)
            log(f"{s.name}: {len(s.exchanges)} responses, {throttled} throttled"
                + (f", ERROR {s.error}" if s.error else ""))

    def _clean_up(self, admin: Admin, ours: Sequence[QuotaEntry], scram_user: str | None) -> None:
        """Quotas, topics and the SCRAM user of the run go; a failure here is reported, not raised."""
        topics = [x for s in self.scenarios for x in ([s.topic] if s.kind == "produce" else s.created) if x]
        steps: list[tuple[str, Callable[[], None]]] = [
            ("quotas", lambda: admin.alter_quotas(ours, remove=True)),
            ("topics", lambda: admin.delete_topics(topics)),
        ]
        if scram_user:
            steps.append(("SCRAM user", lambda: self._delete_scram_user(scram_user)))
        for what, step in steps:
            try:
                step()
            except Exception as e:
                log(f"clean-up of the run's {what} failed: {e}")
        admin.close()

    # -- verdict --------------------------------------------------------------------------------------------

    def evaluate(self) -> dict[str, Any]:
        """Replay every scenario through each engine, and the deliberately wrong replays through the model."""
        engines: dict[str, EngineFactory] = {"model": EngineFactory("model", None)}
        if self.redis_url:
            engines["redis"] = EngineFactory("redis", self.redis_url)
        else:
            log("no --redis-url / $QUOTAS_REDIS_URL: the Redis engine is not replayed")
        pooled = {name: Comparison() for name in engines}
        scenarios: dict[str, Any] = {}
        for s in self.scenarios:
            uncertainty = [ex.broker_time(s.kind)[1] for ex in s.exchanges]
            entry: dict[str, Any] = {
                "driver": s.driver,
                "kind": s.kind,
                "quota": {"key": s.key, "value": s.bound, "level": s.level,
                          "entities": [{"user": q.user, "client_id": q.client_id, "value": q.value}
                                       for q in s.quotas]},
                "responses": len(s.exchanges),
                "throttled_by_broker": sum(ex.throttle_ms > 0 for ex in s.exchanges),
                "uncertainty_p50_ms": percentile(uncertainty, 50),
                "uncertainty_p99_ms": percentile(uncertainty, 99),
                "bound_ms": bound_ms(s),
                **s.notes,
            }
            if s.kind == "produce":
                entry["message_bytes"] = s.message_bytes
                entry["request_bytes"] = sorted({ex.size for ex in s.exchanges})
            else:
                entry["topics_refused"] = sum(broker_view(s).decisions)
                entry["topics_created"] = len(s.created)
                other = [e for ex in s.exchanges for _, _, e in ex.topics if e not in (0, THROTTLING_QUOTA_EXCEEDED)]
                entry["topics_failed_otherwise"] = {"count": len(other), "error_codes": sorted(set(other))}
                free = Comparison().add(s, replay(s, engines["model"], self.config, conditioned=False))
                entry["free_running_model"] = {k: free.summary()[k] for k in
                                               ("decision_agreement", "throttle_diff_p50_ms", "throttle_diff_p99_ms")}
            entry["engines"] = {}
            for name, factory in engines.items():
                engine = replay(s, factory, self.config)
                alone = Comparison().add(s, engine).summary()
                entry["engines"][name] = {**alone, "resolved_bound": engine.resolved_bound}
                pooled[name].add(s, engine)
            scenarios[s.name] = entry
        per_engine = {name: c.summary() for name, c in pooled.items()}
        mutations = self.mutations(engines["model"])
        passed = all(c.passed for c in pooled.values())
        caught = all(m["caught"] for m in mutations.values() if m["must_fail"])
        return {
            "decision_agreement": min(c.agreement for c in pooled.values()),
            "throttle_diff_p99_ms": max(percentile(c.diffs, 99) for c in pooled.values()),
            "bound_ms": max(c.bound_ms for c in pooled.values()),
            "within_bound": min(c.within_bound for c in pooled.values()),
            "passed": passed,
            "mutations_caught": caught,
            "ok": passed and caught,
            "samples": SAMPLES,
            "window_s": WINDOW_S,
            "duration_s": self.duration_s,
            "engines": per_engine,
            "scenarios": scenarios,
            "mutations": mutations,
        }

    def mutations(self, model: EngineFactory) -> dict[str, Any]:
        """Deliberately wrong replays: each must fail the same comparison, over the scenarios it applies to
        (pooled) and in each of them alone."""
        out: dict[str, Any] = {}

        def check(name: str, what: str, must_fail: bool, applies: Callable[[Scenario], bool],
                  wrong: Callable[[Scenario], Replay]) -> None:
            pooled = Comparison()
            failed, passed = [], []
            for s in self.scenarios:
                if not applies(s):
                    continue
                engine = wrong(s)
                pooled.add(s, engine)
                (passed if Comparison().add(s, engine).passed else failed).append(s.name)
            out[name] = {
                "what": what, "must_fail": must_fail, "failed_in": failed, "passed_in": passed,
                "decision_agreement": round(pooled.agreement, 5), "within_bound": round(pooled.within_bound, 5),
                "throttle_diff_p99_ms": percentile(pooled.diffs, 99),
                "caught": bool(failed) and not passed and not pooled.passed,
            }

        def throttled(s: Scenario) -> bool:
            return any(ex.throttle_ms > 0 for ex in s.exchanges)

        check("window_count", f"{SAMPLES - 1} samples instead of {SAMPLES}", True, throttled,
              lambda s: replay(s, model, self.config, samples=SAMPLES - 1))
        check("precedence", "the most specific configured entity ignored: a lower level's quota applies", True,
              lambda s: len(s.quotas) > 1 and throttled(s),
              lambda s: replay(s, model, [e for e in self.config if e != s.quotas[0]]))
        check("request_size", "produce: the record batch instead of request.sizeInBytes; "
              "CreateTopics: one token per topic instead of one per partition", True, throttled,
              lambda s: replay(s, model, self.config, size=lambda ex: float(record_batch_bytes(s.message_bytes)),
                               permits=lambda p: 1.0))
        check("length_prefix", "produce: the 4-byte frame length counted too (a sensitivity probe, may pass)",
              False, lambda s: s.kind == "produce" and throttled(s),
              lambda s: replay(s, model, self.config, size=lambda ex: float(ex.size + 4)))
        return out

    def dump(self) -> dict[str, Any]:
        """The raw material of the run (scenarios with their exchanges, the replayed config), for analysis."""
        return {
            "config": [vars(e) for e in self.config],
            "scenarios": [
                {**{k: v for k, v in vars(s).items() if k not in ("exchanges", "quotas", "sasl")},
                 "quotas": [vars(q) for q in s.quotas], "exchanges": [vars(ex) for ex in s.exchanges]}
                for s in self.scenarios
            ],
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.oracle", description=__doc__)
    parser.add_argument("--bootstrap", required=True, help="a broker's PLAINTEXT address, host:port")
    parser.add_argument("--sasl-bootstrap", default=None,
                        help="SASL_PLAINTEXT (SCRAM) addresses, comma-separated: enables the user-level scenario")
    parser.add_argument("--redis-url", default=None, help="Redis for the Redis engine (default $QUOTAS_REDIS_URL)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_S:.0f} s of traffic instead of {DEFAULT_S:.0f} s")
    parser.add_argument("--duration", type=float, default=None, help="seconds of traffic (overrides --quick)")
    parser.add_argument("--dump", default=None, help="also write every scenario's exchanges to this JSON file")
    args = parser.parse_args(argv)
    oracle = Oracle(
        bootstrap=args.bootstrap,
        sasl_bootstrap=args.sasl_bootstrap,
        redis_url=args.redis_url or os.environ.get("QUOTAS_REDIS_URL"),
        duration_s=args.duration or (QUICK_S if args.quick else DEFAULT_S),
    )
    try:
        result = oracle.run()
    except (OracleError, KafkaClientError) as e:  # no verdict: the cluster could not be reached or refused
        log(f"error: {e}")
        print(json.dumps({"error": str(e)}))
        return 2
    finally:
        if args.dump:
            with open(args.dump, "w") as f:
                json.dump(oracle.dump(), f)
    log(f"decision agreement {result['decision_agreement']}, throttle diff p99 {result['throttle_diff_p99_ms']} ms "
        f"(bound {result['bound_ms']} ms), mutations caught: {result['mutations_caught']}")
    print(json.dumps(result))
    return 0 if result["ok"] else 1

