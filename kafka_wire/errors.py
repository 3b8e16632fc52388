"""The client's errors: each carries Kafka's error name (``code``) and whether trying again can help."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import kafka.errors as kafka_errors


class KafkaClientError(Exception):
    """A request that got no usable answer. ``code`` is Kafka's error name; ``retriable``: trying again may help."""

    code = "UNKNOWN_SERVER_ERROR"
    retriable = False

    def __init__(self, message: str, *, code: str | None = None, retriable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retriable is not None:
            self.retriable = retriable

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class KafkaConnectionError(KafkaClientError):
    """The broker could not be reached, or closed the connection before answering."""

    code = "NETWORK_EXCEPTION"
    retriable = True


class KafkaTimeoutError(KafkaClientError):
    """No answer within the timeout; the request may or may not have been applied (ours are idempotent)."""

    code = "REQUEST_TIMED_OUT"
    retriable = True


class KafkaProtocolError(KafkaClientError):
    """The broker's bytes did not decode as the expected response: a broken peer, not a passing fault."""

    code = "UNKNOWN_SERVER_ERROR"
    retriable = False


class UnsupportedApiError(KafkaClientError):
    """The broker supports no version of an API that this client can speak."""

    code = "UNSUPPORTED_VERSION"
    retriable = False


class KafkaBrokerError(KafkaClientError):
    """An error code the broker answered with; ``errno`` is its number."""

    def __init__(self, errno: int, message: str | None = None) -> None:
        cls = kafka_errors.for_code(errno)
        text = message or cls.description or cls.message or f"error code {errno}"
        if errno not in kafka_errors.kafka_errors:  # newer than kafka-python: keep the number
            text = f"error code {errno}: {text}"
        super().__init__(text, code=cls.message, retriable=bool(cls.retriable))
        self.errno = errno


class SaslAuthenticationError(KafkaClientError):
    """The broker refused the SASL login (wrong user or password), or its SCRAM answers did not verify.

    Not retriable: the same credentials fail the same way at every broker, and each attempt is a failed login.
    """

    code = "SASL_AUTHENTICATION_FAILED"
    retriable = False


class UnsupportedSaslMechanismError(KafkaClientError):
    """The broker does not offer the configured SASL mechanism; ``mechanisms`` are the ones it offers."""

    code = "UNSUPPORTED_SASL_MECHANISM"
    retriable = False

    def __init__(self, message: str, mechanisms: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.mechanisms = tuple(mechanisms)


class ScramCredentialError(KafkaBrokerError):
    """DescribeUserScramCredentials or AlterUserScramCredentials refused some users (Kafka answers per user).

    ``code`` / ``errno`` / ``user`` are those of the first refused user; ``errors`` has every refused user,
    ``described`` what was described of the others, ``altered`` the users whose alterations were applied.
    """

    def __init__(
        self,
        errors: Mapping[str, KafkaBrokerError],
        *,
        described: Mapping[str, list[tuple[str, int]]] | None = None,
        altered: Sequence[str] = (),
    ) -> None:
        user, first = next(iter(errors.items()))
        more = f" (and {len(errors) - 1} more users)" if len(errors) > 1 else ""
        super().__init__(first.errno, f"user {user!r}: {first.message}{more}")
        self.user = user
        self.errors = dict(errors)
        self.described = dict(described or {})
        self.altered = list(altered)


def error_name(errno: int) -> str:
    """Kafka's name of an error code (``NONE`` for 0)."""
    return "NONE" if not errno else kafka_errors.for_code(errno).message


def raise_for_errors(results: Iterable[Any]) -> None:
    """Raise KafkaBrokerError for the first result (entry, resource) whose ``error_code`` is not 0."""
    for result in results:
        if result.error_code:
            raise KafkaBrokerError(result.error_code, result.error_message)
