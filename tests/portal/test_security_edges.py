"""Sign-in throttling, cookie flags, security headers and the Content-Security-Policy the pages satisfy, and DEBUG
kept to development (issue 20)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.test import Client

from portal.login import KEY_PREFIX

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "correct horse battery staple"


@pytest.fixture
def throttle(redis_url: str, settings: Any) -> Iterator[redis.Redis]:
    """Fast password hashing, small limits, and no counts left from another test."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.QUOTAS_LOGIN_MAX_FAILURES = 3
    settings.QUOTAS_LOGIN_MAX_FAILURES_PER_ADDRESS = 5
    client = redis.Redis.from_url(redis_url)

    def clear() -> None:
        for key in client.scan_iter(f"{KEY_PREFIX}:*"):
            client.delete(key)

    clear()
    get_user_model().objects.create_user("alice", password=PASSWORD)
    get_user_model().objects.create_user("root", password=PASSWORD, is_staff=True)
    yield client
    clear()


def login(username: str, password: str, address: str = "10.0.0.1", url: str = "/login/") -> Any:
    return Client(REMOTE_ADDR=address).post(url, {"username": username, "password": password})


def test_an_account_is_throttled_after_its_failures_even_with_the_right_password(throttle: redis.Redis) -> None:
    for _ in range(3):
        assert login("alice", "wrong").status_code == 200
    blocked = login("alice", PASSWORD, address="10.9.9.9")  # per account: another address does not help
    assert blocked.status_code == 429
    assert 0 < int(blocked["Retry-After"]) <= django_settings.QUOTAS_LOGIN_WINDOW_S
    assert "try again in 5 minutes" in blocked.content.decode()
    assert "_auth_user_id" not in blocked.wsgi_request.session
    assert login("root", PASSWORD, address="10.9.9.9").status_code == 302  # other accounts are not
    throttle.delete(*throttle.keys(f"{KEY_PREFIX}:account:*"))  # the window ends
    assert login("alice", PASSWORD).status_code == 302


def test_an_address_is_throttled_across_accounts(throttle: redis.Redis) -> None:
    for i in range(5):
        assert login(f"nobody-{i}", "wrong").status_code == 200
    assert login("alice", PASSWORD).status_code == 429
    assert login("alice", PASSWORD, address="10.0.0.2").status_code == 302


def test_a_success_clears_the_account_and_the_admin_login_counts_too(throttle: redis.Redis) -> None:
    for _ in range(2):
        login("alice", "wrong")
    assert login("alice", PASSWORD).status_code == 302
    for _ in range(2):
        assert login("alice", "wrong", address="10.0.0.3").status_code == 200  # counted from zero again
    for _ in range(3):
        assert login("root", "wrong", url="/admin/login/", address="10.0.0.4").status_code == 200
    blocked = login("root", PASSWORD, url="/admin/login/", address="10.0.0.5")
    assert blocked.status_code == 200 and "Too many failed sign-ins" in blocked.content.decode()
    assert login("root", PASSWORD, address="10.0.0.5").status_code == 429  # the same counter as the portal's


def test_session_and_csrf_cookies_are_httponly_and_lax(throttle: redis.Redis) -> None:
    client = Client()
    page = client.get("/login/")
    csrf = page.cookies["csrftoken"]
    assert csrf["httponly"] and csrf["samesite"] == "Lax"
    response = client.post("/login/", {"username": "alice", "password": PASSWORD})
    session = response.cookies["sessionid"]
    assert session["httponly"] and session["samesite"] == "Lax" and not session["secure"]


def _settings_in(env: dict[str, str]) -> dict[str, Any]:
    """portal.settings as a fresh process reads it from this environment (or the error it raises)."""
    code = (
        "import json\n"
        "try:\n"
        "    import portal.settings as s\n"
        "    print(json.dumps({'DEBUG': s.DEBUG, 'SESSION_COOKIE_SECURE': s.SESSION_COOKIE_SECURE,"
        " 'CSRF_COOKIE_SECURE': s.CSRF_COOKIE_SECURE}))\n"
        "except Exception as e:\n"
        "    print(json.dumps({'error': type(e).__name__, 'message': str(e)}))\n"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "QUOTAS_SECURE", "ALLOWED_HOSTS"))}
    base["DJANGO_SECRET_KEY"] = os.environ["DJANGO_SECRET_KEY"]  # the session's (tests/keys_plugin.py)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**base, **env}, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_debug_and_secure_cookies_come_from_the_environment_only() -> None:
    assert _settings_in({}) == {"DEBUG": False, "SESSION_COOKIE_SECURE": False, "CSRF_COOKIE_SECURE": False}
    assert _settings_in({"QUOTAS_SECURE_COOKIES": "1"})["SESSION_COOKIE_SECURE"] is True
    assert _settings_in({"QUOTAS_SECURE_COOKIES": "1"})["CSRF_COOKIE_SECURE"] is True
    assert _settings_in({"DJANGO_DEBUG": "1"})["DEBUG"] is True
    public = _settings_in({"DJANGO_DEBUG": "1", "ALLOWED_HOSTS": "quotas.example.com"})
    assert public["error"] == "ImproperlyConfigured" and "quotas.example.com" in public["message"]
    assert _settings_in({"DJANGO_DEBUG": "0", "ALLOWED_HOSTS": "quotas.example.com"})["DEBUG"] is False


