"""The Java and Kafka tools the runner calls, and probes of ports, processes and a broker's metadata."""


from __future__ import annotations

import base64
import os
import secrets
import shutil
import socket
import string
import uuid
from pathlib import Path

from devtools.kafka.base import KAFKA_DIR, LIB_DIR, KafkaError
from kafka_wire import AdminClient, format_address


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


def metadata_brokers(host: str, port: int, timeout: float = 2.0) -> dict[int, tuple[str, int]]:
    """The brokers (id -> host, port) in the metadata that the broker at ``host:port`` answers.

    A Metadata request for no topics (``kafka_wire``); a broker appears there once it is registered and
    unfenced. Raises ``kafka_wire.KafkaClientError`` when the broker does not answer (yet).
    """
    address = format_address(host, port)
    with AdminClient(address, connect_timeout=timeout, request_timeout=timeout, client_id="kafka_cluster") as client:
        response = client.metadata([])
    return {b.node_id: (b.host, b.port) for b in response.brokers}


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


