"""Kafka's quota primitives, stated as the seeds state them, on both engines."""

from __future__ import annotations

from engine.decisions import Decision, Kind, Op
from engine.javamath import java_round
from engine.quota_utils import bounded_throttle_time_ms, throttle_time_ms, token_bucket_throttle_ms

from .conftest import T0


def run(backend, key: str, *decisions: Decision):
    for d in decisions:
        d.key = key
    return backend.execute(list(decisions))


def rate(op: Op, value: float, t: int, bound: float | None = None, samples: int = 11, window: int = 1000) -> Decision:
    return Decision("", Kind.RATE, op, value, t, bound, samples, window)


def bucket(op: Op, value: float, t: int, bound: float, samples: int = 10, window: int = 1000) -> Decision:
    return Decision("", Kind.TOKEN_BUCKET, op, value, t, bound, samples, window)


def test_window_is_padded_to_samples_minus_one_whole_windows(backend, namespace) -> None:
    (o,) = run(backend, f"qe:{{{namespace}|r}}", rate(Op.RECORD, 50.0, T0))
    assert o.window_ms == 10_000  # (11 - 1) * 1000: a fresh sensor is not a spike
    assert o.value == 50.0 / 10.0


def test_a_new_sample_starts_at_the_first_record_once_the_current_is_a_window_old(backend, namespace) -> None:
    key = f"qe:{{{namespace}|r}}"
    outs = run(backend, key, rate(Op.RECORD, 10.0, T0, samples=2, window=1000),
               rate(Op.RECORD, 10.0, T0 + 999, samples=2, window=1000),
               rate(Op.RECORD, 10.0, T0 + 1500, samples=2, window=1000))
    # elapsed since the oldest start (T0), padded up to one whole window while less than one has passed;
    # the third record opens sample 2 at T0+1500 and the window is then the real 1500 ms
    assert [o.window_ms for o in outs] == [1000, 1999, 1500]
    assert outs[-1].sum == 30.0


def test_samples_whose_last_event_is_n_windows_old_are_purged(backend, namespace) -> None:
    key = f"qe:{{{namespace}|r}}"
    outs = run(backend, key, rate(Op.RECORD, 100.0, T0, samples=3, window=1000),
               rate(Op.MEASURE, 0.0, T0 + 2999, samples=3, window=1000),
               rate(Op.MEASURE, 0.0, T0 + 3000, samples=3, window=1000))
    assert outs[1].sum == 100.0
    assert outs[2].sum == 0.0


def test_equality_with_the_bound_is_not_a_violation(backend, namespace) -> None:
    # 100 over a padded 10 s window is exactly 10/s
    (at,) = run(backend, f"qe:{{{namespace}|a}}", rate(Op.RECORD, 100.0, T0, bound=10.0))
    (over,) = run(backend, f"qe:{{{namespace}|b}}", rate(Op.RECORD, 100.5, T0, bound=10.0))
    assert not at.violated
    assert over.violated
    assert java_round(over.throttle_raw) == throttle_time_ms(10.05, 10.0, 10_000) == 50


def test_throttle_formula_brings_the_rate_back_to_the_bound() -> None:
    observed, target, window = 15.0, 10.0, 10_000
    x = throttle_time_ms(observed, target, window)
    assert x == 5000
    assert observed * window / (window + x) == target
    assert bounded_throttle_time_ms(observed, target, window, 1000) == 1000


def test_token_bucket_kip599_example(backend, namespace) -> None:
    # Q = 5/s, S * W = 100 s: B = 500. A burst of 560 leaves -60 tokens: 12 s to refill.
    key = f"qe:{{{namespace}|tb}}"
    first, = run(backend, key, bucket(Op.MEASURE, 0.0, T0, 5.0, samples=100, window=1000))
    assert first.value == 500.0  # a bucket first touched at an epoch time is full
    burst, = run(backend, key, bucket(Op.RECORD, 560.0, T0, 5.0, samples=100, window=1000))
    assert burst.value == -60.0 and burst.violated
    assert token_bucket_throttle_ms(burst.value, 5.0) == 12_000
    later, = run(backend, key, bucket(Op.CHECK, 0.0, T0 + 12_000, 5.0, samples=100, window=1000))
    assert later.value == 0.0 and not later.violated  # 0 tokens is not a violation


def test_token_bucket_refill_is_capped_at_burst(backend, namespace) -> None:
    key = f"qe:{{{namespace}|tb}}"
    outs = run(backend, key, bucket(Op.RECORD_NOCHECK, 30.0, T0, 2.0), bucket(Op.MEASURE, 0.0, T0 + 10**9, 2.0))
    assert outs[1].value == 10 * 1.0 * 2.0


def test_strict_check_rejects_before_recording(backend, namespace) -> None:
    key = f"qe:{{{namespace}|tb}}"
    outs = run(backend, key, bucket(Op.STRICT, 150.0, T0, 10.0), bucket(Op.STRICT, 1.0, T0, 10.0))
    assert outs[0].recorded and not outs[0].violated and outs[0].value == -50.0  # accepted: tokens were >= 0
    assert outs[1].violated and not outs[1].recorded and outs[1].value == -50.0  # rejected, nothing recorded


def test_changing_the_bound_never_resets_usage(backend, namespace) -> None:
    key = f"qe:{{{namespace}|r}}"
    outs = run(backend, key, rate(Op.RECORD, 300.0, T0, bound=100.0), rate(Op.CHECK, 0.0, T0 + 1, bound=20.0))
    assert outs[1].sum == 300.0
    assert outs[1].violated
