"""The portal's API over HTTP (urllib: no dependency to install), with its typed errors as exceptions."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

USER_AGENT = "quotactl/0.1"


@dataclass
class PortalError(Exception):
    """An answer in the API's error shape ``{"code", "message", "details"}`` (or a transport failure)."""

    code: str
    message: str
    status: int = 0
    details: Any = field(default=None)
    errors: list[Any] = field(default_factory=list)  # a bad quota file: [{line, key, message}]

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class Portal:
    """One portal: its base URL and the bearer token sent with every call."""

    def __init__(self, url: str, token: str | None, timeout: float = 60.0) -> None:
        if not url:
            raise PortalError(
                "NO_PORTAL", "Name the portal: --portal URL or QUOTACTL_PORTAL (e.g. http://127.0.0.1:8000)."
            )
        if "://" not in url:
            url = "http://" + url  # kafka-configs scripts pass host:port
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _request(
        self, method: str, path: str, body: Any = None, accept: str = "application/json"
    ) -> tuple[int, bytes, str]:
        url = path if path.startswith(("http://", "https://")) else self.url + path
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", accept)
        request.add_header("User-Agent", USER_AGENT)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                return answer.status, answer.read(), answer.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            raise _error_of(e.code, e.read(), e.headers.get("Content-Type", "")) from None
        except urllib.error.URLError as e:
            raise PortalError(
                "PORTAL_UNREACHABLE", f"Cannot reach the portal at {self.url}: {e.reason}; check --portal."
            ) from None
        except TimeoutError:
            raise PortalError(
                "REQUEST_TIMED_OUT", f"The portal at {self.url} did not answer within {self.timeout:g} s."
            ) from None

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """A JSON call: (status, decoded body)."""
        status, raw, _ = self._request(method, path, body)
        return status, (json.loads(raw) if raw else None)

    def get(self, path: str) -> Any:
        return self.call("GET", path)[1]

    def post(self, path: str, body: Any = None) -> Any:
        return self.call("POST", path, {} if body is None else body)[1]

    def text(self, path: str) -> str:
        """A text resource (the state file's YAML)."""
        return self._request("GET", path, accept="application/yaml, text/plain, */*")[1].decode()

    def pages(self, method: str, path: str, body: Any = None) -> list[Any]:
        """Every ``results`` of a cursor-paged answer, following ``next`` (with the same body for POSTs)."""
        rows: list[Any] = []
        url: str | None = path
        while url:
            page = self.call(method, url, body)[1]
            rows.extend(page.get("results", []))
            url = page.get("next")
        return rows


def cluster_path(cluster: str, rest: str) -> str:
    return f"/api/clusters/{urllib.parse.quote(cluster, safe='')}/{rest}"


def _error_of(status: int, raw: bytes, content_type: str) -> PortalError:
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if isinstance(body, dict) and "code" in body and "message" in body:
        errors = (
            body.get("errors") or (body.get("details") or {}).get("errors")
            if isinstance(body.get("details"), dict)
            else body.get("errors")
        )
        return PortalError(str(body["code"]), str(body["message"]), status, body.get("details"), list(errors or []))
    if status == 404:
        return PortalError("NOT_FOUND", "The portal has no such endpoint; is --portal the portal's base URL?", status)
    return PortalError("HTTP_ERROR", f"The portal answered HTTP {status}.", status)
