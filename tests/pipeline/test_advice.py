"""The advice's search replays exactly as the per-record rows of ``replay_frame`` say, without building them."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from pipeline.advice import Replays, advise
from pipeline.replay import replay_frame, throttled_fraction

ENTITY = ("svc", "app")


def usage(seed: int) -> pd.DataFrame:
    """One client's requests on three brokers: bursty sizes, times with ties, landed out of order."""
    rng = np.random.default_rng(seed)
    n = 3000
    t = np.sort(rng.integers(0, 12_000, n)) * 10  # many requests at the same millisecond
    value = rng.lognormal(6, 1, n) * np.where(rng.random(n) < 0.2, 4.0, 1.0)
    frame = pd.DataFrame({"cluster": "prod", "quota_type": "produce", "broker": rng.integers(1, 4, n),
                          "user": "svc", "client_id": "app", "seq": np.arange(n), "t_ms": t, "value": value})
    return frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_search_replays_as_the_per_record_rows_say(seed: int) -> None:
    pdf = usage(seed)
    replays = Replays(pdf, "produce", 11, 1000, ENTITY)
    for quota in (100.0, 1000.0, 2_345.0, 10_000.0, 1e12):
        rows = pd.concat([replay_frame(g, "produce", quota, entity=ENTITY) for _, g in pdf.groupby("broker")])
        assert replays.throttled_fraction(quota) == throttled_fraction(rows)
        peak, want = replays.peak(quota), float(rows["measured"].max())
        assert peak == want or (math.isnan(peak) and math.isnan(want))
    (advice,) = advise(pdf, 0.01, entity=ENTITY).to_dict(orient="records")
    assert replays.throttled_fraction(advice["quota"]) <= 0.01 < replays.throttled_fraction(advice["quota"] - 1)
