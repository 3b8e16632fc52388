"""The ``client_metrics`` kind of the conformance vectors (conformance/kafka_vectors.json), replayed.

Used by ``python -m conformance.replay``. Each case gets fresh managers (one per ``server`` arg,
default ``A``) built from the case config (``telemetry_max_bytes``, ``cache_expiry_ms``,
``plugin_throws``), with the request context of Kafka's tests (client ``producer-1``,
``apache-kafka-java`` 3.5.2, port 56078) unless a step's args override it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from .crc32c import crc32c
from .errors import SubscriptionValidationError
from .instance import ClientMetricsInstance
from .javautil import KafkaUuid, java_hash_set_order, java_set_to_string
from .manager import (
    DEFAULT_CACHE_EXPIRY_MS,
    DEFAULT_TELEMETRY_MAX_BYTES,
    ClientMetricsManager,
    RequestContext,
    compute_subscription_id,
)
from .subscriptions import is_match

Out = dict[str, Any]

DEFAULT_CONTEXT = {
    "client_id": "producer-1",
    "software_name": "apache-kafka-java",
    "software_version": "3.5.2",
    "source_address": "127.0.0.1",
    "source_port": 56078,
    "connection_id": "1",
}
_CONTEXT_ARGS = {
    "client_id": "client_id",
    "client_software_name": "software_name",
    "client_software_version": "software_version",
    "client_source_address": "source_address",
    "client_source_port": "source_port",
    "connection_id": "connection_id",
}


class UnsupportedOp(Exception):
    pass


def _context(args: dict[str, Any]) -> RequestContext:
    values = dict(DEFAULT_CONTEXT)
    for arg, name in _CONTEXT_ARGS.items():
        if arg in args:
            values[name] = args[arg]
    if values["source_port"] is not None:
        values["source_port"] = int(values["source_port"])
    return RequestContext(**values)


def _exporter_that_throws(*_: Any) -> None:
    raise RuntimeError("plugin failure")


def client_metrics_case(config: dict[str, Any]) -> Callable[[dict[str, Any]], Out]:
    managers: dict[str, ClientMetricsManager] = {}
    history: list[tuple[str, dict[str, str]]] = []  # subscription changes applied to every server
    last_get: dict[str, int] = {}
    pending_id: list[str] = []
    standalone: list[ClientMetricsInstance] = []

    def generator() -> KafkaUuid:
        if pending_id:
            return KafkaUuid.from_string(pending_id.pop())
        return KafkaUuid.random()

    def manager(name: str) -> ClientMetricsManager:
        m = managers.get(name)
        if m is None:
            m = ClientMetricsManager(
                telemetry_max_bytes=int(config.get("telemetry_max_bytes", DEFAULT_TELEMETRY_MAX_BYTES)),
                cache_expiry_ms=int(config.get("cache_expiry_ms", DEFAULT_CACHE_EXPIRY_MS)),
                exporter=_exporter_that_throws if config.get("plugin_throws") else None,
                id_generator=generator,
            )
            for sub_name, props in history:
                try:
                    m.update_subscription(sub_name, props)
                except SubscriptionValidationError:
                    pass
            managers[name] = m
        return m

    def update_subscription(args: dict[str, Any], t: int) -> Out:
        name = args.get("name")
        props = {k[len("prop."):]: unquote(str(v)) for k, v in args.items() if k.startswith("prop.")}
        targets = [args["server"]] if args.get("server") else sorted(set(managers) | {"A"})
        out: Out = {"error": "NONE"}
        for server in targets:
            m = manager(server)
            m.advance(t)
            try:
                m.update_subscription(name, props)
            except SubscriptionValidationError as e:
                out = {"error": e.java_class, "message": e.message}
        if not args.get("server") and out["error"] == "NONE":
            history.append((name, props))
        first = manager(targets[0])
        out.update(version=first.subscription_update_version, subscriptions=len(first.subscriptions))
        return out

    def get(args: dict[str, Any], t: int) -> Out:
        m = manager(args.get("server") or "A")
        pending_id.clear()
        if args.get("generated_id"):
            pending_id.append(args["generated_id"])
        r = m.get_telemetry_subscriptions(args.get("client_instance_id"), _context(args), t)
        pending_id.clear()
        if r.error != "NONE":
            return {"error": r.error, "client_instance_id": r.client_instance_id, "throttle_time_ms": 0}
        assert r.client_instance_id is not None
        last_get[r.client_instance_id] = r.subscription_id
        inst = m.client_instance(r.client_instance_id)
        return {
            "error": r.error,
            "client_instance_id": r.client_instance_id,
            "subscription_id": r.subscription_id,
            "push_interval_ms": r.push_interval_ms,
            "requested_metrics": ",".join(r.requested_metrics),
            "metrics_to_string": java_set_to_string(r.requested_metrics),
            "expiration_ms": m.expiration_ms(inst) if inst is not None else None,
            "telemetry_max_bytes": r.telemetry_max_bytes,
            "accepted_compression_types": r.accepted_compression_types,
            "delta_temporality": r.delta_temporality,
            "throttle_time_ms": r.throttle_time_ms,
        }

    def push(args: dict[str, Any], t: int) -> Out:
        m = manager(args.get("server") or "A")
        cid = args.get("client_instance_id")
        sub = args.get("subscription_id", 0)
        if sub == "$last_get":
            sub = last_get.get(str(cid), 0)
        n = args.get("metrics_len")
        payload = None if n is None or n == "null" else b"\x00" * int(n)
        r = m.push_telemetry(
            cid, int(sub), int(args.get("compression_type", 0)), payload, bool(args.get("terminating", False)),
            _context(args), t,
        )
        out: Out = {"error": r.error, "throttle_time_ms": r.throttle_time_ms}
        inst = m.client_instance(cid) if cid is not None else None
        if inst is not None:
            out.update(terminating=inst.terminating, last_known_error=inst.last_known_error)
        return out

    def instance(args: dict[str, Any]) -> ClientMetricsInstance:
        if not standalone:
            standalone.append(ClientMetricsInstance())
        inst = standalone[0]
        inst.push_interval_ms = int(args.get("push_interval_ms", inst.push_interval_ms))
        return inst

    def step(s: dict[str, Any]) -> Out:
        op, t, args = s["op"], int(s["t_ms"]), dict(s.get("args") or {})
        if op == "inst_get":
            return {"accepted": instance(args).maybe_update_get_request_timestamp(t)}
        if op == "inst_push":
            return {"accepted": instance(args).maybe_update_push_request_timestamp(t)}
        if op == "update_subscription":
            return update_subscription(args, t)
        if op == "get":
            return get(args, t)
        if op == "push":
            return push(args, t)
        if op == "counters":
            m = manager(args.get("server") or "A")
            m.advance(t)
            return m.counters()
        if op == "disconnect":
            manager(args.get("server") or "A").disconnect(str(args.get("connection_id", "1")), t)
            return {"ok": True}
        if op == "crc32c":
            return {"crc32c": crc32c(unquote(str(args.get("s", ""))).encode("utf-8"))}
        if op == "subscription_id":
            metrics = [unquote(x) for x in str(args.get("metrics", "")).split(",") if x != ""]
            ordered = java_hash_set_order(metrics)
            interval = int(args.get("push_interval_ms", args.get("interval_ms", 300_000)))
            cid = KafkaUuid.from_string(args["client_instance_id"])
            return {"subscription_id": compute_subscription_id(ordered, interval, cid)}
        if op == "is_match":
            # a JSON null is an attribute the client did not send (Java null), which no pattern matches: not "None"
            attrs = {k[len("attr."):]: None if v is None else unquote(str(v)) for k, v in args.items()
                     if k.startswith("attr.")}
            # isMatch takes any key -> Pattern map (validation is not its job): a key that is no client attribute
            # matches nothing, it raises nothing
            pats = {k[len("pat."):]: unquote(str(v)) for k, v in args.items() if k.startswith("pat.")}
            try:
                patterns = {k: re.compile(v) for k, v in pats.items()}
            except re.error as e:
                return {"error": "PatternSyntaxException", "message": str(e)}
            matched = is_match(attrs, patterns)
            return {"match": matched, "matched": matched, "is_match": matched, "result": matched}
        raise UnsupportedOp(f"op {op!r}")

    return step

