"""What the clients asked for, where Kafka throttled the traffic a what-if replays: an estimate beside the lower bound.

The recorded rate ``r`` is what Kafka let through, so the clients asked for at least that (the lower bound). What
more they asked for follows from Kafka's throttle, ``QuotaUtils.throttleTime``: a request that takes the sensor's
rate ``R`` over the quota ``L`` (a mean over the window ``W`` of its samples) is answered with

    T = (R - L) / L * W

and the client is muted for ``T``: exactly as long as the window needs, at ``L``, to absorb what came above ``L``.
So a client that asked ``D`` over a window it was free to send in was muted ``(D - L) / L * W``, and
``D = L * (W + T) / W``: the rate, scaled by the time sending took with the throttle over the time it would have
taken without. What that time is depends on what the client does while muted:

* **It goes on at its own pace** (it sends its next request when it would have, or when the throttle ends if that is
  later; what it did not send meanwhile is not sent later: a request-response client, an application that slows
  down). It sends at ``D`` whenever it is not muted, so over a span in which it was muted a share ``f`` of the time
  (the throttle time Kafka returned, over the time observed), ``r = D * (1 - f)``: ``D = r / (1 - f)``, which is
  ``r * (W + T) / W`` cycle by cycle (``from_throttle``). Exact for such a client on the model
  (``tests/pipeline/test_demand.py``).
* **It queues** (Kafka's producers do: records wait in the client's buffer and go as soon as the broker unmutes it).
  Asking anything above ``L``, it is muted back to back: each request's throttle is then about that request's size
  over ``L``, whatever ``D``, ``f`` tends to 1 and ``r / (1 - f)`` only bounds ``D`` from above (measured on a real
  Kafka 4.4 broker: a librdkafka producer asking exactly its 1 MiB/s quota got all of it through and was muted 72 % of
  the time). What grows with ``D`` is its queue: behind by ``T = (D - L) / L * W`` per window ``W`` of its demand,
  its queue time (KIP-714's ``org.apache.kafka.producer.record.queue.time.avg``) grows by ``Δq`` between two of its
  pushes ``S`` apart, over which ``r`` got through, and ``D = r * S / (S - Δq)`` (``from_queue_time``): the same
  ``(W + T) / W`` with the time the client fell behind for ``T``. Exact while its buffer has room (within the error of
  a push's average); once the buffer is full the application is held back too, and ``D`` is at least that.

``estimate`` turns the evidence there is into the what-if's ``demand``: the lower bound, the estimate and which
evidence it rests on, an upper bound from the throttle time when it is not back to back, and one sentence. A queue
time that did not grow over the span (a queue estimate within ``FLAT_QUEUE`` of what got through) estimates nothing:
the client either waited for nothing (it slows down) or its buffer was already full, holding the application back
(the demo's producers fill their 4 MiB within seconds of being throttled); then the other evidence, or none, speaks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from engine.units import format_quota_value, quota_key

from .recorded import SOURCE_WORDS, percent

#: A muted share from which the throttle time no longer bounds demand usefully: clients that queue what is held back
#: are muted back to back at any demand above the quota (r / (1 - f) is 10 times r and more from here).
BACK_TO_BACK = 0.9
#: How far above what got through a queue estimate must be to say more than the lower bound: within it the queue time
#: did not grow beyond its own error (an average per push; the estimates are checked to 5 %, tests/pipeline).
FLAT_QUEUE = 0.05
#: The KIP-714 producer metric of how long records wait in the client's buffer before they are sent (ms).
QUEUE_TIME = "org.apache.kafka.producer.record.queue.time.avg"
#: Points of one client instance's queue time it takes to tell its growth (its first and last are compared).
MIN_POINTS = 2
#: Sources whose ``thr_frac`` measures the time throttled: the clients' statistics (librdkafka sums every throttle
#: time the broker answered). Prometheus's is Kafka's throttle-time average per second (Kafka publishes no
#: throttled-time total per entity), which a client throttled many times a second understates; the engine's sampler
#: counts at most a second of each throttle, which long throttles make read low.
MEASURED_SOURCES = frozenset({"client"})
#: Why a source's share of time throttled bounds nothing, in words.
UNMEASURED = {"prometheus": "from Prometheus the throttle time is an average per throttled request, not a share of "
                            "the time",
              "engine": "the engine's sampler counts at most a second of each throttle, so long ones read short"}


def from_throttle(rate: float, fraction: float) -> float | None:
    """``D = r / (1 - f)``: what a client muted a share ``f`` of the time and sending at its own pace otherwise asked
    for, given the rate ``r`` that got through; an upper bound for a client that queues instead. None from
    ``BACK_TO_BACK`` on (muted back to back: no useful bound)."""
    if not 0.0 <= fraction < BACK_TO_BACK:
        return None
    return rate / (1.0 - fraction)


def from_queue_time(rate: float, span_ms: float, growth_ms: float) -> float | None:
    """``D = r * S / (S - Δq)``: what a queueing client asked for, given the rate ``r`` that got through over ``S``
    and how much its queue time grew meanwhile (a full buffer holds the application back too: then at least this).
    None when the growth is not below the span (no estimate a queue could give)."""
    if span_ms <= 0 or growth_ms >= span_ms:
        return None
    return rate * span_ms / (span_ms - growth_ms)


def queue_growth(points: Iterable[tuple[int, float]], from_ms: int, to_ms: int) -> tuple[int, int, float] | None:
    """How much one client instance's queue time grew between its first and last points inside [from_ms, to_ms]:
    (first time, last time, growth in ms). None with fewer than ``MIN_POINTS``."""
    inside = sorted((int(t), float(q)) for t, q in points
                    if t is not None and from_ms <= t <= to_ms and q is not None and np.isfinite(q))
    if len(inside) < MIN_POINTS or inside[-1][0] <= inside[0][0]:
        return None
    (a, qa), (b, qb) = inside[0], inside[-1]
    return a, b, qb - qa


def queue_demand(client_rates: Mapping[str, float], growths: Mapping[str, Sequence[tuple[int, int, float]]],
                 bytes_between: Callable[[str, int, int], float]) -> tuple[float, int] | None:
    """The clients' demand from their queue times: per client-id with points, ``from_queue_time`` over the widest of
    its instances' spans (the bytes its records carry between that span's ends, ``bytes_between(client_id, a, b)``);
    a client-id without points counts as its rate over the whole span (``client_rates``). Returns (demand, client-ids
    with points), None when no client has points."""
    total, seen = 0.0, 0
    for client_id, rate in client_rates.items():
        found = [g for g in growths.get(client_id, ()) if g is not None]
        d = None
        if found:
            a, b, growth = max(found, key=lambda g: g[1] - g[0])
            d = from_queue_time(bytes_between(client_id, a, b) * 1000.0 / (b - a), b - a, growth)
        if d is not None:
            total += d
            seen += 1
        else:
            total += rate
    return (total, seen) if seen else None


def estimate(key: str, rate: float, recorded: Mapping[str, Any],
             queue: tuple[float, int] | None = None) -> dict[str, Any] | None:
    """The what-if's ``demand``, when the samples say Kafka throttled the recorded traffic materially (else None).

    ``rate``: what got through (the recorded rate over the span); ``recorded``: ``pipeline.recorded``'s answer;
    ``queue``: ``queue_demand``'s (KIP-714 evidence), if any.
    """
    details = recorded.get("recorded_throttling") or {}
    fraction = recorded.get("recorded_throttled_fraction")
    if fraction is None or not details.get("material"):
        return None
    key = quota_key(key)
    source = details.get("source")
    words = SOURCE_WORDS.get(source, f"the {source} samples")
    v = lambda x: format_quota_value(key, x)  # noqa: E731 - the page's units
    measured = source in MEASURED_SOURCES
    upper = from_throttle(rate, fraction) if measured else None
    out: dict[str, Any] = {"lower": rate, "estimate": None, "evidence": None, "upper": upper,
                           "throttled_fraction": fraction, "source": source,
                           "back_to_back": measured and fraction >= BACK_TO_BACK}
    let_through = f"Kafka let {v(rate)} through: the lower bound"
    # a queue that did not grow says nothing above what got through (an estimate not above the lower bound's error)
    flat_queue = queue is not None and queue[0] <= rate * (1 + FLAT_QUEUE)
    if queue is not None and not flat_queue:
        d, clients = queue
        out.update(estimate=d, evidence="queue time", clients_with_queue_time=clients)
        out["text"] = (
            f"They asked for about {v(d)}: their queue time (KIP-714 record.queue.time) grew while Kafka muted them, "
            f"so what it held back waited in their buffers ({v(d)} = the {v(rate)} let through, scaled by how long "
            f"sending took over the time the demand came in); more if a buffer filled and held the application back. "
            f"{let_through}.")
    elif upper is not None:
        out.update(estimate=upper, evidence="throttle time")
        out["text"] = (
            f"They asked for about {v(upper)} if they go on at their own pace after each throttle: Kafka muted them "
            f"{percent(fraction)} of the time (the throttle times it returned, from {words}), so the {v(rate)} that "
            f"got through went in the other {percent(1 - fraction)}. Clients that queue what is held back asked for "
            f"less; {let_through}.")
    elif flat_queue:
        out["text"] = (
            f"They asked for more than the {v(rate)} Kafka let through, by how much their queue time (KIP-714 "
            "record.queue.time) cannot say: it did not grow while Kafka muted them, so their buffers were full and "
            "held the application back (or nothing waited).")
    elif measured:
        out["text"] = (
            f"They asked for more than the {v(rate)} Kafka let through, by how much the throttle times cannot say: "
            f"Kafka muted them back to back ({percent(fraction)} of the time, from {words}), as it does clients that "
            "queue what is held back at any demand above the quota; their queue time (KIP-714 record.queue.time) "
            "would say.")
    else:
        why = UNMEASURED.get(source, f"{words} do not measure the time throttled")
        out["text"] = (
            f"They asked for more than the {v(rate)} Kafka let through, by how much the samples cannot say ({why}); "
            "their queue time (KIP-714 record.queue.time) would say.")
    return out
