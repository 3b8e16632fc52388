"""The Prometheus source's mapping (observe/kafka_quotas.py) on answers shaped as Prometheus gives them, its
publishing into the monitor's streams (real Redis), and the HTTP client's auth and errors (a local HTTP server).

The poller against the real Prometheus scraping the real Kafka is in tests/kafka/test_prometheus_source.py.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from engine import monitor
from observe.kafka_quotas import Entity, Naming, Poll, PrometheusSource, SamplePublisher, SourceLoop, jmx_unquote
from observe.prometheus import PrometheusClient, PrometheusError, QueryResult
from tests.redis_keys import keys_cleared

NOW_MS = 1_800_000_000_000
FIELDS = {"t", "c", "b", "q", "e", "rate", "bound", "util", "thr_avg", "thr_max", "thr_frac", "tokens", "src",
          "res_ms"}


class Answers:
    """Stands in for PrometheusClient.query: answers the matrix it was given, records the expressions."""

    def __init__(self, result: list[dict[str, Any]]) -> None:
        self.result = result
        self.asked: list[str] = []

    def query(self, expr: str, **_: Any) -> QueryResult:
        self.asked.append(expr)
        return QueryResult("matrix", self.result)


def series(name: str, values: list[tuple[int, str]], **labels: str) -> dict[str, Any]:
    """One series of a matrix answer: ``values`` as (ms before NOW_MS, value text)."""
    return {
        "metric": {"__name__": name, "job": "kafka", "instance": "127.0.0.1:9404", **labels},
        "values": [[(NOW_MS - ago) / 1000.0, text] for ago, text in values],
    }


def poll(result: list[dict[str, Any]], **kwargs: Any) -> tuple[list[dict[str, Any]], list[Entity], Any]:
    asked: list[Entity] = []

    def bound(entity: Entity) -> float | None:
        asked.append(entity)
        return 1024.0

    source = PrometheusSource(Answers(result), "prod", bound=bound, **kwargs)  # type: ignore[arg-type]
    p = source.poll(NOW_MS)
    return sorted(p.samples, key=lambda s: (s["b"], s["q"], s["e"])), asked, p


def test_tags_come_back_from_the_labels_with_users_decoded() -> None:
    result = [
        series("kafka_server_produce_byte_rate", [(1500, "2048"), (500, "4096")], broker="2",
               user="svc%40corp", client_id='"app,1"'),
        series("kafka_server_produce_throttle_time", [(1500, "250"), (500, "100")], broker="2",
               user="svc%40corp", client_id='"app,1"'),
        series("kafka_server_fetch_byte_rate", [(500, "10")], broker="1", user="alice"),
        series("kafka_server_fetch_throttle_time", [(500, "NaN")], broker="1", user="alice"),
        series("kafka_server_request_request_time", [(500, "12.5")], broker="1", client_id="batch"),
        series("kafka_server_produce_byte_rate", [(500, "1")], broker="3"),
    ]
    samples, asked, p = poll(result)

    by_key = {(s["b"], s["q"], s["e"]): s for s in samples}
    assert set(by_key) == {(2, "produce", "svc%40corp:app,1"), (1, "fetch", "alice:"), (1, "request", ":batch"),
                           (3, "produce", ":")}
    produce = by_key[(2, "produce", "svc%40corp:app,1")]
    assert set(produce) == FIELDS
    assert produce == {
        "t": NOW_MS, "c": "prod", "b": 2, "q": "produce", "e": "svc%40corp:app,1", "src": "prometheus",
        "rate": 4096.0, "bound": 1024.0, "util": 4.0, "thr_avg": 100.0, "thr_max": 250.0, "thr_frac": 0.1,
        "tokens": None, "res_ms": 1000,  # scraped 1 s apart: each sample stands for a second
    }
    assert set(p.scraped_ms) == {NOW_MS - 500}  # when Prometheus scraped each sample's newest value
    fetch = by_key[(1, "fetch", "alice:")]
    assert fetch["thr_avg"] == 0.0 and fetch["thr_max"] == 0.0  # NaN: no throttle in Kafka's window
    assert fetch["res_ms"] is None  # one scrape in the window: its interval is not known yet
    assert by_key[(1, "request", ":batch")]["rate"] == 12.5
    assert Entity("produce", "svc%40corp:app,1", "svc@corp", "app,1") in asked
    assert Entity("fetch", "alice:", "alice", None) in asked
    assert Entity("request", ":batch", None, "batch") in asked


def test_a_budgeted_sensor_is_bound_by_its_share_and_carries_the_budget() -> None:
    result = [
        series("kafka_server_produce_byte_rate", [(500, "300000")], broker="1", client_id="app"),
        series("kafka_server_produce_budget_share", [(500, "349525.3")], broker="1", client_id="app"),
        series("kafka_server_produce_budget", [(500, "1048576")], broker="1", client_id="app"),
        series("kafka_server_produce_byte_rate", [(500, "10")], broker="2", client_id="app"),
    ]
    samples, _, _ = poll(result)
    wide, plain = samples
    assert (wide["b"], wide["budget"], wide["share"], wide["bound"]) == (1, 1048576.0, 349525.3, 349525.3)
    assert wide["util"] == pytest.approx(300000 / 349525.3)
    assert set(plain) == FIELDS and plain["bound"] == 1024.0  # no plugin metrics: the portal's bound, per broker


def test_mutation_tokens_and_connection_samples() -> None:
    result = [
        series("kafka_server_controllermutation_mutation_rate", [(200, "4.5")], broker="1", user="ops"),
        series("kafka_server_controllermutation_tokens", [(200, "-7.25")], broker="1", user="ops"),
        series("kafka_server_controllermutation_throttle_time", [(200, "2400")], broker="1", user="ops"),
        series("kafka_server_socketservermetrics_connection_accept_rate", [(200, "3")], broker="1",
               listener="PLAINTEXT"),
        series("kafka_server_socketservermetrics_connection_accept_throttle_time", [(200, "NaN")], broker="1",
               listener="PLAINTEXT"),
        series("kafka_server_socketservermetrics_connection_count", [(200, "4")], broker="1", listener="PLAINTEXT",
               network_processor="0"),
        series("kafka_server_socketservermetrics_connection_count", [(200, "5")], broker="1", listener="PLAINTEXT",
               network_processor="1"),
        series("kafka_server_socketservermetrics_connection_accept_rate", [(200, "0.5")], broker="1",
               ip="127.0.0.1"),
    ]
    samples, _, _ = poll(result)
    by_e = {s["e"]: s for s in samples}
    mutation = by_e["ops:"]
    assert mutation["q"] == "controller_mutation" and mutation["tokens"] == -7.25 and mutation["rate"] == 4.5
    assert mutation["thr_avg"] == 2400.0 and mutation["thr_frac"] == 1.0
    burst = 1024.0 * 11  # Kafka throttles mutations on a bucket of the quota over its window (11 x 1 s)
    assert mutation["util"] == pytest.approx((burst + 7.25) / burst) and mutation["util"] > 1
    listener = by_e["listener:PLAINTEXT"]
    assert listener["q"] == "connection" and listener["accept_rate"] == 3.0 and listener["count"] == 9.0
    assert by_e["ip:127.0.0.1"]["accept_rate"] == 0.5

    samples, _, _ = poll(result, connections=False)
    assert [s["q"] for s in samples] == ["controller_mutation"]


def test_time_throttled_only_while_the_sensor_throttles() -> None:
    """Kafka's throttle-time is an average over its last minute: a sensor now under its bound, whose throttle time
    stands still, throttles nobody now; a bucket below zero or a new throttle time does."""
    result = [
        # a request sensor at 30 % of its bound whose average still holds the 900 ms throttles of a minute ago
        series("kafka_server_request_request_time", [(1500, "307"), (500, "307.2")], broker="1", client_id="idle"),
        series("kafka_server_request_throttle_time", [(1500, "900"), (500, "900")], broker="1", client_id="idle"),
        # one above its bound, throttled again now
        series("kafka_server_request_request_time", [(500, "2048")], broker="1", client_id="busy"),
        series("kafka_server_request_throttle_time", [(1500, "600"), (500, "800")], broker="1", client_id="busy"),
        # a full bucket, its old throttles in Kafka's average; an empty one
        series("kafka_server_controllermutation_tokens", [(500, "11264")], broker="1", user="calm"),
        series("kafka_server_controllermutation_throttle_time", [(500, "1500")], broker="1", user="calm"),
        series("kafka_server_controllermutation_tokens", [(500, "-512")], broker="1", user="burst"),
    ]
    samples, _, _ = poll(result)
    by_e = {s["e"]: s for s in samples}
    assert by_e[":idle"]["util"] == pytest.approx(0.3) and by_e[":idle"]["thr_frac"] == 0.0
    assert by_e[":busy"]["util"] == 2.0 and by_e[":busy"]["thr_frac"] == 0.8
    assert by_e["calm:"]["util"] == 0.0 and by_e["calm:"]["thr_frac"] == 0.0
    burst = by_e["burst:"]
    assert burst["util"] > 1 and burst["thr_max"] == 500.0 and burst["thr_frac"] == 0.5  # -512 / 1024 per s


def test_a_request_sensor_without_a_request_quota_is_not_throttled_by_the_controllers_forwarded_throttles() -> None:
    """A client that creates topics past its controller mutation quota gets the controller's throttle; the broker
    that forwarded its CreateTopics records it under the client's request quota. Without a request quota Kafka
    throttles nothing there: the row is the controller's (its mutation sample), not 100 % at 0 % of a bound."""
    result = [
        series("kafka_server_request_request_time", [(1500, "0.2"), (500, "0.2")], broker="1", client_id="admin"),
        series("kafka_server_request_throttle_time", [(1500, "800"), (500, "1200")], broker="1", client_id="admin"),
        series("kafka_server_controllermutation_tokens", [(500, "-2048")], broker="1", client_id="admin"),
        series("kafka_server_request_request_time", [(500, "2048")], broker="1", client_id="bounded"),
        series("kafka_server_request_throttle_time", [(1500, "600"), (500, "800")], broker="1", client_id="bounded"),
    ]
    source = PrometheusSource(Answers(result), "prod",  # type: ignore[arg-type]
                              bound=lambda e: 1024.0 if e.client_id == "bounded" or e.quota_type != "request" else None)
    by_key = {(s["q"], s["e"]): s for s in source.poll(NOW_MS).samples}
    forwarded = by_key[("request", ":admin")]
    assert (forwarded["bound"], forwarded["util"], forwarded["thr_frac"]) == (None, None, 0.0)
    assert forwarded["thr_avg"] == 1200.0  # Kafka's figure is kept for the request chart
    assert by_key[("controller_mutation", ":admin")]["thr_frac"] > 0  # where the throttling shows
    assert by_key[("request", ":bounded")]["thr_frac"] == 0.8  # a request quota's own throttle still counts


