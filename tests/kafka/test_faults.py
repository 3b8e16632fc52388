"""What fault_bench's Kafka figures rest on, shown by the session's real cluster (benchmarks/fault_kafka.py):

* a node killed with SIGKILL and started again from its data (``KafkaCluster.kill_node`` / ``start_node``) has caught
  up with what was written while it was down by the time it answers, so a broker seen holding fewer approvals than
  before is a fault of ours, not a restart;
* the metadata log, read with Kafka's own DumpLogSegments, holds one quota record per change of value: the same value
  sent again writes none, so counting a user's records counts how often its value was really applied, and the order
  of the batches is the order in which the controller applied the requests.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import pytest

from benchmarks.fault_kafka import KEY, held_users, log_figures, metadata_quota_batches
from devtools.kafka import KafkaCluster
from kafka_wire import AdminClient, raise_for_errors
from quotas.connector_registry import reset_connectors

LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"


def ours(kafka_cluster: Any) -> KafkaCluster:
    """The session's own cluster: the nodes of a cluster given by QUOTAS_KAFKA_BOOTSTRAP are not ours to kill."""
    if os.environ.get("QUOTAS_KAFKA_BOOTSTRAP") or not isinstance(kafka_cluster, KafkaCluster):
        pytest.skip("QUOTAS_KAFKA_BOOTSTRAP names a running cluster: its nodes are not the tests' to kill or read")
    return kafka_cluster


def alter(client: AdminClient, values: dict[str, float | None]) -> None:
    """One AlterClientQuotas: user -> KEY's value (None: removed)."""
    raise_for_errors(client.alter_client_quotas([({"user": u}, {KEY: v}) for u, v in values.items()]).entries)


def wait_holds(client: AdminClient, want: dict[str, float | None], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        held = held_users(client)
        if all(held.get(u) == v for u, v in want.items()):
            return
        assert time.monotonic() < deadline, f"{client.address} holds {held}, not {want}"
        time.sleep(0.05)


def test_a_killed_node_has_caught_up_when_it_answers_again(kafka_cluster: Any) -> None:
    cluster = ours(kafka_cluster)
    first, last = cluster.nodes[0], cluster.nodes[-1]
    user = f"fault-kill-{os.getpid()}"
    with AdminClient(first.address()) as writer:
        try:
            cluster.kill_node(last.node_id)
            try:
                assert not last.is_running()
                with pytest.raises(OSError):
                    socket.create_connection(("127.0.0.1", last.ports["PLAINTEXT"]), timeout=1).close()
                alter(writer, {user: 4096.0})  # the other two are a quorum: the write is committed without it
            finally:
                cluster.start_node(last.node_id)
                leaders_back(cluster)
            assert last.is_running() and cluster.brokers_in_metadata() >= {n.node_id for n in cluster.nodes}
            with AdminClient(last.address()) as reader:
                assert held_users(reader).get(user) == 4096.0  # its first answer already holds it
        finally:
            alter(writer, {user: None})
            reset_connectors()  # the portal's kept connections to the node that died are not reused


def leaders_back(cluster: KafkaCluster) -> None:
    """The partitions the killed node led go back to it now (a preferred leader election), not minutes later in the
    middle of another test's produce or consumer group (Kafka's leader-imbalance check runs every 300 s)."""
    done = cluster.run_tool(LEADER_ELECTION, "--bootstrap-server", cluster.bootstrap(), "--election-type",
                            "PREFERRED", "--all-topic-partitions", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_metadata_log_holds_one_record_per_change_of_value_in_the_order_applied(kafka_cluster: Any) -> None:
    cluster = ours(kafka_cluster)
    a, b = f"fault-log-a-{os.getpid()}", f"fault-log-b-{os.getpid()}"
    with AdminClient(cluster.nodes[0].address()) as client:
        alter(client, {a: 1024.0, b: 2048.0})  # one request: one batch
        alter(client, {a: 1024.0, b: 2048.0})  # the same values again: no record
        alter(client, {a: 3072.0})
        alter(client, {b: None})
        wait_holds(client, {a: 3072.0, b: None})  # node 1 has applied its log this far
        every = metadata_quota_batches(cluster.nodes[0])
        alter(client, {a: None})
    batches = [mine for mine in ([r for r in batch if r["user"] in (a, b)] for batch in every) if mine]
    written = [sorted((r["user"], None if r["remove"] else r["value"]) for r in batch) for batch in batches]
    assert written == [[(a, 1024.0), (b, 2048.0)], [(a, 3072.0)], [(b, None)]]

    figures = log_figures(batches, [a, b])
    # a written twice (two different values) and b removed: as fault_bench counts them, 2 applications too many;
    # a's second value came after b's first: one batch out of the approvals' order
    assert (figures["double_applied"], figures["out_of_order"], figures["never_written"]) == (2, 1, 0)
