"""One blocking TCP connection to one broker: Kafka's framing, request headers and API version negotiation."""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

import kafka.errors as kafka_errors
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.parser import KafkaProtocol

from kafka_wire.errors import (
    KafkaBrokerError,
    KafkaClientError,
    KafkaConnectionError,
    KafkaProtocolError,
    KafkaTimeoutError,
    UnsupportedApiError,
)
from kafka_wire.protocol import (
    API_VERSIONS,
    DEFAULT_CLIENT_ID,
    SOFTWARE_NAME,
    SOFTWARE_VERSION,
    UNSUPPORTED_VERSION,
    parse_address,
)


def wall_ms() -> float:
    """Wall-clock milliseconds: the broker's ``time.milliseconds()`` is the same clock on the same host."""
    return time.time_ns() / 1e6


@dataclass(frozen=True)
class Exchange:
    """One request and its response, with the wall-clock times around it and the request's size.

    ``sent_ms`` is taken before the first byte goes out and ``received_ms`` after the last byte came in, so
    whatever the broker did for the request happened between the two. ``request_bytes`` is the frame without
    its 4-byte length prefix: what the broker counts as the request's size (``RequestChannel``'s
    ``sizeInBytes``).
    """

    response: Any
    sent_ms: float
    received_ms: float
    request_bytes: int


class Connection:
    """One blocking connection to one broker, one request in flight: framing, request headers and correlation
    ids are kafka-python's ``KafkaProtocol``, requests and responses its schema classes, so the bytes are
    Kafka's own. Opening it connects and negotiates API versions (ApiVersions); any failure closes it.

    Every failure is a ``KafkaClientError`` naming the address: a timeout, a refused or dropped connection,
    bytes that do not decode, or no common version of an API.
    """

    def __init__(
        self,
        address: str,
        *,
        client_id: str = DEFAULT_CLIENT_ID,
        connect_timeout: float = 5.0,
        request_timeout: float = 30.0,
        max_frame_bytes: int = 100 * 1024 * 1024,
        software: tuple[str, str] = (SOFTWARE_NAME, SOFTWARE_VERSION),
    ) -> None:
        self.address = address
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.software = software
        self.broker_versions: dict[int, tuple[int, int]] = {}
        host, port = parse_address(address)
        try:
            self._sock: socket.socket | None = socket.create_connection((host, port), timeout=connect_timeout)
        except TimeoutError as e:
            raise KafkaTimeoutError(f"connecting to {address} took more than {connect_timeout}s") from e
        except OSError as e:
            raise KafkaConnectionError(f"cannot connect to {address}: {e}") from e
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._protocol = KafkaProtocol(client_id=client_id, ident=address, receive_message_max_bytes=max_frame_bytes)
        self.last_used = time.monotonic()
        try:
            self._negotiate()
        except BaseException:
            self.close()
            raise

    @property
    def closed(self) -> bool:
        return self._sock is None

    def close(self) -> None:
        """Close the socket (idempotent)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def version(self, request_class: type[ApiMessage], cap: int | None = None, floor: int = 0) -> int:
        """The highest version of ``request_class``'s API that both sides speak, at most ``cap`` and at least
        ``floor``; UnsupportedApiError when there is none."""
        name, api_key = request_class.name.removesuffix("Request"), request_class.API_KEY
        ours_min, ours_max = request_class.valid_versions
        theirs = self.broker_versions.get(api_key)
        if theirs is None:
            raise UnsupportedApiError(f"the broker at {self.address} does not support {name} (API key {api_key})")
        low = max(ours_min, theirs[0], floor)
        high = min(ours_max, theirs[1], ours_max if cap is None else cap)
        if high < low:
            raise UnsupportedApiError(
                f"the broker at {self.address} supports {name} versions {theirs[0]}-{theirs[1]}, "
                f"this client {max(ours_min, floor)}-{min(ours_max, ours_max if cap is None else cap)}: "
                "no common version"
            )
        return high

    def call(self, request: ApiMessage, version: int | None = None, *, quiet: bool = False) -> Any:
        """``exchange``'s response only."""
        return self.exchange(request, version, quiet=quiet).response

    def exchange(self, request: ApiMessage, version: int | None = None, *, quiet: bool = False) -> Exchange:
        """Send ``request`` (at ``version``; None = the highest both sides speak) and wait for its response.

        ``quiet``: for a request that carries a credential, which kafka-python's protocol would log at DEBUG.
        """
        if self._sock is None:
            raise KafkaConnectionError(f"the connection to {self.address} is closed")
        sock, protocol = self._sock, self._protocol
        request.API_VERSION = self.version(type(request)) if version is None else version
        name, address = type(request).name, self.address
        deadline = time.monotonic() + self.request_timeout
        try:
            if quiet:  # KafkaProtocol.send_request / send_bytes without their debug logging of the request
                correlation_id = protocol._next_correlation_id()
                request.with_header(correlation_id=correlation_id, client_id=self.client_id)
                data = bytes(request.encode(framed=True, header=True))
                protocol.in_flight_requests.append(request.header)
            else:
                correlation_id = protocol.send_request(request)
                data = protocol.send_bytes()
            sock.settimeout(self.request_timeout)
            sent = wall_ms()
            sock.sendall(data)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                sock.settimeout(remaining)
                chunk = sock.recv(65536)
                if not chunk:
                    raise KafkaConnectionError(f"{address} closed the connection before answering {name}")
                for received_id, response in protocol.receive_bytes(chunk):
                    if received_id == correlation_id:
                        received = wall_ms()
                        self.last_used = time.monotonic()
                        return Exchange(response, sent, received, len(data) - 4)
        except KafkaClientError:
            self.close()
            raise
        except TimeoutError as e:
            self.close()
            raise KafkaTimeoutError(f"{address} did not answer {name} within {self.request_timeout}s") from e
        except OSError as e:
            self.close()
            raise KafkaConnectionError(f"connection to {address} failed during {name}: {e}") from e
        except (kafka_errors.KafkaError, ValueError, struct.error) as e:
            self.close()
            raise KafkaProtocolError(f"{address} answered {name} with bytes that do not decode: {e}") from e

    def _negotiate(self) -> None:
        """ApiVersions at our highest version; a broker that does not know it answers UNSUPPORTED_VERSION in v0
        with the ApiVersions range it does support, and we ask once more at that version."""
        version = ApiVersionsRequest.max_version
        for _attempt in range(2):
            name, software_version = self.software
            request = ApiVersionsRequest(client_software_name=name, client_software_version=software_version)
            response = self.call(request, version)
            ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys or ()}
            if response.error_code == UNSUPPORTED_VERSION and API_VERSIONS in ranges:
                theirs = min(ranges[API_VERSIONS][1], ApiVersionsRequest.max_version)
                if theirs < version:
                    version = theirs
                    continue
            if response.error_code:
                raise KafkaBrokerError(response.error_code, f"ApiVersions failed at {self.address}")
            self.broker_versions = ranges
            return
        raise UnsupportedApiError(f"{self.address} accepts no ApiVersions request version this client can send")
