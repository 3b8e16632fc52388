"""Impact previews: asked through the API, run by a real Celery worker as a Spark job, cached per proposal.

The figures a preview reports are checked against the replay computed here directly (pandas, no Spark, no
worker) on the same records: the preview must replay exactly the records the entity's quota governs.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import redis
from django.test import Client
from django.utils import timezone
from django.utils.html import escape

from engine.entities import DEFAULT
from engine.monitor import Sampler
from engine.units import format_quota_value
from history import jobs, services
from history.models import ImpactPreview, PreviewState
from pipeline.advice import advise
from pipeline.replay import replay_frame, summarize
from quotas.models import QuotaEntity, QuotaValue
from quotas.workflow import quota_requests
from tests.celery_worker import CELERY_KEYS, Worker
from tests.database import database_url
from tests.people import api
from tests.redis_keys import keys_cleared
from tests.waiting import wait_for

from .conftest import CLUSTER, T0, steady, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

PBR = "producer_byte_rate"
CLAIM = services.CLAIM_STALE_S
ALICE = {"cluster": CLUSTER, "user": "svc-a-1", "client_id": "app-a-1", "key": PBR}


def finished(pk: int, timeout: float = 180) -> ImpactPreview:
    wait_for(f"preview #{pk} to finish", lambda: ImpactPreview.objects.get(pk=pk).finished, timeout)
    return ImpactPreview.objects.get(pk=pk)


def expected(records_by_broker: dict[int, list], value: float, entity: tuple | None = None) -> tuple[dict, float]:
    """The replay's summary and the advised quota, computed here from the records themselves (with the quota on
    ``entity``, by default the records' own names)."""
    frames = []
    for broker, records in records_by_broker.items():
        pdf = pd.DataFrame(records, columns=["user", "client_id", "value", "t_ms"]).assign(
            cluster=CLUSTER, broker=broker, quota_type="produce", seq=range(len(records))
        )
        frames.append(pdf)
    rows = pd.concat([replay_frame(f, "produce", value, entity=entity) for f in frames])
    advised = advise(pd.concat(frames), 0.01, entity=entity)
    return summarize(rows), float(advised["quota"].iloc[0])


def test_a_member_previews_a_proposal_a_worker_replays_it_and_the_answer_is_cached(
    world: dict[str, Any], land: Callable, worker_factory: Callable
) -> None:
    """... and the worker's next previews run in the Spark session the first one started (the same Spark
    application: no new JVM), on the data landed since."""
    traffic = {1: steady("svc-a-1", "app-a-1", 60), 2: steady("svc-a-1", "app-a-1", 60, size=50.0)}
    other = steady("svc-a-1", "app-a-2", 60, size=5000.0)  # another client of the user: not this entity's
    land(1, traffic[1] + other)
    root = land(2, traffic[2])
    worker_factory(**worker_env(root))
    alice = api(world["alice"])

    asked = alice.post("/api/previews/", {**ALICE, "value": 600}, format="json")
    assert asked.status_code == 202, asked.content
    assert asked.json()["state"] == PreviewState.QUEUED
    preview = finished(asked.json()["id"])
    assert preview.state == PreviewState.DONE, (preview.error_code, preview.error_message)
    want, advised = expected(traffic, 600.0)
    got = preview.result
    for name in ("requests", "throttle_events", "total_delay_ms", "p99_delay_ms", "max_delay_ms", "bytes"):
        assert got[name] == want[name], name
    for name in ("recorded_rate", "achieved_rate", "throttled_fraction"):
        assert got[name] == pytest.approx(want[name], rel=1e-12), name
    assert got["throttle_events"] > 0 and got["brokers"] == 2 and got["clients"] == 1
    (advice,) = got["advice"]["entities"]
    assert advice["quota"] == advised and advice["throttled_fraction"] <= 0.01
    assert (got["history_from_ms"], got["history_to_ms"]) == (T0, T0 + 59_900)
    # no live samples were landed: whether the traffic was throttled while recorded is unknown, and not guessed
    assert got["recorded_throttled_fraction"] is None and got["recorded_throttling"]["samples"] == 0
    assert got["advice"]["lower_bound"] is False and got["advice"]["note"] is None

    polled = alice.get(f"/api/previews/{preview.pk}/").json()
    assert (polled["state"], polled["progress"], polled["stage"], polled["error"]) == ("done", 1.0, "done", None)

    again = alice.post("/api/previews/", {**ALICE, "value": 600}, format="json")
    assert (again.status_code, again.json()["id"]) == (200, preview.pk)  # cached: nothing recomputed
    other_value = alice.post("/api/previews/", {**ALICE, "value": 700}, format="json")
    assert other_value.status_code == 202 and other_value.json()["id"] != preview.pk
    land(1, steady("svc-a-1", "app-a-1", 10, start_ms=T0 + 60_000))  # new usage landed: a new answer is due
    fresh = alice.post("/api/previews/", {**ALICE, "value": 600}, format="json")
    assert fresh.status_code == 202 and fresh.json()["id"] not in (preview.pk, other_value.json()["id"])
    assert ImpactPreview.objects.count() == 3

    # the first preview started the worker's Spark session; the next ones ran in it, and read the new data
    first, second, third = (finished(p.pk) for p in ImpactPreview.objects.order_by("pk"))
    assert first.result["spark"]["warm"] is False and first.result["spark"]["jobs"] == 1
    for later, jobs_run in ((second, 2), (third, 3)):
        assert later.state == PreviewState.DONE, later.error_message
        assert later.result["spark"] == {**first.result["spark"], "warm": True, "jobs": jobs_run}
    assert second.result["value"] == 700
    assert third.result["requests"] == got["requests"] + 100  # the 10 s landed since: 100 more records


