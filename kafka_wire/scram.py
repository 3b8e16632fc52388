"""SCRAM: credentials as Kafka's admin client makes them, and the SASL/SCRAM login of a connection."""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any

from kafka.net.sasl.scram import ScramClient
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from kafka_wire.connection import Connection
from kafka_wire.errors import (
    KafkaBrokerError,
    SaslAuthenticationError,
    UnsupportedApiError,
    UnsupportedSaslMechanismError,
)

#: Kafka's ScramMechanism enum: the int8 of DescribeUserScramCredentials / AlterUserScramCredentials.
SCRAM_MECHANISMS: dict[str, int] = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
SCRAM_MECHANISM_NAMES: dict[int, str] = {v: k for k, v in SCRAM_MECHANISMS.items()}
_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's bounds for both mechanisms (ScramMechanism.minIterations / maxIterations); the broker refuses
#: credentials outside them with UNACCEPTABLE_CREDENTIAL, so they are not checked here.
SCRAM_MIN_ITERATIONS, SCRAM_MAX_ITERATIONS = 4096, 16384
#: Beyond this the client-side PBKDF2 would take minutes for a credential the broker refuses anyway.
_SCRAM_ITERATIONS_CEILING = 1_000_000
# Error codes the login reacts to itself.
_UNSUPPORTED_SASL_MECHANISM, _SASL_AUTHENTICATION_FAILED = 33, 58


def scram_mechanism_number(mechanism: str) -> int:
    """Kafka's ScramMechanism number of ``mechanism`` (SCRAM-SHA-256 = 1, SCRAM-SHA-512 = 2)."""
    try:
        return SCRAM_MECHANISMS[mechanism.upper()]
    except KeyError:
        raise ValueError(f"SCRAM mechanism is one of {', '.join(SCRAM_MECHANISMS)}, not {mechanism!r}.") from None


def scram_salt() -> bytes:
    """A random salt as Kafka's admin client makes one (``UserScramCredentialUpsertion``): a 130-bit random
    number written in base 36, as ASCII bytes."""
    number, digits = secrets.randbits(130), []
    while True:
        number, digit = divmod(number, 36)
        digits.append("0123456789abcdefghijklmnopqrstuvwxyz"[digit])
        if not number:
            return "".join(reversed(digits)).encode("ascii")


def scram_salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SCRAM's ``Hi(password, salt, iterations)`` (PBKDF2-HMAC of the mechanism's hash, RFC 5802), what Kafka's
    admin client sends in AlterUserScramCredentials; the broker derives the stored and server keys from it."""
    scram_mechanism_number(mechanism)
    if not 0 < iterations <= _SCRAM_ITERATIONS_CEILING:
        raise ValueError(f"SCRAM iterations must be 1..{_SCRAM_ITERATIONS_CEILING} (Kafka accepts "
                         f"{SCRAM_MIN_ITERATIONS}..{SCRAM_MAX_ITERATIONS}), got {iterations}.")
    return hashlib.pbkdf2_hmac(_SCRAM_HASHES[mechanism.upper()], password.encode("utf-8"), salt, iterations)


def _sasl_name(username: str) -> str:
    """The SCRAM ``saslname`` of a user (RFC 5802: ``=`` -> ``=3D``, ``,`` -> ``=2C``), as Kafka decodes it."""
    return username.replace("=", "=3D").replace(",", "=2C")


class Secret:
    """A password that no repr, str or log line shows."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def scrub(self, text: str) -> str:
        """``text`` without the password, should a broker ever echo it."""
        return text.replace(self._value, "***") if self._value and self._value in text else text

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__


def authenticate(connection: Connection, mechanism: str, username: str, password: Secret) -> float | None:
    """SaslHandshake v1, then SCRAM's two SaslAuthenticate rounds (client-first, client-final), checking the
    server's signature: the broker proves it knows the credential too. Returns when (``time.monotonic()``) to
    reconnect, before the broker ends the session it granted, or None when it set no end."""
    address = connection.address
    version = connection.version(SaslHandshakeRequest)
    if version < 1:
        raise UnsupportedApiError(f"{address} has SaslHandshake v0 only, this client needs v1 (SaslAuthenticate)")
    response = connection.call(SaslHandshakeRequest(mechanism=mechanism), version)
    offered = list(response.mechanisms or ())
    if response.error_code == _UNSUPPORTED_SASL_MECHANISM or (not response.error_code and mechanism not in offered):
        raise UnsupportedSaslMechanismError(
            f"{address} does not offer SASL mechanism {mechanism}; it offers {', '.join(offered) or 'none'}",
            offered,
        )
    if response.error_code:
        raise KafkaBrokerError(
            response.error_code, f"{address} refused the SASL handshake for {mechanism} (is it a SASL listener?)"
        )

    def step(token: bytes) -> Any:
        """One SaslAuthenticate round; a refusal becomes SaslAuthenticationError (the password never named)."""
        answer = connection.call(SaslAuthenticateRequest(auth_bytes=token))
        if answer.error_code == _SASL_AUTHENTICATION_FAILED:
            detail = password.scrub(answer.error_message or "invalid credentials")
            raise SaslAuthenticationError(f"{address} refused the {mechanism} login of user {username!r}: {detail}")
        if answer.error_code:
            raise KafkaBrokerError(answer.error_code, password.scrub(answer.error_message or "") or None)
        return answer

    scram = ScramClient(_sasl_name(username), password.reveal(), mechanism)
    try:
        server_first = step(scram.first_message())
        scram.process_server_first_message(server_first.auth_bytes)
        server_final = step(scram.final_message())
        scram.process_server_final_message(server_final.auth_bytes)
    except (ValueError, KeyError, UnicodeDecodeError) as e:  # kafka-python's checks of the server's messages
        raise SaslAuthenticationError(
            f"{address} answered the {mechanism} login of user {username!r} with a message that does not "
            f"verify: {e!r}"
        ) from None
    lifetime_ms = getattr(server_final, "session_lifetime_ms", 0) or 0
    return time.monotonic() + 0.85 * lifetime_ms / 1000 if lifetime_ms > 0 else None
