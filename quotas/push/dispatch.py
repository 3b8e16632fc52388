"""Sending pushes on their way: what a commit enqueues (a Celery message per target, or one for a group of them),
and the direct pushes a committing process runs itself for the connectors in ``QUOTAS_PUSH_DIRECT``.

Commits enqueue at most one pending push per target (``quotas.push.flags``); while a group push drains an engine
cluster (its lease on the version row, ``quotas.push.group_push``) they enqueue none. A busy or failing direct push
falls back to the Celery task, retried with backoff."""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kombu.exceptions
import redis
from celery import current_app
from django.conf import settings
from django.db import connection

from quotas import push_format
from quotas.connectors.base import PushError
from quotas.models import Broker, Cluster, push_targets, push_wanted
from quotas.push import flags, target_push

log = logging.getLogger(__name__)

#: The Celery task that pushes one target (``quotas.tasks.push_target``), sent by name: the tasks sit above this
#: module and call into it.
PUSH_TASK = "quotas.tasks.push_target"
#: The task that pushes several targets of one cluster (``quotas.tasks.push_group``): one message for a commit
#: that left them all behind, instead of one per broker (each costs the worker a few ms of its own).
PUSH_GROUP_TASK = "quotas.tasks.push_group"


def _on_push_wanted(
    sender: object, cluster_id: int, broker_pks: list[int | None], connector: str | None = None, **_: object
) -> None:
    """A commit left targets behind (a new version, a new broker): pushes go out (``enqueue_pushes`` looked up at
    call time, so a benchmark may wrap it)."""
    enqueue_pushes(cluster_id, broker_pks, connector=connector)


push_wanted.connect(_on_push_wanted, dispatch_uid="quotas.push.enqueue")


def enqueue_pushes(
    cluster_id: int, broker_pks: list[int | None] | None = None, *, force: bool = False, connector: str | None = None
) -> int:
    """Make sure a push is on its way to each target (all of the cluster's by default); returns how many were sent.

    A target with a push already pending gets none (that push will read the newer state), unless ``force``.
    ``connector`` (the cluster's kind, when the caller knows it) in ``QUOTAS_PUSH_DIRECT``: the push runs in this
    process (``push_direct``) instead of a Celery task. The targets left for the worker go in one message
    (``push_group``) when the commit had several, even if only one of them was claimed: the flags of a cluster's
    brokers, once cleared at different times (a broker added, a retry), would otherwise keep each commit claiming
    one of them, one message per broker, and no group to drain the commits. A Redis failure here loses nothing: the
    change is in the database and reconcile pushes it.
    """
    if broker_pks is None:
        cluster = Cluster.objects.get(pk=cluster_id)
        broker_pks = [b.pk if b is not None else None for b in push_targets(cluster)]
    direct = not force and connector is not None and connector in settings.QUOTAS_PUSH_DIRECT
    try:
        with flags._client().pipeline(transaction=False) as p:
            for pk in broker_pks:
                p.set(flags._flag(cluster_id, pk), 1, nx=True, ex=flags.PENDING_TTL_S)
            p.get(push_format.FLEET_KEY)  # in the same round trip: the format every live worker reads
            *claimed, fleet = p.execute()
        due = [pk for pk, mine in zip(broker_pks, claimed, strict=True) if mine or force]
        queued = [pk for pk in due if not (direct and _submit_direct(cluster_id, pk))]
        _publish(cluster_id, queued, several=len(broker_pks) > 1, fmt=push_format.parse_fleet(fleet))
    except (redis.exceptions.RedisError, OSError, kombu.exceptions.OperationalError) as e:
        log.warning("Could not enqueue pushes to cluster %s (reconcile will): %s", cluster_id, e)
        return 0
    return len(due)


