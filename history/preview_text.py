"""What a preview's figures rest on, in sentences the pages show beside them: whose traffic, seen on which of the
cluster's brokers and why, and what each per-broker rate is compared with.

Kafka's quotas are per broker (``per_broker``): each broker has its own sensor of a client's requests, and counts
only the requests sent to it, so a producer is counted where the partitions it writes to have their leaders. A
recorded rate is compared with a bound broker by broker; a ``cluster_wide`` budget is one bound for the sum over the
brokers, shared out between them by the portal's quota callback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.units import format_quota_value

#: Where Kafka counts a client's requests of each quota type, in words.
COUNTED = {
    "produce": "on the broker that leads each partition it writes to",
    "fetch": "on the broker that leads each partition it reads from",
    "request": "on each broker it sends requests to",
    "controller_mutation": "on the broker that takes its topic and partition changes",
}


def _brokers(ids: Sequence[int]) -> str:
    names = [str(b) for b in ids]
    words = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"broker{'s' if len(names) > 1 else ''} {words}"


def where_from(result: Mapping[str, Any], cluster: str, cluster_brokers: int, scope: str, key: str,
               value: float) -> str:
    """Where the replayed traffic came from and why, and what the proposal's bound means there: "Recorded on broker
    1, 1 of prod's 3 brokers: Kafka counts a client's requests on the broker that leads each partition it writes to,
    and bounds each broker on its own ..."."""
    ids = [int(b["broker"]) for b in result.get("per_broker") or ()]
    n = len(ids) or int(result.get("brokers") or 0)
    counted = COUNTED.get(str(result.get("quota_type")), "on the broker each request is sent to")
    of = f", {n} of {cluster}'s {cluster_brokers} brokers" if cluster_brokers else ""
    if cluster_brokers and n == cluster_brokers:
        of = f", all {n} of {cluster}'s brokers" if n > 1 else f", {cluster}'s one broker"
    seen = f"Recorded on {_brokers(ids)}{of}" if ids else f"Recorded on {n} broker{'s' if n != 1 else ''}"
    bound = format_quota_value(key, value)
    if scope == "cluster_wide":
        return (f"{seen}: Kafka counts a client's requests {counted}; as a cluster-wide budget, {key} = {bound} is one "
                f"bound for the sum over {cluster}'s brokers, each broker's share following where the demand is.")
    most = (f" (a client on all {cluster_brokers} could get up to {cluster_brokers} × {bound})"
            if cluster_brokers > 1 else "")
    return (f"{seen}: Kafka counts a client's requests {counted}, and bounds each broker's sensor on its own, so "
            f"{key} = {bound} applies per broker{most}.")


def recorded_per_broker(result: Mapping[str, Any], key: str, scope: str) -> str:
    """The recorded rate broker by broker, with the bound that applied to each while it was recorded: "598.63 KiB/s
    on broker 1; Kafka bounds each broker at 512 KiB/s" (and why a rate may stand above it)."""
    rows = list(result.get("per_broker") or ())
    total = format_quota_value(key, float(result.get("recorded_rate") or 0.0))
    if not rows:
        return total
    each = ", ".join(f"{format_quota_value(key, float(b['recorded_rate']))} on broker {b['broker']}" for b in rows)
    text = each if len(rows) == 1 else f"{total} in all: {each}"
    quota = result.get("recorded_quota")
    if quota is None:
        return text
    if scope == "cluster_wide":
        return f"{text}; then under {format_quota_value(key, float(quota))} per broker"
    text += f"; Kafka bounded each broker at {format_quota_value(key, float(quota))} then"
    if any(float(b["recorded_rate"]) > float(quota) for b in rows):
        text += (" (a rate above it: Kafka throttles after a request, not before, holding a broker's rate at its "
                 "bound on average over its quota window, and a client's records may hold what it had queued but Kafka "
                 "had not taken yet)")
    return text
