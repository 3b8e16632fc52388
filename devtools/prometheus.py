"""Start and stop a project-local Prometheus (Debian's ``prometheus`` package) that scrapes the project's Kafka.

    python -m devtools.prometheus start [--name NAME] [--port N] [--interval 1s] [--cluster C ...] [--target ...]
    python -m devtools.prometheus status [--name NAME]     # one JSON line of facts, or exit 1
    python -m devtools.prometheus reload [--name NAME]     # the config written anew, then SIGHUP
    python -m devtools.prometheus stop [--name NAME]

Each instance lives under ``.run/prometheus/<name>/``: ``prometheus.yml`` (generated; edits are overwritten),
``data/`` (``--storage.tsdb.path``), ``prometheus.log`` and ``state.json`` (pid, port, what it scrapes). It listens
on ``127.0.0.1:<port>`` only (``--port``, else the last run's port when free, else a free one) and never touches a
Prometheus already running on the machine.

What it scrapes, every ``--interval`` (1 s by default, as the demo and the tests want): the JMX exporter of every
node of the project's Kafka clusters that run (``.run/kafka/<name>/cluster.json``, ``ports.JMX_EXPORTER``; only
those named by ``--cluster`` when given), job ``kafka`` with the labels ``cluster`` (the runner's cluster name) and
``broker`` (the node id), plus ``--target JOB=HOST:PORT[/PATH]`` (e.g. the portal's own ``/metrics``). ``start`` on
an instance that runs rewrites the config for the clusters running now and reloads it.

No Django and nothing from the portal's packages: the tests, the benchmarks and the scripts use it alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools.kafka import JMX_EXPORTER, KAFKA_DIR, KafkaCluster, KafkaError
from devtools.kafka.probes import _pid_alive, _port_is_free
from devtools.redis_server import RUN_DIR, free_port

PROMETHEUS_DIR = RUN_DIR / "prometheus"
KAFKA_JOB = "kafka"


class PrometheusError(RuntimeError):
    """Prometheus could not be started or stopped; the message says where to look."""


def _log(message: str) -> None:
    print(f"prometheus: {message}", file=sys.stderr, flush=True)


def prometheus_executable() -> str:
    exe = shutil.which("prometheus")
    if exe is None:
        raise PrometheusError("prometheus is not installed: run `bash scripts/bootstrap.sh` (ensure_prometheus)")
    return exe


@dataclass(frozen=True)
class Target:
    """One scrape target: a job name, ``host:port`` and the metrics path, with labels of its own."""

    job: str
    address: str
    path: str = "/metrics"
    labels: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Target:
        """``JOB=HOST:PORT[/PATH]``, e.g. ``portal=127.0.0.1:8000/metrics``."""
        job, sep, rest = text.partition("=")
        if not sep or not job or not rest:
            raise ValueError(f"a target is JOB=HOST:PORT[/PATH], not {text!r}")
        address, slash, path = rest.partition("/")
        host, colon, port = address.rpartition(":")
        if not colon or not host or not port.isdigit():
            raise ValueError(f"a target's address is HOST:PORT, not {address!r}")
        return cls(job, address, "/" + path if slash else "/metrics")


def kafka_targets(clusters: Sequence[str] | None = None, root: Path = KAFKA_DIR) -> list[Target]:
    """The JMX exporters of the project's Kafka clusters that run (``clusters`` names some; None = all)."""
    names = clusters if clusters is not None else sorted(p.parent.name for p in root.glob("*/cluster.json"))
    targets = []
    for name in names:
        try:
            cluster = KafkaCluster.load(name, root=root)
        except (KafkaError, KeyError, TypeError, ValueError):
            if clusters is not None:
                _log(f"warning: no Kafka cluster {name!r} under {root}")
            continue
        if not cluster.is_running():
            if clusters is not None:
                _log(f"warning: Kafka cluster {name!r} does not run; not scraped")
            continue
        with_exporter = [n for n in cluster.nodes if JMX_EXPORTER in n.ports]
        if clusters is not None and not with_exporter:
            _log(f"warning: Kafka cluster {name!r} runs without the JMX exporter; not scraped")
        for node in with_exporter:
            targets.append(Target(KAFKA_JOB, f"127.0.0.1:{node.ports[JMX_EXPORTER]}",
                                  labels={"cluster": name, "broker": str(node.node_id)}))
    return targets


def render_config(targets: Iterable[Target], scrape_interval: str = "1s", comment: str = "") -> str:
    """``prometheus.yml`` for ``targets``, grouped into one scrape job per job name (JSON, which is YAML)."""
    jobs: dict[tuple[str, str], list[Target]] = {}
    for t in targets:
        jobs.setdefault((t.job, t.path), []).append(t)
    paths_of = {job: sum(1 for j, _ in jobs if j == job) for job, _ in jobs}

    def job_name(job: str, path: str) -> str:  # unique: one scrape config per job and metrics path
        return job if paths_of[job] == 1 else job + path.replace("/", "_")

    config = {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                   "evaluation_interval": scrape_interval},
        "scrape_configs": [
            {
                "job_name": job_name(job, path),
                "metrics_path": path,
                "static_configs": [{"targets": [t.address], "labels": dict(t.labels)} for t in group],
            }
            for (job, path), group in sorted(jobs.items())
        ],
    }
    head = f"# written by devtools/prometheus.py{comment}; edits are overwritten\n"
    return head + json.dumps(config, indent=2) + "\n"


