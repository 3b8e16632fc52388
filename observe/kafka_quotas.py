"""Kafka's own quota sensors, read from Prometheus, as the live monitor's samples (``"src": "prometheus"``).

The brokers publish their per-entity quota sensors as MBeans; the JMX exporter turns them into series (the project's
rules, ``devtools/kafka/jmx-exporter.yml``, name them as Confluent's jmx-monitoring-stacks does) and Prometheus
scrapes them. :class:`PrometheusSource` asks Prometheus for all of them at once with one instant query of a range
selector (``{__name__=~"..."}[<window>]``), which answers each series' raw samples with the time they were
scraped, and makes of each (broker, quota type, sensor) one sample in the format of ``engine.monitor``:

``{"t", "c", "b", "q", "e", "rate", "bound", "util", "thr_avg", "thr_max", "thr_frac", "tokens", "src"}``

- ``e`` is Kafka's sensor identity ``"<user>:<client-id>"`` as the exporter's labels give it: the user as Kafka
  sanitized it (URL-encoded, as the engine's tags have it), an absent label an empty part. Which labels a series has
  is the quota level that applies (``"alice:"`` is user alice's own quota, ``":app"`` a client-id quota); the
  ``bound`` callback gets the :class:`Entity` with the user URL-decoded, and answers the quota of those tags.
- ``rate``: bytes/s (produce, fetch), the request-time percentage (request), mutations/s (controller_mutation);
  ``util`` = rate / bound, and for controller mutations, which Kafka throttles on their token bucket, the share of
  the bucket's burst spent (``engine.monitor.bucket_util``, with Kafka's default quota window of 11 x 1 s
  unless ``mutation_window`` says otherwise); ``tokens`` the controller-mutation token bucket (negative =
  throttled).
- ``thr_avg`` is Kafka's ``throttle-time`` (the mean of the throttle times it gave in its metrics window, 0 when
  none), ``thr_max`` the highest value of it in the query window (for a bucket below zero at least the throttle a
  mutation gets now), ``thr_frac`` an estimate: Kafka publishes no throttled-time total per entity, so it is
  ``thr_avg`` per second (capped at 1) while the sensor throttles now (its value above the bound, its bucket below
  zero, or new throttle times in the query window), else 0: Kafka's average keeps the throttles of the last
  minute, long after its clients stopped waiting. A request sensor without a request quota never throttles now:
  Kafka's broker records there the controller's throttle of a forwarded CreateTopics, DeleteTopics or
  CreatePartitions, which the client's controller-mutation sample shows.
- ``budget`` and ``share`` (only for a sensor under a cluster-wide budget, published by the portal's quota callback
  plugin as ``kafka_server_<type>_budget`` and ``..._budget_share``): the budget B for the whole cluster and this
  broker's share of it, which is then the sample's ``bound`` (what this broker enforces).
- ``members`` (only on a quota group's sensor, tags ``"group@<name>:"``): who used it. A group's members share one
  Kafka sensor, so Kafka measures only their sum; the portal's quota callback counts each member's requests
  (``kafka_server_quota_group_member_requests_total{group, user, client_id, quota_type}``, a counter per broker), and
  a second query reads their rate over ``members_window_s``. Each entry ``{"u", "c", "rps", "share", "part"}``: the
  member's user (URL-decoded) and client-id, its requests/s, its share of the group's requests on this broker, and
  its *estimated* part of the sensor's rate (share x rate: by request counts, not bytes), busiest first; past
  ``group_members.MEMBERS_KEPT`` (20) the rest are one entry ``{"others": <how many>, "rps", "share", "part"}``.
- ``res_ms``: how long the sample stands for, the scrape interval seen in the window (the time between a series'
  newest two scrapes, to 100 ms; None while a series has one): the history lands it, so rollups and previews know
  their resolution (a broker is published once per scrape).
- Connection quotas: ``q`` ``"connection"``, ``e`` ``"listener:<name>"`` (``accept_rate``, ``count`` summed over the
  network processors, the accept throttle time) or ``"ip:<address>"`` (``accept_rate``).

``b`` is the ``broker`` label (the project's Prometheus config sets it per target), else the ``instance`` label
mapped by ``brokers``. A series with no sample in the window (by Prometheus's clock) is gone: Kafka expired the
sensor, or the broker stopped. No Django: the ``prometheus_source`` management command runs it with the portal's
resolver (``SourceLoop``: the polls, and the publishing in a thread of its own).
"""

