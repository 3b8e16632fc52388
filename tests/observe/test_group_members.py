"""A quota group's members in the Prometheus source: the group's shared sensor and the quota callback's per-member
request counters, as a fake exporter serves them over HTTP, scraped by a real Prometheus (1 s scrapes), read by
``PrometheusSource.poll``. The counters grow at a known rate per second of the clock, so Prometheus's ``rate()``
of them is that rate.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from devtools.prometheus import PrometheusError, PrometheusServer, Target
from observe.group_members import MEMBERS_KEPT, member_parts
from observe.kafka_quotas import PrometheusSource
from observe.prometheus import PrometheusClient
from tests.waiting import wait_for

STARTED = time.time()
#: broker -> (group sensor's produce bytes/s, [(user label, client_id, quota_type, requests/s)])
BROKERS = {
    1: (6000.0, [("svc-a", "app", "produce", 30.0), ("svc%40b", "", "produce", 10.0), ("svc-a", "app", "fetch", 5.0)]),
    2: (1000.0, [("svc-a", "app", "produce", 2.0)]),
}


def exporter_text(broker: int) -> str:
    """What broker ``broker``'s JMX exporter would serve: the group's sensor (JMX-quoted user) and the counters."""
    rate, members = BROKERS[broker]
    elapsed = time.time() - STARTED
    lines = [
        "# TYPE kafka_server_produce_byte_rate gauge",
        f'kafka_server_produce_byte_rate{{user="\\"group@g1\\"",client_id=""}} {rate}',
        'kafka_server_produce_throttle_time{user="\\"group@g1\\"",client_id=""} 0',
        "# TYPE kafka_server_quota_group_member_requests_total counter",
    ]
    for user, client_id, q, rps in members:
        labels = f'group="g1",user="{user}",quota_type="{q}"' + (f',client_id="{client_id}"' if client_id else "")
        lines.append(f"kafka_server_quota_group_member_requests_total{{{labels}}} {rps * elapsed:.3f}")
    return "\n".join(lines) + "\n"


class _Exporter(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        raw = exporter_text(int(self.path.strip("/").split("/")[-1])).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def scraped() -> Iterator[PrometheusServer]:
    """A Prometheus of its own scraping the fake exporter of brokers 1 and 2 every second."""
    if shutil.which("prometheus") is None:
        pytest.fail("prometheus is not installed: run `bash scripts/bootstrap.sh` (ensure_prometheus)", pytrace=False)
    http = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{http.server_address[1]}"
    targets = [Target("fake-kafka", address, f"/metrics/{b}", {"cluster": "fake", "broker": str(b)}) for b in BROKERS]
    server = PrometheusServer(f"pytest-members-{os.getpid()}", clusters=[], targets=targets, scrape_interval="1s")
    try:
        server.start()
        server.wait_targets_up(timeout=60)
        yield server
    except PrometheusError as e:
        pytest.fail(f"Prometheus could not be started for the test:\n{e}", pytrace=False)
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)
        http.shutdown()
        http.server_close()


def test_a_groups_sample_carries_each_members_share_and_estimated_part(scraped: PrometheusServer) -> None:
    with PrometheusClient(scraped.url) as client:
        source = PrometheusSource(client, "prod", selector={"cluster": "fake"}, window_s=5.0, members_window_s=5.0,
                                  bound=lambda e: 8000.0 if e.user == "group@g1" else None)

        # rate() extrapolates a series younger than its range: wait until every counter has a full window of scrapes
        full = "count_over_time(kafka_server_quota_group_member_requests_total[5s]) >= 5"
        wait_for("five scrapes of every member counter", lambda: len(client.query(full).result) == 4, 60, 0.5)
        samples = {s["b"]: s for s in source.poll().samples if s["e"] == "group@g1:" and s["q"] == "produce"}
    one, two = samples[1], samples[2]
    assert (one["rate"], one["bound"]) == (6000.0, 8000.0)  # the group's total against the group's value
    # broker 1: svc-a 30 req/s, svc@b 10 req/s (its user URL-decoded); the fetch counter is not a produce part
    assert [(m["u"], m["c"]) for m in one["members"]] == [("svc-a", "app"), ("svc@b", "")]
    assert [m["rps"] for m in one["members"]] == [pytest.approx(30.0, rel=0.1), pytest.approx(10.0, rel=0.1)]
    assert [m["share"] for m in one["members"]] == [pytest.approx(0.75, abs=0.03), pytest.approx(0.25, abs=0.03)]
    assert [m["part"] for m in one["members"]] == [pytest.approx(4500.0, rel=0.05), pytest.approx(1500.0, rel=0.05)]
    # broker 2: one member, all of the group's rate there
    assert [(m["u"], m["c"], m["share"], m["part"]) for m in two["members"]] == [("svc-a", "app", 1.0, 1000.0)]


def test_past_the_kept_members_the_rest_is_one_entry() -> None:
    members = [(f"u{i:02d}", "", float(100 - i)) for i in range(MEMBERS_KEPT + 3)]
    parts = member_parts(members, 1000.0)
    assert len(parts) == MEMBERS_KEPT + 1
    assert parts[0]["u"] == "u00" and parts[0]["rps"] == 100.0
    rest = parts[-1]
    assert rest["others"] == 3 and rest["rps"] == sum(m[2] for m in members[MEMBERS_KEPT:])
    assert sum(p["share"] for p in parts) == pytest.approx(1.0)
    assert sum(p["part"] for p in parts) == pytest.approx(1000.0)
    assert member_parts([("a", "", 1.0)], None) == [{"u": "a", "c": "", "rps": 1.0, "share": 1.0, "part": None}]
