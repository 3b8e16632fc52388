"""Browser tests: Playwright driving the system's chromium against a real portal.

The session starts the portal as it runs in production, on the test database file and the test Redis: static
files collected (plotly.js included) and served by whitenoise under uvicorn, the live-monitoring relay
(``python manage.py relay``) as a subprocess; the tests that push start a Celery worker subprocess. The tests
commit their data (``transaction=True``), so the subprocesses read it from the SQLite file.

No browser is ever downloaded: the tests launch the chromium that the system has (``QUOTAS_CHROMIUM``, else
``chromium`` / ``chromium-browser`` on the PATH; ``scripts/run_tests.sh`` installs Debian's with apt-get), and
are skipped, saying why, when there is none. Screenshots of every page visited go to
``test-artifacts/screenshots/`` (gitignored).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password

from devtools.processes import stop_session
from devtools.redis_server import free_port
from quotas.models import OwnedName, Tenant
from tests.brokers import cluster_with_brokers
from tests.celery_worker import celery_queue_clean  # noqa: F401 (a fixture)
from tests.database import database_url
from tests.redis_keys import keys_cleared
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
VIEWPORT = {"width": 1366, "height": 768}
#: The cluster of the browser tests (its own name, so its Redis keys and Channels groups are its own).
CLUSTER = "bprod"
PASSWORD = "browser-test-pass-42"


def find_chromium() -> str | None:
    """The system's chromium: $QUOTAS_CHROMIUM, else chromium or chromium-browser on the PATH."""
    explicit = os.environ.get("QUOTAS_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _skip(reason: str) -> None:
    print(f"\nbrowser tests skipped: {reason}", file=sys.stderr)
    pytest.skip(reason)


@pytest.fixture(scope="package", autouse=True)
def _async_unsafe_allowed() -> Iterator[None]:
    """Playwright's sync API runs an asyncio loop in the test's thread, which makes Django refuse ORM calls
    ("SynchronousOnlyOperation") although nothing here is async: allowed for these tests only (never for the
    portal's own processes, whose environment drops it)."""
    old = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if old is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = old


@pytest.fixture(scope="package")
def chromium(django_db_setup: None) -> Iterator[Any]:
    """A headless chromium of the system, through Playwright's driver (which the playwright package brings)."""
    path = find_chromium()
    if path is None:
        _skip("no chromium on this machine (set QUOTAS_CHROMIUM, or apt-get install chromium; never downloaded)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _skip("the playwright package is not installed (requirements.txt)")
    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=path, args=["--disable-dev-shm-usage"])
    except Exception as e:
        pw.stop()
        _skip(f"chromium at {path} did not start: {str(e).splitlines()[0]}")
    yield browser
    browser.close()
    pw.stop()


@dataclass
class Portal:
    """The running portal: its URL, the environment of its processes, what runs beside it, and their logs."""

    url: str
    env: dict[str, str]
    logs: Path
    relay: bool
    websocket: bool
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def require_live(self) -> None:
        """Fail (saying what is missing) when the monitor's WebSocket route or relay command has gone: both are built,
        so their absence is a regression, not a reason to skip."""
        if not self.websocket:
            pytest.fail("the WebSocket /ws/monitor/ is not routed (telemetry_ui/live/routing.py)")
        if not self.relay:
            pytest.fail("python manage.py relay does not exist (telemetry_ui)")
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                pytest.fail(f"{name} exited ({proc.returncode}):\n{self.log(name)}")


def _start(name: str, args: list[str], env: dict[str, str], logs: Path) -> subprocess.Popen[bytes]:
    with (logs / f"{name}.log").open("ab") as out:
        return subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status < 500
    except OSError:
        return False


@pytest.fixture(scope="package")  # gone after the browser tests: a second relay would double every message
def portal(django_db_setup: None, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Portal]:
    """uvicorn serving portal.asgi on a free port, with the relay beside it, on the test database and Redis."""
    logs = tmp_path_factory.mktemp("browser-logs")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.browser.settings",
        "BROWSER_TEST_STATIC_ROOT": str(tmp_path_factory.mktemp("static")),
        "DATABASE_URL": database_url(),  # the test database (SQLite file or PostgreSQL's test_<name>)
        "QUOTAS_REDIS_URL": redis_url,
        # the pipeline's landing area (impact previews read it; tests write usage there)
        "QUOTAS_LANDING_ROOT": str(tmp_path_factory.mktemp("landing")),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    python = sys.executable
    collected = subprocess.run(
        [python, "manage.py", "collectstatic", "--noinput", "-v", "0"], cwd=ROOT, env=env, capture_output=True
    )
    assert collected.returncode == 0, collected.stderr.decode()[-3000:]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    from telemetry_ui.live import routing

    running = Portal(
        url, env, logs,
        relay=importlib.util.find_spec("telemetry_ui.management.commands.relay") is not None,
        websocket=bool(routing.websocket_urlpatterns),
    )
    running.procs["uvicorn"] = _start(
        "uvicorn",
        [python, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--lifespan", "off", "--log-level", "warning"],
        env, logs,
    )
    if running.relay:
        # the relay re-reads the cluster list every 0.5 s: each test creates its cluster anew
        running.procs["relay"] = _start(
            "relay", [python, "manage.py", "relay", "--clusters-every", "0.5", "--block-ms", "200"], env, logs
        )
    try:
        wait_for("the portal to answer", lambda: _answers(url + "/login/") or running.procs["uvicorn"].poll(), 60)
        assert running.procs["uvicorn"].poll() is None, running.log("uvicorn")
        yield running
    finally:
        for proc in running.procs.values():
            stop_session(proc, 10.0)


@pytest.fixture
def monitor_keys(redis_url: str) -> Iterator[redis.Redis]:
    """The test Redis without monitor keys of the browser tests' cluster, before and after each test."""
    with keys_cleared(redis_url, f"mon:{{{CLUSTER}}}*") as client:
        yield client


@pytest.fixture
def context(chromium: Any, portal: Portal) -> Iterator[Any]:
    """A fresh browser profile (no cookies) at 1366x768 for one test."""
    ctx = chromium.new_context(viewport=VIEWPORT, base_url=portal.url)
    ctx.set_default_timeout(15_000)
    errors: list[str] = []  # uncaught JavaScript errors and Content-Security-Policy refusals: a test fails on them

    def watch(page: Any) -> None:
        page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
        page.on("console", lambda m: errors.append(f"{page.url}: {m.text}") if "Content Security Policy" in m.text
                else None)

    ctx.on("page", watch)
    yield ctx
    ctx.close()
    assert not errors, errors


def screenshot(page: Any, name: str) -> Path:
    """The whole page as a PNG under test-artifacts/screenshots/ (to look at)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def log_in(page: Any, username: str, password: str = PASSWORD) -> None:
    """Through the login form, as a person does."""
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    with page.expect_navigation():
        page.click("form.stacked button[type=submit]")
    assert "/login/" not in page.url, page.content()[:2000]


@functools.cache
def password_hash() -> str:
    """PASSWORD hashed as the portal hashes passwords (its first hasher, PBKDF2: about 0.2 s of CPU), once: every
    person of the browser tests has it, and logging in checks it as for anyone."""
    return make_password(PASSWORD)


def person(username: str, *, staff: bool = False) -> Any:
    user = get_user_model().objects.create_user(username, is_staff=staff)
    user.password = password_hash()
    user.save(update_fields=["password"])
    return user


@pytest.fixture
def world(engine_redis: redis.Redis, monitor_keys: redis.Redis) -> dict[str, Any]:
    """team-a (alice; owns svc-a-*), team-b (bob; svc-b-*), an admin, cluster bprod with 3 engine brokers."""
    alice, bob, admin = person("alice"), person("bob"), person("root", staff=True)
    a, b = Tenant.objects.create(name="team-a"), Tenant.objects.create(name="team-b")
    a.members.add(alice)
    b.members.add(bob)
    OwnedName.objects.create(tenant=a, entity_type="user", pattern="svc-a-*")
    OwnedName.objects.create(tenant=b, entity_type="user", pattern="svc-b-*")
    # engine namespaces bprod.broker-<i> in the test Redis
    cluster = cluster_with_brokers(range(3), name=CLUSTER, capacity_in_bytes_per_s=10_000_000)
    return {"alice": alice, "bob": bob, "admin": admin, "a": a, "b": b, "cluster": cluster, "redis": engine_redis}
