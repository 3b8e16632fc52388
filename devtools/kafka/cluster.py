"""A project-local KRaft cluster: planned, formatted, started, probed, stopped, one node at a time if asked."""


from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devtools.kafka.artifacts import ensure_jmx_agent, ensure_kafka_jars, ensure_plugin_jars
from devtools.kafka.base import (
    BUDGET_REDIS_URL_ENV,
    DEFAULT_HEAP_OPTS,
    DEFAULT_SIZE,
    JMX_EXPORTER,
    JMX_EXPORTER_RULES,
    KAFKA_DIR,
    KAFKA_VERSION,
    LISTENERS,
    PLUGIN_CLASS,
    QUORUM_LOST_GRACE_S,
    QUOTA_CALLBACK_CLASS,
    SCRAM_MECHANISMS,
    SUPER_USER,
    TELEMETRY_ENDPOINT_ENV,
    TELEMETRY_TOKEN_ENV,
    TOOL_JVM_OPTS,
    KafkaError,
    _file_lock,
    _log,
    _tail,
)
from devtools.kafka.node import KafkaNode
from devtools.kafka.node_faults import NodeFaults
from devtools.kafka.node_files import NodeFiles
from devtools.kafka.probes import (
    _new_password,
    _port_is_free,
    _redact_url,
    _tools_log_config,
    classpath,
    java_executable,
    metadata_brokers,
    new_cluster_id,
)
from devtools.redis_server import free_port
from kafka_wire import KafkaClientError

JvmOpts = Sequence[str] | Callable[["KafkaNode"], Sequence[str]]
ServerProps = Mapping[str, object] | Callable[["KafkaNode"], Mapping[str, object]]


