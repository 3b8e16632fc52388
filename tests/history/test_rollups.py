"""Hourly history: the rollups job over landed samples, loaded into the portal, drawn on the entity page.

The Celery task body runs here in the test process (it starts ``python -m pipeline.rollups`` as a subprocess,
on real Spark); the expected hours are computed from the samples with pandas.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.test import Client

from history import tasks
from history.models import UsageRollup
from quotas.models import QuotaEntity
from tests.landing_files import write_landing
from tests.people import api

from .conftest import CLUSTER, T0

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

H = 3_600_000
TAGS = "svc-a-1:app-a-1"


def samples(hour: int, seconds: int = 120, rate: float = 100.0, base: int = T0) -> list[dict]:
    """``seconds`` per-second samples at the start of hour ``hour`` on brokers 1 and 2; broker 1 is throttled
    for the first 10 seconds."""
    rows = []
    for s in range(seconds):
        t = base + hour * H + 1000 * s
        for b in (1, 2):
            thr = 0.5 if (b == 1 and s < 10) else 0.0
            rows.append({"t": t, "c": CLUSTER, "b": b, "q": "produce", "e": TAGS, "rate": rate + s * b,
                         "bound": 1000.0, "util": 0.1, "thr_avg": 5.0 * thr, "thr_max": 10.0 * thr, "thr_frac": thr,
                         "tokens": None})
    return rows


@pytest.fixture
def rollup_dirs(settings: Any, tmp_path: Path, redis_url: str) -> Path:
    settings.QUOTAS_LANDING_ROOT = tmp_path / "landing"
    settings.QUOTAS_ROLLUPS_ROOT = tmp_path / "rollups"
    return settings.QUOTAS_LANDING_ROOT


def test_rollups_load_hours_once_and_catch_up_with_new_samples(world: dict[str, Any], rollup_dirs: Path) -> None:
    write_landing(None, rollup_dirs, "samples", samples(0) + samples(1, rate=300.0), "t")
    first = tasks.rollups()
    assert first["loaded"] == 2 and first["rows"] == {"hour": 2, "minute": 4}
    hours = list(UsageRollup.objects.filter(tags=TAGS).order_by("window_start"))
    assert [h.window_start.timestamp() * 1000 for h in hours] == [T0, T0 + H]
    per_second = np.array([(100.0 + s) + (100.0 + 2 * s) for s in range(120)])  # summed over the 2 brokers
    h0 = hours[0]
    assert (h0.cluster, h0.quota_type, h0.seconds) == (CLUSTER, "produce", 120)
    assert h0.bytes == per_second.sum() and h0.rate_max == per_second.max()
    assert h0.rate_p99 == pytest.approx(np.percentile(per_second, 99), rel=1e-12)
    assert h0.throttle_ms == pytest.approx(10 * 0.5 * 1000)
    assert h0.throttled_fraction == pytest.approx(10 * 0.25 / 120)

    again = tasks.rollups()  # nothing new: the recent hours are recomputed, nothing doubles
    assert again["loaded"] == 2
    assert UsageRollup.objects.count() == 2
    assert UsageRollup.objects.get(window_start=h0.window_start).bytes == h0.bytes

    write_landing(None, rollup_dirs, "samples", samples(2, seconds=60), "t")
    write_landing(None, rollup_dirs, "samples", samples(0, seconds=5, rate=9e9), "t")  # landed late, for hour 0
    third = tasks.rollups()
    assert third["loaded"] == 3 and UsageRollup.objects.count() == 3
    late = sum((9e9 + s) + (9e9 + 2 * s) for s in range(5))
    assert UsageRollup.objects.get(window_start=h0.window_start).bytes == pytest.approx(h0.bytes + late)


def test_hours_older_than_the_lookback_are_not_read_again(
    world: dict[str, Any], rollup_dirs: Path, settings: Any
) -> None:
    settings.QUOTAS_ROLLUPS_LOOKBACK_HOURS = 1
    write_landing(None, rollup_dirs, "samples", samples(0) + samples(3), "t")
    tasks.rollups()
    write_landing(None, rollup_dirs, "samples", samples(0, seconds=5, rate=9e9), "t")  # too late for hour 0
    assert tasks.rollups()["loaded"] == 1  # hours 2 and 3 read again; hour 0 is before the lookback
    h0 = UsageRollup.objects.order_by("window_start").first()
    assert h0.bytes == sum((100.0 + s) + (100.0 + 2 * s) for s in range(120))


def test_the_entity_page_and_the_api_show_the_hours_to_whoever_may_see_the_entity(
    world: dict[str, Any], rollup_dirs: Path
) -> None:
    base = int(time.time() * 1000) // H * H - 2 * H  # the page shows the last 7 days
    connections = [{**row, "q": "connection", "e": "ip:10.0.0.1"} for row in samples(0, seconds=3, base=base)]
    write_landing(None, rollup_dirs, "samples", samples(0, base=base) + samples(1, base=base) + connections, "t")
    tasks.rollups()
    entity = QuotaEntity.objects.create(cluster=world["cluster"], user="svc-a-1", client_id="app-a-1")
    client = Client()
    client.force_login(world["alice"])
    page = client.get(f"/entities/{entity.pk}/")
    assert page.status_code == 200
    data = json.loads(re.search(r'id="usage-history-data"[^>]*>(.*?)</script>', page.content.decode(), re.S)[1])
    assert data["tags"] == TAGS and len(data["series"]["produce"]["t"]) == 2 and "connection" not in data["series"]
    assert 'id="usage-history-chart"' in page.content.decode()

    got = api(world["alice"]).get(f"/api/clusters/{CLUSTER}/usage-history/", {"entity": TAGS, "days": 2})
    assert got.status_code == 200 and list(got.json()["series"]) == ["produce"]
    assert got.json()["series"]["produce"]["rate_max"]
    ip = {"entity": "ip:10.0.0.1", "days": 2}  # a per-IP connection sensor: admins and auditors only
    assert api(world["admin"]).get(f"/api/clusters/{CLUSTER}/usage-history/", ip).json()["series"]["connection"]
    assert api(world["alice"]).get(f"/api/clusters/{CLUSTER}/usage-history/", ip).status_code == 403
    denied = api(world["bob"]).get(f"/api/clusters/{CLUSTER}/usage-history/", {"entity": TAGS})
    assert (denied.status_code, denied.json()["code"]) == (403, "PERMISSION_DENIED")
    for params, code in (({"entity": "no-colon"}, 400), ({"entity": TAGS, "days": "0"}, 400)):
        bad = api(world["alice"]).get(f"/api/clusters/{CLUSTER}/usage-history/", params)
        assert (bad.status_code, bad.json()["code"]) == (code, "INVALID_REQUEST")
    assert api(world["alice"]).get("/api/clusters/nowhere/usage-history/", {"entity": TAGS}).status_code == 404


def test_a_missing_landing_area_fails_the_run_with_its_code(world: dict[str, Any], rollup_dirs: Path) -> None:
    from history.jobs import JobFailed

    with pytest.raises(JobFailed) as failed:
        tasks.rollups()
    assert failed.value.code == "MISSING_INPUT"
    assert not UsageRollup.objects.exists()
