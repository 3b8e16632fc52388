"""Celery tasks of the quota domain (found by ``app.autodiscover_tasks()``).

Pushes are acknowledged late (settings: ``CELERY_TASK_ACKS_LATE``), so a worker killed mid-push
leaves its message to be delivered again; the push is version-checked, so running it twice applies
nothing twice.
"""

from __future__ import annotations

import logging
import smtplib
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import kombu.exceptions
import redis
from celery import current_app, shared_task
from celery.signals import worker_ready
from celery.worker.control import inspect_command
from django.conf import settings
from django.utils import timezone

from pipeline import landing
from quotas import notify, push_format, targets
from quotas.connectors.base import PushError
from quotas.models import Broker, Cluster, WebhookDelivery
from quotas.push import dispatch, flags, group_push, resolve, target_push
from quotas.push.reconcile import reconcile_all
from quotas.workflow import boosts

log = logging.getLogger(__name__)


@shared_task(name="quotas.tasks.expire_boosts")
def expire_boosts(now: datetime | None = None) -> list[int]:
    """Restore the previous value of every boost whose expiry has come (beat runs it every minute).

    ``now`` is for tests and catch-up runs; beat passes nothing and the current time is used.
    Returns the ids of the requests that expired.
    """
    return boosts.expire_boosts(now)


@shared_task(
    bind=True,
    name="quotas.tasks.push_target",
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=None,
    ignore_result=True,  # the outcome is in the Push rows; enqueueing never waits on the result backend
)
def push_target(self: Any, cluster_id: int, broker_pk: int | None = None, *_: Any, **__: Any) -> dict[str, Any]:
    """Bring one broker (or cluster-wide namespace) to its cluster's current desired-state version.

    A target that is down is retried with exponential backoff and jitter, for as long as it takes;
    a refused push is recorded as failed and not retried (reconcile tries again later). A message in a format newer
    than this worker reads goes back to the queue (``_defer``); the extra arguments such a format may bring are
    accepted for that.
    """
    deferred = _defer(self)
    if deferred is not None:
        return deferred
    try:
        return target_push.push_target(cluster_id, broker_pk).as_dict()
    except (Cluster.DoesNotExist, Broker.DoesNotExist):
        return {"skipped": "the cluster or broker no longer exists"}
    except PushError as e:
        if not e.retriable:
            return {"failed": e.code, "message": e.message}
        if not flags.claim_retry(cluster_id, broker_pk):
            return {"retry": "another push to this target is already pending"}
        countdown = dispatch.backoff_s(self.request.retries)
        log.info("Push to cluster %s target %s failed (%s); retrying in %.1fs", cluster_id, broker_pk, e, countdown)
        raise self.retry(exc=e, countdown=countdown) from e


@shared_task(
    bind=True,
    name="quotas.tasks.push_group",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
)
def push_group(self: Any, cluster_id: int, broker_pks: list[int | None], *_: Any, **__: Any) -> dict[str, Any]:
    """Bring several targets of one cluster to its current version (a round of commits that left them all behind).

    Each target's outcome as ``push_target`` answers it; a target that failed and may succeed later is retried on
    its own (``push_target``, with backoff), one that was refused is recorded as failed. Engine targets: the task
    keeps pushing the commits made meanwhile for up to QUOTAS_PUSH_DRAIN_S (``group_push.push_group``'s drain lease).
    A message in a format newer than this worker reads goes back to the queue (``_defer``).
    """
    deferred = _defer(self)
    if deferred is not None:
        return deferred
    fmt = min(push_format.message_format(self.request), push_format.PUSH_FORMAT)
    try:
        results = group_push.push_group(cluster_id, broker_pks, drain_s=settings.QUOTAS_PUSH_DRAIN_S)
    except Cluster.DoesNotExist:
        return {"skipped": "the cluster no longer exists"}
    out: dict[str, Any] = {}
    for pk, result in results.items():
        if isinstance(result, target_push.PushOutcome):
            out[str(pk)] = result.as_dict()
        elif isinstance(result, PushError) and not result.retriable:
            out[str(pk)] = {"failed": result.code, "message": result.message}
        elif not flags.claim_retry(cluster_id, pk):
            out[str(pk)] = {"retry": "another push to this target is already pending"}
        else:  # down for now, or an error of ours (logged): pushed again on its own, with backoff
            countdown = dispatch.backoff_s(0)
            log.info("Push to cluster %s target %s failed (%s); retrying in %.1fs", cluster_id, pk, result, countdown)
            push_target.apply_async((cluster_id, pk), countdown=countdown, headers=push_format.headers(fmt))
            out[str(pk)] = {"retry": f"in {countdown:.1f}s"}
    return {"targets": out}


