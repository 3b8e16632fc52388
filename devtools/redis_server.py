"""Start and stop a project-local redis-server on 127.0.0.1.

One way to run Redis for the portal, the tests and the benchmarks: a private
port and data folder under ``.run/`` so nothing collides with a Redis that is
already running on the machine (never the default 6379).

    python -m devtools.redis_server start [--port N] [--name NAME]   # prints the URL
    python -m devtools.redis_server stop [--name NAME]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = ROOT / ".run"


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server process owned by this project (context manager)."""

    def __init__(self, name: str = "test", port: int | None = None, persist: bool = False) -> None:
        self.name = name
        self.port = port or free_port()
        self.dir = RUN_DIR / f"redis-{name}"
        self.persist = persist
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pidfile(self) -> Path:
        return self.dir / "redis.pid"

    def start(self, daemonize: bool = False) -> RedisServer:
        with socket.socket() as probe:
            # SO_REUSEADDR, as redis-server itself binds: connections in TIME_WAIT from a Redis that just stopped
            # on this port do not count, a program listening on it still does.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", self.port))
            except OSError:
                raise RuntimeError(
                    f"127.0.0.1:{self.port} is already in use: another Redis (or program) is there; "
                    "choose another port (QUOTAS_REDIS_PORT / QUOTAS_TEST_REDIS_PORT) or stop it"
                ) from None
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError(
                "redis-server is not installed: run `apt-get install -y redis-server` "
                "(the scripts in scripts/ do this for you)"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        args = [
            exe,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.dir),
            "--pidfile", str(self.pidfile),
            "--logfile", str(self.dir / "redis.log"),
            "--protected-mode", "yes",
            "--daemonize", "yes" if daemonize else "no",
        ]
        if self.persist:
            args += ["--appendonly", "yes", "--save", "60 1"]
        else:
            args += ["--save", "", "--appendonly", "no"]
        if daemonize:
            subprocess.run(args, check=True)
        else:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_ready()
        (self.dir / "url").write_text(self.url + "\n")
        return self

    def _wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}; see {self.dir / 'redis.log'}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None
        elif self.pidfile.exists():
            try:
                os.kill(int(self.pidfile.read_text().strip()), 15)
            except (ProcessLookupError, ValueError):
                pass

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--name", default="portal")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--persist", action="store_true", help="keep data in the data folder (AOF)")
    args = parser.parse_args(argv)
    server = RedisServer(name=args.name, port=args.port, persist=args.persist)
    if args.action == "start":
        server.start(daemonize=True)
        print(server.url)
    else:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