# ------------------------------------------------------------------ headers and the Content-Security-Policy


def csp(response: Any) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]
    return {part.split()[0]: part.split()[1:] for part in header.split("; ")}


def test_every_answer_carries_the_security_headers(throttle: redis.Redis) -> None:
    for response in (Client().get("/login/"), Client().get("/api/me/"), Client().get("/api/nope/")):
        policy = csp(response)
        assert policy["default-src"] == ["'self'"] and policy["script-src"] == ["'self'"]
        assert policy["frame-ancestors"] == ["'none'"] and policy["object-src"] == ["'none'"]
        unsafe = [(name, source) for name, sources in policy.items() for source in sources if "unsafe" in source]
        assert unsafe == [("style-src-attr", "'unsafe-hashes'")]  # never unsafe-inline or unsafe-eval
        assert response["X-Content-Type-Options"] == "nosniff"
        assert response["Referrer-Policy"] == "same-origin"
        assert response["X-Frame-Options"] == "DENY"


INLINE_SCRIPT = re.compile(r"<script\b(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I)
STYLE_ATTRIBUTE = re.compile(r"<[^>]+\sstyle\s*=", re.I)
HANDLER_ATTRIBUTE = re.compile(r"<[^>]+\son[a-z]+\s*=", re.I)
STYLE_BLOCK = re.compile(r"<style\b[^>]*>(.*?)</style>", re.I | re.S)


def inline_code(html: str) -> list[str]:
    return [m.group(0)[:80] for p in (INLINE_SCRIPT, STYLE_ATTRIBUTE, HANDLER_ATTRIBUTE) for m in p.finditer(html)]


def test_the_templates_have_no_inline_script_or_style() -> None:
    for template in sorted((ROOT / "frontend" / "templates").rglob("*.html")):
        html = template.read_text()
        assert inline_code(html) == [] and not STYLE_BLOCK.search(html), template


PAGES = ["/", "/entities/", "/requests/", "/requests/new/", "/approvals/", "/audit/", "/clusters/", "/drift/",
         "/tenants/", "/credentials/", "/admin/", "/admin/quotas/cluster/", "/admin/quotas/cluster/add/"]


def test_the_rendered_pages_satisfy_the_policy(throttle: redis.Redis, settings: Any) -> None:
    settings.WHITENOISE_USE_FINDERS = True
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("super", password=PASSWORD))
    for url in PAGES:
        response = client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert inline_code(html) == [], (url, inline_code(html))
        assert not STYLE_BLOCK.search(html), url


def test_swagger_ui_runs_from_files_and_its_one_style_block_is_allowed_by_hash(settings: Any) -> None:
    settings.WHITENOISE_USE_FINDERS = True
    response = Client().get("/api/schema/swagger-ui/")
    html = response.content.decode()
    assert inline_code(html) == []
    (style,) = STYLE_BLOCK.findall(html)
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    assert f"'sha256-{digest}'" in csp(response)["style-src"]
    script = re.search(r'<script src="([^"]*script=[^"]*)"', html)
    assert script is not None
    init = Client().get(script.group(1).replace("&amp;", "&"))
    assert init.status_code == 200 and init["Content-Type"].startswith("application/javascript")


def sha256_source(text: str) -> str:
    return f"'sha256-{base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()}'"


def test_the_plotly_exceptions_are_the_installed_plotlys_own(settings: Any) -> None:
    """The hashes the policy lets through are those of what this plotly.min.js writes (a new plotly fails here)."""
    from frontend.finders import plotly_package_data

    folder = plotly_package_data()
    assert folder is not None
    bundle = (folder / "plotly.min.js").read_text()
    maplibre = re.search(r"e\.id=\"[0-9a-f]{64}\",e\.textContent='([^'\\]*)'", bundle)
    declarations = re.search(r"CSS_DECLARATIONS=(\[\[.*?\]\])", bundle)
    assert maplibre is not None and declarations is not None
    probe = "".join(": ".join(d) + "; " for d in json.loads(declarations.group(1)))
    assert {sha256_source(""), sha256_source(maplibre.group(1))} <= set(settings.QUOTAS_CSP["style-src"])
    assert {sha256_source(""), sha256_source(probe)} <= set(settings.QUOTAS_CSP["style-src-attr"])