from __future__ import annotations

import math
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from engine.monitor import CONNECTION, Sampler, bucket_throttle_ms, bucket_util

from .group_members import GROUP_TAG, MEMBER_REQUESTS, member_parts
from .prometheus import PrometheusClient, PrometheusError

PRODUCE, FETCH, REQUEST, MUTATION = "produce", "fetch", "request", "controller_mutation"
QUOTA_TYPES = (PRODUCE, FETCH, REQUEST, MUTATION)
SRC = "prometheus"

#: quota type -> field -> metric name, as jmx-monitoring-stacks names Kafka's quota sensors
DEFAULT_METRICS: dict[str, dict[str, str]] = {
    PRODUCE: {
        "rate": "kafka_server_produce_byte_rate",
        "throttle": "kafka_server_produce_throttle_time",
        "share": "kafka_server_produce_budget_share",
        "budget": "kafka_server_produce_budget",
    },
    FETCH: {
        "rate": "kafka_server_fetch_byte_rate",
        "throttle": "kafka_server_fetch_throttle_time",
        "share": "kafka_server_fetch_budget_share",
        "budget": "kafka_server_fetch_budget",
    },
    REQUEST: {
        "rate": "kafka_server_request_request_time",
        "throttle": "kafka_server_request_throttle_time",
        "share": "kafka_server_request_budget_share",
        "budget": "kafka_server_request_budget",
    },
    MUTATION: {
        "rate": "kafka_server_controllermutation_mutation_rate",
        "tokens": "kafka_server_controllermutation_tokens",
        "throttle": "kafka_server_controllermutation_throttle_time",
    },
    CONNECTION: {
        "accept_rate": "kafka_server_socketservermetrics_connection_accept_rate",
        "throttle": "kafka_server_socketservermetrics_connection_accept_throttle_time",
        "count": "kafka_server_socketservermetrics_connection_count",
    },
}


@dataclass(frozen=True)
class Naming:
    """Metric and label names (jmx-monitoring-stacks' by default). ``metrics`` maps quota type -> field -> name
    (fields: ``rate``, ``throttle``, ``tokens``; for ``connection``: ``accept_rate``, ``throttle``, ``count``)."""

    metrics: Mapping[str, Mapping[str, str]] = field(
        default_factory=lambda: {q: dict(fields) for q, fields in DEFAULT_METRICS.items()}
    )
    user: str = "user"
    client_id: str = "client_id"
    broker: str = "broker"
    instance: str = "instance"
    listener: str = "listener"
    ip: str = "ip"
    #: the quota callback's per-member request counter of a quota group, and its labels
    member_requests: str = MEMBER_REQUESTS
    group: str = "group"
    quota_type: str = "quota_type"

    def with_overrides(
        self, metrics: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None
    ) -> Naming:
        """A copy with some names changed: ``metrics`` as ``{"produce.rate": name}``, ``labels`` as
        ``{"user": name}`` (user, client_id, broker, instance, listener, ip)."""
        metrics, labels = metrics or {}, labels or {}
        table = {q: dict(fields) for q, fields in self.metrics.items()}
        for key, name in metrics.items():
            q, dot, f = key.partition(".")
            if not dot or q not in table or f not in table[q]:
                known = ", ".join(f"{q}.{f}" for q, fields in table.items() for f in fields)
                raise ValueError(f"no metric {key!r}; one of {known}")
            table[q][f] = name
        unknown = set(labels) - {"user", "client_id", "broker", "instance", "listener", "ip"}
        if unknown:
            raise ValueError(f"no label {sorted(unknown)}; one of user, client_id, broker, instance, listener, ip")
        current = {k: getattr(self, k) for k in ("user", "client_id", "broker", "instance", "listener", "ip")}
        return Naming(metrics=table, member_requests=self.member_requests, group=self.group,
                      quota_type=self.quota_type, **{**current, **labels})

    def fields_of(self) -> dict[str, tuple[str, str]]:
        """metric name -> (quota type, field)."""
        return {name: (q, f) for q, fields in self.metrics.items() for f, name in fields.items()}


