"""Secure by default (issue 30): no start on public keys, HTTPS for a public host, ``check --deploy`` clean.

With ``DJANGO_DEBUG`` off the portal refuses to start on the built-in secret key or without a sealing key of its own,
saying in one sentence what to set (no traceback), from manage.py, uvicorn and celery alike. Keys may come from files
(``*_FILE``, as Docker and Kubernetes mount secrets; ``python -m portal.keys`` writes them). A host other than this
machine gets HTTPS settings (redirect, Secure cookies, HSTS) by default, and Django's deployment checks find nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from portal.keys import FILES, ensure_keys, make_keys

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {"ALLOWED_HOSTS": "quotas.example.com", "DJANGO_DEBUG": "0"}
SETTINGS = ["DEBUG", "SECRET_KEY", "QUOTAS_SECRETS_KEYS", "SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE",
            "CSRF_COOKIE_SECURE", "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD"]


def environment(env: dict[str, str]) -> dict[str, str]:
    """This process's environment without any setting of keys, debug, hosts or HTTPS, plus ``env``."""
    kept = {k: v for k, v in os.environ.items()
            if not k.startswith(("DJANGO_", "QUOTAS_SECRETS_KEYS", "QUOTAS_SSL", "QUOTAS_SECURE", "QUOTAS_HSTS",
                                 "ALLOWED_HOSTS"))}
    # no *_FILE either: not even the keys run_portal.sh made in .run/keys, which the settings read when unset
    return {**kept, "DJANGO_SETTINGS_MODULE": "portal.settings", "DJANGO_SECRET_KEY_FILE": "",
            "QUOTAS_SECRETS_KEYS_FILE": "", **env}


READ_SETTINGS = f"""
import importlib, json, os, sys
for env in json.load(sys.stdin):
    os.environ.clear()
    os.environ.update(env)
    sys.modules.pop("portal.settings", None)
    try:
        s = importlib.import_module("portal.settings")
        print(json.dumps({{name: getattr(s, name) for name in {SETTINGS!r}}}))
    except Exception as e:
        print(json.dumps({{"error": type(e).__name__, "message": str(e)}}))
"""


def settings_in_each(*envs: dict[str, str]) -> list[dict[str, Any]]:
    """portal.settings as a process reads it from each of ``envs`` in turn (or the error it raises): one process."""
    out = subprocess.run([sys.executable, "-c", READ_SETTINGS], cwd=ROOT, capture_output=True, text=True,
                         input=json.dumps([environment(e) for e in envs]), timeout=60)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_without_debug_the_portal_refuses_public_or_missing_keys() -> None:
    keys = make_keys()
    public_keys = ("django-insecure-dev-only-key-do-not-use-in-production", "compose-dev-only-secret-change-me")
    nothing, *publics, no_sealing, started, debug = settings_in_each(
        {},
        *({**keys, "DJANGO_SECRET_KEY": public} for public in public_keys),
        {"DJANGO_SECRET_KEY": keys["DJANGO_SECRET_KEY"]},
        keys,
        {"DJANGO_DEBUG": "1"},
    )
    assert nothing["error"] == "ImproperlyConfigured"
    assert "DJANGO_SECRET_KEY" in nothing["message"] and "QUOTAS_SECRETS_KEYS" in nothing["message"]
    assert "python -m portal.keys" in nothing["message"] and "DJANGO_DEBUG=1" in nothing["message"]
    for refused in publics:
        assert refused["error"] == "ImproperlyConfigured" and "DJANGO_SECRET_KEY" in refused["message"]
        assert "QUOTAS_SECRETS_KEYS (" not in refused["message"]  # only what is missing is named
    assert "QUOTAS_SECRETS_KEYS" in no_sealing["message"] and "DJANGO_SECRET_KEY (" not in no_sealing["message"]
    assert (started["SECRET_KEY"], started["QUOTAS_SECRETS_KEYS"]) == (
        keys["DJANGO_SECRET_KEY"], [keys["QUOTAS_SECRETS_KEYS"]]
    )
    assert debug["DEBUG"] is True  # development: DEBUG on this machine runs on the development keys