def test_series_without_a_broker_are_left_out_unless_their_instance_is_mapped() -> None:
    result = [
        series("kafka_server_produce_byte_rate", [(100, "5")], client_id="nobody"),  # no broker label, no mapping
        series("kafka_server_produce_byte_rate", [(100, "5")], instance="10.0.0.7:9404", client_id="mapped"),
        series("kafka_server_produce_byte_rate", [], broker="1", client_id="empty"),  # no sample in the window
    ]
    samples, _, p = poll(result)
    assert samples == [] and p.skipped == 2
    samples, _, p = poll(result, brokers={"127.0.0.1:9404": 7})
    assert {(s["b"], s["e"]) for s in samples} == {(7, ":nobody")}


def test_the_query_asks_every_metric_once_with_the_selector() -> None:
    answers = Answers([])
    naming = Naming().with_overrides({"produce.rate": "my_produce_rate"}, {"client_id": "clientId"})
    source = PrometheusSource(answers, "prod", naming=naming, selector={"cluster": 'a"b'}, window_s=2.5)  # type: ignore[arg-type]
    source.poll(NOW_MS)
    (expr,) = answers.asked
    assert expr.startswith('{__name__=~"') and expr.endswith('cluster="a\\"b"}[2500ms]')
    assert "my_produce_rate" in expr and "kafka_server_produce_byte_rate" not in expr
    with pytest.raises(ValueError, match="no metric"):
        Naming().with_overrides({"produce.bytes": "x"})
    with pytest.raises(ValueError, match="no label"):
        Naming().with_overrides(labels={"principal": "x"})


