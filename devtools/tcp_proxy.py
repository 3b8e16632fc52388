"""A TCP relay on loopback whose listener can be taken away for a while: a broker "refusing connections".

Killing a Kafka node takes its whole JVM away (the quorum, replication, every listener). A listener that refuses
while the broker runs on is another fault a deployment sees (a firewall, a load balancer draining, a listener being
reconfigured), and the loopback has no per-port firewall a project may touch. So the benchmark puts one of these in
front of a listener the portal uses (the broker advertises the relay's port) and calls :meth:`TcpProxy.refuse`:
the listening socket is closed, so a new connection gets RST (refused), and every open connection is cut, as a
listener that goes away cuts its clients. :meth:`TcpProxy.accept` listens again on the same port.

Threads, not asyncio: the relay carries a few admin requests per second and must not depend on the caller's loop.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

#: Bytes read per ``recv`` while relaying.
CHUNK = 64 * 1024


class TcpProxy:
    """Relays connections from ``127.0.0.1:<port>`` to ``upstream`` (host, port) until :meth:`close`.

    ``port`` 0 picks a free one (:attr:`port` tells which). Counters: :attr:`accepted` connections relayed,
    :attr:`cut` connections closed by :meth:`refuse`.
    """

    def __init__(self, upstream: tuple[str, int], port: int = 0, host: str = "127.0.0.1") -> None:
        self.upstream = upstream
        self.host = host
        self.port = port
        self.accepted = 0
        self.cut = 0
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._closed = False
        self.accept()

    # -- the listener ----------------------------------------------------------------------------------------------

    def accept(self) -> None:
        """Listen (again) on the proxy's port; a no-op while it listens."""
        with self._lock:
            if self._listener is not None or self._closed:
                return
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(64)
            self.port = sock.getsockname()[1]
            self._listener = sock
        threading.Thread(target=self._serve, args=(sock,), name=f"tcp-proxy-{self.port}", daemon=True).start()

    def refuse(self) -> int:
        """Stop listening and cut every open connection; returns how many were cut. New connections are refused
        until :meth:`accept`."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = list(self._conns), set()
        if listener is not None:
            _close(listener)
        for conn in conns:
            _close(conn)
        self.cut += len(conns) // 2  # each relayed connection is a pair of sockets
        return len(conns) // 2

    @property
    def listening(self) -> bool:
        return self._listener is not None

    def close(self) -> None:
        """Refuse for good."""
        self._closed = True
        self.refuse()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- relaying --------------------------------------------------------------------------------------------------

    def _serve(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed by refuse()
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5.0)
            except OSError:  # the upstream itself is down: the client sees its connection closed
                _close(client)
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._listener is not listener:  # refused meanwhile
                    _close(client)
                    _close(upstream)
                    return
                self._conns.update((client, upstream))
                self.accepted += 1
            done = _Once(lambda c=client, u=upstream: self._drop(c, u))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(src, dst, done), daemon=True).start()

    def _drop(self, *socks: socket.socket) -> None:
        with self._lock:
            for sock in socks:
                self._conns.discard(sock)
        for sock in socks:
            _close(sock)


class _Once:
    """Runs ``action`` the first time it is called (either direction of a pair ending ends both)."""

    def __init__(self, action: Callable[[], None]) -> None:
        self._action: Callable[[], None] | None = action
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            action, self._action = self._action, None
        if action is not None:
            action()


def _pump(src: socket.socket, dst: socket.socket, done: _Once) -> None:
    try:
        while True:
            data = src.recv(CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    done()


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
