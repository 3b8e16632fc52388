"""Redis unreachable: a typed error within the timeout, then the documented fail policy; never a hang."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from engine.config import AlterOp, EntityRef, QuotaConfigStore
from engine.decisions import Decision, Kind, Op
from engine.entities import DEFAULT, QuotaType
from engine.errors import EngineUnavailable, ThrottlingQuotaExceeded
from engine.managers import FAIL_CLOSED, ClientQuotaManager, ControllerMutationQuotaManager
from engine.redis_backend import RedisBackend, connect

from .conftest import T0


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts connections and never answers: a hung Redis."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield srv.getsockname()[1]
    stop.set()
    thread.join()
    for c in held:
        c.close()
    srv.close()


def decision() -> Decision:
    return Decision("qe:{x|y}", Kind.RATE, Op.RECORD, 1.0, T0, 10.0)


@pytest.mark.parametrize("which", ["closed_port", "silent_server"])
def test_unreachable_redis_is_a_typed_error_within_the_timeout(which: str, request: pytest.FixtureRequest) -> None:
    port = request.getfixturevalue(which)
    backend = RedisBackend(connect(f"redis://127.0.0.1:{port}/0", timeout_s=0.2))
    started = time.monotonic()
    with pytest.raises(EngineUnavailable) as e:
        backend.execute([decision()])
    assert time.monotonic() - started < 2.0
    assert e.value.code == "ENGINE_UNAVAILABLE"


def test_fail_open_lets_traffic_through_and_says_so(closed_port: int) -> None:
    m = ClientQuotaManager(QuotaType.PRODUCE, RedisBackend(connect(f"redis://127.0.0.1:{closed_port}/0", 0.2)))
    m.update_quota(None, DEFAULT, 1.0)
    r = m.record("u", "c", 10**9, T0)
    assert (r.throttle_ms, r.degraded) == (0, True)


def test_fail_closed_throttles_for_the_whole_sample_span(closed_port: int) -> None:
    backend = RedisBackend(connect(f"redis://127.0.0.1:{closed_port}/0", 0.2))
    m = ClientQuotaManager(QuotaType.PRODUCE, backend, samples=11, window_s=1, fail_mode=FAIL_CLOSED)
    m.update_quota(None, DEFAULT, 1.0)
    r = m.record("u", "c", 1.0, T0)
    assert (r.throttle_ms, r.degraded) == (11_000, True)
    cm = ControllerMutationQuotaManager(backend, fail_mode=FAIL_CLOSED)
    cm.update_quota(None, DEFAULT, 1.0)
    with pytest.raises(ThrottlingQuotaExceeded):
        cm.new_quota_for("u", "c", strict=True).record(1.0, T0)


def test_config_change_on_unreachable_redis_changes_nothing(closed_port: int) -> None:
    store = QuotaConfigStore(connect(f"redis://127.0.0.1:{closed_port}/0", 0.2), "ns")
    with pytest.raises(EngineUnavailable):
        store.alter([AlterOp(EntityRef(user="u"), "producer_byte_rate", 10)])


def test_an_unknown_fail_mode_is_refused() -> None:
    from engine.errors import QuotaValidationError
    from engine.model import ModelBackend

    with pytest.raises(QuotaValidationError):
        ClientQuotaManager(QuotaType.PRODUCE, ModelBackend(), fail_mode="maybe")


@pytest.mark.parametrize("mode", ["open", "closed"])
def test_redis_refusing_writes_is_unavailability_too(mode: str) -> None:
    """Out of memory (or a read-only replica after a failover) gets the fail policy, not a produce outage."""
    from devtools.redis_server import RedisServer

    with RedisServer(name=f"oom-{mode}") as server:
        client = connect(server.url, 2.0)
        client.config_set("maxmemory", 1)
        m = ClientQuotaManager(QuotaType.PRODUCE, RedisBackend(client), fail_mode=mode)
        m.update_quota(None, DEFAULT, 1.0)
        r = m.record("u", "c", 10.0, T0)
        assert r.degraded
        assert r.throttle_ms == (0 if mode == "open" else 11_000)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, "10", None])
def test_usage_must_be_a_finite_amount(value: object, redis_client) -> None:
    from engine.errors import QuotaValidationError
    from engine.managers import UsageRecord

    m = ClientQuotaManager(QuotaType.PRODUCE, RedisBackend(redis_client), namespace="usage-check")
    m.update_quota(None, DEFAULT, 100.0)
    with pytest.raises(QuotaValidationError):
        m.record_many([UsageRecord("u", "c", 5.0, T0), UsageRecord("u", "c", value, T0)])  # type: ignore[arg-type]
    assert not redis_client.exists(m.sensor_key(":c"))  # the valid record of the batch was not applied either
