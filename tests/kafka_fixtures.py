"""pytest plugin: the session's real Apache Kafka cluster (``kafka_cluster`` fixture).

One project-local 3-node KRaft cluster named ``test`` (fresh data; ``test-<pid>`` while another live session
runs ``test``) is started by ``devtools.kafka`` the first time a test asks for it, and stopped at the
end of the session; the time it took is shown in the terminal summary. With ``QUOTAS_KAFKA_BOOTSTRAP`` set,
that running cluster is used instead and left alone: a project-local one (``python -m devtools.kafka
start``) is recognised by its address, so its super user is known; for any other,
``QUOTAS_KAFKA_SASL_BOOTSTRAP``, ``QUOTAS_KAFKA_USERNAME`` and ``QUOTAS_KAFKA_PASSWORD`` give SASL access (tests
that need it are skipped without). Kafka that cannot be started fails the tests, with the logs' tails.

The session's cluster runs the portal's broker plugins (``broker-plugins/``):

- the client quota callback ``BudgetQuotaCallback`` on every node, with the session's Redis (``QUOTAS_REDIS_URL``)
  as its budget Redis (``kafka_cluster.budget_redis_url``) and the cluster's name as its budget cluster: without a
  scope in that Redis it answers exactly as Kafka's default callback, so every quota test runs against it. The
  brokers sign in to that Redis as the ACL user ``BUDGET_USER``, so a test can take Redis away from the brokers
  alone (``ACL SETUSER ... off``) while the rest of the session keeps it;
- the KIP-714 exporter: its brokers forward client telemetry to ``http://127.0.0.1:<port>/v1/metrics``, a port
  reserved when the cluster starts (``kafka_cluster.telemetry_endpoint``), with ``X-Quotas-Cluster: kip714``
  (``kafka_cluster.telemetry_cluster``); ``tests/kafka/test_kip714.py`` serves the portal there. Until something
  listens, the exporter's posts fail (counted, never in the brokers' way).

Plugins that cannot be built leave the cluster without them (reported; the tests that need them then fail with the
reason).

Registered from tests/conftest.py (``pytest_plugins``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devtools.kafka import (
    SCRAM_MECHANISMS,
    KafkaCluster,
    KafkaError,
    ensure_plugin_jars,
    local_cluster_for,
    metadata_brokers,
    run_kafka_tool,
)
from kafka_wire import KafkaClientError

#: Seconds the first test using the cluster may take, its setup included: a first run fetches the jars with
#: Maven, formats three nodes and boots them (about half a minute on 2 cores with the jars in ~/.m2).
KAFKA_SETUP_TIMEOUT_S = 360.0

_report: list[str] = []
#: The portal cluster name the session cluster's plugin sends (X-Quotas-Cluster).
TELEMETRY_CLUSTER = "kip714"
#: Why the session cluster runs without the broker plugins, when it does.
plugin_problem: list[str] = []
#: The bound (not listening) socket that keeps the receiver's port from every other server until it is released.
_reserved: list[socket.socket] = []


def _reserve_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    _reserved.append(sock)
    return int(sock.getsockname()[1])


def release_telemetry_port() -> None:
    """Free the port reserved for the session cluster's OTLP receiver, right before a server binds it."""
    while _reserved:
        _reserved.pop().close()