def test_jmx_quoted_values_are_unquoted() -> None:
    assert jmx_unquote('"a,b=c"') == "a,b=c"
    assert jmx_unquote('"say \\"hi\\"\\n\\\\"') == 'say "hi"\n\\'
    assert jmx_unquote("plain") == "plain"


def test_the_publisher_fills_the_monitors_streams_per_broker(redis_url: str) -> None:
    cluster = "prom-unit"
    with keys_cleared(redis_url, f"mon:{{{cluster}}}*") as client:
        publisher = SamplePublisher(client, cluster)
        first = [
            {"t": NOW_MS, "c": cluster, "b": 1, "q": "produce", "e": "a:", "src": "prometheus", "rate": 1.0},
            {"t": NOW_MS, "c": cluster, "b": 2, "q": "produce", "e": "a:", "src": "prometheus", "rate": 2.0},
        ]
        assert publisher.publish(first, NOW_MS) == 2
        assert sorted(s["b"] for s in monitor.latest(client, cluster)) == [1, 2]
        assert len(monitor.recent(client, cluster, "produce", "a:", NOW_MS - 1)) == 2
        # broker 2's sensor is gone next tick: it leaves the overview
        publisher.publish([{**first[0], "t": NOW_MS + 1000}], NOW_MS + 1000)
        latest = monitor.latest(client, cluster)
        assert [(s["b"], s["t"]) for s in latest] == [(1, NOW_MS + 1000)]
        assert all(s["src"] == "prometheus" for s in latest)


