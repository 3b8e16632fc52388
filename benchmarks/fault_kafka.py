"""fault_bench's real Apache Kafka target: a 3-node KRaft cluster behind TCP relays, its two faults, and what its
brokers show (issue 20: "one Kafka broker killed and restarted, a broker's listener refusing connections").

* The cluster is ``devtools.kafka``'s (fresh, no JMX exporter, no KIP-714 plugin: neither is under test). The
  portal reaches it over SASL_PLAINTEXT with SCRAM as its super user, the way the demo's ``prod`` is pushed to, and
  each broker advertises that listener at a relay of its own (``devtools.tcp_proxy``), so the portal's every
  connection to a broker goes through it. Replication and the controller quorum do not (PLAINTEXT, CONTROLLER).
* ``kafka_broker_kill``: SIGKILL of one node (broker and controller in one JVM; its data stays), started again after
  1-3 s, back once every node has it in its metadata (it answers only once it has caught up with the metadata log).
* ``kafka_listener_refusing``: one broker's relay stops listening for 1-3 s and cuts its open connections: the
  portal's kept connections drop and new ones are refused, while the broker runs on.
* ``kafka_controller_kill``: SIGKILL of the node that leads the KRaft quorum now (``kafka-metadata-quorum describe
  --status``): the other two elect a leader, and the node comes back after 1-3 s as for ``kafka_broker_kill``.
* ``kafka_node_disk_lost``: one node killed, its data directory removed and formatted again with the cluster's id,
  started after 1-3 s with an empty log: it rebuilds the metadata log and its replicas from the quorum before it
  answers (it is back once every node has it in its metadata).
* ``kafka_password_rotated``: the portal's SCRAM password changed in Kafka (AlterUserScramCredentials, past the
  relays) and every relay's open connections cut, so the portal's next login uses the old secret and fails with a
  typed ``SASL_AUTHENTICATION_FAILED`` (retried with backoff, nothing failed for good); once a push has been refused
  (at least 1-3 s later, at most 20 s) the new secret is written to the file the workers read it from at each push
  (``QUOTAS_KAFKA_PASSWORD_<NAME>_FILE``, a mounted secret rotated in place), and pushes go through again.
  ``auth_failures`` counts the rotations whose old secret a push met.
* What the brokers hold is read past the relays (PLAINTEXT, each broker itself): DescribeClientQuotas of every
  ``user`` entity. Kafka keeps no version of ours, so order is read from the quotas themselves: the approvals are
  sequential, a push carries every change up to the cluster's newest version in one AlterClientQuotas, and the
  controller writes one request's records atomically, so a broker must always hold a prefix of the approvals.
  :class:`KafkaSampler` counts a broker seen holding a later approval without an earlier one, or fewer than before.
* ``double_applied`` and the log's own order come from the cluster's metadata log (``__cluster_metadata``, read with
  Kafka's ``DumpLogSegments``): the controller writes a ``CLIENT_QUOTA_RECORD`` only when a value changes, so a
  retried push of the same values writes nothing, and every approval must appear exactly once, never removed, in
  approval order across record batches.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from devtools.kafka import SUPER_USER, KafkaCluster, KafkaError, KafkaNode, run_kafka_tool
from devtools.tcp_proxy import TcpProxy
from kafka_wire import MATCH_SPECIFIED, AdminClient, KafkaClientError

KAFKA_CLUSTER = "faultbench-kafka"
KEY = "producer_byte_rate"
MECHANISM = "SCRAM-SHA-512"
KAFKA_KINDS = (
    "kafka_broker_kill", "kafka_listener_refusing", "kafka_controller_kill", "kafka_node_disk_lost",
    "kafka_password_rotated",
)
#: SCRAM's iteration count for a rotated password (Kafka's admin tools use 4096 by default).
ITERATIONS = 8192
DUMP_TOOL = "org.apache.kafka.tools.DumpLogSegments"
BATCH_LINE = re.compile(r"^baseOffset: (\d+) ")
RECORD_LINE = re.compile(r"^\| offset: (\d+) .* payload: (\{.*\})\s*$")


class KafkaTarget:
    """The cluster, its relays and the portal's cluster row."""

    def __init__(self, name: str, size: int = 3) -> None:
        # placeholders until the nodes' ports are known (nothing connects before start() returns)
        self.proxies = {node_id: TcpProxy(("127.0.0.1", 9)) for node_id in range(1, size + 1)}
        self.kafka = KafkaCluster(
            name, size=size, fresh=True, jmx_exporter=False, telemetry_endpoint="",
            server_properties=self._advertised,
        )
        self._clients: dict[int, AdminClient] = {}
        self.cluster_id = 0
        #: rotations whose old secret the portal's pushes met (and were refused with) before the new one was in place
        self.auth_failures = 0
        #: held while a node is started again; stop() takes it, so no restart starts a JVM after the cluster stopped
        self._nodes_lock = threading.Lock()
        self._stopped = False

    def _advertised(self, node: KafkaNode) -> dict[str, str]:
        """The SASL listener advertised at the node's relay: every connection the portal makes goes through it."""
        relay = self.proxies[node.node_id]
        return {
            "advertised.listeners": f"PLAINTEXT://{node.address('PLAINTEXT')},SASL_PLAINTEXT://127.0.0.1:{relay.port}"
        }

    def start(self) -> KafkaTarget:
        self.kafka.start()
        for node in self.kafka.nodes:
            self.proxies[node.node_id].upstream = ("127.0.0.1", node.ports["SASL_PLAINTEXT"])
        return self

    def stop(self) -> None:
        with self._nodes_lock:  # a restart under way ends first; none starts after this
            self._stopped = True
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        for proxy in self.proxies.values():
            proxy.close()
        try:
            self.kafka.stop()
        except KafkaError as e:
            print(f"fault_bench: stopping Kafka: {e}", flush=True)

    @property
    def bootstrap(self) -> str:
        """The portal's bootstrap servers: the relays."""
        return ",".join(f"127.0.0.1:{p.port}" for _, p in sorted(self.proxies.items()))

    def portal_env(self, password_env: str, secret_file: Path) -> dict[str, str]:
        """The super user's password where the portal's processes read it: a secret file (mode 0600) named by
        ``<password_env>_FILE`` (``Cluster.kafka_password``), as a mounted secret that :meth:`rotate` changes."""
        self.secret_file = secret_file
        self.install(self.kafka.admin_credentials()["password"])
        return {password_env + "_FILE": str(secret_file)}

    def install_once_refused(self, password: str, delay_s: float, limit_s: float = 20.0) -> None:
        """The new secret in place ``delay_s`` after the rotation, and not before the portal's pushes have met the
        old one (a Push row holding SASL_AUTHENTICATION_FAILED, counted in ``auth_failures``), as an operator who
        rotates in Kafka first and updates the secret once an alert says so; after ``limit_s`` it goes in anyway."""
        from django.db import close_old_connections

        from quotas.models import Push

        started = time.monotonic()
        time.sleep(delay_s)
        while time.monotonic() - started < limit_s:
            close_old_connections()
            refused = Push.objects.filter(cluster_id=self.cluster_id, error_code="SASL_AUTHENTICATION_FAILED")
            if refused.exists():
                self.auth_failures += 1
                break
            time.sleep(0.1)
        self.install(password)

    def install(self, password: str) -> None:
        """The new secret in place, atomically: a worker reads the old file or the new one, never half of one."""
        part = self.secret_file.with_name(self.secret_file.name + ".new")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(password + "\n")
        os.replace(part, self.secret_file)

    def rotate(self) -> str:
        """The super user's password changed in Kafka (past the relays) and the portal's open connections cut (Kafka
        keeps a session authenticated until it closes); returns the new password, for :meth:`install`."""
        password = secrets.token_urlsafe(18)
        for node_id in self.node_ids():  # any node that answers: the controller writes it to the metadata log
            try:
                self.client(node_id).alter_user_scram_credentials([(SUPER_USER, MECHANISM, ITERATIONS, password)])
                break
            except KafkaClientError:
                continue
        else:
            raise KafkaError("no Kafka node took the rotated password")
        for relay in self.proxies.values():
            relay.refuse()
            relay.accept()
        return password

    def register(self) -> Any:
        """The portal's cluster row (SASL_PLAINTEXT, SCRAM, through the relays), registered as holding version 0 (its
        empty desired state), so pushes are deltas from the first one."""
        from django.db import transaction
        from django.utils import timezone

        from quotas.choices import ConnectorKind
        from quotas.models import Cluster, Push, PushState

        with transaction.atomic():
            cluster = Cluster.objects.create(
                name=KAFKA_CLUSTER, description="fault_bench: a real Kafka cluster", connector=ConnectorKind.KAFKA,
                bootstrap_servers=self.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism=MECHANISM,
                sasl_username=SUPER_USER,
            )
            Push.objects.create(cluster=cluster, broker=None, version=0, state=PushState.APPLIED,
                                applied_at=timezone.now())
        self.cluster_id = cluster.pk
        return cluster

    # -- faults ----------------------------------------------------------------------------------------------------

    def node_ids(self) -> list[int]:
        return [n.node_id for n in self.kafka.nodes]

    def kill(self, node_id: int) -> None:
        self.kafka.kill_node(node_id)

    def restart(self, node_id: int) -> None:
        with self._nodes_lock:
            if self._stopped:  # the run ended (or failed) while this node was down: leave it down
                return
            self.kafka.start_node(node_id)

    def controller(self) -> int:
        """The node leading the KRaft quorum now."""
        return self.kafka.active_controller()

    def wipe(self, node_id: int) -> None:
        """The node's disk lost: killed, its data removed, formatted again; :meth:`restart` brings it back."""
        self.kafka.wipe_node(node_id)

    # -- what the brokers hold -------------------------------------------------------------------------------------

    def client(self, node_id: int) -> AdminClient:
        """A client of the broker itself, past its relay (PLAINTEXT), kept; short timeouts: it may be down."""
        client = self._clients.get(node_id)
        if client is None:
            address = self.kafka.node(node_id).address("PLAINTEXT")
            client = self._clients[node_id] = AdminClient(address, connect_timeout=1.0, request_timeout=5.0)
        return client

    def held(self, node_id: int, client: AdminClient | None = None) -> dict[str, float]:
        """:func:`held_users` of the broker (``client``: one of the caller's own to it)."""
        return held_users(client or self.client(node_id))

    def holds_all(self, expected: dict[str, float]) -> bool:
        """Every broker answers every expected value (False while one does not answer)."""
        for node_id in self.node_ids():
            try:
                held = self.held(node_id)
            except KafkaClientError:
                return False
            if any(held.get(u) != v for u, v in expected.items()):
                return False
        return True

    def lost(self, expected: dict[str, float]) -> tuple[int, list[str]]:
        """Approved values missing or different on each broker, at the end."""
        lost, problems = 0, []
        for node_id in self.node_ids():
            held = self.held(node_id)
            missing = [u for u, v in expected.items() if held.get(u) != v]
            lost += len(missing)
            if missing:
                problems.append(f"kafka broker {node_id}: {len(missing)} approved values missing or different, "
                                f"e.g. {missing[:3]}")
        return lost, problems

    def log_figures(self, order: list[str]) -> dict[str, Any]:
        """double_applied and out_of_order as the metadata log shows them (see the module's docstring)."""
        return log_figures(metadata_quota_batches(self.kafka.node(1)), order)


