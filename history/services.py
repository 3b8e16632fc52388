"""Impact previews (asked, cached, run) and the hourly rollups (computed, loaded, read) of the portal.

Both run the pipeline's own jobs (``history.jobs``) over the landing area that ``quotas.tasks.land`` fills.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from celery import current_app
from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from engine.config import CLIENT_ID, USER, EntityRef
from engine.entities import DEFAULT, entity_path, validate_quota_value
from engine.monitor import CONNECTION
from engine.units import unit_label
from history.group_previews import earlier_than_group, members_of
from history.jobs import ROLLUPS_NICE, JobFailed, run, run_warm
from history.models import ImpactPreview, PreviewState, UsageRollup
from history.preview_text import recorded_per_broker, where_from
from quotas.choices import BudgetScope
from quotas.models import Cluster, QuotaGroup, QuotaRequest, QuotaValue, RequestState
from quotas.models.tenants import entity_owned_by, member_tenants, owned_by_any, sees_everything
from quotas.workflow.errors import PermissionDenied

log = logging.getLogger(__name__)

#: The Celery task that runs one preview (``history.tasks.preview``), on the previews' own queue (a worker of its own
#: with a warm Spark session: previews never wait behind the rollups of the ``pipeline`` queue).
PREVIEW_TASK = "history.tasks.preview"
PREVIEWS_QUEUE = "previews"
#: Failures that asking again cannot change while the same data is landed (anything else is retried).
FINAL_ERRORS = frozenset({"NO_HISTORY", "INVALID_REQUEST", "MISSING_INPUT", "CORRUPT_INPUT"})
#: A transient failure (a worker crash, Redis down) is run again when asked after this long.
RETRY_AFTER_S = 30
PROGRESS_EVERY_S = 0.3
#: A running preview whose row has not moved for this long lost its worker (the task beats every
#: HEARTBEAT_S while its job runs).
CLAIM_STALE_S = 120


# ------------------------------------------------------------------ previews


def proposal_of(cluster: Cluster, user: str | None, client_id: str | None, key: str, value: float,
                scope: str = BudgetScope.PER_BROKER, group_spec: str = "") -> str:
    """The cache key of a proposal (the same entity, key, value and scope are the same proposal; the advice's
    target is part of the answer too). A group's proposal is its members' (``group_spec``): a member joining or
    leaving makes it another one."""
    fields: list[Any] = [cluster.name, user, client_id, key, float(value), settings.QUOTAS_ADVICE_TARGET]
    if scope != BudgetScope.PER_BROKER:  # the per-broker proposals keep the keys they were cached under
        fields.append(str(scope))
    if group_spec:
        fields.append(["group", group_spec])
    text = json.dumps(fields)
    return hashlib.sha256(text.encode()).hexdigest()


def usage_version(root: Path | None = None) -> str:
    """A fingerprint of what previews replay: the landed usage and samples (a real cluster watched through
    Prometheus is replayed from its samples); it changes whenever a file lands in (or leaves) any partition.

    Landing writes each file under a ``_`` name and renames it into its ``date=/hour=`` folder, which moves
    the folder's mtime, so the folders' times are enough (hundreds of stats a month, not one per file).
    """
    digest, count = hashlib.sha256(), 0
    for dataset in ("usage", "samples"):
        base = Path(root or settings.QUOTAS_LANDING_ROOT) / dataset
        for directory, dirs, _files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
            digest.update(f"{directory}:{os.stat(directory).st_mtime_ns}\n".encode())
            count += 1
    return f"{count}-{digest.hexdigest()[:40]}" if count > 1 else "none"


def check_proposal(actor: AbstractBaseUser, user: str | None, client_id: str | None, key: str, value: Any) -> float:
    """The value as the engine accepts it for this entity, when the actor may preview the entity.

    Admins and auditors may preview any entity (a preview changes nothing); a member the entities one of its
    tenants owns, as for asking for a quota.
    """
    ref = EntityRef.parse({k: v for k, v in ((USER, user), (CLIENT_ID, client_id)) if v is not None})
    checked = validate_quota_value(key, value, ref.kind)
    if not sees_everything(actor):
        reasons = [entity_owned_by(t, user, client_id) for t in member_tenants(actor)]
        if not reasons:
            raise PermissionDenied("You are not a member of any tenant; previews are of your tenant's entities.")
        if all(r is not None for r in reasons):
            raise PermissionDenied(reasons[0])
    return checked


def may_see_preview(actor: AbstractBaseUser, preview: ImpactPreview) -> bool:
    if sees_everything(actor):
        return True
    if preview.group_name:
        tenant = preview.group.tenant_id if preview.group is not None else None
        return tenant in {t.pk for t in member_tenants(actor)}
    return owned_by_any(member_tenants(actor), preview.user, preview.client_id)


def ensure_preview(
    actor: AbstractBaseUser | None, cluster: Cluster, user: str | None, client_id: str | None, key: str, value: float,
    version: str | None = None, scope: str = BudgetScope.PER_BROKER, group: QuotaGroup | None = None,
) -> ImpactPreview:
    """The preview of this proposal on the usage landed now: the cached one, or a new one being computed.

    A failure that asking again cannot change on the same data (no history, a bad proposal, a missing or corrupt
    file) is cached too; any other failure is run again after ``RETRY_AFTER_S``, and a preview whose worker
    vanished (no heartbeat for ``CLAIM_STALE_S``) at once. ``version``: ``usage_version()``, when known.
    ``scope``: ``cluster_wide`` replays the value as a budget for the sum over brokers. ``group``: a group's value,
    replayed over its members' traffic together (``user`` and ``client_id`` None).
    """
    spec = members_of(group) if group is not None else ""
    proposal, version = proposal_of(cluster, user, client_id, key, value, scope, spec), version or usage_version()
    found = ImpactPreview.objects.filter(proposal=proposal, data_version=version).first()
    if found is not None:
        age = (timezone.now() - found.updated).total_seconds()
        transient = found.state == PreviewState.FAILED and found.error_code not in FINAL_ERRORS
        retry = (transient and age > RETRY_AFTER_S) or (not found.finished and age > CLAIM_STALE_S)
        if not retry:
            return found
        requeued = ImpactPreview.objects.filter(pk=found.pk, updated=found.updated).update(
            state=PreviewState.QUEUED, progress=0.0, stage="", result=None, error_code="", error_message="",
            updated=timezone.now(),
        )
        found.refresh_from_db()
        if requeued:
            _enqueue(found)
        return found
    try:
        with transaction.atomic():
            created = ImpactPreview.objects.create(
                cluster=cluster, user=user, client_id=client_id, key=key, value=value, scope=scope,
                group=group, group_name=group.name if group is not None else "", group_spec=spec,
                proposal=proposal, data_version=version,
                requested_by=actor if actor is not None and actor.is_authenticated else None,
            )
    except IntegrityError:  # asked twice at once: the other one is the cache
        return ImpactPreview.objects.get(proposal=proposal, data_version=version)
    _enqueue(created)
    return created


def _enqueue(preview: ImpactPreview) -> None:
    """Queue the preview's task after the commit; when the queue is unreachable, the preview says so.

    Sent by name (``history.tasks`` sits above this module and calls into it); routed to the previews' queue.
    """

    def send() -> None:
        try:
            current_app.send_task(PREVIEW_TASK, (preview.pk,))
        except Exception as e:  # kombu's OperationalError & co.: Redis is down; asking again later retries
            ImpactPreview.objects.filter(pk=preview.pk).update(
                state=PreviewState.FAILED, error_code="BROKER_UNAVAILABLE", updated=timezone.now(),
                error_message=f"The preview could not be queued ({type(e).__name__}: {e}); ask again shortly.",
            )
            preview.state, preview.error_code = PreviewState.FAILED, "BROKER_UNAVAILABLE"

    transaction.on_commit(send)


def preview_of_request(request: QuotaRequest, version: str | None = None) -> ImpactPreview | None:
    """The request's preview, for its page and the approval queue.

    Viewing a page never piles up work: the proposal's newest preview is shown while it runs or if it finished
    within ``QUOTAS_PREVIEW_MAX_AGE_S`` (landing brings new data every minute; the form's button asks for a fresh
    one). Otherwise, while the request waits for a decision, one is computed on the data landed now.
    """
    group = request.group if request.group_name else None
    if request.group_name and group is None:  # the group was deleted: its last preview, if any
        return ImpactPreview.objects.filter(cluster=request.cluster, group_name=request.group_name,
                                            key=request.key, value=request.value).order_by("-pk").first()
    proposal = proposal_of(request.cluster, request.user, request.client_id, request.key, request.value,
                           request.budget_scope, members_of(group) if group is not None else "")
    newest = ImpactPreview.objects.filter(proposal=proposal).order_by("-pk").first()
    if request.state != RequestState.SUBMITTED:
        return newest
    if newest is not None:
        age = (timezone.now() - newest.updated).total_seconds()
        # a queued preview waits its turn (its row moves only once a worker takes it): on a busy worker a view after
        # CLAIM_STALE_S queued another preview of the same proposal on newer data, behind the first, at every visit
        waiting = newest.state == PreviewState.QUEUED and age <= 10 * CLAIM_STALE_S
        if waiting or (not newest.finished and age <= CLAIM_STALE_S) or (
            newest.state == PreviewState.DONE and age <= settings.QUOTAS_PREVIEW_MAX_AGE_S
        ):
            return newest
    return ensure_preview(None, request.cluster, request.user, request.client_id, request.key, request.value, version,
                          scope=request.budget_scope, group=group)


#: Held while the rollups job runs (history.tasks.rollups): one run at a time.
ROLLUPS_LOCK = "history:rollups:lock"


def waiting_for(preview: ImpactPreview | None) -> str:
    """What a queued preview waits for, in words ("behind 2 other previews"): the preview worker runs one preview
    at a time, and a bar at 0 % that says nothing looks stuck. (Previews have their own queue and worker, so the
    rollups never hold one back.)"""
    if preview is None or preview.state != PreviewState.QUEUED:
        return ""
    recent = timezone.now() - timedelta(seconds=10 * CLAIM_STALE_S)  # a preview queued long ago was lost, not ahead
    ahead = ImpactPreview.objects.filter(
        state__in=(PreviewState.QUEUED, PreviewState.RUNNING), pk__lt=preview.pk, updated__gte=recent
    ).count()
    return f"behind {ahead} other preview{'s' if ahead > 1 else ''}" if ahead else ""


def run_preview(pk: int) -> dict[str, Any]:
    """The Celery task's body: run pipeline.whatif (with advice) for the preview, recording progress and outcome.

    It runs in the worker's long-lived Spark session (``history.jobs.run_warm``): the first preview of a worker
    process starts Spark (the "starting Spark" stage of its progress), the next ones reuse it.

    Returns ``{"running_elsewhere": True}`` when another worker holds it (its heartbeat is fresh): the task then
    checks again later, so a redelivered message never leaves a preview whose worker died unfinished.
    """
    preview = ImpactPreview.objects.select_related("cluster").filter(pk=pk).first()
    if preview is None:
        return {"preview": pk, "skipped": "no such preview (deleted since it was queued)"}
    # Claim it: a message delivered twice (Redis redelivers a task running past the visibility timeout) must
    # not run it twice; one whose worker died (no heartbeat for CLAIM_STALE_S) is taken over. PostgreSQL:
    # SELECT ... FOR UPDATE SKIP LOCKED, so a worker finding another one claiming the row passes on at once (it
    # answers "running elsewhere" below) instead of queueing on the row lock; the UPDATE stays conditional, the
    # whole guard on SQLite (no row locks; its IMMEDIATE transactions run one at a time).
    stale = timezone.now() - timedelta(seconds=CLAIM_STALE_S)
    claimable = Q(state=PreviewState.QUEUED) | Q(state=PreviewState.RUNNING, updated__lt=stale)
    with transaction.atomic():
        free = ImpactPreview.objects.select_for_update(skip_locked=True).filter(claimable, pk=pk)
        free = free.values_list("pk", flat=True)
        claimed = ImpactPreview.objects.filter(claimable, pk__in=list(free)).update(
            state=PreviewState.RUNNING, stage="starting", progress=0.0, updated=timezone.now()
        )
    if not claimed:
        # a row another worker was claiming (skipped while locked) is running elsewhere too
        if preview.state in (PreviewState.RUNNING, PreviewState.QUEUED):
            return {"preview": pk, "running_elsewhere": True}
        return {"preview": pk, "skipped": f"already {preview.state}"}
    last = [0.0]

    def on_progress(stage: str, fraction: float) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S or fraction >= 1.0:
            last[0] = now
            ImpactPreview.objects.filter(pk=pk).update(stage=stage[:64], progress=fraction, updated=timezone.now())

    def heartbeat() -> None:  # while a long step reports no progress
        ImpactPreview.objects.filter(pk=pk, state=PreviewState.RUNNING).update(updated=timezone.now())

    args = ["--root", str(settings.QUOTAS_LANDING_ROOT), "--cluster", preview.cluster.name, "--key", preview.key,
            "--value", repr(preview.value), "--advice-target", str(settings.QUOTAS_ADVICE_TARGET)]
    if preview.user is not None:
        args.append(f"--user={preview.user}")  # one argument: a name may start with '-'
    if preview.client_id is not None:
        args.append(f"--client-id={preview.client_id}")
    if preview.group_spec:
        args.append(f"--group={preview.group_spec}")
    if preview.scope != BudgetScope.PER_BROKER:
        args += ["--scope", preview.scope]
    try:
        runner = run_warm if settings.QUOTAS_SPARK_WARM else run  # warm: the worker's Spark session, reused
        result = runner("whatif", args, on_progress, heartbeat=heartbeat)
        ImpactPreview.objects.filter(pk=pk).update(
            state=PreviewState.DONE, progress=1.0, stage="done", result=result, updated=timezone.now()
        )
    except JobFailed as e:
        _fail(pk, e.code, e.message)
        return {"preview": pk, "state": PreviewState.FAILED, "code": e.code}
    except Exception as e:  # never leave it running: say what broke, then let Celery log it
        _fail(pk, "PIPELINE_ERROR", f"The preview broke ({type(e).__name__}: {e}); ask again shortly.")
        raise
    return {"preview": pk, "state": PreviewState.DONE}


def _fail(pk: int, code: str, message: str) -> None:
    """Record a failure in words for the person who asked (the pipeline's own message, which names server files,
    goes to the worker's log for the operator)."""
    shown = for_people(code, message)
    if not shown.startswith(message):  # the pipeline's own words were replaced: the operator still gets them
        log.warning("preview %s failed: %s: %s", pk, code, message)
    ImpactPreview.objects.filter(pk=pk).update(
        state=PreviewState.FAILED, error_code=code[:32], error_message=shown, updated=timezone.now()
    )


#: Failures whose pipeline message names server files or Spark internals, said so a person can act on them.
PERSON_MESSAGES = {
    "MISSING_INPUT": "No traffic of this cluster has been landed yet, so there is nothing to replay. Usage is "
    "landed every {landing_s:g} s (QUOTAS_LANDING_SECONDS); ask again after that.",
    "CORRUPT_INPUT": "Part of the landed Parquet history cannot be read, so the preview cannot be computed; an "
    "operator finds the damaged files named in the preview worker's log.",
    "SPARK_UNAVAILABLE": "Spark could not start for the preview (Java or PySpark missing on the preview worker); "
    "an operator finds the reason in the preview worker's log.",
    "PIPELINE_ERROR": "The impact job failed; the preview worker's log has the details. Ask again shortly.",
}
#: An absolute file path or a Java/Python stack frame: never shown to a person.
_SERVER_DETAIL = re.compile(
    r"(?:file:)?/(?:[\w.@+-]+/)+[\w.@+-]*"  # an absolute path
    r"|\bat [\w.$]+\([^)]*\)"  # a Java stack frame
    r"|Traceback \(most recent call last\)"
)


#: What any other failure whose message names a server file says instead.
SERVER_DETAIL_MESSAGE = "The preview failed ({code}); the preview worker's log has the details. Ask again shortly."
#: After "no history yet": when the next usage lands, from the portal's own cadence.
NEXT_LANDING = ("Usage is landed every {landing_s:g} s (QUOTAS_LANDING_SECONDS) while its clients run; ask again "
                "after that.")


def for_people(code: str, message: str) -> str:
    """The failure as the API and the pages show it: no server path, no placeholder for one, no stack trace, a
    sentence to act on (with the landing cadence of this portal where waiting for it is the remedy)."""
    landing_s = float(settings.QUOTAS_LANDING_SECONDS)
    if code in PERSON_MESSAGES and (code != "PIPELINE_ERROR" or _SERVER_DETAIL.search(message)):
        return PERSON_MESSAGES[code].format(landing_s=landing_s)
    if _SERVER_DETAIL.search(message):
        return SERVER_DETAIL_MESSAGE.format(code=code)
    if code == "NO_HISTORY":
        return f"{message} {NEXT_LANDING.format(landing_s=landing_s)}"
    return message


def _level(user: str | None, client_id: str | None) -> int:
    """Kafka's precedence level of a client-quota entity (1 = most specific, 8 = default client-id)."""
    if user is None:
        return 8 if client_id == DEFAULT else 7
    base = 0 if user != DEFAULT else 3
    return base + (3 if client_id is None else 2 if client_id == DEFAULT else 1)


def _overlaps(mine: str | None, theirs: str | None) -> bool:
    """Whether two entity parts can name the same client (absent and <default> stand for any name)."""
    return mine in (None, DEFAULT) or theirs in (None, DEFAULT) or mine == theirs


def earlier_quotas(preview: ImpactPreview) -> list[str]:
    """The cluster's entities with this key that Kafka would apply before the proposed one to some of the
    clients the preview replays (an earlier precedence level that can match them): for those clients the
    preview shows a quota they would not get. For a group: the values at levels naming a client that can name a
    member (they beat any group)."""
    if preview.group_spec:
        return earlier_than_group(preview.cluster_id, preview.key, preview.group_spec)
    mine = _level(preview.user, preview.client_id)
    rows = QuotaValue.objects.filter(entity__cluster=preview.cluster_id, entity__ip__isnull=True, key=preview.key)
    found = []
    for user, client_id in rows.values_list("entity__user", "entity__client_id"):
        if (user, client_id) == (preview.user, preview.client_id) or _level(user, client_id) >= mine:
            continue
        if _overlaps(preview.user, user) and _overlaps(preview.client_id, client_id):
            found.append(entity_path(user, client_id))
    return sorted(found)


def summary(preview: ImpactPreview | None) -> dict[str, Any] | None:
    """What the pages show of a finished preview: the replay's figures and the advice (the strictest client's)."""
    if preview is None or preview.state != PreviewState.DONE or not preview.result:
        return None
    r = dict(preview.result)
    r["unit"] = unit_label(r.get("quota_type", ""))  # pages show each figure in it (engine.units)
    r["is_bucket"] = r.get("quota_type") == "controller_mutation"  # the advice's "peak" is a token level there
    r["earlier"] = earlier_quotas(preview)
    advice = (r.get("advice") or {}).get("entities") or []
    if advice:
        top = max(advice, key=lambda a: a["quota"])
        target = r["advice"]["target"]
        r["advised"] = {**top, "clients": len(advice), "target": target, "target_pct": 100 * target,
                        "over_peak": max(0.0, -top["headroom"])}
    r["throttled_pct"] = 100 * float(r.get("throttled_fraction", 0.0))
    # how the replayed traffic was throttled while it was recorded (pipeline.recorded; None: no samples, or a preview
    # computed before it was reported)
    recorded = r.get("recorded_throttled_fraction")
    r["recorded_pct"] = None if recorded is None else 100 * float(recorded)
    if advice:
        # the advice is a lower bound, or at or below the quota that was throttling the recorded traffic: the page
        # says so next to it (the pipeline's sentence, in the page's units)
        r["advised"]["caveat"] = r["advice"].get("note")
    # replayed from a real cluster's sensors at Prometheus resolution, not from recorded requests
    r["sampled"] = (r.get("resolution") or {}).get("source") == "prometheus"
    r["step_ms"] = (r.get("resolution") or {}).get("step_ms")
    for name in ("history_from_ms", "history_to_ms"):
        if name in r:
            r[name.removesuffix("_ms")] = datetime.fromtimestamp(r[name] / 1000, UTC)
    if "history_from_ms" in r and "history_to_ms" in r:
        r["covered"] = covered_text(r["history_to_ms"] - r["history_from_ms"])
    # where the traffic came from and what each broker's rate is compared with (previews computed before the
    # per-broker figures were reported have none: the page then shows the total alone)
    if r.get("per_broker"):
        r["where"] = where_from(r, preview.cluster.name, preview.cluster.brokers.count(), preview.scope, preview.key,
                                preview.value)
        r["recorded_text"] = recorded_per_broker(r, preview.key, preview.scope)
    r["demand"] = r.get("demand")  # what the clients asked for, where Kafka throttled the recorded traffic
    return r


def covered_text(span_ms: float) -> str:
    """How much traffic a preview replayed, in words a person reads at a glance ("based on 3 min of traffic")."""
    seconds = max(0.0, span_ms / 1000)
    if seconds < 120:
        return f"based on {seconds:.0f} s of traffic"
    if seconds < 2 * 3600:
        return f"based on {seconds / 60:.0f} min of traffic"
    if seconds < 2 * 86400:
        return f"based on {seconds / 3600:.1f} h of traffic"
    return f"based on {seconds / 86400:.1f} days of traffic"


# ------------------------------------------------------------------ rollups


def rollups_since() -> datetime | None:
    """Where the next rollup run starts: ``QUOTAS_ROLLUPS_LOOKBACK_HOURS`` before the newest loaded hour (or now,
    if a clock put that in the future), so samples that landed late for recent hours are counted; everything on
    the first run."""
    newest = UsageRollup.objects.filter(granularity="hour").order_by("-window_start").first()
    if newest is None:
        return None
    return min(newest.window_start, timezone.now()) - timedelta(hours=settings.QUOTAS_ROLLUPS_LOOKBACK_HOURS)


def refresh_rollups() -> dict[str, Any]:
    """Run pipeline.rollups over the samples landed since the newest loaded hour, and load its hours."""
    out = Path(settings.QUOTAS_ROLLUPS_ROOT)
    args = ["--root", str(settings.QUOTAS_LANDING_ROOT), "--out", str(out)]
    since = rollups_since()
    if since is not None:
        args += ["--since-ms", str(int(since.timestamp() * 1000))]
    result = run("rollups", args, nice=ROLLUPS_NICE)
    return {**result, "loaded": load_rollups(out / "granularity=hour")}


def load_rollups(directory: Path) -> int:
    """Replace the hours present in ``directory`` (pipeline.rollups' hour output) in one transaction."""
    import pyarrow.parquet as pq

    if not directory.exists():
        return 0
    files = sorted(p for p in directory.rglob("*.parquet") if not p.name.startswith(("_", ".")))
    if not files:
        return 0
    table = pq.ParquetDataset([str(f) for f in files]).read().to_pylist()
    rows = [
        UsageRollup(
            cluster=r["cluster"], quota_type=r["quota_type"], tags=r["tags"], granularity="hour",
            window_start=datetime.fromtimestamp(r["window_start_ms"] / 1000, UTC), bytes=r["bytes"],
            rate_p50=r["rate_p50"], rate_p95=r["rate_p95"], rate_p99=r["rate_p99"], rate_max=r["rate_max"],
            throttle_ms=r["throttle_ms"], throttled_fraction=r["throttled_fraction"], tokens_min=r["tokens_min"],
            seconds=r["seconds"],
        )
        for r in table
    ]
    starts = {r.window_start for r in rows}
    with transaction.atomic():
        UsageRollup.objects.filter(granularity="hour", window_start__in=starts).delete()
        UsageRollup.objects.bulk_create(rows, batch_size=2000)
    _record_resolutions(table)
    return len(rows)


#: Redis hash: portal cluster -> JSON {"resolution_ms", "source"} of its newest loaded rollups.
RESOLUTION_KEY = "history:rollups:resolution"
SOURCE_WORDS = {"prometheus": "from Prometheus", "client": "from the clients' statistics",
                "engine": "from the engine's sensors"}


def _record_resolutions(table: list[dict[str, Any]]) -> None:
    """Keep what each cluster's rollups rest on (the coarsest sample and its source), for the pages to say."""
    import redis

    found: dict[str, dict[str, Any]] = {}
    for r in table:
        res, source = r.get("resolution_ms"), r.get("source")
        if res is None:
            continue
        mine = found.setdefault(r["cluster"], {"resolution_ms": int(res), "source": source})
        if int(res) > mine["resolution_ms"]:
            mine.update(resolution_ms=int(res), source=source)
    if not found:
        return
    try:
        client = redis.Redis.from_url(settings.QUOTAS_REDIS_URL, socket_connect_timeout=2, socket_timeout=5)
        client.hset(RESOLUTION_KEY, mapping={c: json.dumps(v) for c, v in found.items()})
        client.close()
    except (redis.RedisError, OSError) as e:  # the rollups are loaded; only the words about them wait
        log.warning("Recording the rollups' resolution failed: %s", e)


def history_resolution(cluster: str) -> dict[str, Any]:
    """What a cluster's hourly history rests on, in words: ``{"resolution_ms", "source", "text", "cannot_know"}``
    (``text`` e.g. "per 5 s, from Prometheus"; the engine's per-second samples when nothing was recorded)."""
    import redis

    raw = None
    try:
        client = redis.Redis.from_url(settings.QUOTAS_REDIS_URL, socket_connect_timeout=2, socket_timeout=5)
        raw = client.hget(RESOLUTION_KEY, cluster)
        client.close()
    except (redis.RedisError, OSError):
        pass
    found = json.loads(raw) if raw else {"resolution_ms": 1000, "source": "engine"}
    res, source = int(found.get("resolution_ms") or 1000), found.get("source") or "engine"
    every = "second" if res == 1000 else f"{res / 1000:g} s"
    cannot = ([f"bursts shorter than {every}: the percentiles are over {every} averages (and Kafka's byte-rate is "
               "itself a mean over its quota window, 11 s by default)",
               "throttled time within a scrape: Kafka publishes a throttle-time average, not a total, so the time "
               "throttled is estimated from it"] if source == "prometheus" else [])
    return {"resolution_ms": res, "source": source,
            "text": f"per {every}, {SOURCE_WORDS.get(source, 'from ' + str(source))}", "cannot_know": cannot}


def entity_history(cluster: str, tags: str, days: int = 7, connections: bool = False) -> dict[str, list[Any]]:
    """An entity's hourly rollups of the last ``days``, per quota type, as columns for a chart.

    Connection rollups (per-IP sensors) only with ``connections``: as on the live monitor, for admins and auditors.
    """
    since = timezone.now() - timedelta(days=days)
    series: dict[str, dict[str, list[Any]]] = {}
    rows = UsageRollup.objects.filter(cluster=cluster, tags=tags, granularity="hour", window_start__gte=since)
    if not connections:
        rows = rows.exclude(quota_type=CONNECTION)
    for r in rows.order_by("quota_type", "window_start"):
        s = series.setdefault(r.quota_type, {k: [] for k in ("t", "rate_avg", "rate_p50", "rate_p95", "rate_p99",
                                                                 "rate_max", "throttled_fraction", "throttle_ms")})
        s["t"].append(r.window_start.isoformat())
        s["rate_avg"].append(r.bytes / r.seconds if r.seconds else 0.0)
        for k in ("rate_p50", "rate_p95", "rate_p99", "rate_max", "throttled_fraction", "throttle_ms"):
            s[k].append(getattr(r, k))
    return series