def test_advice_on_traffic_throttled_while_recorded_says_it_is_a_lower_bound_in_the_api_and_on_the_page(
    world: dict[str, Any], land: Callable, worker_factory: Callable, redis_url: str
) -> None:
    """The engine's sampler saw the client's sensor throttled 30 % of each second under 800 B/s while its 1000 B/s
    were recorded: its samples are published to the firehose and landed with the usage, as the portal does."""
    client = redis.Redis.from_url(redis_url)
    sampler = Sampler(client, CLUSTER, 1, {})
    for s in range(1, 61):
        t = T0 + 1000 * s
        sampler.publish([{"t": t, "c": CLUSTER, "b": 1, "q": "produce", "e": "svc-a-1:app-a-1", "rate": 1000.0,
                          "bound": 800.0, "util": 1.25, "thr_avg": 300.0, "thr_max": 300.0, "thr_frac": 0.3,
                          "tokens": None}], t)
    client.close()
    root = land(1, steady("svc-a-1", "app-a-1", 60))
    worker_factory(**worker_env(root))
    alice = api(world["alice"])
    preview = finished(alice.post("/api/previews/", {**ALICE, "value": 600}, format="json").json()["id"])
    assert preview.state == PreviewState.DONE, preview.error_message

    result = alice.get(f"/api/previews/{preview.pk}/").json()["result"]
    assert result["recorded_throttled_fraction"] == pytest.approx(0.3)
    assert result["recorded_quota"] == 800.0 and result["recorded_throttling"]["source"] == "engine"
    advice = result["advice"]
    (advised,) = advice["entities"]
    assert advised["quota"] > 800 and advice["lower_bound"] and not advice["at_or_below_recorded_quota"]
    assert advice["note"] == (
        "Kafka throttled this traffic 30% of the time while it was recorded under 800 B/s, so the rates recorded are "
        f"what Kafka let through, not what the clients asked for: {format_quota_value(PBR, advised['quota'])} is a "
        "lower bound, and the value that keeps throttled time under 1% may be well above it.")

    pages = Client()
    pages.force_login(world["alice"])
    html = pages.get(f"/previews/{preview.pk}/").content.decode()
    assert "Right-sizing, a lower bound:" in html
    assert f'<p class="warning" data-figure="advice-caveat">{escape(advice["note"])}</p>' in html
    assert "Throttled while recorded" in html and "30.00%" in html