def held_users(client: AdminClient) -> dict[str, float]:
    """user -> ``KEY`` of every user-only entity ``client``'s broker answers; KafkaClientError when it does not."""
    response = client.describe_client_quotas([("user", MATCH_SPECIFIED, None)], strict=True)
    if response.error_code:
        raise KafkaClientError(f"DescribeClientQuotas: error {response.error_code}: {response.error_message}")
    out: dict[str, float] = {}
    for entry in response.entries or ():
        names = {e.entity_type: e.entity_name for e in entry.entity}
        if set(names) == {"user"} and names["user"] is not None:
            for value in entry.values:
                if value.key == KEY:
                    out[names["user"]] = value.value
    return out


def metadata_quota_batches(node: KafkaNode) -> list[list[dict[str, Any]]]:
    """The user quota records of the cluster's metadata log as ``node`` holds it, in the order written, grouped by
    record batch: each record ``{"user", "key", "value", "remove"}``. Read with Kafka's own DumpLogSegments from a
    copy of the node's segments (the tool wants files named by their offset; a copy is not written to meanwhile)."""
    log_dir = node.data_dir / "__cluster_metadata-0"
    with tempfile.TemporaryDirectory(prefix="fault-bench-metadata-") as tmp:
        files = []
        for segment in sorted(log_dir.glob("*.log")):
            shutil.copy(segment, Path(tmp) / segment.name)
            files.append(str(Path(tmp) / segment.name))
        if not files:
            raise RuntimeError(f"no metadata log segment in {log_dir}")
        done = run_kafka_tool(DUMP_TOOL, "--cluster-metadata-decoder", "--files", ",".join(files), timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{DUMP_TOOL} failed ({done.returncode}): {done.stderr[-2000:]}")
    return parse_metadata_dump(done.stdout)


def log_figures(batches: list[list[dict[str, Any]]], order: list[str]) -> dict[str, Any]:
    """What the metadata log says of the approvals on ``order``'s users (in approval order): ``double_applied``,
    a value written more than once or removed (the controller writes a record only when a value changes, so a
    retried push of the same values writes none); ``out_of_order``, a batch writing an approval earlier than one an
    earlier batch wrote (one AlterClientQuotas is one batch, written atomically, in any order inside);
    ``never_written``."""
    position = {user: n for n, user in enumerate(order)}
    written: dict[str, int] = {}
    removed: list[str] = []
    out_of_order: list[str] = []
    highest = -1
    for batch in batches:
        mine = [r for r in batch if r["user"] in position and r["key"] == KEY]
        for record in mine:
            if record["remove"]:
                removed.append(record["user"])
            else:
                written[record["user"]] = written.get(record["user"], 0) + 1
        positions = [position[r["user"]] for r in mine if not r["remove"]]
        if positions and min(positions) < highest:
            out_of_order.append(f"metadata log: {order[min(positions)]} written after {order[highest]}")
        highest = max([highest, *positions])
    double = sum(n - 1 for n in written.values() if n > 1) + len(removed)
    problems = [f"metadata log: {u} written {n} times" for u, n in written.items() if n > 1][:3]
    problems += [f"metadata log: {u} removed" for u in removed[:3]]
    return {
        "double_applied": double, "out_of_order": len(out_of_order), "records": sum(written.values()),
        "never_written": sum(1 for u in order if u not in written), "problems": problems + out_of_order[:3],
    }


def parse_metadata_dump(text: str) -> list[list[dict[str, Any]]]:
    """``DumpLogSegments --cluster-metadata-decoder`` output -> the user-only quota records, by batch."""
    batches: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] | None = None
    for line in text.splitlines():
        if BATCH_LINE.match(line):
            current = []
            batches.append(current)
            continue
        m = RECORD_LINE.match(line)
        if m is None or current is None:
            continue
        payload = json.loads(m.group(2))
        if payload.get("type") != "CLIENT_QUOTA_RECORD":
            continue
        data = payload["data"]
        names = {e["entityType"]: e["entityName"] for e in data["entity"]}
        if set(names) != {"user"} or names["user"] is None:
            continue
        current.append({"user": names["user"], "key": data["key"], "value": data.get("value"),
                        "remove": bool(data.get("remove"))})
    return [b for b in batches if b]