@dataclass(frozen=True)
class Entity:
    """What a sample is about, as the ``bound`` callback gets it: the quota type, the sensor tags, the user
    (URL-decoded) and client-id (None when the tags leave them out); connection entities have tags
    ``"ip:<address>"`` or ``"listener:<name>"`` and no user or client-id."""

    quota_type: str
    tags: str
    user: str | None = None
    client_id: str | None = None


BoundOf = Callable[[Entity], "float | None"]


@dataclass
class Poll:
    """One poll: the samples, when Prometheus scraped the newest value of each (ms, same order), the series read,
    series left out (no broker), and how long the query took."""

    at_ms: int
    samples: list[dict[str, Any]]
    scraped_ms: list[int]
    series: int
    skipped: int
    query_ms: float


def jmx_unquote(value: str) -> str:
    """A key property value as Kafka named it: JMX quotes values with ``,=:"*?`` (``ObjectName.quote``)."""
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        out, i, inner = [], 0, value[1:-1]
        while i < len(inner):
            ch = inner[i]
            if ch == "\\" and i + 1 < len(inner):
                i += 1
                ch = "\n" if inner[i] == "n" else inner[i]
            out.append(ch)
            i += 1
        return "".join(out)
    return value


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(text: str) -> float | None:
    """A sample value; NaN (Kafka's Avg over no events) and infinities are None."""
    value = float(text)
    return value if math.isfinite(value) else None


@dataclass
class _Acc:
    """What one poll read of one (broker, quota type, sensor)."""

    newest_ms: int = 0
    res_ms: int | None = None  # the scrape interval seen (newest two scrapes of a series)
    values: dict[str, float | None] = field(default_factory=dict)  # field -> newest value
    thr_max: float = 0.0
    thr_moved: bool = False  # the throttle time changed within the window: Kafka gave new throttles
    count: float | None = None  # connection count, summed over network processors