class TestOnOneWorker:
    """Previews that only need a pipeline worker, run by one worker and its Spark session (started by the first
    preview that reaches Spark) on one landing area, emptied after each test (the worker reads the area it was
    started with, ``QUOTAS_LANDING_ROOT``)."""

    @pytest.fixture(scope="class")
    @classmethod
    def worker(
        cls, redis_url: str, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[tuple[Worker, Path]]:
        root = tmp_path_factory.mktemp("one-worker") / "landing"
        with keys_cleared(redis_url, *CELERY_KEYS):  # no message of another test for it, none left behind
            w = Worker(redis_url, database_url(), root.parent / "worker.log", name="previews",
                       QUOTAS_LANDING_SECONDS="20", **worker_env(root))
            w.start()
            try:
                yield w, root
            finally:
                w.stop()

    @pytest.fixture
    def landing_root(self, worker: tuple[Worker, Path]) -> Iterator[Path]:
        """``land`` writes where the worker reads; nothing of it is left for the next test."""
        yield worker[1]
        shutil.rmtree(worker[1], ignore_errors=True)

    def test_a_user_level_proposal_replays_all_its_clients_through_one_sensor(
        self, world: dict[str, Any], land: Callable
    ) -> None:
        a1, a2 = steady("svc-a-1", "app-a-1", 30), steady("svc-a-1", "app-a-2", 30, start_ms=T0 + 50)
        land(1, sorted(a1 + a2, key=lambda r: r[3]) + steady("svc-a-9", "app-a-1", 30))
        asked = api(world["alice"]).post(
            "/api/previews/", {"cluster": CLUSTER, "user": "svc-a-1", "key": PBR, "value": 1500}, format="json"
        )
        preview = finished(asked.json()["id"])
        assert preview.state == PreviewState.DONE, preview.error_message
        # Kafka's user-level quota: one sensor for every client-id of the user, here 2000 B/s against 1500
        shared = [("svc-a-1", "", v, t) for _, _, v, t in sorted(a1 + a2, key=lambda r: r[3])]
        want, advised = expected({1: shared}, 1500.0, entity=("svc-a-1", None))
        assert preview.result["requests"] == want["requests"] == 600
        assert preview.result["throttle_events"] == want["throttle_events"] > 0
        assert preview.result["total_delay_ms"] == want["total_delay_ms"]
        (advice,) = preview.result["advice"]["entities"]
        assert advice["quota"] == advised and 1500 < advised <= 2100  # the shared sensor sees ~2000 B/s

    def test_a_cluster_wide_proposal_replays_every_broker_together(self, world: dict[str, Any], land: Callable) -> None:
        # 1000 B/s on each of two brokers: per broker 1500 throttles nothing, as a cluster-wide budget it holds 2000
        land(1, steady("svc-a-1", "app-a-1", 30))
        land(2, steady("svc-a-1", "app-a-1", 30, start_ms=T0 + 50))
        alice = api(world["alice"])
        wide = alice.post("/api/previews/", {**ALICE, "value": 1500, "scope": "cluster_wide"}, format="json")
        per_broker = alice.post("/api/previews/", {**ALICE, "value": 1500}, format="json")
        assert wide.json()["id"] != per_broker.json()["id"] and wide.json()["scope"] == "cluster_wide"
        wide_done, per_broker_done = finished(wide.json()["id"]), finished(per_broker.json()["id"])
        assert wide_done.state == per_broker_done.state == PreviewState.DONE, wide_done.error_message
        assert per_broker_done.result["throttle_events"] == 0
        assert wide_done.result["scope"] == "cluster_wide" and wide_done.result["brokers"] == 2
        assert wide_done.result["throttle_events"] > 0
        assert wide_done.result["achieved_rate"] < per_broker_done.result["achieved_rate"]
        refused = alice.post("/api/previews/", {**ALICE, "key": "controller_mutation_rate", "value": 5,
                                                "scope": "cluster_wide"}, format="json")
        assert (refused.status_code, refused.json()["code"]) == (400, "INVALID_REQUEST")
        assert "cannot be cluster-wide" in refused.json()["details"]["scope"][0]

    def test_no_history_and_corrupt_files_fail_with_their_code_and_a_message(
        self, world: dict[str, Any], land: Callable
    ) -> None:
        root = land(1, steady("svc-a-1", "app-a-1", 5))
        alice = api(world["alice"])
        nobody = {**ALICE, "client_id": "app-a-404", "value": 1000}
        preview = finished(alice.post("/api/previews/", nobody, format="json").json()["id"])
        assert (preview.state, preview.error_code) == (PreviewState.FAILED, "NO_HISTORY")
        assert "app-a-404" in preview.error_message and CLUSTER in preview.error_message
        # the worker's own cadence, never a placeholder or a path of the server
        assert preview.error_message.endswith("Usage is landed every 20 s (QUOTAS_LANDING_SECONDS) while its clients "
                                              "run; ask again after that.")
        assert "<" not in preview.error_message and str(root) not in preview.error_message
        body = alice.get(f"/api/previews/{preview.pk}/").json()
        assert body["error"] == {"code": "NO_HISTORY", "message": preview.error_message}
        again = alice.post("/api/previews/", nobody, format="json")
        assert (again.status_code, again.json()["id"]) == (200, preview.pk)  # no history stays no history

        hour = next((root / "usage").glob("date=*/hour=*"))
        (hour / "part-zz-corrupt.parquet").write_bytes(b"not parquet at all")
        broken = finished(alice.post("/api/previews/", {**ALICE, "value": 1000}, format="json").json()["id"])
        assert (broken.state, broken.error_code) == (PreviewState.FAILED, "CORRUPT_INPUT")
        assert "Parquet" in broken.error_message
        assert str(root) not in broken.error_message and "/" not in broken.error_message.replace("'/'", "")
        again = alice.post("/api/previews/", {**ALICE, "value": 1000}, format="json")
        assert (again.status_code, again.json()["id"]) == (200, broken.pk)  # the same file stays corrupt: not rerun

    def test_a_preview_before_anything_landed_says_when_to_ask_again_and_names_no_server_file(
        self, world: dict[str, Any], landing_root: Path
    ) -> None:
        """A fresh demo: nothing landed yet. The answer is a typed code and a sentence, never the landing path."""
        assert not landing_root.exists()
        preview = finished(
            api(world["alice"]).post("/api/previews/", {**ALICE, "value": 600}, format="json").json()["id"]
        )

        assert (preview.state, preview.error_code) == (PreviewState.FAILED, "MISSING_INPUT")
        assert "landed every" in preview.error_message and "ask again" in preview.error_message
        assert str(landing_root.parent) not in preview.error_message


@pytest.mark.parametrize(
    ("who", "body", "status", "code"),
    [
        ("alice", {**ALICE, "key": "bogus_rate", "value": 1}, 400, "INVALID_REQUEST"),
        ("alice", {**ALICE, "value": 0}, 400, "INVALID_REQUEST"),
        ("alice", {**ALICE, "value": 10.5}, 400, "INVALID_REQUEST"),
        ("alice", {**ALICE, "value": "lots"}, 400, "INVALID_REQUEST"),
        ("alice", {**ALICE, "value": 10**400}, 400, "INVALID_REQUEST"),
        ("alice", {**ALICE, "client_id": "x" * 256, "value": 1}, 400, "INVALID_REQUEST"),
        ("alice", {**ALICE, "user": None, "client_id": None, "value": 1}, 400, "INVALID_REQUEST"),
        ("alice", {**ALICE, "cluster": "nowhere", "value": 1}, 404, "NOT_FOUND"),
        ("bob", {**ALICE, "value": 1000}, 403, "PERMISSION_DENIED"),
        ("alice", {**ALICE, "user": "svc-b-1", "value": 1000}, 403, "PERMISSION_DENIED"),
    ],
)
def test_bad_proposals_are_refused_with_a_typed_error_and_nothing_is_queued(
    world: dict[str, Any], land: Callable, who: str, body: dict, status: int, code: str
) -> None:
    land(1, steady("svc-a-1", "app-a-1", 1))
    answer = api(world[who]).post("/api/previews/", body, format="json")
    assert (answer.status_code, answer.json()["code"]) == (status, code), answer.content
    assert answer.json()["message"]
    assert not ImpactPreview.objects.exists()


def test_a_proposal_may_be_written_with_a_unit_as_on_the_request_form(world: dict[str, Any], land: Callable) -> None:
    land(1, steady("svc-a-1", "app-a-1", 1))
    alice = api(world["alice"])
    asked = alice.post("/api/previews/", {**ALICE, "value": "1.5 MiB/s"}, format="json")
    assert asked.status_code == 202, asked.content
    assert asked.json()["value"] == 1_572_864
    again = alice.post("/api/previews/", {**ALICE, "value": 1_572_864}, format="json")
    assert again.json()["id"] == asked.json()["id"]  # the same proposal, however it was written
    refused = alice.post("/api/previews/", {**ALICE, "value": "1.5 MB/s"}, format="json")
    assert (refused.status_code, refused.json()["code"]) == (400, "INVALID_REQUEST")
    assert "1536 KiB/s, 1.5 MiB/s, 2 GiB/s" in refused.json()["details"]["value"][0]


def test_a_preview_is_read_by_whoever_may_see_its_entity_only(world: dict[str, Any], land: Callable) -> None:
    land(1, steady("svc-a-1", "app-a-1", 1))
    asked = api(world["auditor"]).post("/api/previews/", {**ALICE, "value": 1000}, format="json")
    assert asked.status_code == 202  # a preview changes nothing: auditors may ask
    pk = asked.json()["id"]
    assert api(world["alice"]).get(f"/api/previews/{pk}/").status_code == 200
    denied = api(world["bob"]).get(f"/api/previews/{pk}/")
    assert (denied.status_code, denied.json()["code"]) == (404, "NOT_FOUND")
    pages = Client()  # the HTML fragment the pages poll keeps the same rule
    pages.force_login(world["alice"])
    assert pages.get(f"/previews/{pk}/").status_code == 200
    pages.force_login(world["bob"])
    assert pages.get(f"/previews/{pk}/").status_code == 404


def test_a_preview_running_on_a_live_worker_is_not_run_twice(world: dict[str, Any], land: Callable) -> None:
    land(1, steady("svc-a-1", "app-a-1", 1))
    preview = services.ensure_preview(world["alice"], world["cluster"], "svc-a-1", "app-a-1", PBR, 1000.0)
    ImpactPreview.objects.filter(pk=preview.pk).update(state=PreviewState.RUNNING, updated=timezone.now())
    assert services.run_preview(preview.pk) == {"preview": preview.pk, "running_elsewhere": True}  # checked later
    ImpactPreview.objects.filter(pk=preview.pk).update(state=PreviewState.DONE, result={"requests": 1})
    assert services.run_preview(preview.pk)["skipped"] == "already done"
    assert services.run_preview(10**9)["skipped"].startswith("no such preview")


def test_a_queued_preview_stays_the_requests_until_a_worker_takes_it(world: dict[str, Any], land: Callable) -> None:
    """A busy pipeline worker leaves previews queued for minutes: the request's page shows the queued one (and what
    it waits behind) instead of queueing another on each visit once newer data has landed."""
    land(1, steady("svc-a-1", "app-a-1", 1))
    req = quota_requests.submit(world["alice"], None, world["cluster"], user="svc-a-1", client_id="app-a-1", key=PBR,
                                value=1000, reason="queued behind a busy worker")
    first = services.preview_of_request(req, "landed-1")
    assert first.state == PreviewState.QUEUED and services.waiting_for(first) == ""
    ImpactPreview.objects.filter(pk=first.pk).update(updated=timezone.now() - timedelta(seconds=3 * CLAIM))
    assert services.preview_of_request(req, "landed-2").pk == first.pk  # newer data: still the one in the queue
    other = services.ensure_preview(world["alice"], world["cluster"], "svc-a-1", "app-a-1", PBR, 2000.0, "landed-2")
    assert services.waiting_for(other) == "behind 1 other preview"
    ImpactPreview.objects.filter(pk=first.pk).update(updated=timezone.now() - timedelta(seconds=11 * CLAIM))
    assert services.preview_of_request(req, "landed-2").pk not in (first.pk, other.pk)  # lost long ago: asked anew


def test_the_preview_names_quotas_kafka_would_apply_first(world: dict[str, Any], land: Callable) -> None:
    land(1, steady("svc-a-1", "app-a-1", 1))
    cluster = world["cluster"]
    for user, client_id in ((DEFAULT, None), ("svc-a-2", None), (None, "app-a-1"), ("svc-a-1", "app-a-1")):
        entity = QuotaEntity.objects.create(cluster=cluster, user=user, client_id=client_id)
        QuotaValue.objects.create(entity=entity, key=PBR, value=5000.0)
    by_client = services.ensure_preview(None, cluster, None, "app-a-1", PBR, 1000.0)  # level 7
    # before a client-id's own quota (level 7): alice's pair (1), any user's own quota (3: svc-a-2 runs app-a-1
    # too) and the default user's (6)
    assert services.earlier_quotas(by_client) == [
        "/config/users/<default>",
        "/config/users/svc-a-1/clients/app-a-1",
        "/config/users/svc-a-2",
    ]
    exact = services.ensure_preview(None, cluster, "svc-a-1", "app-a-1", PBR, 1000.0)  # level 1: nothing first
    assert services.earlier_quotas(exact) == []
    own_user = services.ensure_preview(None, cluster, "svc-a-1", None, PBR, 1000.0)  # level 3
    assert services.earlier_quotas(own_user) == ["/config/users/svc-a-1/clients/app-a-1"]


def test_the_job_reports_progress_from_start_to_done(world: dict[str, Any], land: Callable) -> None:
    root = land(1, steady("svc-a-1", "app-a-1", 20))
    seen: list[tuple[str, float]] = []
    result = jobs.run(
        "whatif",
        [
            "--root",
            str(root),
            "--cluster",
            CLUSTER,
            "--user",
            "svc-a-1",
            "--client-id",
            "app-a-1",
            "--key",
            PBR,
            "--value",
            "500",
            "--advice-target",
            "0.01",
        ],
        lambda stage, fraction: seen.append((stage, fraction)),
    )
    assert result["requests"] == 200
    stages = [s for s, _ in seen]
    for stage in ("reading the landed history", "replaying the history", "right-sizing", "done"):
        assert stage in stages
    fractions = [f for _, f in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and 0 < fractions[1] < 1


def test_a_job_that_refuses_its_input_raises_its_code(world: dict[str, Any], land: Callable) -> None:
    root = land(1, steady("svc-a-1", "app-a-1", 1))
    with pytest.raises(jobs.JobFailed) as failed:
        jobs.run("whatif", ["--root", str(root), "--cluster", CLUSTER, "--user", "x", "--key", "bogus", "--value", "1"])
    assert failed.value.code == "INVALID_REQUEST" and "bogus" in failed.value.message


def test_covered_text_says_how_much_traffic_a_preview_replayed() -> None:
    from history.services import covered_text

    assert [covered_text(ms) for ms in (45_000, 180_000, 3 * 3600_000, 3 * 86400_000)] == [
        "based on 45 s of traffic",
        "based on 3 min of traffic",
        "based on 3.0 h of traffic",
        "based on 3.0 days of traffic",
    ]


def test_previews_have_a_lane_of_their_own_and_rollups_yield_the_cpu() -> None:
    """A preview is routed to its own queue (a worker that only runs previews), the rollups to the pipeline queue;
    the rollups' subprocess runs at a lower priority; only a worker of the previews' queue warms a Spark session."""
    from celery import current_app

    from history import tasks

    route = current_app.amqp.router.route
    assert route({}, services.PREVIEW_TASK)["queue"].name == services.PREVIEWS_QUEUE == "previews"
    assert route({}, "history.tasks.rollups")["queue"].name == "pipeline"
    assert jobs.ROLLUPS_NICE > 0
    assert not tasks.consumes_previews()  # this process takes no queue: it warms no Spark


def test_failures_read_as_sentences_with_no_server_path_nor_a_placeholder(settings: Any) -> None:
    settings.QUOTAS_LANDING_SECONDS = 20
    none_yet = "No recorded produce usage for user 'a' on cluster 'c': nothing to replay yet."
    assert services.for_people("NO_HISTORY", none_yet) == (
        f"{none_yet} Usage is landed every 20 s (QUOTAS_LANDING_SECONDS) while its clients run; ask again after that.")
    with_path = "Could not read file:/srv/portal/.run/landing/usage/date=2026-01-01/part-1.parquet: Bad"
    for code in ("NO_HISTORY", "SOMETHING_NEW"):
        shown = services.for_people(code, with_path)
        assert "/srv" not in shown and "<" not in shown and "worker's log" in shown
    assert "every 20 s" in services.for_people("MISSING_INPUT", with_path)


def test_the_page_says_where_the_traffic_came_from_and_compares_each_broker_with_its_bound(
    world: dict[str, Any],
) -> None:
    """A principal seen on one of the cluster's brokers: the page says so and why, states the per-broker bound
    beside the per-broker rate it is compared with, and puts what the clients asked for beside what got through."""
    kib = 1024
    demand = {"lower": 598.63 * kib, "estimate": None, "evidence": None, "upper": None, "back_to_back": True,
              "source": "client", "throttled_fraction": 0.91, "text": "They asked for more than 598.63 KiB/s."}
    result = {
        "quota_type": "produce", "requests": 5000, "clients": 1, "brokers": 1, "closed_loop": True,
        "history_from_ms": T0, "history_to_ms": T0 + 60_000, "resolution": {"source": "usage"},
        "throttle_events": 0, "throttled_fraction": 0.0, "total_delay_ms": 0, "p99_delay_ms": 0, "max_delay_ms": 0,
        "recorded_rate": 598.63 * kib, "achieved_rate": 598.63 * kib, "recorded_throttled_fraction": 0.91,
        "recorded_quota": 512.0 * kib, "per_broker": [{"broker": 1, "requests": 5000, "bytes": 1.0,
                                                       "recorded_rate": 598.63 * kib, "throttle_events": 0}],
        "demand": demand,
    }
    preview = ImpactPreview.objects.create(cluster=world["cluster"], user="svc-a-1", key=PBR, value=1024 * kib,
                                           proposal="p", data_version="v", state=PreviewState.DONE, result=result)
    pages = Client()
    pages.force_login(world["alice"])
    html = pages.get(f"/previews/{preview.pk}/").content.decode()
    assert ("Recorded on broker 1, 1 of hist&#x27;s 2 brokers: Kafka counts a client&#x27;s requests on the broker "
            "that leads each partition it writes to, and bounds each broker&#x27;s sensor on its own, so "
            "producer_byte_rate = 1 MiB/s applies per broker (a client on all 2 could get up to 2 × 1 MiB/s).") in html
    assert ("598.63 KiB/s on broker 1; Kafka bounded each broker at 512 KiB/s then (a rate above it: Kafka "
            "throttles after a request, not before") in html
    assert 'title="524,288 B/s">512 KiB/s</span> per broker</dd>' in html
    assert re.search(r'<dd data-figure="demand">more than <span[^>]*>598.63 KiB/s</span></dd>', html)
    assert demand["text"] in html

    wide = ImpactPreview.objects.create(cluster=world["cluster"], user="svc-a-1", key=PBR, value=1024 * kib,
                                        scope="cluster_wide", proposal="w", data_version="v", state=PreviewState.DONE,
                                        result={**result, "demand": {**demand, "estimate": 2048.0 * kib,
                                                                     "evidence": "queue time"}})
    html = pages.get(f"/previews/{wide.pk}/").content.decode()
    assert "as a cluster-wide budget, producer_byte_rate = 1 MiB/s is one bound for the sum over hist&#x27;s" in html
    assert 'title="524,288 B/s">512 KiB/s</span></dd>' in html  # a share of a budget, not a per-broker bound
    assert re.search(r'<dd data-figure="demand">about <span[^>]*>2 MiB/s</span> \(queue time\)</dd>', html)


def test_where_the_traffic_came_from_reads_well_for_any_number_of_brokers() -> None:
    from history.preview_text import recorded_per_broker, where_from

    rows = [{"broker": b, "recorded_rate": 1024.0 * b} for b in (1, 2, 3)]
    r = {"quota_type": "fetch", "per_broker": rows, "recorded_rate": 6144.0, "recorded_quota": 2048.0}
    assert where_from(r, "prod", 3, "per_broker", "consumer_byte_rate", 4096.0).startswith(
        "Recorded on brokers 1, 2 and 3, all 3 of prod's brokers: Kafka counts a client's requests on the broker "
        "that leads each partition it reads from")
    assert where_from(r, "prod", 0, "per_broker", "consumer_byte_rate", 4096.0).startswith(
        "Recorded on brokers 1, 2 and 3: ")  # a cluster whose brokers the portal does not list
    assert recorded_per_broker(r, "consumer_byte_rate", "per_broker").startswith(
        "6 KiB/s in all: 1 KiB/s on broker 1, 2 KiB/s on broker 2, 3 KiB/s on broker 3; Kafka bounded each broker at "
        "2 KiB/s then (a rate above it:")
    below = {**r, "recorded_quota": 8192.0}
    assert recorded_per_broker(below, "consumer_byte_rate", "per_broker").endswith("at 8 KiB/s then")