class KafkaSampler(threading.Thread):
    """Asks each broker (past its relay) what it holds every ``interval_s``; counts a broker holding a later
    approval without an earlier one, or fewer approvals than it held before (``order``: the users of the Kafka
    approvals, in approval order)."""

    def __init__(self, target: KafkaTarget, order: list[str], interval_s: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.target, self.interval_s = target, interval_s
        self.position = {user: n for n, user in enumerate(order)}
        self.order = order
        self.last = dict.fromkeys(target.node_ids(), 0)
        self.reads = dict.fromkeys(target.node_ids(), 0)  # answers read, per broker
        self.out_of_order: list[str] = []
        self.samples = 0
        self.unreachable = 0
        self.stopping = threading.Event()
        # clients of its own (AdminClient is one request at a time): the main thread asks the brokers too
        self.clients = {
            n: AdminClient(target.kafka.node(n).address("PLAINTEXT"), connect_timeout=0.5, request_timeout=5.0)
            for n in target.node_ids()
        }

    def run(self) -> None:
        while not self.stopping.is_set():
            for node_id, client in self.clients.items():
                try:
                    held = self.target.held(node_id, client)
                except KafkaClientError:  # down, restarting or behind its relay's fault: nothing to read now
                    self.unreachable += 1
                    continue
                self.reads[node_id] += 1
                positions = sorted(self.position[u] for u in held if u in self.position)
                count = len(positions)
                if positions and positions[-1] != count - 1:
                    gap = next(n for n, p in enumerate(positions) if p != n)
                    self.out_of_order.append(
                        f"kafka broker {node_id}: holds {self.order[positions[-1]]} without {self.order[gap]}")
                if count < self.last[node_id]:
                    self.out_of_order.append(f"kafka broker {node_id}: held {self.last[node_id]}, then {count}")
                self.last[node_id] = max(self.last[node_id], count)
            self.samples += 1
            self.stopping.wait(self.interval_s)
        for client in self.clients.values():
            client.close()

    def finish(self) -> None:
        self.stopping.set()
        self.join()

    def blind(self) -> list[str]:
        """Why its zero would not count: a broker it never read, or whose last answer it read lacked approvals."""
        why = [f"kafka broker {n}: the sampler never read it" for n, reads in self.reads.items() if not reads]
        why += [f"kafka broker {n}: the sampler last saw {held} of {len(self.order)} approvals"
                for n, held in self.last.items() if self.reads[n] and held != len(self.order)]
        return why


def push_attempts(cluster_id: int) -> dict[str, int]:
    """The portal's Push rows of the Kafka cluster: versions pushed, and attempts beyond each one's first (the
    retries the faults caused)."""
    from django.db.models import Count, Sum

    from quotas.models import Push

    rows = Push.objects.filter(cluster_id=cluster_id, version__gt=0).aggregate(n=Count("pk"), attempts=Sum("attempts"))
    n, attempts = rows["n"] or 0, rows["attempts"] or 0
    return {"push_versions": n, "push_attempts_beyond_first": max(0, attempts - n)}


def wait_kafka_pushes(cluster_id: int, timeout_s: float) -> None:
    """Until every Push row of the Kafka cluster is applied (the portal's own view, after the brokers')."""
    from django.db import close_old_connections

    from quotas.models import Push, PushState

    deadline = time.monotonic() + timeout_s
    while True:
        close_old_connections()
        left = Push.objects.filter(cluster_id=cluster_id).exclude(state=PushState.APPLIED).count()
        if not left:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{left} Push rows of {KAFKA_CLUSTER} not applied after {timeout_s:g} s")
        time.sleep(0.1)
