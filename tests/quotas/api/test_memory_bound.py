"""List endpoints bounded in memory by the process-wide dual memory limiter (``quotas/api/memory.py``).

Budgets are made tiny with ``override_settings`` (the limiter is rebuilt when its settings change). The
other listings a request competes with are ``memory_permits`` holders in threads (no database there, so
the tests keep their rolled-back transaction).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from portal.api.errors import ResourceExhausted
from quotas.api.memory import memory_permits, metrics_text, reset
from quotas.api.views.base import AUDIT_ROW_BYTES, DESCRIBE_ROW_BYTES
from quotas.models import Cluster
from tests.people import api, make_user

DESCRIBE = "/api/clusters/prod/client-quotas/describe"
ONE_AUDIT_PAGE = 2 * AUDIT_ROW_BYTES  # page_size=1 reads 2 rows


@pytest.fixture(autouse=True)
def fresh_limiter() -> None:
    """Each test counts from zero, whatever ran before with the same settings."""
    reset()


def _client(username: str, *, is_staff: bool = False, groups: tuple[str, ...] = ()) -> APIClient:
    return api(make_user(username, staff=is_staff, groups=groups))


@pytest.fixture
def admin(db: None) -> APIClient:
    Cluster.objects.get_or_create(name="prod")
    return _client("admin", is_staff=True)


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``fn`` in a thread; its result (or error) lands in the returned dict."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except Exception as e:  # handed to the test
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def metric(name: str) -> float:
    for line in metrics_text().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in the metrics")


def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# ------------------------------------------------------------------ larger than the pool


@override_settings(QUOTAS_LIST_HEAP_BYTES=10 * DESCRIBE_ROW_BYTES)
def test_a_page_larger_than_the_pool_is_refused_at_once(admin: APIClient) -> None:
    response = admin.post(f"{DESCRIBE}?page_size=50", {}, format="json")
    assert response.status_code == 503, response.json()
    # never queued: nothing waited for permits, nothing timed out
    assert metric("quotas_api_list_heap_wait_time_ms_count") == 0
    assert metric("quotas_api_list_heap_timeout_total") == 0
    body = response.json()
    assert body["code"] == "RESOURCE_EXHAUSTED" and "smaller page_size" in body["message"]
    assert body["details"] == {
        "reason": "larger_than_limit",
        "requested_bytes": 51 * DESCRIBE_ROW_BYTES,
        "limit_bytes": 10 * DESCRIBE_ROW_BYTES,
        "retriable": False,
    }
    assert "Retry-After" not in response  # the same request cannot succeed later
    # a page that fits is served, and its permits come back
    assert admin.post(f"{DESCRIBE}?page_size=5", {}, format="json").status_code == 200
    assert metric("quotas_api_list_heap_memory_used_bytes") == 0
    # the other list endpoints are bounded too
    for url in ("/api/audit/", "/api/requests/", "/api/clusters/prod/broker-configs"):
        response = admin.get(url)
        assert response.status_code == 503 and response.json()["code"] == "RESOURCE_EXHAUSTED"


# ------------------------------------------------------------------ waiting their turn


@override_settings(QUOTAS_LIST_HEAP_BYTES=100, QUOTAS_LIST_TIMEOUT_MS=5000)
def test_two_concurrent_holders_serialize() -> None:
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()

    def listing() -> None:
        with memory_permits(80):
            start = time.monotonic()
            time.sleep(0.2)
            with lock:
                spans.append((start, time.monotonic()))

    threads = [in_thread(listing) for _ in range(2)]
    for thread, out in threads:
        thread.join(10)
        assert "error" not in out
    (a_start, a_end), (b_start, b_end) = sorted(spans)
    assert b_start >= a_end  # the second waited for the first to give its bytes back
    assert metric("quotas_api_list_heap_memory_used_bytes") == 0
    assert metric("quotas_api_list_heap_wait_time_ms_count") == 2


def hold_until_queued(n_bytes: int, queued: int, release: threading.Event | None = None) -> Callable[[], float]:
    """Another listing in progress: hold the bytes until ``queued`` requests wait (and ``release`` is set)."""

    def run() -> float:
        with memory_permits(n_bytes):
            wait_for(lambda: metric("quotas_api_list_heap_queue_size") == queued)
            if release is not None:
                assert release.wait(10)
            time.sleep(0.2)
            return time.monotonic()

    return run


@override_settings(QUOTAS_LIST_HEAP_BYTES=ONE_AUDIT_PAGE, QUOTAS_LIST_TIMEOUT_MS=10_000)
def test_a_listing_waits_while_another_holds_the_pool(admin: APIClient) -> None:
    holder, held = in_thread(hold_until_queued(ONE_AUDIT_PAGE, queued=1))
    wait_for(lambda: metric("quotas_api_list_heap_memory_used_bytes") == ONE_AUDIT_PAGE)
    response = admin.get("/api/audit/", {"page_size": 1})  # queued until the holder lets go
    served = time.monotonic()
    holder.join(10)
    assert response.status_code == 200, response.json()
    assert served >= held["result"]  # it was served only after the holder released its bytes
    assert metric("quotas_api_list_heap_memory_used_bytes") == 0
    assert metric("quotas_api_list_heap_wait_time_ms_count") == 2


def small_listing() -> None:
    with memory_permits(1):
        pass


@override_settings(QUOTAS_LIST_HEAP_BYTES=ONE_AUDIT_PAGE, QUOTAS_LIST_QUEUE_SIZE=1, QUOTAS_LIST_TIMEOUT_MS=10_000)
def test_a_full_queue_answers_503_with_retry_after(admin: APIClient) -> None:
    release = threading.Event()
    holder, _ = in_thread(hold_until_queued(ONE_AUDIT_PAGE, queued=1, release=release))
    wait_for(lambda: metric("quotas_api_list_heap_memory_used_bytes") == ONE_AUDIT_PAGE)
    waiter, waited = in_thread(small_listing)  # takes the one queue slot
    wait_for(lambda: metric("quotas_api_list_heap_queue_size") == 1)
    response = admin.get("/api/audit/", {"page_size": 1})  # refused at once: queued, it would time out (below)
    release.set()
    holder.join(10)
    waiter.join(10)
    assert response.status_code == 503
    body = response.json()
    assert body["code"] == "RESOURCE_EXHAUSTED" and "retry in 10 s" in body["message"]
    assert body["details"] == {"reason": "queue_full", "requested_bytes": ONE_AUDIT_PAGE, "retriable": True}
    assert response["Retry-After"] == "10"
    assert metric("quotas_api_list_heap_queue_full_total") == 1
    assert "error" not in waited  # the queued one was granted once the pool was free
    assert metric("quotas_api_list_heap_memory_used_bytes") == 0


@override_settings(QUOTAS_LIST_HEAP_BYTES=ONE_AUDIT_PAGE, QUOTAS_LIST_TIMEOUT_MS=200)
def test_a_wait_that_times_out_answers_503(admin: APIClient) -> None:
    with memory_permits(ONE_AUDIT_PAGE):
        started = time.monotonic()
        response = admin.get("/api/audit/", {"page_size": 1})
        assert 0.15 < time.monotonic() - started < 8  # it waited for its 200 ms timeout, not the default 10 s
    assert response.status_code == 503 and response.json()["details"]["reason"] == "timeout"
    assert response["Retry-After"] == "1"
    assert metric("quotas_api_list_heap_timeout_total") == 1


@override_settings(QUOTAS_LIST_HEAP_BYTES=100)
def test_permits_come_back_when_the_body_fails() -> None:
    with pytest.raises(RuntimeError), memory_permits(100):
        raise RuntimeError("serializer blew up")
    with memory_permits(100):  # would time out if the first had leaked
        assert metric("quotas_api_list_heap_memory_used_bytes") == 100
    with pytest.raises(ResourceExhausted):
        with memory_permits(101):
            pass


# ------------------------------------------------------------------ metrics


@override_settings(QUOTAS_LIST_HEAP_BYTES=1 << 20, QUOTAS_LIST_DIRECT_BYTES=2 << 20, QUOTAS_LIST_QUEUE_SIZE=7)
def test_metrics_name_both_pools_for_admins_and_auditors(admin: APIClient) -> None:
    for client in (admin, _client("audit", groups=("auditors",))):
        response = client.get("/api/metrics/memory")
        assert response.status_code == 200
        assert response["Content-Type"] == "text/plain; version=0.0.4"
        text = response.content.decode()
        for pool in ("heap", "direct"):
            assert f"# TYPE quotas_api_list_{pool}_memory_used_bytes gauge" in text
            assert f"quotas_api_list_{pool}_wait_time_ms_count" in text
        assert "quotas_api_list_heap_memory_limit_bytes 1048576" in text
        assert "quotas_api_list_direct_memory_limit_bytes 2097152" in text
        assert "quotas_api_list_heap_queue_max_size 7" in text
    member = _client("member")
    assert member.get("/api/metrics/memory").status_code == 403
    assert APIClient().get("/api/metrics/memory").status_code == 401
