"""quotactl against a real portal: uvicorn serving portal.asgi on the test database and Redis (as the monitoring
tests start it), and people with personal access tokens. Tests commit what the server must see
(``transaction=True``) and name their clusters, tenants and entities uniquely."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.services import service_env, start_server

ROOT_DIR = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def portal_url(redis_url: str, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a live portal, one for the session's quotactl tests."""
    logs = tmp_path_factory.mktemp("quotactl-portal")
    server, port = start_server(service_env(redis_url), logs / "uvicorn.log")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@dataclass
class Ran:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


def quotactl(*argv: str, portal: str, token: str | None) -> Ran:
    """quotactl's main in this process (its HTTP calls reach the live portal), with captured streams."""
    from quotactl.cli import main

    out, err = io.StringIO(), io.StringIO()
    args = ["--portal", portal, *(["--token", token] if token else []), *argv]
    code = main(args, stdout=out, stderr=err)
    return Ran(code, out.getvalue(), err.getvalue())


def token_for(user: Any, tenant: Any = None) -> str:
    from access_tokens.models import AccessToken

    return AccessToken.issue(user, "quotactl tests", tenant, user)[1]
