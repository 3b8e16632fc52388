"""One blocking connection to one broker, timed around each exchange."""

from __future__ import annotations

import socket
import time
from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.parser import KafkaProtocol

from conformance.oracle.base import OracleError, now_ms


class Wire:
    """One blocking connection to one broker with kafka-python's protocol classes: what a client with one
    request in flight does, with the times around each exchange and the exact request size."""

    def __init__(self, address: str, client_id: str, timeout_s: float = 30.0) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self.client_id = client_id
        self.timeout_s = timeout_s
        try:
            self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        except OSError as e:
            raise OracleError(f"cannot connect to {address}: {e}") from e
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.protocol = KafkaProtocol(client_id=client_id, ident=address)
        api = ApiVersionsRequest(client_software_name="quota-oracle", client_software_version="1")
        response = self.call(api, 3)[0]
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys or ()}

    def version(self, request_class: Any, cap: int | None = None, floor: int = 0) -> int:
        """The highest version both sides speak (at most ``cap``)."""
        theirs = self.versions.get(request_class.API_KEY)
        ours = request_class.valid_versions
        high = min(ours[1], theirs[1] if theirs else -1, cap if cap is not None else ours[1])
        if theirs is None or high < max(ours[0], theirs[0], floor):
            raise OracleError(f"{self.address} speaks no usable version of {request_class.__name__}: {theirs}")
        return high

    def call(self, request: Any, version: int) -> tuple[Any, float, float, int]:
        """Send and wait: (response, send ms, receive ms, request size without the length prefix).

        The send time is taken before the first byte goes out and the receive time after the last byte came
        in, so whatever the broker did for this request happened between the two.
        """
        request.API_VERSION = version
        self.protocol.send_request(request)
        data = self.protocol.send_bytes()
        deadline = time.monotonic() + self.timeout_s
        try:
            sent = now_ms()
            self.sock.sendall(data)
            while True:
                self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    raise OracleError(f"{self.address} closed the connection")
                answers = self.protocol.receive_bytes(chunk)
                if answers:
                    return answers[0][1], sent, now_ms(), len(data) - 4
        except OSError as e:
            raise OracleError(f"{type(request).__name__} to {self.address} failed: {e}") from e

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