class PrometheusServer:
    """A project-local Prometheus under ``.run/prometheus/<name>/`` (context manager).

    ``clusters`` names the project's Kafka clusters to scrape (None: every one that runs); ``targets`` adds
    others. A Prometheus started by another process is taken over by :meth:`load`.
    """

    def __init__(
        self,
        name: str = "dev",
        *,
        port: int | None = None,
        scrape_interval: str = "1s",
        clusters: Sequence[str] | None = None,
        targets: Sequence[Target] = (),
        retention: str = "1d",
        start_timeout: float = 60.0,
        root: Path = PROMETHEUS_DIR,
        kafka_root: Path = KAFKA_DIR,
    ) -> None:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"not a Prometheus name: {name!r}")
        self.name = name
        self.port = port
        self.scrape_interval = scrape_interval
        self.clusters = list(clusters) if clusters is not None else None
        self.extra_targets = list(targets)
        self.retention = retention
        self.start_timeout = start_timeout
        self.dir = root / name
        self.kafka_root = kafka_root
        self.pid: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.targets: list[Target] = []

    # -- files and facts ----------------------------------------------------------------------------------------

    @property
    def config_file(self) -> Path:
        return self.dir / "prometheus.yml"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def log_file(self) -> Path:
        return self.dir / "prometheus.log"

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def facts(self) -> dict[str, Any]:
        return {
            "name": self.name, "url": self.url if self.port else None, "pid": self.pid, "port": self.port,
            "scrape_interval": self.scrape_interval, "clusters": self.clusters,
            "targets": [{"job": t.job, "address": t.address, "path": t.path, "labels": dict(t.labels)}
                        for t in self.targets],
            "extra_targets": [f"{t.job}={t.address}{t.path}" for t in self.extra_targets],
            "config": str(self.config_file), "data": str(self.data_dir), "log": str(self.log_file),
        }

    def _write_state(self) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.facts(), indent=2) + "\n")
        tmp.replace(self.state_file)

    @classmethod
    def load(cls, name: str = "dev", root: Path = PROMETHEUS_DIR) -> PrometheusServer:
        """The instance ``name`` as its ``state.json`` records it, to query, reload or stop it."""
        server = cls(name, root=root)
        try:
            state = json.loads(server.state_file.read_text())
        except (OSError, ValueError) as e:
            raise PrometheusError(f"no Prometheus {name!r}: {server.state_file} cannot be read") from e
        server.pid, server.port = state.get("pid"), state.get("port")
        server.scrape_interval = state.get("scrape_interval") or server.scrape_interval
        server.clusters = state.get("clusters")
        server.extra_targets = [Target.parse(t) for t in state.get("extra_targets") or []]
        server.targets = [Target(t["job"], t["address"], t["path"], t.get("labels") or {})
                          for t in state.get("targets") or []]
        return server

    def is_running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.pid is not None and _pid_alive(self.pid, str(self.config_file))

    def ready(self, timeout: float = 1.0) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=timeout) as answer:
                return answer.status == 200
        except (OSError, urllib.error.URLError):
            return False

    # -- start, reload, stop -----------------------------------------------------------------------------------

    def write_config(self) -> list[Target]:
        """Write ``prometheus.yml`` for the clusters that run now and the extra targets; return the targets."""
        self.targets = [*kafka_targets(self.clusters, self.kafka_root), *self.extra_targets]
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.config_file.with_suffix(".tmp")
        tmp.write_text(render_config(self.targets, self.scrape_interval, f" for instance {self.name!r}"))
        tmp.replace(self.config_file)
        return self.targets

    def start(self) -> PrometheusServer:
        """Write the config and start Prometheus, or reload the config of the instance that runs already; wait
        until it is ready."""
        exe = prometheus_executable()
        try:
            previous = PrometheusServer.load(self.name, root=self.dir.parent)
        except PrometheusError:
            previous = None
        if previous is not None and previous.is_running():
            self.pid, self.port = previous.pid, previous.port
            if self.clusters is None and not self.extra_targets:
                self.clusters, self.extra_targets = previous.clusters, previous.extra_targets
            self.reload()
            _log(f"instance {self.name!r} is already running at {self.url}; config reloaded")
            return self
        if self.port is None:
            old = previous.port if previous is not None else None
            self.port = old if old and _port_is_free(old) else free_port()
        elif not _port_is_free(self.port):
            raise PrometheusError(f"127.0.0.1:{self.port} is already in use; choose another --port")
        self.write_config()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            exe,
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--storage.tsdb.retention.time={self.retention}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        with open(self.log_file, "ab") as out:
            # a session of its own: it outlives the command that started it; stop() signals it by pid
            self.proc = subprocess.Popen(cmd, cwd=self.dir, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self.proc.pid
        self._write_state()
        deadline = time.monotonic() + self.start_timeout
        while not self.ready(timeout=0.5):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise PrometheusError(f"Prometheus {self.name!r} did not start on {self.url}:\n{self._log_tail()}")
            time.sleep(0.1)
        return self

    def reload(self) -> None:
        """Write the config anew (clusters started or stopped since) and have Prometheus read it (SIGHUP)."""
        self.write_config()
        self._write_state()
        if self.pid is not None and self.is_running():
            os.kill(self.pid, signal.SIGHUP)

    def set_scrape_interval(self, interval: str, timeout: float = 15.0) -> None:
        """Scrape every ``interval`` from now on (config rewritten, SIGHUP), once Prometheus runs the new config: a
        test session scrapes often only while a test needs it (each scrape of three brokers costs CPU)."""
        if interval == self.scrape_interval:
            return
        self.scrape_interval = interval
        self.reload()
        deadline = time.monotonic() + timeout
        while f"scrape_interval: {interval}" not in self.api("status/config")["yaml"]:
            if time.monotonic() > deadline:
                raise PrometheusError(f"Prometheus {self.name!r} did not take scrape_interval {interval} within "
                                      f"{timeout:.0f}s:\n{self._log_tail()}")
            time.sleep(0.1)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (Prometheus closes its storage cleanly), SIGKILL when it is still there after ``timeout``."""
        if not self.is_running():
            self.proc = None
            return
        assert self.pid is not None
        for sig, wait_s in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if self.proc is not None:
                    self.proc.poll()  # reap our own child
                if not self.is_running():
                    self.proc = None
                    return
                time.sleep(0.05)
            if sig == signal.SIGTERM:
                _log(f"instance {self.name!r} still running after {timeout:.0f}s; killing it")
        self.proc = None
        if self.is_running():
            raise PrometheusError(f"Prometheus {self.name!r} (pid {self.pid}) did not stop")

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"({self.log_file} does not exist)"

    # -- what it sees ------------------------------------------------------------------------------------------

    def api(self, path: str, timeout: float = 5.0) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data`` (raises on an error answer)."""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}", timeout=timeout) as answer:
            body = json.loads(answer.read())
        if body.get("status") != "success":
            raise PrometheusError(f"{path}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def wait_targets_up(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Wait until every configured target was scraped successfully; return the active targets."""
        deadline = time.monotonic() + timeout
        while True:
            active = self.api("targets?state=active")["activeTargets"]
            if len(active) >= len(self.targets) and all(t.get("health") == "up" for t in active):
                return active
            if time.monotonic() > deadline:
                down = [(t["scrapeUrl"], t.get("health"), t.get("lastError")) for t in active
                        if t.get("health") != "up"]
                raise PrometheusError(f"Prometheus {self.name!r}: targets not up after {timeout:.0f}s: {down}")
            time.sleep(0.25)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- command line ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "stop", "status", "reload"])
    parser.add_argument("--name", default="dev", help="the instance (folder .run/prometheus/NAME); default dev")
    parser.add_argument("--port", type=int, default=None, help="start: the port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--interval", default="1s", help="start: the scrape interval (default 1s)")
    parser.add_argument("--cluster", action="append", default=None, metavar="NAME",
                        help="start: scrape this project Kafka cluster (repeatable; default: every one that runs)")
    parser.add_argument("--target", action="append", default=[], metavar="JOB=HOST:PORT[/PATH]",
                        help="start: another target to scrape, e.g. portal=127.0.0.1:8000/metrics (repeatable)")
    parser.add_argument("--retention", default="1d", help="start: how long samples are kept (default 1d)")
    args = parser.parse_args(argv)
    try:
        if args.action == "start":
            server = PrometheusServer(
                args.name, port=args.port, scrape_interval=args.interval, clusters=args.cluster,
                targets=[Target.parse(t) for t in args.target], retention=args.retention,
            ).start()
            print(json.dumps(server.facts()), flush=True)
            server.proc = None  # it runs on after this command
            return 0
        try:
            server = PrometheusServer.load(args.name)
        except PrometheusError as e:
            _log(str(e))
            return 1 if args.action in ("status", "reload") else 0
        if args.action == "status":
            if not server.is_running():
                _log(f"instance {args.name!r} is not running")
                return 1
            print(json.dumps({**server.facts(), "ready": server.ready()}), flush=True)
            return 0
        if args.action == "reload":
            if not server.is_running():
                _log(f"instance {args.name!r} is not running")
                return 1
            server.reload()
            print(json.dumps(server.facts()), flush=True)
            return 0
        server.stop()
        _log(f"instance {args.name!r} stopped")
        return 0
    except (PrometheusError, ValueError) as e:
        _log(str(e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