def _publish(
    cluster_id: int, pks: Sequence[int | None], *, several: bool, fmt: int | None = None, **options: Any
) -> None:
    """The Celery messages for ``pks`` in format ``fmt`` (by default the newest every live worker reads,
    ``push_format``): one group message when the cluster has several targets and every worker reads groups (and
    groups are on), else one per target. ``options`` go to ``send_task`` (a countdown)."""
    fmt = push_format.sendable(flags._client()) if fmt is None else fmt
    headers = push_format.headers(fmt)
    if pks and several and settings.QUOTAS_PUSH_GROUPS and fmt >= push_format.FORMAT_GROUP:
        current_app.send_task(PUSH_GROUP_TASK, (cluster_id, list(pks)), ignore_result=True, headers=headers, **options)
    else:
        for pk in pks:
            current_app.send_task(PUSH_TASK, (cluster_id, pk), ignore_result=True, headers=headers, **options)


# ------------------------------------------------------------------ direct pushes

_direct: dict[int, ThreadPoolExecutor] = {}  # per process id: a pool made before a fork has no threads after it
_direct_guard = threading.Lock()


def _submit_direct(cluster_id: int, broker_pk: int | None) -> bool:
    """Hand the push to this process's direct-push threads; False when they cannot take it (shutting down)."""
    pid = os.getpid()
    with _direct_guard:
        pool = _direct.get(pid)
        if pool is None:
            pool = _direct[pid] = ThreadPoolExecutor(max_workers=4, thread_name_prefix="push-direct")
    try:
        pool.submit(push_direct, cluster_id, broker_pk)
    except RuntimeError:  # the interpreter is exiting: the Celery task takes it
        return False
    return True


def push_direct(cluster_id: int, broker_pk: int | None) -> target_push.PushOutcome | None:
    """The committing process pushes a target it has just claimed (its pending flag set), in a thread of its own:
    the task's body under the same per-target lock (waited for at most DIRECT_WAIT_S: the push before it is ending),
    the flag cleared once the lock is held, so the version it reads covers every commit that found the flag set.
    The Celery task stays the path for the rest: a target held longer (the task waits its turn), and a failed push
    (retried with backoff, as the task's own failures are). Returns the outcome, or None when the task took it."""
    try:
        return target_push.push_target(cluster_id, broker_pk, direct=True)
    except target_push.TargetBusy:
        _to_task(cluster_id, broker_pk, claim=False)  # our flag is still set: the task clears it when it starts
    except (Cluster.DoesNotExist, Broker.DoesNotExist):
        pass
    except PushError as e:
        if e.retriable:
            log.info("Direct push to cluster %s target %s failed (%s); the task retries it", cluster_id, broker_pk, e)
            _to_task(cluster_id, broker_pk, claim=True, countdown=backoff_s(0))
    except Exception:  # e.g. the database went away mid-push: nothing is lost, the task pushes it again
        log.exception("Direct push to cluster %s target %s failed; the task takes it", cluster_id, broker_pk)
        _to_task(cluster_id, broker_pk, claim=True)
    finally:
        connection.close()  # this thread's own connection: never left open between pushes
    return None


def _to_task(cluster_id: int, broker_pk: int | None, *, claim: bool, countdown: float | None = None) -> None:
    try:
        if claim and not flags.claim_retry(cluster_id, broker_pk):
            return  # another push to the target is already pending
        current_app.send_task(PUSH_TASK, (cluster_id, broker_pk), countdown=countdown, ignore_result=True,
                              headers=push_format.headers(push_format.FORMAT_TARGET))  # every worker reads it
    except (redis.exceptions.RedisError, OSError, kombu.exceptions.OperationalError) as e:
        log.warning("Could not enqueue a push to cluster %s (reconcile will): %s", cluster_id, e)


def wait_direct_pushes(timeout_s: float = 60.0) -> None:
    """Wait until this process's direct pushes submitted so far are done (tests, and commands before they exit)."""
    pool = _direct.get(os.getpid())
    if pool is not None:
        pool.submit(lambda: None).result(timeout_s)  # FIFO with max_workers threads: reaching it is not enough
        with _direct_guard:
            pool.shutdown(wait=True)
            _direct.pop(os.getpid(), None)


def backoff_s(retries: int) -> float:
    """Exponential backoff with full jitter: uniform in [base/2, min(cap, base * 2**retries)]."""
    base, cap = settings.QUOTAS_PUSH_RETRY_BASE_S, settings.QUOTAS_PUSH_RETRY_MAX_S
    high = min(cap, base * 2 ** min(retries, 30))
    return random.uniform(min(base / 2, high), high)