class PrometheusSource:
    """Polls Prometheus for Kafka's quota sensors of one cluster and returns the monitor's samples.

    ``cluster`` is the portal's cluster name (``c`` of the samples); ``selector`` label matchers that pick its
    series in Prometheus (e.g. ``{"cluster": "dev"}``, the label the project's Prometheus config sets);
    ``bound(entity)`` the quota that applies to a sensor (None: none); ``window_s`` how far back a series' newest
    sample may be (a few scrape intervals; the range of the query).
    """

    def __init__(
        self,
        client: PrometheusClient,
        cluster: str,
        *,
        bound: BoundOf | None = None,
        naming: Naming | None = None,
        selector: Mapping[str, str] | None = None,
        window_s: float = 3.0,
        connections: bool = True,
        brokers: Mapping[str, int] | None = None,
        mutation_window: tuple[int, int] = (11, 1000),
        members_window_s: float | None = 30.0,
    ) -> None:
        self.client = client
        self.cluster = cluster
        self.bound = bound
        self.naming = naming or Naming()
        self.selector = dict(selector or {})
        self.window_s = window_s
        self.connections = connections
        self.brokers = dict(brokers or {})
        #: the controller-mutation quota window (samples, ms): Kafka's quota.window.num and
        #: controller.quota.window.size.seconds, which size its token bucket
        self.mutation_window = mutation_window
        #: the range of the rate() of quota groups' member counters (a few scrape intervals); None: not asked
        self.members_window_s = members_window_s
        self._fields = {
            name: qf for name, qf in self.naming.fields_of().items() if connections or qf[0] != CONNECTION
        }

    def query_expr(self) -> str:
        """The one PromQL expression a poll asks: every wanted series with its samples of the window."""
        names = "|".join(re.escape(n) for n in sorted(self._fields))
        matchers = [f'__name__=~"{_label_value(names)}"']
        matchers += [f'{k}="{_label_value(v)}"' for k, v in sorted(self.selector.items())]
        window_ms = max(1, int(self.window_s * 1000))
        return "{" + ",".join(matchers) + "}" + f"[{window_ms}ms]"

    def members_expr(self) -> str:
        """The PromQL expression of the members' request rates (per series: broker, group, user, client-id, type)."""
        matchers = [f'{k}="{_label_value(v)}"' for k, v in sorted(self.selector.items())]
        window_ms = max(1, int((self.members_window_s or 0) * 1000))
        return f"rate({self.naming.member_requests}{{{','.join(matchers)}}}[{window_ms}ms])"

    def _members(self) -> dict[tuple[int, str, str], list[tuple[str, str, float]]]:
        """(broker, quota type, group's tags) -> [(user, client-id, requests/s)] of the members seen lately."""
        n = self.naming
        out: dict[tuple[int, str, str], list[tuple[str, str, float]]] = {}
        for series in self.client.query(self.members_expr()).result:
            labels = series.get("metric", {})
            broker = self._broker_of(labels)
            value = _num((series.get("value") or [0, "NaN"])[1])
            if broker is None or not value or value < 0:
                continue  # an idle member (or a counter reset) has no part now
            group = jmx_unquote(labels.get(n.group, ""))
            user = urllib.parse.unquote(jmx_unquote(labels.get(n.user, "")))
            key = (broker, labels.get(n.quota_type, ""), f"{GROUP_TAG}{group}:")
            out.setdefault(key, []).append((user, jmx_unquote(labels.get(n.client_id, "")), value))
        return out

    def _broker_of(self, labels: Mapping[str, str]) -> int | None:
        value = labels.get(self.naming.broker)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                pass
        return self.brokers.get(labels.get(self.naming.instance, ""))

    def _tags_of(self, q: str, labels: Mapping[str, str]) -> tuple[str, Entity] | None:
        n = self.naming
        if q == CONNECTION:
            if n.listener in labels:
                tags = f"listener:{labels[n.listener]}"
            elif n.ip in labels:
                tags = f"ip:{labels[n.ip]}"
            else:
                return None
            return tags, Entity(CONNECTION, tags)
        user = jmx_unquote(labels.get(n.user, ""))
        client_id = jmx_unquote(labels.get(n.client_id, ""))
        tags = f"{user}:{client_id}"
        return tags, Entity(q, tags, urllib.parse.unquote(user) if user else None, client_id or None)

    def poll(self, now_ms: int | None = None) -> Poll:
        """Ask Prometheus once; one sample per (broker, quota type, sensor) seen within the window."""
        started = time.perf_counter()
        answer = self.client.query(self.query_expr())
        query_ms = (time.perf_counter() - started) * 1000.0
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        accs: dict[tuple[int, str, str], _Acc] = {}
        entities: dict[tuple[int, str, str], Entity] = {}
        skipped = 0
        for series in answer.result:
            labels = series.get("metric", {})
            qf = self._fields.get(labels.get("__name__", ""))
            points = series.get("values") or []
            if qf is None or not points:
                continue
            q, f = qf
            broker = self._broker_of(labels)
            named = self._tags_of(q, labels)
            if broker is None or named is None:
                skipped += 1
                continue
            newest_s, newest_text = points[-1]  # the range selector answers only what was scraped in the window
            newest_ms = int(round(float(newest_s) * 1000))
            tags, entity = named
            key = (broker, q, tags)
            acc = accs.get(key)
            if acc is None:
                acc = accs[key] = _Acc()
                entities[key] = entity
            acc.newest_ms = max(acc.newest_ms, newest_ms)
            if len(points) >= 2:
                step = int(round((float(newest_s) - float(points[-2][0])) * 10)) * 100
                acc.res_ms = max(acc.res_ms or 0, step) or None
            value = _num(newest_text)
            if f == "count":  # one series per network processor
                acc.count = (acc.count or 0.0) + (value or 0.0)
                continue
            acc.values[f] = value
            if f == "throttle":
                seen = [v for _, text in points if (v := _num(text)) is not None]
                acc.thr_max = max(seen, default=0.0)
                acc.thr_moved = any(v != seen[0] for v in seen)
        groups = self.members_window_s and any(tags.startswith(GROUP_TAG) for _b, _q, tags in accs)
        members = self._members() if groups else {}
        samples, scraped = [], []
        for key, acc in accs.items():
            broker, q, tags = key
            sample = self._sample(now_ms, broker, q, tags, entities[key], acc)
            if key in members:
                sample["members"] = member_parts(members[key], sample["rate"])
            samples.append(sample)
            scraped.append(acc.newest_ms)
        return Poll(now_ms, samples, scraped, len(answer.result), skipped, query_ms)

    def _sample(self, now_ms: int, broker: int, q: str, tags: str, entity: Entity, acc: _Acc) -> dict[str, Any]:
        v = acc.values
        bound = self.bound(entity) if self.bound is not None else None
        thr_avg = v.get("throttle") or 0.0
        s: dict[str, Any] = {"t": now_ms, "c": self.cluster, "b": broker, "q": q, "e": tags, "src": SRC}
        if q == CONNECTION:
            rate = v.get("accept_rate")
            s.update(rate=rate, accept_rate=rate, count=acc.count)
        else:
            rate = v.get("rate")
            s["rate"] = rate
        share = v.get("share")
        if share is not None:  # a cluster-wide budget: this broker enforces its share of it (the portal's plugin)
            s["budget"] = v.get("budget") if v.get("budget") is not None else bound
            bound = s["share"] = share
        s["bound"] = bound
        tokens = v.get("tokens") if q == MUTATION else None
        bucket_ms = bucket_throttle_ms(tokens, bound)
        if q == MUTATION:
            s["util"] = bucket_util(tokens, bound, *self.mutation_window)
        else:
            s["util"] = rate / bound if rate is not None and bound else None
        throttling = acc.thr_moved or bucket_ms > 0 or (s["util"] is not None and s["util"] > 1.0)
        if q == REQUEST and bound is None:
            # Kafka's request quota throttles only the clients it bounds. An unbounded client's request sensor gets
            # the throttles the controller gave the topic changes its broker forwarded (KafkaApis records them under
            # the request quota, sendForwardedResponse): its controller-mutation sample shows them as throttling
            throttling = False
        s["thr_avg"] = thr_avg
        s["thr_max"] = max(acc.thr_max, thr_avg, bucket_ms)
        s["thr_frac"] = min(1.0, max(thr_avg, bucket_ms) / 1000.0) if throttling else 0.0
        s["tokens"] = tokens
        s["res_ms"] = acc.res_ms
        return s