def test_keys_come_from_files_written_once(tmp_path: Path) -> None:
    made = ensure_keys(tmp_path / "keys")
    assert made == dict.fromkeys(FILES, True)
    texts = {name: (tmp_path / "keys" / name).read_text() for name in FILES}
    assert all((tmp_path / "keys" / name).stat().st_mode & 0o777 == 0o600 for name in FILES)
    assert ensure_keys(tmp_path / "keys") == dict.fromkeys(FILES, False)  # kept: sealed secrets stay readable
    assert texts == {name: (tmp_path / "keys" / name).read_text() for name in FILES}
    files = {f"{setting}_FILE": str(tmp_path / "keys" / name) for name, setting in FILES.items()}
    read, told, missing = settings_in_each(
        files,
        {**files, "DJANGO_SECRET_KEY": "x" * 60},  # the variable itself wins over its file
        {**files, "DJANGO_SECRET_KEY_FILE": str(tmp_path / "nowhere")},
    )
    assert read["SECRET_KEY"] == texts["django-secret-key"].strip()
    assert read["QUOTAS_SECRETS_KEYS"] == [texts["quotas-secrets-keys"].strip()]
    assert told["SECRET_KEY"] == "x" * 60
    assert missing["error"] == "ImproperlyConfigured"
    assert missing["message"].startswith("DJANGO_SECRET_KEY_FILE names ") and "cannot be read" in missing["message"]


@pytest.mark.parametrize("command", [
    ["manage.py", "migrate", "--check"],
    ["-m", "uvicorn", "portal.asgi:application", "--port", "1"],
    ["-m", "celery", "-A", "portal", "worker", "--pool", "solo"],
], ids=["manage.py", "uvicorn", "celery"])
def test_a_refused_start_says_what_to_set_in_one_sentence(command: list[str]) -> None:
    out = subprocess.run([sys.executable, *command], cwd=ROOT, env=environment({}), capture_output=True, text=True,
                         timeout=90)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("quota portal: The portal does not start without keys of its own"), out.stderr
    assert "DJANGO_SECRET_KEY" in lines[-1] and "QUOTAS_SECRETS_KEYS" in lines[-1]


def test_a_public_host_gets_https_by_default_and_each_part_can_be_set() -> None:
    keys = make_keys()
    public, local, told = settings_in_each(
        {**keys, **PRODUCTION},
        keys,  # http://127.0.0.1: the demo, the tests, compose tried on this machine
        {**keys, **PRODUCTION, "QUOTAS_SSL_REDIRECT": "0", "QUOTAS_SECURE_COOKIES": "0", "QUOTAS_HSTS_SECONDS": "600",
         "QUOTAS_HSTS_INCLUDE_SUBDOMAINS": "0", "QUOTAS_HSTS_PRELOAD": "0"},
    )
    assert {k: public[k] for k in SETTINGS[3:]} == {
        "SECURE_SSL_REDIRECT": True, "SESSION_COOKIE_SECURE": True, "CSRF_COOKIE_SECURE": True,
        "SECURE_HSTS_SECONDS": 31_536_000, "SECURE_HSTS_INCLUDE_SUBDOMAINS": True, "SECURE_HSTS_PRELOAD": True,
    }
    assert (local["SECURE_SSL_REDIRECT"], local["SESSION_COOKIE_SECURE"], local["SECURE_HSTS_SECONDS"]) == (
        False, False, 0
    )
    assert {k: told[k] for k in SETTINGS[3:]} == {
        "SECURE_SSL_REDIRECT": False, "SESSION_COOKIE_SECURE": False, "CSRF_COOKIE_SECURE": False,
        "SECURE_HSTS_SECONDS": 600, "SECURE_HSTS_INCLUDE_SUBDOMAINS": False, "SECURE_HSTS_PRELOAD": False,
    }


def test_check_deploy_is_clean_with_production_settings() -> None:
    command = [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"]
    out = subprocess.run(command, cwd=ROOT, env=environment({**make_keys(), **PRODUCTION}), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no issues (0 silenced)" in out.stdout, out.stdout + out.stderr


@pytest.mark.django_db
def test_plain_http_is_redirected_except_what_the_network_reaches_inside(settings: Any) -> None:
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 600
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = settings.SECURE_HSTS_PRELOAD = True
    settings.ALLOWED_HOSTS = ["quotas.example.com"]
    client = Client(HTTP_HOST="quotas.example.com")
    answer = client.get("/api/clusters/")
    assert answer.status_code == 301 and answer["Location"] == "https://quotas.example.com/api/clusters/"
    assert client.get("/healthz").status_code in (200, 503)  # the container healthcheck, over http
    secure = client.get("/login/", secure=True)
    assert secure.status_code == 200
    assert secure["Strict-Transport-Security"] == "max-age=600; includeSubDomains; preload"
