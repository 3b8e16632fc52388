"""One node of a project-local cluster at a time: its crash, clean stop, lost disk and restart (the faults)."""


from __future__ import annotations

import os
import re
import shutil
import signal
import time
from collections.abc import Sequence

from devtools.kafka.base import KafkaError, _log
from devtools.kafka.node import KafkaNode


class NodeFaults:
    """What :class:`KafkaCluster` does to one node (a mixin: it uses the cluster's nodes, format and launch)."""

    def node(self, node_id: int) -> KafkaNode:
        """The node with this id (KafkaError when the cluster has none)."""
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KafkaError(f"cluster {self.name!r} has no node {node_id} (its nodes: {[n.node_id for n in self.nodes]})")

    def kill_node(self, node_id: int) -> None:
        """A crash of one node: SIGKILL, no controlled shutdown (the controller fences it once its session times
        out). Its data stays; :meth:`start_node` brings it back. Returns once the process is gone."""
        node = self.node(node_id)
        self._signal([node], signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while self._still_running([node]):
            if time.monotonic() > deadline:
                raise KafkaError(f"node {node_id} of cluster {self.name!r} did not die on SIGKILL")
            time.sleep(0.02)
        node.proc = None

    def stop_node(self, node_id: int, timeout: float | None = None) -> None:
        """A clean stop of one node: SIGTERM (its broker shuts down under the controller's watch), SIGKILL when it is
        still running after ``timeout`` (default the cluster's stop timeout). Its data stays; :meth:`start_node`
        brings it back. The other two of three nodes keep the quorum."""
        node = self.node(node_id)
        timeout = self.stop_timeout if timeout is None else timeout
        self._signal([node], signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self._still_running([node]):
            if time.monotonic() > deadline:
                _log(f"node {node_id} of cluster {self.name!r} still running after {timeout:.0f}s; killing it")
                self.kill_node(node_id)
                return
            time.sleep(0.1)
        node.proc = None

    def wipe_node(self, node_id: int) -> None:
        """A node's disk lost: SIGKILL, its data directory removed, formatted again with the cluster's id (as an
        operator replaces a disk). :meth:`start_node` then brings it back with an empty log: it fetches the metadata
        log and its replicas from the others before it answers."""
        node = self.node(node_id)
        if node.is_running():
            self.kill_node(node_id)
        shutil.rmtree(node.data_dir, ignore_errors=True)
        node.data_dir.mkdir(parents=True)
        self._format([node], self._ensure_credentials())

    def active_controller(self) -> int:
        """The id of the node that leads the KRaft quorum now (Kafka's ``kafka-metadata-quorum describe --status``)."""
        result = self.run_tool(
            "org.apache.kafka.tools.MetadataQuorumCommand",
            "--bootstrap-server", self.bootstrap(), "describe", "--status",
        )
        found = re.search(r"^LeaderId:\s+(\d+)", result.stdout, re.MULTILINE)
        if result.returncode != 0 or found is None:
            raise KafkaError(f"kafka-metadata-quorum answered no leader (exit {result.returncode}): "
                             f"{(result.stdout + result.stderr)[-500:]}")
        return int(found.group(1))

    def start_node(self, node_id: int) -> None:
        """Start one stopped node again from its data (its configuration, ports and log as they were) and wait
        until every node, this one included, has every broker in its metadata: a restarted broker answers only
        once it has caught up with the metadata log, and lists itself only once the controller unfenced it."""
        node = self.node(node_id)
        if node.is_running():
            raise KafkaError(f"node {node_id} of cluster {self.name!r} is running")
        self._launch(node)
        self._write_state()
        self._wait_ready()

    @staticmethod
    def _signal(nodes: Sequence[KafkaNode], sig: signal.Signals) -> None:
        for node in nodes:
            if node.pid is None:
                continue
            try:
                os.kill(node.pid, sig)
            except ProcessLookupError:
                pass

    @staticmethod
    def _still_running(nodes: Sequence[KafkaNode]) -> list[KafkaNode]:
        for node in nodes:
            if node.proc is not None:
                node.proc.poll()  # reap our own child, so that it does not linger as a zombie
        return [n for n in nodes if n.is_running()]