class _Handler(BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length).decode()
        self.seen.append({"auth": self.headers.get("Authorization", ""), "path": self.path, "body": body})
        if "bad" in body:
            status, doc = 400, {"status": "error", "errorType": "bad_data", "error": "parse error"}
        else:
            status, doc = 200, {"status": "success", "data": {"resultType": "vector", "result": []}}
        raw = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Handler.seen = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/prom"
    finally:
        server.shutdown()
        server.server_close()


def test_the_client_sends_basic_auth_or_a_bearer_token_and_raises_prometheus_errors(http_server: str) -> None:
    with PrometheusClient(http_server, username="reader", password="s3cret") as client:
        assert client.query("up").result_type == "vector"
        assert client.query("up").result == []  # the same kept-alive connection
        with pytest.raises(PrometheusError, match="bad_data") as info:
            client.query("bad(")
        assert info.value.status == 400 and info.value.error_type == "bad_data"
        assert "s3cret" not in repr(client)
    with PrometheusClient(http_server, bearer_token="tok") as client:
        client.query("up")
    basic = "Basic " + base64.b64encode(b"reader:s3cret").decode()
    assert [s["auth"] for s in _Handler.seen] == [basic, basic, basic, "Bearer tok"]
    assert {s["path"] for s in _Handler.seen} == {"/prom/api/v1/query"}
    with pytest.raises(ValueError, match="not both"):
        PrometheusClient(http_server, username="u", bearer_token="t")
    with pytest.raises(PrometheusError, match="did not answer"):
        PrometheusClient("http://127.0.0.1:1", timeout=1).query("up")


def test_a_poll_publishes_only_the_brokers_scraped_since_their_last_tick(redis_url: str) -> None:
    cluster = "prom-unit-poll"

    def sample(b: int, e: str) -> dict[str, Any]:
        return {"t": NOW_MS, "c": cluster, "b": b, "q": "produce", "e": e, "src": "prometheus", "rate": 1.0}

    with keys_cleared(redis_url, f"mon:{{{cluster}}}*") as client:
        publisher = SamplePublisher(client, cluster)
        first = Poll(NOW_MS, [sample(1, "a:"), sample(2, "a:")], [NOW_MS - 900, NOW_MS - 400], 2, 0, 1.0)
        assert publisher.publish_poll(first) == [1, 2]
        # broker 1 was scraped again, broker 2 not: only broker 1 ticks, broker 2's entry stays
        second = Poll(NOW_MS + 500, [sample(1, "a:"), sample(2, "a:")], [NOW_MS + 100, NOW_MS - 400], 2, 0, 1.0)
        assert publisher.publish_poll(second) == [1]
        assert len(monitor.recent(client, cluster, "produce", "a:", 0)) == 3
        # broker 2's sensor is gone: its tick clears it from the overview, once
        third = Poll(NOW_MS + 1000, [sample(1, "b:")], [NOW_MS + 1100], 1, 0, 1.0)
        assert publisher.publish_poll(third) == [1, 2]
        assert [(s["b"], s["e"]) for s in monitor.latest(client, cluster)] == [(1, "b:")]
        assert publisher.publish_poll(Poll(NOW_MS + 1500, [], [], 0, 0, 1.0)) == [1]
        assert monitor.latest(client, cluster) == []


def test_the_loop_polls_on_time_and_publishes_in_its_own_thread(redis_url: str) -> None:
    cluster = "prom-unit-loop"
    clock = {"n": 0}

    class Moving(Answers):
        def query(self, expr: str, **kw: Any) -> QueryResult:  # a new scrape of broker 1 on every poll
            clock["n"] += 1
            ago = -clock["n"] * 1000
            self.result = [series("kafka_server_produce_byte_rate", [(ago, "5")], broker="1", client_id="x")]
            return super().query(expr, **kw)

    with keys_cleared(redis_url, f"mon:{{{cluster}}}*") as client:
        published: list[list[int]] = []
        source = PrometheusSource(Moving([]), cluster, window_s=3600.0)  # type: ignore[arg-type]
        loop = SourceLoop(source, SamplePublisher(client, cluster), interval_s=0.1,
                          on_published=lambda poll, brokers, at_ms: published.append(brokers))
        loop.run(lambda: False, duration_s=0.45)
        assert 4 <= loop.polls <= 6 and loop.failures == 0
        assert published and all(b == [1] for b in published)
        assert [s["e"] for s in monitor.latest(client, cluster)] == [":x"]
