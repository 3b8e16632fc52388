"""A small client of Prometheus's HTTP API (``/api/v1/query``, instant queries), plain Python.

One keep-alive connection (HTTP or HTTPS), optional basic auth or a bearer token, the base URL may carry a path
prefix (a Prometheus behind a proxy at ``/prometheus``). Answers are Prometheus's ``data`` objects; errors raise
:class:`PrometheusError` with Prometheus's ``errorType`` when it gave one. Not thread-safe: one per thread.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import urllib.parse
from dataclasses import dataclass
from typing import Any


class PrometheusError(RuntimeError):
    """Prometheus did not answer, or answered an error (``error_type``: bad_data, timeout, execution, ...)."""

    def __init__(self, message: str, *, status: int | None = None, error_type: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type


@dataclass
class QueryResult:
    """``resultType`` (vector, matrix, scalar, string) and ``result`` of a query."""

    result_type: str
    result: list[Any]


class PrometheusClient:
    """``url`` is the server's base URL, e.g. ``http://127.0.0.1:9090``; ``username``/``password`` for basic auth
    or ``bearer_token``, not both."""

    def __init__(
        self,
        url: str,
        *,
        username: str | None = None,
        password: str | None = None,
        bearer_token: str | None = None,
        timeout: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"a Prometheus URL is http(s)://host[:port][/prefix], not {url!r}")
        if bearer_token and (username or password):
            raise ValueError("basic auth or a bearer token, not both")
        self.url = url.rstrip("/")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.ssl_context = ssl_context
        self._headers = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"}
        if username is not None:
            token = base64.b64encode(f"{username}:{password or ''}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        elif bearer_token:
            self._headers["Authorization"] = f"Bearer {bearer_token}"
        self._conn: http.client.HTTPConnection | None = None

    def __repr__(self) -> str:  # never the credentials
        return f"PrometheusClient({self.url!r})"

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self.scheme == "https":
                self._conn = http.client.HTTPSConnection(
                    self.host, self.port, timeout=self.timeout, context=self.ssl_context
                )
            else:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _post(self, path: str, params: dict[str, str]) -> Any:
        body = urllib.parse.urlencode(params)
        for attempt in (1, 2):  # a kept-alive connection the server closed meanwhile is opened again, once
            conn = self._connection()
            try:
                conn.request("POST", f"{self.prefix}{path}", body=body, headers=self._headers)
                answer = conn.getresponse()
                status, raw = answer.status, answer.read()
                break
            except (http.client.HTTPException, OSError) as e:  # TimeoutError and ConnectionError are OSErrors
                self.close()
                if attempt == 2 or isinstance(e, TimeoutError):
                    raise PrometheusError(f"Prometheus at {self.url} did not answer: {e}") from e
        try:
            doc = json.loads(raw)
        except ValueError:
            raise PrometheusError(
                f"Prometheus at {self.url} answered {status} without JSON: {raw[:200]!r}", status=status
            ) from None
        if status != 200 or doc.get("status") != "success":
            raise PrometheusError(
                f"Prometheus at {self.url} answered {status}: {doc.get('errorType')}: {doc.get('error')}",
                status=status, error_type=doc.get("errorType"),
            )
        return doc["data"]

    def query(self, expr: str, *, at: float | None = None, timeout_s: float | None = None) -> QueryResult:
        """An instant query (``/api/v1/query``) of ``expr`` at ``at`` (seconds; default now)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        if timeout_s is not None:
            params["timeout"] = f"{timeout_s:g}s"
        data = self._post("/api/v1/query", params)
        return QueryResult(data["resultType"], data["result"])

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
