"""Start and stop a project-local Spark standalone cluster (one master, one worker) on 127.0.0.1.

It runs the PySpark installation's own launcher, ``$SPARK_HOME/sbin/spark-daemon.sh`` (SPARK_HOME is the pyspark
package's folder; the pip package ships ``spark-daemon.sh`` but not ``start-master.sh``/``start-worker.sh``, which
are thin wrappers around it), with the master and the worker on free ports of 127.0.0.1, their logs, pid files and
the worker's scratch space under ``.run/spark-<name>/``. The worker is small on purpose (1 core, 1 GiB for
executors, 256 MiB for each daemon): the jobs select it with ``QUOTAS_SPARK_MASTER=spark://127.0.0.1:<port>``
(``--master`` of ``python -m pipeline.<job>``).

    python -m devtools.spark_cluster start [--name NAME] [--cores 1] [--memory 1g]   # prints the master URL
    python -m devtools.spark_cluster status|stop [--name NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from devtools.redis_server import RUN_DIR, free_port

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The pyspark package's folder: its ``bin/``, ``sbin/`` and ``jars/`` are a Spark distribution's."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkCluster:
    """A standalone master and one worker started by ``spark-daemon.sh`` (context manager)."""

    def __init__(self, name: str = "test", cores: int = 1, memory: str = "1g") -> None:
        self.name = name
        self.cores = cores
        self.memory = memory
        self.dir = RUN_DIR / f"spark-{name}"
        self.port = 0
        self.ui_port = 0

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        home = spark_home()
        return {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOG_DIR": str(self.dir / "logs"),
            "SPARK_PID_DIR": str(self.dir / "pids"),
            "SPARK_WORKER_DIR": str(self.dir / "work"),
            "SPARK_IDENT_STRING": f"quotas-{self.name}",
            "SPARK_DAEMON_MEMORY": "256m",
            # the daemons do little work: the C1 compiler and serial GC start them faster on a busy machine
            "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_MASTER_HOST": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
        }

    def _daemon(self, action: str, cls: str, *args: str) -> None:
        script = spark_home() / "sbin" / "spark-daemon.sh"
        if not script.exists():
            raise RuntimeError(f"{script} is missing: this PySpark installation has no standalone launcher")
        subprocess.run(["bash", str(script), action, cls, "1", *args], env=self._env(), check=True,
                       capture_output=True, timeout=60)

    def start(self, timeout: float = 300.0) -> SparkCluster:
        from pipeline.session import java_binary

        if java_binary() is None:
            raise RuntimeError("Spark needs Java: no JAVA_HOME and no java on the PATH (apt-get install default-jdk)")
        if (self.dir / "cluster.json").exists():
            raise RuntimeError(f"a Spark cluster named {self.name!r} is already running: stop it first")
        shutil.rmtree(self.dir, ignore_errors=True)
        for sub in ("logs", "pids", "work"):
            (self.dir / sub).mkdir(parents=True)
        self.port, self.ui_port, worker_port, worker_ui = (free_port() for _ in range(4))
        try:
            self._daemon("start", MASTER, "--host", "127.0.0.1", "--port", str(self.port),
                         "--webui-port", str(self.ui_port))
            self._daemon("start", WORKER, "--host", "127.0.0.1", "--port", str(worker_port),
                         "--webui-port", str(worker_ui), "--cores", str(self.cores), "--memory", self.memory,
                         "--work-dir", str(self.dir / "work"), self.url)
            deadline = time.monotonic() + timeout
            while self.alive_workers() < 1:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the Spark worker did not register with the master; see {self.dir / 'logs'}")
                time.sleep(0.5)
        except BaseException:
            self.stop()
            raise
        (self.dir / "cluster.json").write_text(json.dumps({"url": self.url, "ui_port": self.ui_port}) + "\n")
        return self

    def alive_workers(self) -> int:
        """Workers the master counts as ALIVE (its web UI's JSON), 0 while it is not up."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                return int(json.load(r).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def stop(self) -> None:
        """Stop the worker, then the master, and remove ``.run/spark-<name>/``."""
        if not self.dir.exists():
            return
        for cls in (WORKER, MASTER):
            try:
                self._daemon("stop", cls)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired, RuntimeError):
                pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def status(self) -> dict[str, object]:
        info = self.dir / "cluster.json"
        if not info.exists():
            return {"name": self.name, "running": False}
        facts = json.loads(info.read_text())
        self.ui_port = facts["ui_port"]
        workers = self.alive_workers()
        return {"name": self.name, "running": workers > 0, "url": facts["url"], "alive_workers": workers}

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--name", default="dev")
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--memory", default="1g", help="memory the worker offers its executors")
    args = parser.parse_args(argv)
    cluster = SparkCluster(name=args.name, cores=args.cores, memory=args.memory)
    if args.action == "start":
        print(cluster.start().url)
    elif args.action == "stop":
        cluster.stop()
    else:
        print(json.dumps(cluster.status()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
