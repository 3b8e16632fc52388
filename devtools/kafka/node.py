"""One KRaft node of a project-local cluster: its ports, folders and process."""


from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.kafka.base import JMX_EXPORTER, _tail
from devtools.kafka.probes import _pid_alive


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
