"""The scenarios of a run: clients, quotas and offered load, one per precedence case."""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field
from typing import Any

from conformance.oracle.admin import QuotaEntry
from conformance.oracle.base import MUTATION_KEY, PRINCIPAL_PLAINTEXT, PRODUCE_KEY
from engine.entities import DEFAULT


@dataclass
class Exchange:
    """One request and its response as the client saw them."""

    send_ms: float
    recv_ms: float
    size: int  # request.sizeInBytes
    throttle_ms: int
    error: int = 0
    topics: list[tuple[str, int, int]] = field(default_factory=list)  # CreateTopics: (name, partitions, error)

    def broker_time(self, kind: str) -> tuple[int, int]:
        """(estimated record time on the broker's ms clock, uncertainty u): the midpoint for Produce (recorded in
        the response callback, after the append), the send side for CreateTopics (recorded when the controller
        handles it, before the commit of its records that makes most of the round trip)."""
        lo, hi = math.floor(self.send_ms), math.floor(self.recv_ms)
        t = (lo + hi) // 2 if kind == "produce" else lo
        return t, max(t - lo, hi - t)


@dataclass
class Scenario:
    """One client, its quotas and what it saw."""

    name: str
    kind: str  # "produce" | "mutation"
    driver: str  # "kafka-python" | "confluent-kafka"
    client_id: str
    user: str
    quotas: list[QuotaEntry]  # its own entities, the one that must win first
    level: int  # the precedence level that must supply the bound (1..8)
    message_bytes: int = 0
    offered: float = 0.0  # bytes/s (produce) or requests/s (mutation)
    partitions: tuple[int, ...] = ()  # per topic of each CreateTopics request
    sasl: dict[str, str] | None = None
    topic: str = ""
    leader: int = -1
    exchanges: list[Exchange] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def bound(self) -> float:
        return self.quotas[0].value

    @property
    def key(self) -> str:
        return self.quotas[0].key

    @property
    def interval_s(self) -> float:
        """Seconds between sends at the offered load (120 bytes of request overhead per message)."""
        return (self.message_bytes + 120) / self.offered if self.kind == "produce" else 1 / self.offered


def plan(run: str, sasl: bool) -> list[Scenario]:
    """The scenarios of one run; names of clients, users and topics carry the run id."""
    scenarios = []
    for rate in (8000, 24000):
        for size in (1024, 4096):
            cid = f"oracle-{run}-kp-{rate}-{size}"
            scenarios.append(Scenario(
                name=f"kp-{rate // 1000}k-{size}B", kind="produce", driver="kafka-python", client_id=cid,
                user=PRINCIPAL_PLAINTEXT, quotas=[QuotaEntry(None, cid, PRODUCE_KEY, rate)], level=7,
                message_bytes=size, offered=2.5 * rate,
            ))
    cid = f"oracle-{run}-kp-precedence"
    scenarios.append(Scenario(
        name="kp-precedence", kind="produce", driver="kafka-python", client_id=cid, user=PRINCIPAL_PLAINTEXT,
        quotas=[
            QuotaEntry(PRINCIPAL_PLAINTEXT, cid, PRODUCE_KEY, 12000),
            QuotaEntry(None, DEFAULT, PRODUCE_KEY, 48000),
        ],
        level=1, message_bytes=1024, offered=2.5 * 12000,
    ))
    cid = f"oracle-{run}-cf"
    if sasl:
        user = f"oracle-{run}-user"
        scenarios.append(Scenario(
            name="cf-user", kind="produce", driver="confluent-kafka", client_id=cid, user=user,
            quotas=[QuotaEntry(user, None, PRODUCE_KEY, 12000), QuotaEntry(None, cid, PRODUCE_KEY, 36000)],
            level=3, message_bytes=1024, offered=2.5 * 12000,
            sasl={"username": user, "password": secrets.token_hex(16)},
        ))
    else:
        scenarios.append(Scenario(
            name="cf-client", kind="produce", driver="confluent-kafka", client_id=cid, user=PRINCIPAL_PLAINTEXT,
            quotas=[QuotaEntry(None, cid, PRODUCE_KEY, 12000)], level=7, message_bytes=1024, offered=2.5 * 12000,
        ))
    cid = f"oracle-{run}-mutation"
    scenarios.append(Scenario(
        name="mutation", kind="mutation", driver="kafka-python", client_id=cid, user=PRINCIPAL_PLAINTEXT,
        quotas=[QuotaEntry(None, cid, MUTATION_KEY, 2.0)], level=7, offered=2.0, partitions=(1, 2, 3),
    ))
    return scenarios
