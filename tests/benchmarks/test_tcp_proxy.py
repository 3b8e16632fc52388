"""The relay fault_bench puts in front of a Kafka listener: it relays, and while it refuses, new connections are
refused and open ones are cut; afterwards it relays again on the same port."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from devtools.tcp_proxy import TcpProxy


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    """An upstream that answers each line with the same line, upper-cased."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with conn:
            while True:
                data = conn.recv(1024)
                if not data:
                    return
                conn.sendall(data.upper())

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()
    stop.set()
    server.close()


def ask(sock: socket.socket, text: bytes) -> bytes:
    sock.sendall(text)
    return sock.recv(1024)


def test_the_relay_carries_both_directions(echo: tuple[str, int]) -> None:
    with TcpProxy(echo) as relay, socket.create_connection(("127.0.0.1", relay.port), timeout=5) as conn:
        assert ask(conn, b"hello") == b"HELLO"
        assert relay.accepted == 1


def test_refusing_cuts_open_connections_and_refuses_new_ones_until_it_accepts_again(echo: tuple[str, int]) -> None:
    with TcpProxy(echo) as relay:
        port = relay.port
        conn = socket.create_connection(("127.0.0.1", port), timeout=5)
        assert ask(conn, b"before") == b"BEFORE"

        assert relay.refuse() == 1
        assert not relay.listening
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
        try:  # the open connection is gone: the next exchange fails or reads the end of the stream
            answer = ask(conn, b"during")
        except OSError:
            answer = b""
        assert answer == b""
        conn.close()

        relay.accept()
        assert relay.listening and relay.port == port
        with socket.create_connection(("127.0.0.1", port), timeout=5) as again:
            assert ask(again, b"after") == b"AFTER"
        assert relay.cut == 1


def test_an_upstream_that_is_down_closes_the_client_connection() -> None:
    spare = socket.create_server(("127.0.0.1", 0))
    address = spare.getsockname()
    spare.close()  # nothing listens there now
    with TcpProxy(address) as relay, socket.create_connection(("127.0.0.1", relay.port), timeout=5) as conn:
        conn.sendall(b"anyone?")
        assert conn.recv(1024) == b""
