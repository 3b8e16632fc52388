"""Start and stop a project-local Apache Kafka 4.4 cluster (KRaft) on 127.0.0.1.

The jars come from Maven Central through the pinned Maven project ``devtools/kafka/pom.xml`` into
``.run/kafka/lib`` (fetched once; again only when the pom changes). Each cluster lives under
``.run/kafka/<name>/``: ``cluster.json`` (ports, pids, cluster id), ``credentials.json`` (the portal's
super user, mode 0600) and ``node-N/`` (``server.properties``, ``log4j2.xml``, ``data/``, ``logs/server.log``).

    python -m devtools.kafka_cluster start [--name NAME] [--fresh] [--no-jmx-exporter]   # one JSON line of facts
    python -m devtools.kafka_cluster start ... --telemetry-endpoint http://127.0.0.1:8000/v1/metrics  # KIP-714 plugin
    python -m devtools.kafka_cluster start ... --budget-redis-url redis://127.0.0.1:6379/0  # cluster-wide budgets
    python -m devtools.kafka_cluster status [--name NAME]            # the same for a running cluster, or exit 1
    python -m devtools.kafka_cluster stop [--name NAME]

Quorum layout: three nodes, each ``process.roles=broker,controller``, forming a static 3-voter quorum
(``controller.quorum.voters``). Combined mode runs three JVMs instead of four or six, which is what fits two
cores next to Redis, the portal, Celery and Spark; three voters still give a real Raft quorum (one node may
stop) and three brokers give real per-broker quotas and replication. A static voter set (not a dynamic
quorum formatted with ``--initial-controllers``) keeps the endpoints out of the log, so a restart may move a
node to other ports when its old ones are taken.

Listeners per node: ``PLAINTEXT`` (also inter-broker), ``SASL_PLAINTEXT`` with SCRAM-SHA-256 and
SCRAM-SHA-512, and ``CONTROLLER``. The super user ``portal-admin`` gets SCRAM credentials of both mechanisms at
format time (``--add-scram``) and is listed in ``super.users`` with ``User:ANONYMOUS``; no authorizer is
configured, so ACLs are out of scope and every authenticated or PLAINTEXT client may do everything.

Kafka's own metrics: each node runs the Prometheus JMX exporter java agent (``.run/kafka/agent/``, fetched by the
pom) on a free loopback port of its own (``ports.JMX_EXPORTER`` of each node in the facts and ``cluster.json``;
``http://127.0.0.1:<port>/metrics``) with the rules of ``devtools/kafka/jmx-exporter.yml`` (the quota sensors,
connection quotas and throttle histograms, in jmx-monitoring-stacks naming). On by default; ``jmx_exporter=False``
(``--no-jmx-exporter``) leaves it out, and so does an agent jar that cannot be had (with a warning).

The portal's broker plugins (``broker-plugins/``, one Maven build of two modules, built by
:func:`ensure_plugin_jars` into ``.run/kafka/plugin/`` when their sources or the engine's ``budget_share.lua``
change, offline when Maven can) are on every broker's classpath:

- Client quotas: every node runs ``BudgetQuotaCallback`` (``client.quota.callback.class``; ``quota_callback=False``
  or ``--no-quota-callback`` leaves it out, and Kafka's own default callback answers). Without a budget Redis it
  answers exactly as Kafka's default callback; with one (``budget_redis_url=``, ``--budget-redis-url`` or
  ``QUOTAS_KAFKA_BUDGET_REDIS_URL``) it shares the quota values the portal marked cluster-wide out to the brokers
  through the engine (``quota.budget.redis.url``, ``quota.budget.cluster`` = ``budget_cluster``, default this
  cluster's name). Its state is the JMX MBean ``kafka.server:type=quota-budget-callback``.
- Client telemetry (KIP-714): with a telemetry endpoint (``telemetry_endpoint=``, ``--telemetry-endpoint`` or
  ``QUOTAS_KAFKA_TELEMETRY_ENDPOINT``) every broker runs ``PortalTelemetryExporter`` (in ``metric.reporters``),
  which forwards every pushed payload to that OTLP/HTTP receiver (the portal's ``POST /v1/metrics``) with the header
  ``X-Quotas-Cluster: <telemetry_cluster>`` (default: this cluster's name). Without an endpoint the exporter stays
  off (and Kafka answers no client a telemetry subscription). :meth:`KafkaCluster.exporter_stats` reads its counters
  (JMX ``kafka.server:type=portal-telemetry-exporter``).

No Django, and nothing from the portal's packages: the tests, the benchmarks and the scripts use it alike.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import string
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.redis_server import ROOT, RUN_DIR, free_port

KAFKA_VERSION = "4.4.0"
POM = Path(__file__).resolve().parent / "kafka" / "pom.xml"
KAFKA_DIR = RUN_DIR / "kafka"
LIB_DIR = KAFKA_DIR / "lib"
AGENT_DIR = KAFKA_DIR / "agent"
LIB_STAMP = KAFKA_DIR / "lib.sha256"
JMX_AGENT_JAR = AGENT_DIR / "jmx_prometheus_javaagent.jar"
#: The portal's broker plugins: one Maven build (a parent pom and its modules), where the jars land (the brokers'
#: classpath) and their classes. The quota callback's jar carries the engine's Lua script, so it is a source too.
PLUGINS_POM = ROOT / "broker-plugins" / "pom.xml"
PLUGIN_MODULES = ("telemetry-exporter", "quota-callback")
BUDGET_LUA = ROOT / "engine" / "lua" / "budget_share.lua"
PLUGIN_DIR = KAFKA_DIR / "plugin"
PLUGIN_BUILD_DIR = KAFKA_DIR / "plugin-build"
PLUGIN_JAR = PLUGIN_DIR / "portal-telemetry-exporter.jar"
QUOTA_CALLBACK_JAR = PLUGIN_DIR / "portal-quota-callback.jar"
PLUGIN_STAMP = KAFKA_DIR / "plugin.sha256"
PLUGIN_CLASS = "quotaportal.kafka.telemetry.PortalTelemetryExporter"
QUOTA_CALLBACK_CLASS = "quotaportal.kafka.quota.BudgetQuotaCallback"
BUDGET_REDIS_URL_ENV = "QUOTAS_KAFKA_BUDGET_REDIS_URL"
JMX_REPORTER_CLASS = "org.apache.kafka.common.metrics.JmxReporter"
PLUGIN_STATS_CLASS = "quotaportal.kafka.telemetry.StatsTool"
TELEMETRY_ENDPOINT_ENV = "QUOTAS_KAFKA_TELEMETRY_ENDPOINT"
TELEMETRY_TOKEN_ENV = "QUOTAS_KAFKA_TELEMETRY_TOKEN"
#: The exporter's rules, kept in the project; the port name of each node's exporter in ``ports``.
JMX_EXPORTER_RULES = POM.parent / "jmx-exporter.yml"
JMX_EXPORTER = "JMX_EXPORTER"

SUPER_USER = "portal-admin"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "CONTROLLER")
DEFAULT_SIZE = 3
# Small heaps: three of them next to Redis, the portal, Celery and Spark on 2 cores / 24 GB. The serial
# collector has no GC threads to compete for the two cores and short pauses at this heap size.
DEFAULT_HEAP_OPTS = ("-Xms256m", "-Xmx384m")
DEFAULT_GC_OPTS = ("-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError")
#: Seconds a node may still take to exit once fewer than a majority of the voters run (see KafkaCluster.stop).
QUORUM_LOST_GRACE_S = 3.0
TOOL_JVM_OPTS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")

JvmOpts = Sequence[str] | Callable[["KafkaNode"], Sequence[str]]
ServerProps = Mapping[str, object] | Callable[["KafkaNode"], Mapping[str, object]]


class KafkaError(RuntimeError):
    """The cluster could not be fetched, formatted, started or stopped; the message says where to look."""


def _log(message: str) -> None:
    print(f"kafka_cluster: {message}", file=sys.stderr, flush=True)


# -- the jars -------------------------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock between processes (two test sessions, a test run and the CLI) on ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"({path} does not exist)"
    return "\n".join(text.splitlines()[-lines:])


def jars_ready(pom: Path = POM, lib_dir: Path = LIB_DIR) -> bool:
    """True when ``lib_dir`` holds the jars of this very pom (its sha256 stamp matches)."""
    stamp = lib_dir.parent / f"{lib_dir.name}.sha256"
    return (
        stamp.is_file()
        and stamp.read_text().strip() == _sha256(pom)
        and any(lib_dir.glob("kafka_2.13-*.jar"))
    )


def ensure_kafka_jars(pom: Path = POM, lib_dir: Path = LIB_DIR, agent_dir: Path = AGENT_DIR) -> Path:
    """Bring Kafka's runtime jars into ``lib_dir`` with Maven, unless they are there for this pom already.

    Runs no Maven at all when the stamp matches, so later runs work offline. The copy goes to a temporary
    folder that replaces ``lib_dir`` only when complete, so an interrupted fetch never leaves half a classpath.
    The JMX exporter agent goes to ``agent_dir``; failing to get it is only a warning (the brokers then run
    without it; :func:`ensure_jmx_agent` tries again).
    """
    if jars_ready(pom, lib_dir):
        return lib_dir
    with _file_lock(lib_dir.parent / ".fetch.lock"):
        if jars_ready(pom, lib_dir):  # another process fetched them while we waited for the lock
            return lib_dir
        mvn = shutil.which("mvn")
        if mvn is None:
            raise KafkaError("Maven (mvn) is not installed: run `bash scripts/bootstrap.sh` (ensure_maven)")
        want = _sha256(pom)
        tmp = lib_dir.parent / f"{lib_dir.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        log = lib_dir.parent / "maven.log"
        _log(f"fetching Apache Kafka {KAFKA_VERSION} jars from Maven Central into {lib_dir} (see {log})")
        started = time.monotonic()
        base = [mvn, "-B", "-ntp", "-f", str(pom), f"-Dkafka.lib.dir={tmp}", f"-Dkafka.agent.dir={agent_dir}"]
        # Both copies in one Maven run (one JVM start); if that fails, the classpath alone: the brokers can run
        # without the JMX exporter agent.
        if _run_logged([*base, "dependency:copy-dependencies", "dependency:copy@jmx-agent"], log) != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            _log(f"warning: the JMX exporter agent could not be fetched (brokers run without it); see {log}")
            code = _run_logged([*base, "dependency:copy-dependencies"], log, append=True)
            if code != 0 or not any(tmp.glob("kafka_2.13-*.jar")):
                raise KafkaError(f"mvn dependency:copy-dependencies failed (exit {code}):\n{_tail(log)}")
        if not any(tmp.glob("kafka_2.13-*.jar")):
            raise KafkaError(f"Maven copied no kafka_2.13 jar into {tmp}:\n{_tail(log)}")
        old = lib_dir.parent / f"{lib_dir.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        if lib_dir.exists():
            lib_dir.rename(old)
        tmp.rename(lib_dir)
        shutil.rmtree(old, ignore_errors=True)
        _log(f"{len(list(lib_dir.glob('*.jar')))} jars in {time.monotonic() - started:.1f}s")
        (lib_dir.parent / f"{lib_dir.name}.sha256").write_text(want + "\n")
    return lib_dir


def ensure_jmx_agent(pom: Path = POM, agent_dir: Path = AGENT_DIR) -> Path | None:
    """The JMX exporter agent jar, copied by Maven when it is missing (the jars' fetch may have gone without it);
    None, with a warning, when it cannot be had."""
    jar = agent_dir / JMX_AGENT_JAR.name
    if jar.is_file():
        return jar
    with _file_lock(LIB_DIR.parent / ".fetch.lock"):
        if jar.is_file():
            return jar
        mvn = shutil.which("mvn")
        log = LIB_DIR.parent / "maven-agent.log"
        if mvn is not None:
            _run_logged([mvn, "-B", "-ntp", "-f", str(pom), f"-Dkafka.agent.dir={agent_dir}",
                         "dependency:copy@jmx-agent"], log)
    if jar.is_file():
        return jar
    _log(f"warning: no JMX exporter agent at {jar} (see {log}); the brokers run without it")
    return None


def plugin_sources_sha256(pom: Path = PLUGINS_POM) -> str:
    """A sha256 of what the plugins are built from: the parent pom, each module's pom and every file under its
    ``src/`` (names and contents), and the engine's ``budget_share.lua`` (a resource of the quota callback's jar)."""
    digest = hashlib.sha256()
    root = pom.parent
    paths = [pom]
    for module in PLUGIN_MODULES:
        paths.append(root / module / "pom.xml")
        paths.extend(sorted(p for p in (root / module / "src").rglob("*") if p.is_file()))
    for path in paths:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(b"budget_share.lua\0" + BUDGET_LUA.read_bytes() + b"\0")
    return digest.hexdigest()


def _plugin_jars() -> tuple[Path, ...]:
    return (PLUGIN_JAR, QUOTA_CALLBACK_JAR)


def plugin_ready(pom: Path = PLUGINS_POM, stamp: Path = PLUGIN_STAMP) -> bool:
    """True when both plugin jars were built from the sources as they are now."""
    return (
        all(jar.is_file() for jar in _plugin_jars())
        and stamp.is_file()
        and stamp.read_text().strip() == plugin_sources_sha256(pom)
    )


def ensure_plugin_jars(pom: Path = PLUGINS_POM, stamp: Path = PLUGIN_STAMP) -> tuple[Path, Path]:
    """Build the broker plugins (one ``mvn package`` of the parent) unless the jars are current (a sha256 of their
    sources in ``stamp``); returns (telemetry exporter jar, quota callback jar).

    ``mvn -o`` first (no network once Maven's own plugins and the dependencies are in ~/.m2), online only when that
    fails; tests are left to ``mvn test`` (tests/broker_plugins). The build happens under ``.run/kafka/plugin-build``
    (never in the source tree, where a developer's ``mvn test`` may be running) and the jars replace the old ones
    only when complete.
    """
    if plugin_ready(pom, stamp):
        return PLUGIN_JAR, QUOTA_CALLBACK_JAR
    with _file_lock(KAFKA_DIR / ".fetch.lock"):
        if plugin_ready(pom, stamp):
            return PLUGIN_JAR, QUOTA_CALLBACK_JAR
        mvn = shutil.which("mvn")
        if mvn is None:
            raise KafkaError("Maven (mvn) is not installed: run `bash scripts/bootstrap.sh` (ensure_maven)")
        want = plugin_sources_sha256(pom)
        log = KAFKA_DIR / "plugin-maven.log"
        _log(f"building the broker plugins ({pom.parent}; see {log})")
        started = time.monotonic()
        base = [mvn, "-B", "-ntp", "-f", str(pom), f"-Dplugins.build.dir={PLUGIN_BUILD_DIR}", "-Dmaven.test.skip=true",
                "clean", "package"]
        code = _run_logged([base[0], "-o", *base[1:]], log)
        if code != 0:  # the first build: Maven's own plugins and Jedis come from Maven Central once
            code = _run_logged(base, log, append=True)
        built = [PLUGIN_BUILD_DIR / jar.stem / jar.name for jar in _plugin_jars()]
        if code != 0 or not all(b.is_file() for b in built):
            raise KafkaError(f"building the broker plugins failed (exit {code}):\n{_tail(log)}")
        PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
        for source, jar in zip(built, _plugin_jars(), strict=True):
            tmp = jar.with_suffix(".tmp")
            shutil.copyfile(source, tmp)
            tmp.replace(jar)
        stamp.write_text(want + "\n")
        _log(f"broker plugins built in {time.monotonic() - started:.1f}s: {', '.join(j.name for j in _plugin_jars())}")
    return PLUGIN_JAR, QUOTA_CALLBACK_JAR


def ensure_plugin_jar() -> Path:
    """:func:`ensure_plugin_jars`, answering the KIP-714 exporter's jar (what the telemetry tests run)."""
    return ensure_plugin_jars()[0]


def exporter_stats_of(pid: int, jar: Path = PLUGIN_JAR, timeout: float = 60.0) -> dict[str, Any] | None:
    """The plugin's counters in the broker JVM ``pid`` (JMX ``kafka.server:type=portal-telemetry-exporter``, read
    by the plugin's StatsTool through the JDK's attach API), e.g. ``{"enqueued", "sent", "dropped", "failed",
    "rejected", "queuedepth", "queuecapacity", "lasterror", ...}``; None when the broker runs no exporter."""
    cmd = [java_executable(), *TOOL_JVM_OPTS, "-cp", str(jar), PLUGIN_STATS_CLASS, str(pid)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode == 2:
        return None
    if proc.returncode != 0:
        raise KafkaError(f"reading the exporter's counters of process {pid} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def _run_logged(cmd: Sequence[str], log: Path, append: bool = False) -> int:
    with open(log, "a" if append else "w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
    return proc.returncode


def java_executable() -> str:
    """The ``java`` to run Kafka with: $JAVA_HOME's when set, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise KafkaError("java is not installed: run `bash scripts/bootstrap.sh` (ensure_java)")
    return java


def _tools_log_config() -> Path:
    """Log4j 2 settings for Kafka's command-line tools: warnings and errors on stderr, nothing else."""
    path = KAFKA_DIR / "tools-log4j2.xml"
    text = (
        '<Configuration status="WARN"><Appenders><Console name="err" target="SYSTEM_ERR">'
        '<PatternLayout pattern="%p %m%n"/></Console></Appenders>'
        '<Loggers><Root level="WARN"><AppenderRef ref="err"/></Root></Loggers></Configuration>\n'
    )
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def classpath(lib_dir: Path = LIB_DIR) -> str:
    return str(lib_dir / "*")


# -- the wire: just enough of Kafka's protocol to see which brokers are in the metadata -------------------------


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("connection closed by the broker")
        data += chunk
    return bytes(data)


def metadata_brokers(host: str, port: int, timeout: float = 2.0) -> dict[int, tuple[str, int]]:
    """The brokers (id -> host, port) in the metadata that the broker at ``host:port`` answers.

    A raw Metadata v1 request for no topics, so that readiness needs no client library; a broker appears
    there once it is registered and unfenced.
    """
    client_id = b"kafka_cluster"
    body = struct.pack(">hhih", 3, 1, 1, len(client_id)) + client_id + struct.pack(">i", 0)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        data = _recv_exact(sock, size)
    pos = 4  # correlation id
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    brokers: dict[int, tuple[str, int]] = {}
    for _ in range(count):
        node_id, host_len = struct.unpack_from(">ih", data, pos)
        pos += 6
        broker_host = data[pos:pos + host_len].decode()
        pos += host_len
        (broker_port, rack_len) = struct.unpack_from(">ih", data, pos)
        pos += 6 + max(rack_len, 0)
        brokers[node_id] = (broker_host, broker_port)
    return brokers


def _port_is_free(port: int) -> bool:
    """Free for a server to bind: SO_REUSEADDR, as Kafka binds, so TIME_WAIT leftovers do not count."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _pid_alive(pid: int, marker: str) -> bool:
    """True when ``pid`` runs (not a zombie) and its command line contains ``marker``: pids get reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X") and marker in cmdline


def new_cluster_id() -> str:
    """A KRaft cluster id as ``kafka-storage random-uuid`` makes one (base64url of 16 random bytes, never starting
    with '-', which command lines would take for an option), without starting a JVM for it."""
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not text.startswith("-") and raw != bytes(16) and raw != bytes(15) + b"\x01":
            return text


def _redact_url(url: str) -> str:
    """A URL without the password it may carry (``redis://user:secret@host`` -> ``redis://user:***@host``)."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    auth, _, host = rest.partition("@")
    user = auth.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"


def _new_password() -> str:
    # letters and digits only: the --add-scram syntax uses ',', '=', '[', ']' and quotes as delimiters
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(32))


# -- the cluster ----------------------------------------------------------------------------------------------


@dataclass
class KafkaNode:
    """One KRaft node (broker and controller in one JVM) and its ports."""

    node_id: int
    dir: Path
    ports: dict[str, int]
    pid: int | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)
    jvm_opts: list[str] = field(default_factory=list)
    server_properties: dict[str, str] = field(default_factory=dict)

    @property
    def config_file(self) -> Path:
        return self.dir / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def log_file(self) -> Path:
        return self.dir / "logs" / "server.log"

    @property
    def stdout_file(self) -> Path:
        return self.dir / "logs" / "stdout.log"

    def address(self, listener: str = "PLAINTEXT") -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    @property
    def metrics_url(self) -> str | None:
        """The node's JMX exporter (``/metrics``, Prometheus text), or None when it runs without one."""
        port = self.ports.get(JMX_EXPORTER)
        return f"http://127.0.0.1:{port}/metrics" if port else None

    @property
    def formatted(self) -> bool:
        return (self.data_dir / "meta.properties").is_file()

    def is_running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.pid is not None and _pid_alive(self.pid, str(self.config_file))

    def log_tail(self, lines: int = 40) -> str:
        """What to show when this node failed: the end of server.log and of the JVM's own output."""
        return (
            f"--- {self.log_file} (last {lines} lines) ---\n{_tail(self.log_file, lines)}\n"
            f"--- {self.stdout_file} ---\n{_tail(self.stdout_file, 15)}"
        )

    def facts(self) -> dict[str, Any]:
        return {
            "id": self.node_id,
            "pid": self.pid,
            "ports": dict(self.ports),
            "dir": str(self.dir),
            "log": str(self.log_file),
        }


class KafkaCluster:
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
            except (OSError, struct.error):
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

    def _properties(self, node: KafkaNode) -> dict[str, str]:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.ports['CONTROLLER']}" for n in self.nodes)
        rf = str(min(3, self.size))
        min_isr = str(min(2, self.size))
        scram_jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        props: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": ",".join(f"{lst}://127.0.0.1:{node.ports[lst]}" for lst in LISTENERS),
            "advertised.listeners": ",".join(
                f"{lst}://127.0.0.1:{node.ports[lst]}" for lst in ("PLAINTEXT", "SASL_PLAINTEXT")
            ),
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": ",".join(SCRAM_MECHANISMS),
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": scram_jaas,
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": scram_jaas,
            # No authorizer: super.users only matters once one is configured (ACLs are out of scope).
            "super.users": f"User:{SUPER_USER};User:ANONYMOUS",
            "log.dirs": str(node.data_dir),
            # Small and fast to start: few partitions for the internal topics, no rebalance delay, few threads.
            "num.partitions": "1",
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": "3",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            "share.coordinator.state.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "background.threads": "4",
            "num.replica.fetchers": "1",
            "num.recovery.threads.per.data.dir": "1",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),  # default 128 MiB would be a third of the heap
            "broker.heartbeat.interval.ms": "500",  # brokers are unfenced sooner after start
            "log.retention.hours": "24",
            "log.segment.bytes": str(64 * 1024 * 1024),
        }
        return props

    def _log4j2_xml(self, node: KafkaNode) -> str:
        logs = node.log_file.parent
        return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- written by devtools/kafka_cluster.py for node {node.node_id} of cluster {self.name} -->
<Configuration status="WARN" shutdownHook="disable">
  <Appenders>
    <RollingFile name="server" fileName="{logs}/server.log" filePattern="{logs}/server.log.%i">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <Policies><SizeBasedTriggeringPolicy size="20 MB"/></Policies>
      <DefaultRolloverStrategy max="2"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="server"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.clients" level="WARN"/>
  </Loggers>
</Configuration>
"""

    def _telemetry_properties(self) -> dict[str, str]:
        """The KIP-714 plugin's broker settings (none without an endpoint)."""
        if not self.telemetry_endpoint:
            return {}
        props = {
            # Kafka 4 drops its own JmxReporter when metric.reporters is set: it must stay listed, or every metric of
            # Kafka's Metrics registry (quota sensors, socket-server-metrics, ...) vanishes from JMX
            "metric.reporters": f"{JMX_REPORTER_CLASS},{PLUGIN_CLASS}",
            "portal.telemetry.endpoint": self.telemetry_endpoint,
            "portal.telemetry.cluster": self.telemetry_cluster,
            "portal.telemetry.queue.capacity": "1000",
            "portal.telemetry.request.timeout.ms": "5000",
        }
        if self.telemetry_token:
            props["portal.telemetry.token"] = self.telemetry_token
        return props

    def _quota_callback_properties(self) -> dict[str, str]:
        """The quota callback's broker settings: the class, and with a budget Redis where and as which cluster it
        coordinates (the plugin's other settings keep their defaults)."""
        if not self.quota_callback:
            return {}
        props = {"client.quota.callback.class": QUOTA_CALLBACK_CLASS}
        if self.budget_redis_url:
            props["quota.budget.redis.url"] = self.budget_redis_url
            props["quota.budget.cluster"] = self.budget_cluster
        return props

    @property
    def plugins_on(self) -> bool:
        """Whether the brokers run a plugin of ``broker-plugins/`` (then both jars are on their classpath)."""
        return bool(self.telemetry_endpoint or self.quota_callback)

    def _classpath(self) -> str:
        """The brokers' classpath: Kafka's jars, and both plugin jars when a plugin is on."""
        if self.plugins_on:
            return f"{classpath()}{os.pathsep}{PLUGIN_DIR / '*'}"
        return classpath()

    def exporter_stats(self) -> dict[int, dict[str, Any] | None]:
        """Each running node's plugin counters (:func:`exporter_stats_of`), by node id."""
        return {n.node_id: exporter_stats_of(n.pid) for n in self.nodes if n.pid is not None and n.is_running()}

    def _extra_properties(self, node: KafkaNode) -> dict[str, str]:
        extra = self.server_properties(node) if callable(self.server_properties) else (self.server_properties or {})
        return {str(k): str(v) for k, v in extra.items()}

    def _write_node_files(self, node: KafkaNode) -> None:
        (node.dir / "logs").mkdir(parents=True, exist_ok=True)
        node.data_dir.mkdir(parents=True, exist_ok=True)
        node.server_properties = self._extra_properties(node)
        node.jvm_opts = list(self.jvm_opts(node) if callable(self.jvm_opts) else self.jvm_opts)
        if JMX_EXPORTER in node.ports:  # the agent serves /metrics on loopback only
            node.jvm_opts.insert(
                0, f"-javaagent:{JMX_AGENT_JAR}=127.0.0.1:{node.ports[JMX_EXPORTER]}:{JMX_EXPORTER_RULES}"
            )
        props = {
            **self._properties(node), **self._telemetry_properties(), **self._quota_callback_properties(),
            **node.server_properties,
        }
        node.config_file.write_text(
            f"# written by devtools/kafka_cluster.py at each start of cluster {self.name!r}; edits are overwritten\n"
            + "".join(f"{k}={v}\n" for k, v in props.items())
        )
        (node.dir / "log4j2.xml").write_text(self._log4j2_xml(node))

    def _java_command(self, node: KafkaNode, main_class: str, *args: str, tool: bool = False) -> list[str]:
        """The java command line for a node's server, or for a short-lived tool run with the node's files (a
        small heap and only the C1 compiler, which starts faster)."""
        jvm = [*TOOL_JVM_OPTS] if tool else [*self.heap_opts, *DEFAULT_GC_OPTS, *node.jvm_opts]
        log_config = _tools_log_config() if tool else node.dir / "log4j2.xml"
        return [
            java_executable(),
            *jvm,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log_config}",
            f"-Dkafka.logs.dir={node.log_file.parent}",
            # the node's classpath for its tools too: the storage formatter validates the node's configuration,
            # which names the plugins' classes
            "-cp", self._classpath(),
            main_class,
            *args,
        ]

    # -- start and stop -------------------------------------------------------------------------------------------

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

    # -- one node (faults) ------------------------------------------------------------------------------------------

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


# -- command line ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--name", default="dev", help="the cluster (folder .run/kafka/NAME); default dev")
    parser.add_argument("--fresh", action="store_true", help="start: wipe the cluster's data first")
    parser.add_argument("--timeout", type=float, default=120.0, help="start: seconds to wait for every broker")
    parser.add_argument("--no-jmx-exporter", dest="jmx_exporter", action="store_false",
                        help="start: no Prometheus JMX exporter agent on the brokers")
    parser.add_argument("--telemetry-endpoint", default=None,
                        help=f"start: the KIP-714 plugin's OTLP/HTTP receiver, e.g. http://127.0.0.1:8000/v1/metrics "
                        f"(default ${TELEMETRY_ENDPOINT_ENV}; none: the plugin is off)")
    parser.add_argument("--telemetry-cluster", default=None,
                        help="start: the portal's name of this cluster, sent as X-Quotas-Cluster (default NAME)")
    parser.add_argument("--no-quota-callback", dest="quota_callback", action="store_false",
                        help="start: Kafka's own default client quota callback instead of the portal's")
    parser.add_argument("--budget-redis-url", default=None,
                        help=f"start: the engine's Redis for cluster-wide budgets, e.g. redis://127.0.0.1:6379/0 "
                        f"(default ${BUDGET_REDIS_URL_ENV}; none: the callback answers as Kafka's default one)")
    parser.add_argument("--budget-cluster", default=None,
                        help="start: the portal's name of this cluster for its budgets (default NAME)")
    args = parser.parse_args(argv)
    try:
        if args.action == "start":
            cluster = KafkaCluster(
                args.name, fresh=args.fresh, start_timeout=args.timeout, jmx_exporter=args.jmx_exporter,
                telemetry_endpoint=args.telemetry_endpoint, telemetry_cluster=args.telemetry_cluster,
                quota_callback=args.quota_callback, budget_redis_url=args.budget_redis_url,
                budget_cluster=args.budget_cluster,
            ).start()
            print(json.dumps(cluster.facts()), flush=True)
            for node in cluster.nodes:
                node.proc = None  # the nodes run on after this command; nothing to reap here
            return 0
        try:
            cluster = KafkaCluster.load(args.name)
        except KafkaError as e:
            _log(str(e))
            return 1 if args.action == "status" else 0
        if args.action == "status":
            if not cluster.is_running():
                down = [n.node_id for n in cluster.nodes if not n.is_running()]
                _log(f"cluster {args.name!r} is not running (node(s) {down} down)")
                return 1
            facts = cluster.facts()
            facts["brokers_in_metadata"] = sorted(cluster.brokers_in_metadata())
            print(json.dumps(facts), flush=True)
            return 0
        cluster.stop()
        _log(f"cluster {args.name!r} stopped")
        return 0
    except KafkaError as e:
        _log(str(e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
