"""Start and stop a project-local Redis Cluster (3 masters, no replicas) on 127.0.0.1.

For the quota engine's cluster mode (``redis+cluster://`` URLs, ``engine.redis_backend.connect``): three
``redis-server --cluster-enabled yes`` on free ports, joined by ``redis-cli --cluster create``, with their data,
logs and ``nodes.conf`` under ``.run/redis-cluster-<name>/<port>/``; ``stop`` ends them and removes that folder
(a cluster's ``nodes.conf`` would otherwise make the next start rejoin an old cluster).

    python -m devtools.redis_cluster start [--name NAME] [--masters 3]   # prints the redis+cluster:// URL
    python -m devtools.redis_cluster status|stop [--name NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from devtools.redis_server import RUN_DIR, free_port


def _ask(port: int, *words: str) -> str:
    """One command to one node through a raw socket, its reply as text (bulk or simple string)."""
    cmd = f"*{len(words)}\r\n" + "".join(f"${len(w)}\r\n{w}\r\n" for w in words)
    with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
        s.sendall(cmd.encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            if data.startswith(b"$"):
                head, _, rest = data.partition(b"\r\n")
                if len(rest) >= int(head[1:]) + 2:
                    return rest[: int(head[1:])].decode()
            elif data.endswith(b"\r\n"):
                return data[1:-2].decode()
    return data.decode()


class RedisCluster:
    """A Redis Cluster of ``masters`` redis-server processes owned by this project (context manager)."""

    def __init__(self, name: str = "test", masters: int = 3, cpus: str | None = None) -> None:
        self.name = name
        self.masters = masters
        self.cpus = cpus  # taskset CPU list for the servers (benchmarks pin them), None: any
        self.dir = RUN_DIR / f"redis-cluster-{name}"
        self.ports: list[int] = []
        self.procs: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        """``redis+cluster://`` and every node: the engine's client discovers the slots from any of them."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    @property
    def node_urls(self) -> list[str]:
        return [f"redis://127.0.0.1:{p}/0" for p in self.ports]

    def start(self) -> RedisCluster:
        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if server is None or cli is None:
            raise RuntimeError(
                "redis-server and redis-cli are not installed: run `apt-get install -y redis-server` "
                "(scripts/bootstrap.sh does this for you)"
            )
        if (self.dir / "cluster.json").exists():
            raise RuntimeError(
                f"a Redis Cluster named {self.name!r} is already running (or was not stopped): "
                f"run `python -m devtools.redis_cluster stop --name {self.name}` first"
            )
        shutil.rmtree(self.dir, ignore_errors=True)
        self.ports = []
        while len(self.ports) < self.masters:
            p = free_port()
            # the cluster bus listens on port + 10000: both must be free
            if p + 10000 < 65536 and p not in self.ports and self._free(p + 10000):
                self.ports.append(p)
        try:
            for port in self.ports:
                node_dir = self.dir / str(port)
                node_dir.mkdir(parents=True)
                args = [
                    server, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(node_dir),
                    "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", "5000", "--logfile", str(node_dir / "redis.log"),
                    "--save", "", "--appendonly", "no", "--protected-mode", "yes", "--daemonize", "no",
                ]
                if self.cpus:
                    args = ["taskset", "-c", self.cpus, *args]
                self.procs.append(subprocess.Popen(
                    args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
                ))
            for port in self.ports:
                self._wait(lambda p=port: _ask(p, "PING") == "PONG", f"node {port} did not answer PING")
            subprocess.run(
                [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                 "--cluster-replicas", "0", "--cluster-yes"],
                check=True, capture_output=True, timeout=60,
            )
            for port in self.ports:
                self._wait(lambda p=port: "cluster_state:ok" in _ask(p, "CLUSTER", "INFO"),
                           f"node {port} did not reach cluster_state:ok")
        except BaseException:
            self.stop()
            raise
        (self.dir / "cluster.json").write_text(json.dumps({
            "url": self.url, "ports": self.ports, "pids": [p.pid for p in self.procs],
        }) + "\n")
        return self

    @staticmethod
    def _free(port: int) -> bool:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
        return True

    def _wait(self, ok: object, what: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if ok():  # type: ignore[operator]
                    return
            except OSError:
                pass
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.05)
        raise RuntimeError(f"Redis Cluster {self.name!r}: {what}; see the logs under {self.dir}")

    def stop(self) -> None:
        """End the nodes (ours, or those a `start` from another process recorded) and remove their folder."""
        pids = [p.pid for p in self.procs]
        info = self.dir / "cluster.json"
        if not pids and info.exists():
            pids = json.loads(info.read_text())["pids"]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if not self.procs:
            deadline = time.monotonic() + 10
            while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
                time.sleep(0.05)
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)

    def status(self) -> dict[str, object]:
        info = self.dir / "cluster.json"
        if not info.exists():
            return {"name": self.name, "running": False}
        facts = json.loads(info.read_text())
        states = {}
        for port in facts["ports"]:
            try:
                states[port] = "ok" if "cluster_state:ok" in _ask(port, "CLUSTER", "INFO") else "fail"
            except OSError:
                states[port] = "down"
        return {"name": self.name, "running": all(s == "ok" for s in states.values()), "url": facts["url"],
                "nodes": states}

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--name", default="dev")
    parser.add_argument("--masters", type=int, default=3)
    args = parser.parse_args(argv)
    cluster = RedisCluster(name=args.name, masters=args.masters)
    if args.action == "start":
        cluster.start()
        print(cluster.url)
    elif args.action == "stop":
        cluster.stop()
    else:
        print(json.dumps(cluster.status()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
