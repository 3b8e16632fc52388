"""The portal says what history and previews rest on: rollups loaded from Prometheus samples are "per 5 s, from
Prometheus" on the entity's history (page and API), with what that resolution cannot show; a preview replayed from a
real cluster's sensors says so instead of counting "recorded requests". The pipeline's side is
tests/pipeline/test_prometheus_history.py."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.template.loader import render_to_string

from history import services
from history.models import ImpactPreview, PreviewState
from quotas.models import Cluster
from tests.redis_keys import keys_cleared

pytestmark = pytest.mark.django_db

T0 = 1_700_002_800_000  # an hour boundary


def hour_rows(cluster: str, res_ms: int | None, source: str | None) -> list[dict[str, Any]]:
    row = {"cluster": cluster, "quota_type": "produce", "tags": "alice:app", "user": "alice", "client_id": "app",
           "window_start_ms": T0, "bytes": 3.6e6, "rate_p50": 1000.0, "rate_p95": 1000.0, "rate_p99": 1000.0,
           "rate_max": 1000.0, "throttle_ms": 0.0, "throttled_fraction": 0.0, "thr_max": 0.0, "tokens_min": None,
           "seconds": 3600}
    if res_ms is not None:
        row.update(resolution_ms=res_ms, source=source)
    return [row]


def test_rollups_from_prometheus_say_their_resolution(settings: Any, redis_url: str, tmp_path: Path) -> None:
    settings.QUOTAS_REDIS_URL = redis_url
    out = tmp_path / "granularity=hour"
    out.mkdir()
    rows = hour_rows("res-prod", 5000, "prometheus") + hour_rows("res-lab", 1000, "engine")
    pq.write_table(pa.Table.from_pylist(rows), out / "part-0.parquet")
    with keys_cleared(redis_url, services.RESOLUTION_KEY):
        assert services.load_rollups(out) == 2
        prod = services.history_resolution("res-prod")
        assert prod["text"] == "per 5 s, from Prometheus" and prod["resolution_ms"] == 5000
        assert any("bursts shorter than 5 s" in why for why in prod["cannot_know"])
        lab = services.history_resolution("res-lab")
        assert lab["text"] == "per second, from the engine's sensors" and not lab["cannot_know"]
        # a cluster whose rollups were never loaded: the engine's per-second samples
        assert services.history_resolution("res-none")["text"] == "per second, from the engine's sensors"


def test_a_preview_from_prometheus_says_what_it_rests_on() -> None:
    cluster = Cluster.objects.create(name="res-preview", connector="kafka", bootstrap_servers="127.0.0.1:9")
    resolution = {"source": "prometheus", "resolution_ms": 5000, "step_ms": 100, "text": "per 5 s, from Prometheus",
                  "cannot_know": ["bursts shorter than 5 s: each sample's rate is replayed as even traffic"]}
    result = {"requests": 1200, "throttle_events": 300, "total_delay_ms": 9000, "p99_delay_ms": 80,
              "max_delay_ms": 90, "bytes": 1e6, "recorded_rate": 2000.0, "achieved_rate": 1000.0,
              "throttled_fraction": 0.5, "history_from_ms": T0, "history_to_ms": T0 + 120_000, "brokers": 2,
              "clients": 1, "quota_type": "produce", "closed_loop": True, "skipped_records": 0,
              "resolution": resolution}
    preview = ImpactPreview.objects.create(cluster=cluster, user="alice", client_id="app", key="producer_byte_rate",
                                           value=1000.0, proposal="p" * 64, data_version="v", state=PreviewState.DONE,
                                           result=result, updated=datetime.now(UTC))
    impact = services.summary(preview)
    assert impact is not None and impact["sampled"]
    html = render_to_string("frontend/_impact.html", {"preview": preview, "impact": impact})
    assert "Replayed Kafka's own sensors" in html and "per 5 s, from Prometheus" in html
    assert "cannot know bursts shorter than 5 s" in html and "Throttled slices (100 ms each)" in html
    assert "recorded request" not in html

    preview.result = {**result, "resolution": {"source": "usage", "resolution_ms": None, "cannot_know": [],
                                               "text": "per request, as the clients' usage was recorded"}}
    html = render_to_string("frontend/_impact.html", {"preview": preview, "impact": services.summary(preview)})
    assert "1,200 recorded requests" in html and "cannot know" not in html  # a count grouped as people read it