class ExternalKafka:
    """A cluster this session did not start, known only from the environment (the subset of
    :class:`~devtools.kafka.KafkaCluster` that the tests use)."""

    def __init__(self, bootstrap: str) -> None:
        self.name = "external"
        self.nodes: list[Any] = []  # unknown: tests check the broker count instead of the ids
        self.telemetry_endpoint: str | None = None  # not ours: whatever plugin it runs is unknown
        self.telemetry_cluster = TELEMETRY_CLUSTER
        self._bootstrap = {"PLAINTEXT": bootstrap, "SASL_PLAINTEXT": os.environ.get("QUOTAS_KAFKA_SASL_BOOTSTRAP", "")}

    def bootstrap(self, listener: str = "PLAINTEXT") -> str:
        if not self._bootstrap.get(listener):
            pytest.skip(f"no {listener} address for the external Kafka (QUOTAS_KAFKA_SASL_BOOTSTRAP)")
        return self._bootstrap[listener]

    def admin_credentials(self) -> dict[str, str]:
        user, password = os.environ.get("QUOTAS_KAFKA_USERNAME"), os.environ.get("QUOTAS_KAFKA_PASSWORD")
        if not user or not password:
            pytest.skip("no SASL credentials for the external Kafka (QUOTAS_KAFKA_USERNAME/QUOTAS_KAFKA_PASSWORD)")
        return {"username": user, "password": password}

    def client_config(self, mechanism: str | None = None) -> dict[str, str]:
        if mechanism is None:
            return {"bootstrap.servers": self.bootstrap("PLAINTEXT")}
        assert mechanism in SCRAM_MECHANISMS
        creds = self.admin_credentials()
        return {
            "bootstrap.servers": self.bootstrap("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism,
            "sasl.username": creds["username"],
            "sasl.password": creds["password"],
        }

    def run_tool(self, main_class: str, *args: str, timeout: float = 120.0) -> Any:
        return run_kafka_tool(main_class, *args, timeout=timeout)


def _check_reachable(bootstrap: str, timeout: float = 10.0) -> None:
    """Fail at once, saying so, when no address of ``bootstrap`` answers a Metadata request."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        for address in filter(None, (a.strip() for a in bootstrap.split(","))):
            host, _, port = address.rpartition(":")
            try:
                if metadata_brokers(host.strip("[]"), int(port)):
                    return
            except (ValueError, KafkaClientError) as e:
                last_error = e
        time.sleep(0.5)
    pytest.fail(f"QUOTAS_KAFKA_BOOTSTRAP={bootstrap} does not answer: {last_error}", pytrace=False)


def _session_cluster_name() -> str:
    """``test``, unless another live test session runs a cluster of that name (then one of our own, removed at
    the end): a fresh start would wipe the other session's cluster under its feet."""
    try:
        existing = KafkaCluster.load("test")
    except KafkaError:
        return "test"
    owner = existing.owner_pid
    if owner and owner != os.getpid() and existing.is_running():
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            return "test"  # left over by a session that died: taken over and started afresh
        except PermissionError:
            pass
        return f"test-{os.getpid()}"
    return "test"


#: The ACL user the session's brokers sign in to the budget Redis as (its password is the session's own).
BUDGET_USER = "kafka-budgets"


def budget_user_url(redis_url: str) -> str:
    """``redis_url`` signed in as ``BUDGET_USER``, made (enabled, every key and command) in that Redis."""
    if not redis_url:
        return ""
    import redis

    password = secrets.token_hex(16)
    client = redis.Redis.from_url(redis_url)
    try:
        client.acl_setuser(BUDGET_USER, enabled=True, reset_passwords=True, passwords=[f"+{password}"],
                           keys=["*"], channels=["*"], commands=["+@all"])
    finally:
        client.close()
    parts = urllib.parse.urlsplit(redis_url)
    netloc = f"{BUDGET_USER}:{password}@{parts.hostname}:{parts.port or 6379}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[KafkaCluster | ExternalKafka]:
    """A running Kafka 4.4 cluster: PLAINTEXT and SASL_PLAINTEXT (SCRAM) listeners, super user ``portal-admin``."""
    external = os.environ.get("QUOTAS_KAFKA_BOOTSTRAP", "").strip()
    if external:
        _check_reachable(external)
        found = local_cluster_for(external)
        _report.append(
            f"kafka: using the running cluster at {external}"
            + (f" (project-local cluster {found.name!r})" if found else "")
        )
        yield found if found is not None else ExternalKafka(external)
        return
    name = _session_cluster_name()
    endpoint: str | None = f"http://127.0.0.1:{_reserve_port()}/v1/metrics"
    quota_callback = True
    try:
        ensure_plugin_jars()
    except KafkaError as e:
        plugin_problem.append(str(e))
        _report.append(f"kafka: the broker plugins could not be built, the cluster runs without them: {e}")
        endpoint = ""
        quota_callback = False
    cluster = KafkaCluster(
        name, fresh=True, telemetry_endpoint=endpoint, telemetry_cluster=TELEMETRY_CLUSTER,
        quota_callback=quota_callback, budget_redis_url=budget_user_url(os.environ.get("QUOTAS_REDIS_URL", "")),
    )
    started = time.monotonic()
    try:
        cluster.start()
    except KafkaError as e:
        pytest.fail(f"Apache Kafka could not be started for the tests:\n{e}", pytrace=False)
    took = time.monotonic() - started
    steps = ", ".join(f"{k} {v:.1f}s" for k, v in cluster.timings.items())
    _report.append(
        f"kafka: cluster {name!r} ({len(cluster.nodes)} nodes, PLAINTEXT {cluster.bootstrap()}) "
        f"started in {took:.1f}s ({steps}); logs under {cluster.dir}"
    )
    try:
        yield cluster
    finally:
        stopped = time.monotonic()
        cluster.stop()
        if name != "test":
            shutil.rmtree(cluster.dir, ignore_errors=True)
        _report.append(f"kafka: cluster {name!r} stopped in {time.monotonic() - stopped:.1f}s")
        release_telemetry_port()


@pytest.fixture(scope="session")
def kafka_tool() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Kafka's own command-line classes (``run_kafka_tool``), for what they print without a cluster (``--help``)."""
    return run_kafka_tool


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give the first test that starts the cluster (setup included in pytest-timeout's limit) time to do so."""
    if os.environ.get("QUOTAS_KAFKA_BOOTSTRAP"):
        return
    for item in items:
        if "kafka_cluster" in getattr(item, "fixturenames", ()):
            marker = item.get_closest_marker("timeout")
            current = marker.args[0] if marker is not None and marker.args else config.getini("timeout")
            if not current or float(current) < KAFKA_SETUP_TIMEOUT_S:
                item.add_marker(pytest.mark.timeout(KAFKA_SETUP_TIMEOUT_S))
            return


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say how long the Kafka cluster took to start (visible with -q too)."""
    for line in _report:
        terminalreporter.write_line(line)