class SamplePublisher:
    """Publishes polls into the monitor's streams, one ``Sampler`` per broker: a broker's tick replaces its newest
    entries, so a sensor no longer seen leaves the overview.

    :meth:`publish_poll` publishes a broker only when Prometheus scraped it again since its last tick (every series
    of a broker comes from one scrape of its exporter): polling more often than the scrape interval then costs
    queries, not duplicate samples, and no scrape waits longer than one poll interval to be published.
    """

    def __init__(self, client: redis.Redis, cluster: str, *, retention_s: int = 300) -> None:
        self.client = client
        self.cluster = cluster
        self.retention_s = retention_s
        self.samplers: dict[int, Sampler] = {}
        self._scraped: dict[int, int] = {}  # broker -> newest scrape published

    def _sampler(self, broker: int) -> Sampler:
        sampler = self.samplers.get(broker)
        if sampler is None:
            sampler = Sampler(self.client, self.cluster, broker, {}, retention_s=self.retention_s)
            self.samplers[broker] = sampler
        return sampler

    def publish(self, samples: Iterable[Mapping[str, Any]], now_ms: int | None = None) -> int:
        """One tick of every broker: its samples, or none (which clears what it published last)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        per_broker: dict[int, list[Mapping[str, Any]]] = {}
        for s in samples:
            per_broker.setdefault(int(s["b"]), []).append(s)
        brokers = sorted(set(per_broker) | set(self.samplers))
        return sum(self._sampler(b).publish(per_broker.get(b, []), now_ms) for b in brokers)

    def publish_poll(self, poll: Poll) -> list[int]:
        """Publish the brokers of ``poll`` scraped since their last tick (and clear those with nothing left);
        returns the brokers published."""
        per_broker: dict[int, list[Mapping[str, Any]]] = {}
        newest: dict[int, int] = {}
        for s, scraped in zip(poll.samples, poll.scraped_ms, strict=True):
            b = int(s["b"])
            per_broker.setdefault(b, []).append(s)
            newest[b] = max(newest.get(b, 0), scraped)
        done = []
        for b in sorted(set(per_broker) | set(self.samplers)):
            if b in per_broker and newest[b] <= self._scraped.get(b, 0):
                continue  # nothing new from this broker's exporter since its last tick
            if b not in per_broker and self._scraped.get(b) == 0:
                continue  # already cleared
            self._sampler(b).publish(per_broker.get(b, []), poll.at_ms)
            self._scraped[b] = newest.get(b, 0)
            done.append(b)
        return done


class SourceLoop:
    """Polls ``source`` every ``interval_s`` and publishes in a thread of its own, so a slow publish never delays the
    next query: a poll that finds the publisher busy replaces the one waiting (``publish_poll`` skips nothing new).

    The polls (and so the ``bound`` callback) run in the calling thread; ``on_published(poll, brokers, at_ms)`` is
    called from the publishing thread after each publish, ``on_error(exc)`` from either thread on a failure of
    Prometheus or Redis (the loop goes on).
    """

    def __init__(
        self,
        source: PrometheusSource,
        publisher: SamplePublisher,
        *,
        interval_s: float = 1.0,
        on_published: Callable[[Poll, list[int], float], None] | None = None,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.source = source
        self.publisher = publisher
        self.interval_s = interval_s
        self.on_published = on_published
        self.on_error = on_error or (lambda _e: None)
        self.polls = self.published = self.failures = self.replaced = 0
        self._slot: Poll | None = None
        self._cond = threading.Condition()
        self._done = False

    def _publishing(self) -> None:
        while True:
            with self._cond:
                while self._slot is None and not self._done:
                    self._cond.wait()
                poll, self._slot = self._slot, None
            if poll is None:
                return
            try:
                brokers = self.publisher.publish_poll(poll)
            except (redis.RedisError, OSError) as e:
                self.failures += 1
                self.on_error(e)
                continue
            self.published += sum(1 for s in poll.samples if s["b"] in brokers)
            if self.on_published is not None:
                self.on_published(poll, brokers, time.time() * 1000.0)

    def run(self, should_stop: Callable[[], bool], duration_s: float | None = None) -> None:
        """Until ``should_stop()`` or ``duration_s`` seconds; the last poll is published before it returns."""
        with self._cond:
            self._done = False
        worker = threading.Thread(target=self._publishing, name="prometheus-source-publish", daemon=True)
        worker.start()
        started = due = time.monotonic()
        try:
            while not should_stop():
                try:
                    poll = self.source.poll()
                    self.polls += 1
                    with self._cond:
                        self.replaced += self._slot is not None
                        self._slot = poll
                        self._cond.notify()
                except (PrometheusError, OSError) as e:
                    self.failures += 1
                    self.on_error(e)
                now = time.monotonic()
                if duration_s is not None and now - started >= duration_s:
                    break
                due += self.interval_s
                if due < now:  # behind (a slow Prometheus): start again from now, no burst of polls
                    due = now + self.interval_s
                while not should_stop() and time.monotonic() < due:
                    time.sleep(min(0.05, max(0.0, due - time.monotonic())))
        finally:
            with self._cond:
                self._done = True
                self._cond.notify()
            worker.join(timeout=30)