def _defer(task: Any) -> dict[str, Any] | None:
    """A push message in a format newer than this worker reads: sent back to the queue as it came (its arguments and
    headers), DEFER_S later, for a worker that reads it; None for a message this worker reads.

    Sent back rather than dropped: the push reaches its target as soon as a newer worker is up, where a drop would
    wait for reconcile to find the pending flag stale (two reconcile rounds). Sent before this message is
    acknowledged (acks_late), so a worker killed in between leaves both, and the push runs twice: a no-op the second
    time. After MAX_DEFERS rounds (no worker reads it: the newer ones are gone) it is dropped and reconcile sends
    the push again in a format the live workers read.
    """
    fmt = push_format.message_format(task.request)
    if fmt <= push_format.PUSH_FORMAT:
        return None
    rounds = int(getattr(task.request, push_format.DEFERRED_HEADER, 0) or 0) + 1
    if rounds > push_format.MAX_DEFERS:
        log.warning("%s in push format %s, which no worker read %s times: dropped (reconcile sends it again)",
                    task.name, fmt, push_format.MAX_DEFERS)
        return {"dropped": f"format {fmt}"}
    # under the visibility timeout: Redis hands a message held longer (its countdown) to a worker again, a copy
    countdown = min(push_format.DEFER_S, settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] / 2)
    log.info("%s in push format %s, newer than this worker's %s: back to the queue for %.1fs",
             task.name, fmt, push_format.PUSH_FORMAT, countdown)
    task.apply_async(task.request.args, task.request.kwargs, countdown=countdown, ignore_result=True,
                     headers=push_format.headers(fmt, rounds))
    return {"deferred": f"format {fmt}", "rounds": rounds}


@inspect_command(name=push_format.COMMAND)
def _push_format_answer(state: Any) -> dict[str, Any]:
    """The survey's question (``push_format.survey``): the newest push format this worker reads, and its queues."""
    consumer = state.consumer.task_consumer
    return push_format.worker_answer([q.name for q in consumer.queues] if consumer else [])


def survey_workers() -> int | None:
    """Which push format every live worker reads (``push_format.survey``), stored for the portal's commits; a broker
    we cannot reach is logged and leaves the last answer to expire."""
    try:
        ttl = max(60.0, 3 * settings.QUOTAS_RECONCILE_SECONDS)
        return push_format.survey(current_app, flags._client(), ttl_s=ttl)
    except (redis.exceptions.RedisError, OSError, kombu.exceptions.OperationalError) as e:
        log.warning("Could not survey the workers' push formats: %s", e)
        return None


@worker_ready.connect(dispatch_uid="quotas.tasks.survey_on_ready")
def _survey_on_ready(**_: Any) -> None:
    """A worker that starts surveys at once (in a thread: its own answer comes from its consumer), so the end of a
    rolling upgrade lifts the format without waiting for reconcile."""
    threading.Thread(target=survey_workers, name="push-format-survey", daemon=True).start()


@shared_task(name="quotas.tasks.reconcile")
def reconcile() -> list[dict[str, Any]]:
    """Beat: catch up targets that are behind, and record (or heal, per QUOTAS_DRIFT_MODE) drift; then survey the
    workers' push formats (a retired older worker lifts the format the portal sends)."""
    outcomes = [o.__dict__ for o in reconcile_all()]
    survey_workers()
    return outcomes


