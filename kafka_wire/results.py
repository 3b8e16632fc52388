"""What the admin requests answer, as plain values: brokers, the cluster, topics to create and per-topic results."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kafka_wire.errors import error_name, raise_for_errors
from kafka_wire.protocol import format_address


@dataclass(frozen=True)
class BrokerNode:
    """A broker as DescribeCluster names it, on the listener the request came through."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = False

    @property
    def address(self) -> str:
        """``host:port`` (``[ipv6]:port``), as ``AdminClient`` takes it."""
        return format_address(self.host, self.port)


@dataclass(frozen=True)
class ClusterDescription:
    """DescribeCluster's answer: which brokers there are, so each can be asked for its own view."""

    cluster_id: str
    controller_id: int
    brokers: dict[int, BrokerNode]

    @property
    def addresses(self) -> dict[int, str]:
        """Node id -> ``host:port``."""
        return {node_id: broker.address for node_id, broker in sorted(self.brokers.items())}


@dataclass(frozen=True)
class NewTopic:
    """A topic for CreateTopics; -1 partitions / replication factor = the broker's defaults."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicResult:
    """Kafka's answer for one topic of CreateTopics / DeleteTopics (``error_code`` 0 = done)."""

    name: str
    error_code: int = 0
    error_message: str | None = None

    @property
    def code(self) -> str:
        """Kafka's error name (``NONE`` when it succeeded)."""
        return error_name(self.error_code)


@dataclass(frozen=True)
class TopicResults:
    """Per-topic results and the throttle time the broker asked for (controller-mutation quotas, KIP-599)."""

    throttle_time_ms: int
    topics: dict[str, TopicResult]

    def raise_for_errors(self) -> None:
        """KafkaBrokerError for the first topic that failed."""
        raise_for_errors(self.topics.values())
