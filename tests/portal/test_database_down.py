"""When the portal's database is down (issue 20, found by benchmarks/fault_bench.py restarting PostgreSQL under two
replicas): the API answers a typed, retriable 503 DATABASE_UNAVAILABLE with Retry-After, under WSGI and ASGI alike,
and a page answers 503 without a trace; before, both were 500 UNKNOWN_SERVER_ERROR with a traceback in the log.

The portal runs in a process of its own whose DATABASE_URL names a PostgreSQL port nothing listens on: psycopg really
connects and is refused, as when the server restarts. The test's own database is not touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from devtools.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import asyncio, json
import django
django.setup()
from django.test import AsyncClient, Client
from django.test.utils import setup_test_environment

setup_test_environment()
def seen(r):
    return {"status": r.status_code, "retry_after": r.get("Retry-After"), "type": r.get("Content-Type", ""),
            "body": r.content.decode(errors="replace")}
wsgi = Client(raise_request_exception=False)
out = {"api": seen(wsgi.get("/api/requests/", HTTP_AUTHORIZATION="Token 0123456789abcdef"))}
wsgi.cookies["sessionid"] = "x" * 32
out["page"] = seen(wsgi.get("/requests/"))
asgi = AsyncClient(raise_request_exception=False)
out["asgi"] = seen(asyncio.run(asgi.get("/api/requests/", headers={"Authorization": "Token 0123456789abcdef"})))
print(json.dumps(out))
"""


def test_database_down_is_a_typed_retriable_503(redis_url: str) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": f"postgres://quotas:quotas-local@127.0.0.1:{free_port()}/quotas",
        "QUOTAS_REDIS_URL": redis_url,
        "DJANGO_DEBUG": "0",
        "DJANGO_LOG_LEVEL": "CRITICAL",
    }
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for via in ("api", "asgi"):
        answer = out[via]
        assert answer["status"] == 503, (via, answer)
        assert answer["type"].startswith("application/json"), (via, answer)
        body = json.loads(answer["body"])
        assert body["code"] == "DATABASE_UNAVAILABLE" and body["details"]["retriable"] is True, (via, body)
        assert int(answer["retry_after"]) > 0, (via, answer)
    page = out["page"]
    assert page["status"] == 503 and int(page["retry_after"]) > 0, page
    for answer in out.values():
        assert "Traceback" not in answer["body"] and ".py" not in answer["body"] and "5432" not in answer["body"]