@shared_task(bind=True, name="quotas.tasks.heal", acks_late=True, max_retries=8)
def heal(self: Any, cluster_id: int, broker_pk: int | None, actor_id: int | None = None) -> dict[str, Any]:
    """Re-apply the whole desired state to one target (the drift page's action); a target that is down is
    retried with backoff, and every failure is in the audit trail."""
    from django.contrib.auth import get_user_model

    cluster = Cluster.objects.get(pk=cluster_id)
    broker = Broker.objects.get(pk=broker_pk) if broker_pk is not None else None
    actor = get_user_model().objects.filter(pk=actor_id).first() if actor_id is not None else None
    try:
        return resolve.heal(cluster, broker, actor).as_dict()
    except PushError as e:
        if not e.retriable:
            return {"failed": e.code, "message": e.message}
        raise self.retry(exc=e, countdown=dispatch.backoff_s(self.request.retries)) from e


@shared_task(bind=True, name="quotas.tasks.notify", acks_late=True, max_retries=5, ignore_result=True)
def notify_request(
    self: Any,
    request_id: int,
    state: str,
    actor_id: int | None = None,
    comment: str = "",
    at: str = "",
    kind: str = notify.DEFAULT_KIND,
) -> dict[str, Any]:
    """Mail the people a request's move concerns and queue its webhook deliveries (``quotas.notify``); ``kind`` says
    which table ``request_id`` is in (``quota``, ``subscription``, ``plan``). A mail server that is down or refuses is
    retried with backoff a few times (webhooks are not queued twice)."""
    try:
        return notify.notify(request_id, state, actor_id, comment, at or timezone.now(), kind).as_dict()
    except (smtplib.SMTPException, OSError) as e:
        countdown = notify.backoff_s(self.request.retries + 1)
        log.warning("Mail of %s request #%s (%s) not sent (%s); retrying in %.1fs", kind, request_id, state, e,
                    countdown)
        raise self.retry(exc=e, countdown=countdown) from e


@shared_task(bind=True, name="quotas.tasks.deliver_webhook", acks_late=True, max_retries=None, ignore_result=True)
def deliver_webhook(self: Any, delivery_id: int) -> dict[str, Any]:
    """POST one webhook delivery; retried with exponential backoff and jitter while the receiver is down or answers
    408, 429 or 5xx, up to QUOTAS_WEBHOOK_MAX_ATTEMPTS attempts (counted on the delivery row, so a redelivered
    message does not reset them)."""
    try:
        outcome = notify.attempt(delivery_id)
    except WebhookDelivery.DoesNotExist:
        return {"skipped": "the delivery (or its webhook) no longer exists"}
    if outcome.outcome == "retry":
        raise self.retry(countdown=outcome.retry_in)
    return outcome.as_dict()


@shared_task(name="quotas.tasks.land", acks_late=True, ignore_result=True)
def land() -> dict[str, Any]:
    """Beat (every QUOTAS_LANDING_SECONDS): usage, samples and telemetry into the landing area as Parquet.

    Idempotent (``pipeline/landing.py``): a retried or overlapping run writes no duplicates.
    """
    clients: dict[str, redis.Redis] = {}
    sources: list[tuple[redis.Redis, str]] = []
    for cluster, brokers in targets.targets_from_db().items():
        for url in sorted({t.url for t in brokers}):
            if url not in clients:
                clients[url] = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=30)
            sources.append((clients[url], cluster))
    # Kafka clusters: what their clients and the Prometheus source logged and sampled in the portal's Redis
    url = settings.QUOTAS_REDIS_URL
    for name in targets.kafka_cluster_names():
        if url not in clients:
            clients[url] = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=30)
        sources.append((clients[url], name))
    try:
        result = landing.land_all(
            sources, Path(settings.QUOTAS_LANDING_ROOT), batch=settings.QUOTAS_LANDING_BATCH,
            stale_s=settings.QUOTAS_LANDING_STALE_SECONDS,
        )
    finally:
        for client in clients.values():
            client.close()
    return result.as_dict()