class KafkaCluster(NodeFiles, NodeFaults):
    """A project-local KRaft cluster of ``size`` combined nodes under ``.run/kafka/<name>/`` (context manager).

    ``jvm_opts`` and ``server_properties`` add to every node's JVM options and ``server.properties``; each may be
    a callable taking the :class:`KafkaNode` (ports and folder known), for settings that differ per node such
    as a ``-javaagent:`` with its own port. ``jmx_exporter`` (default on) runs the Prometheus JMX exporter agent on
    each node (port ``JMX_EXPORTER``, rules :data:`JMX_EXPORTER_RULES`). ``quota_callback`` (default on) makes the
    portal's ``BudgetQuotaCallback`` every node's client quota callback; ``budget_redis_url`` (default
    ``$QUOTAS_KAFKA_BUDGET_REDIS_URL``; "" = none) gives it the engine's Redis, ``budget_cluster`` (default ``name``)
    the portal's name of this cluster. A cluster started by another process is taken over by :meth:`load`
    (``status``/``stop`` from the command line).
    """

    def __init__(
        self,
        name: str = "dev",
        *,
        size: int = DEFAULT_SIZE,
        fresh: bool = False,
        heap_opts: Sequence[str] = DEFAULT_HEAP_OPTS,
        jvm_opts: JvmOpts = (),
        server_properties: ServerProps | None = None,
        jmx_exporter: bool = True,
        telemetry_endpoint: str | None = None,
        telemetry_cluster: str | None = None,
        telemetry_token: str | None = None,
        quota_callback: bool = True,
        budget_redis_url: str | None = None,
        budget_cluster: str | None = None,
        start_timeout: float = 120.0,
        stop_timeout: float = 30.0,
        root: Path = KAFKA_DIR,
    ) -> None:
        if not name or "/" in name or name in ("lib", "agent") or name.startswith("."):
            raise ValueError(f"not a cluster name: {name!r}")
        self.name = name
        self.size = size
        self.fresh = fresh
        self.heap_opts = list(heap_opts)
        self.jvm_opts = jvm_opts
        self.server_properties = server_properties
        # the KIP-714 plugin: on with an endpoint (None: $QUOTAS_KAFKA_TELEMETRY_ENDPOINT; "" = off)
        if telemetry_endpoint is None:
            telemetry_endpoint = os.environ.get(TELEMETRY_ENDPOINT_ENV, "")
        self.telemetry_endpoint = telemetry_endpoint.strip() or None
        self.telemetry_cluster = telemetry_cluster or name
        self.telemetry_token = telemetry_token if telemetry_token is not None else os.environ.get(TELEMETRY_TOKEN_ENV)
        self.jmx_exporter = jmx_exporter
        # the quota callback: on unless told; coordinated with a budget Redis (None: $QUOTAS_KAFKA_BUDGET_REDIS_URL)
        self.quota_callback = quota_callback
        if budget_redis_url is None:
            budget_redis_url = os.environ.get(BUDGET_REDIS_URL_ENV, "")
        self.budget_redis_url = budget_redis_url.strip() or None
        #: what facts() shows of it (no password)
        self.budget_redis_label = _redact_url(self.budget_redis_url) if self.budget_redis_url else None
        self.budget_cluster = budget_cluster or name
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.dir = root / name
        self.nodes: list[KafkaNode] = []
        self.cluster_id: str | None = None
        self.timings: dict[str, float] = {}
        self.started_at: float | None = None
        self.owner_pid: int | None = None  # the process that started the nodes (a test session, the CLI)

    # -- files ------------------------------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        return self.dir / "cluster.json"

    @property
    def credentials_file(self) -> Path:
        return self.dir / "credentials.json"

    def _read_state(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None

    def _write_state(self) -> None:
        state = {**self.facts(), "nodes": [
            {**n.facts(), "jvm_opts": n.jvm_opts, "server_properties": n.server_properties} for n in self.nodes
        ]}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.state_file)

    @classmethod
    def load(cls, name: str = "dev", root: Path = KAFKA_DIR) -> KafkaCluster:
        """The cluster ``name`` as its ``cluster.json`` records it (pids, ports), to query or stop it."""
        cluster = cls(name, root=root)
        state = cluster._read_state()
        if state is None:
            raise KafkaError(f"no cluster {name!r}: {cluster.state_file} does not exist")
        cluster._adopt(state)
        return cluster

    def _adopt(self, state: Mapping[str, Any]) -> None:
        self.cluster_id = state.get("cluster_id")
        self.started_at = state.get("started_at")
        self.owner_pid = state.get("owner_pid")
        self.timings = dict(state.get("timings") or {})
        telemetry = state.get("telemetry") or {}
        self.telemetry_endpoint = telemetry.get("endpoint") or None
        self.telemetry_cluster = telemetry.get("cluster") or self.name
        callback = state.get("quota_callback")
        self.quota_callback = bool(callback)
        self.budget_cluster = (callback or {}).get("budget_cluster") or self.name
        # the URL itself (it may hold a password) stays in the nodes' server.properties, not in cluster.json
        self.budget_redis_url = None
        self.budget_redis_label = (callback or {}).get("budget_redis")
        self.nodes = [
            KafkaNode(
                node_id=n["id"], dir=Path(n["dir"]), ports={k: int(v) for k, v in n["ports"].items()},
                pid=n.get("pid"), jvm_opts=list(n.get("jvm_opts") or []),
                server_properties=dict(n.get("server_properties") or {}),
            )
            for n in state.get("nodes", [])
        ]
        self.size = len(self.nodes) or self.size

    def admin_credentials(self) -> dict[str, str]:
        """The super user's SCRAM name and password (both mechanisms share them)."""
        try:
            creds = json.loads(self.credentials_file.read_text())
        except (OSError, ValueError) as e:
            raise KafkaError(f"no credentials for cluster {self.name!r} in {self.credentials_file}") from e
        return {"username": creds["username"], "password": creds["password"]}

    def _ensure_credentials(self) -> dict[str, str]:
        if self.credentials_file.is_file():
            return self.admin_credentials()
        creds = {"username": SUPER_USER, "password": _new_password(), "mechanisms": list(SCRAM_MECHANISMS)}
        fd = os.open(self.credentials_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(creds, out, indent=2)
            out.write("\n")
        os.chmod(self.credentials_file, 0o600)
        return {"username": creds["username"], "password": creds["password"]}

    # -- facts ------------------------------------------------------------------------------------------------

    def bootstrap(self, listener: str = "PLAINTEXT") -> str:
        """``host:port,...`` of every node on ``listener`` (PLAINTEXT or SASL_PLAINTEXT)."""
        if listener not in ("PLAINTEXT", "SASL_PLAINTEXT"):
            raise ValueError(f"clients connect over PLAINTEXT or SASL_PLAINTEXT, not {listener!r}")
        return ",".join(n.address(listener) for n in self.nodes)

    def client_config(self, mechanism: str | None = None) -> dict[str, str]:
        """librdkafka (confluent-kafka) settings to reach the cluster: PLAINTEXT, or SASL_PLAINTEXT as the super
        user with ``mechanism`` (SCRAM-SHA-256 or SCRAM-SHA-512)."""
        if mechanism is None:
            return {"bootstrap.servers": self.bootstrap("PLAINTEXT")}
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"mechanism is one of {SCRAM_MECHANISMS}, not {mechanism!r}")
        creds = self.admin_credentials()
        return {
            "bootstrap.servers": self.bootstrap("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism,
            "sasl.username": creds["username"],
            "sasl.password": creds["password"],
        }

    def facts(self) -> dict[str, Any]:
        """What ``start`` and ``status`` print: everything a client needs except the password."""
        return {
            "name": self.name,
            "kafka_version": KAFKA_VERSION,
            "cluster_id": self.cluster_id,
            "bootstrap": {listener: self.bootstrap(listener) for listener in ("PLAINTEXT", "SASL_PLAINTEXT")},
            "sasl_mechanisms": list(SCRAM_MECHANISMS),
            "super_user": SUPER_USER,
            "credentials_file": str(self.credentials_file),
            "telemetry": (
                {"endpoint": self.telemetry_endpoint, "cluster": self.telemetry_cluster, "exporter": PLUGIN_CLASS}
                if self.telemetry_endpoint else None
            ),
            "quota_callback": (
                {
                    "class": QUOTA_CALLBACK_CLASS,
                    "budget_redis": self.budget_redis_label,
                    "budget_cluster": self.budget_cluster if self.budget_redis_label else None,
                }
                if self.quota_callback else None
            ),
            "jmx_exporter_rules": str(JMX_EXPORTER_RULES) if any(n.metrics_url for n in self.nodes) else None,
            "nodes": [n.facts() for n in self.nodes],
            "started_at": self.started_at,
            "owner_pid": self.owner_pid,
            "start_seconds": round(sum(self.timings.values()), 2) if self.timings else None,
            "timings": {k: round(v, 2) for k, v in self.timings.items()},
        }

    def is_running(self) -> bool:
        """Every node's process is alive (not that it serves: see :meth:`brokers_in_metadata`)."""
        return bool(self.nodes) and all(n.is_running() for n in self.nodes)

    def brokers_in_metadata(self) -> set[int]:
        """The broker ids that every node, asked over PLAINTEXT, has in its metadata (empty if any is down)."""
        seen: set[int] | None = None
        for node in self.nodes:
            try:
                ids = set(metadata_brokers("127.0.0.1", node.ports["PLAINTEXT"]))
            except KafkaClientError:  # not listening, or not answering yet
                return set()
            seen = ids if seen is None else seen & ids
        return seen or set()

    # -- configuration --------------------------------------------------------------------------------------------

    def _plan_nodes(self, previous: Mapping[str, Any] | None) -> None:
        """Node folders and ports: the previous run's ports when they are still free, fresh free ports otherwise."""
        old_ports = {n["id"]: n["ports"] for n in (previous or {}).get("nodes", [])}
        taken: set[int] = set()

        def pick(want: int | None) -> int:
            if want and want not in taken and _port_is_free(want):
                taken.add(want)
                return want
            while True:
                port = free_port()
                if port not in taken:
                    taken.add(port)
                    return port

        self.nodes = []
        for node_id in range(1, self.size + 1):
            old = old_ports.get(node_id, {})
            ports = {listener: pick(old.get(listener)) for listener in LISTENERS}
            if self.jmx_exporter:
                ports[JMX_EXPORTER] = pick(old.get(JMX_EXPORTER))
            self.nodes.append(KafkaNode(node_id=node_id, dir=self.dir / f"node-{node_id}", ports=ports))

    def start(self) -> KafkaCluster:
        """Fetch the jars if needed, format new nodes, start every node and wait until each broker is in the
        metadata. A cluster of this name that already runs is taken over as it is (unless ``fresh``)."""
        t0 = time.monotonic()
        self.timings = {}
        ensure_kafka_jars()
        if self.jmx_exporter and ensure_jmx_agent() is None:
            self.jmx_exporter = False
        if self.plugins_on:
            ensure_plugin_jars()
        self.timings["jars"] = time.monotonic() - t0
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        with _file_lock(self.dir.parent / f".{self.name}.lock"):
            previous = self._read_state()
            if previous is not None:
                running = KafkaCluster.load(self.name, root=self.dir.parent)
                if running.is_running() and not self.fresh:
                    self._adopt(previous)
                    _log(f"cluster {self.name!r} is already running")
                    return self
                if any(n.is_running() for n in running.nodes):
                    running.stop()
            if self.fresh:
                shutil.rmtree(self.dir, ignore_errors=True)
                previous = None
            self.dir.mkdir(parents=True, exist_ok=True)
            self.cluster_id = (previous or {}).get("cluster_id") or new_cluster_id()
            node_dirs = [self.dir / f"node-{i}" for i in range(1, self.size + 1)]
            if previous is None or not self.credentials_file.is_file() or not all(
                (d / "data" / "meta.properties").is_file() for d in node_dirs
            ):
                # Data without its cluster.json (cluster id) or credentials, or only some nodes formatted: a node
                # cannot join that log, so all of it is formatted anew.
                for d in node_dirs:
                    shutil.rmtree(d / "data", ignore_errors=True)
            creds = self._ensure_credentials()
            self._plan_nodes(previous)
            for node in self.nodes:
                self._write_node_files(node)
            t1 = time.monotonic()
            self._format([n for n in self.nodes if not n.formatted], creds)
            self.timings["format"] = time.monotonic() - t1
            t2 = time.monotonic()
            self.started_at = time.time()
            self.owner_pid = os.getpid()
            for node in self.nodes:
                self._launch(node)
            self._write_state()
            try:
                self._wait_ready()
            except BaseException:
                self.stop()
                raise
            self.timings["boot"] = time.monotonic() - t2
            self._write_state()
        return self

    def _format(self, nodes: Sequence[KafkaNode], creds: Mapping[str, str]) -> None:
        """``kafka-storage format`` for each new node, in parallel, with the super user's SCRAM credentials."""
        if not nodes:
            return
        scram = [
            arg
            for mechanism in SCRAM_MECHANISMS
            for arg in ("--add-scram", f"{mechanism}=[name={creds['username']},password={creds['password']}]")
        ]
        procs = []
        for node in nodes:
            # 0600: the tool prints the SCRAM salts and keys it writes
            fd = os.open(node.dir / "logs" / "format.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            out = os.fdopen(fd, "w")
            cmd = self._java_command(
                node, "kafka.tools.StorageTool", "format",
                "--config", str(node.config_file), "--cluster-id", str(self.cluster_id), *scram, tool=True,
            )
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            procs.append((node, out, proc))
        failed = []
        for node, out, proc in procs:
            try:
                code = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            out.close()
            if code != 0:
                failed.append(f"node {node.node_id} (exit {code}):\n{_tail(node.dir / 'logs' / 'format.log')}")
        if failed:
            raise KafkaError("formatting KRaft storage failed for " + "\n".join(failed))

    def _launch(self, node: KafkaNode) -> None:
        # A session of its own: the node outlives the command that started it (the CLI's `start`) and a Ctrl-C
        # in that terminal; stop() signals it by pid.
        with open(node.stdout_file, "ab") as out:
            node.proc = subprocess.Popen(
                self._java_command(node, "kafka.Kafka", str(node.config_file)),
                cwd=node.dir, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        node.pid = node.proc.pid

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        want = {n.node_id for n in self.nodes}
        while True:
            dead = [n for n in self.nodes if not n.is_running()]
            if dead:
                raise KafkaError(
                    f"Kafka node(s) {[n.node_id for n in dead]} of cluster {self.name!r} exited during start:\n"
                    + "\n".join(n.log_tail() for n in dead)
                )
            if self.brokers_in_metadata() >= want:
                return
            if time.monotonic() > deadline:
                raise KafkaError(
                    f"cluster {self.name!r}: not every broker was in the metadata after {self.start_timeout:.0f}s "
                    f"(have {sorted(self.brokers_in_metadata())}, want {sorted(want)}):\n"
                    + "\n".join(n.log_tail(25) for n in self.nodes)
                )
            time.sleep(0.25)

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM to every node at once (a clean shutdown), SIGKILL to those still alive after ``timeout``.

        Each node's broker part shuts down first and needs the controller quorum to grant its controlled
        shutdown; once fewer than a majority of the voters are left, the remaining node(s) would wait for a quorum
        that cannot come back (minutes), so they get SIGKILL after a short grace. Kafka recovers their logs on
        the next start.
        """
        timeout = self.stop_timeout if timeout is None else timeout
        majority = len(self.nodes) // 2 + 1
        live = [n for n in self.nodes if n.is_running()]
        self._signal(live, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        quorum_lost_at: float | None = None
        while live and time.monotonic() < deadline:
            live = self._still_running(live)
            if live and len(live) < majority:
                quorum_lost_at = quorum_lost_at or time.monotonic()
                if time.monotonic() - quorum_lost_at > QUORUM_LOST_GRACE_S:
                    break
            if live:
                time.sleep(0.1)
        if live:
            why = "the quorum is gone" if quorum_lost_at else f"still running after {timeout:.0f}s"
            _log(f"node(s) {[n.node_id for n in live]} of cluster {self.name!r}: {why}; killing them")
            self._signal(live, signal.SIGKILL)
            kill_deadline = time.monotonic() + 10.0
            while live and time.monotonic() < kill_deadline:
                live = self._still_running(live)
                if live:
                    time.sleep(0.05)
        for node in self.nodes:
            node.proc = None
        if live:
            raise KafkaError(f"Kafka node(s) {[n.node_id for n in live]} of cluster {self.name!r} did not stop")

    def run_tool(self, main_class: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """:func:`run_kafka_tool` (one of Kafka's command-line classes), e.g. kafka-configs against this cluster."""
        return run_kafka_tool(main_class, *args, timeout=timeout)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def local_cluster_for(bootstrap: str, root: Path = KAFKA_DIR) -> KafkaCluster | None:
    """The project-local cluster one of whose nodes listens at an address of ``bootstrap`` (PLAINTEXT or
    SASL_PLAINTEXT), so that a client given only a bootstrap string also finds the super user's credentials."""
    wanted = {a.strip() for a in bootstrap.split(",") if a.strip()}
    for state_file in sorted(root.glob("*/cluster.json")):
        try:
            cluster = KafkaCluster.load(state_file.parent.name, root=root)
        except (KafkaError, KeyError, TypeError, ValueError):
            continue
        addresses = {n.address(listener) for n in cluster.nodes for listener in ("PLAINTEXT", "SASL_PLAINTEXT")}
        if wanted & addresses:
            return cluster
    return None


def run_kafka_tool(main_class: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's command-line classes on the Maven classpath, e.g. ``org.apache.kafka.tools.ConfigCommand``
    (what kafka-configs.sh runs), so tests can compare the portal with Kafka's own tools. Output is captured
    (text); Kafka's own logging goes to stderr at WARN."""
    ensure_kafka_jars()
    cmd = [
        java_executable(), *TOOL_JVM_OPTS, f"-Dlog4j2.configurationFile={_tools_log_config()}",
        "-cp", classpath(), main_class, *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)


