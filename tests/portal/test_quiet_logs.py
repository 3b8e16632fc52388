"""Quiet logs (issue 29): the probes stay out of the access log, mails are INFO.

A real uvicorn, serving the portal with its access log on as ``scripts/run_portal.sh`` does, is scraped and probed
the way Prometheus and a load balancer do, between requests people make: only theirs are in its log.
``QUOTAS_LOG_PROBES`` puts the probes back. A mail sent without a mail server is one INFO record, not a WARNING.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from portal.logs import ACCESS_LOGGER, QuietProbes, log_probes
from quotas import notify
from quotas.models import Cluster, RequestState
from quotas.workflow import quota_requests
from tests.people import make_tenant, roles
from tests.services import service_env, start_server
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


@pytest.mark.django_db(transaction=True)
def test_scrapes_and_health_checks_stay_out_of_the_access_log(redis_url: str, tmp_path: Path) -> None:
    log = tmp_path / "uvicorn.log"
    server, port = start_server(service_env(redis_url), log, access_log=True)  # start_server waits on /healthz too
    base = f"http://127.0.0.1:{port}"
    try:
        assert status_of(f"{base}/healthz") == 200
        assert status_of(f"{base}/metrics") == 200 and status_of(f"{base}/metrics?name[]=x") == 200
        assert status_of(f"{base}/login/") == 200
        assert status_of(f"{base}/no-such-page/") == 404
        wait_for("the access log", lambda: "/no-such-page/" in log.read_text(), 10)
    finally:
        server.stop()
    text = log.read_text()
    assert '"GET /login/ HTTP/1.1" 200' in text and '"GET /no-such-page/ HTTP/1.1" 404' in text, text
    assert "/healthz" not in text and "/metrics" not in text, text


def test_quotas_log_probes_puts_them_back_and_a_failing_probe_is_always_logged(caplog: Any) -> None:
    access = logging.getLogger(ACCESS_LOGGER)
    assert [f for f in access.filters if isinstance(f, QuietProbes)], "Django's setup leaves the probes out"

    def logged(path: str, status: int) -> bool:
        caplog.clear()
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", path, "1.1", status)
        return any(r.name == ACCESS_LOGGER for r in caplog.records)

    with caplog.at_level(logging.INFO):
        assert not logged("/metrics", 200) and not logged("/healthz?full=1", 200)
        assert logged("/healthz", 503) and logged("/metrics", 401)  # news: the portal is down, a scrape refused
        assert logged("/v1/metrics", 200) and logged("/entities/", 200)  # KIP-714 pushes and pages are requests
        try:
            log_probes(keep=True)  # QUOTAS_LOG_PROBES=1
            assert logged("/metrics", 200) and logged("/healthz", 200)
        finally:
            log_probes(keep=False)
        assert not logged("/metrics", 200)


@pytest.mark.django_db
def test_a_mail_without_a_mail_server_is_logged_at_info(caplog: Any, settings: Any) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("EMAIL_HOST", "EMAIL_BACKEND")}
    default = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.EMAIL_BACKEND)"],
        cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "portal.settings"}, capture_output=True, text=True,
        check=True, timeout=60,
    )
    assert default.stdout.strip() == "portal.mail.LoggingEmailBackend"

    people = roles()
    people["alice"].email = "alice@team-a.test"
    people["alice"].save()
    tenant = make_tenant("team-a", people["alice"], users=["svc-a-*"])
    cluster = Cluster.objects.create(name="prod")
    request = quota_requests.submit(people["alice"], tenant, cluster, user="svc-a-1", client_id=None,
                                    key="producer_byte_rate", value=1024)
    settings.EMAIL_BACKEND = default.stdout.strip()  # what the worker sends with, not the tests' locmem
    with caplog.at_level(logging.DEBUG):
        sent = notify.send_mails(request, RequestState.REJECTED, people["admin"], "too much")
    assert sent == ["alice@team-a.test"]
    (record,) = [r for r in caplog.records if r.name == "portal.mail"]
    assert record.levelno == logging.INFO
    assert "to alice@team-a.test" in record.getMessage() and f"Request #{request.pk} rejected" in record.getMessage()
    assert "too much" in record.getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
