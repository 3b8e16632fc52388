"""Pushing desired state to brokers, and finding (and healing) where brokers drifted from it.

A push brings one target (a broker, or a cluster-wide namespace) to the cluster's current desired-state
version: the items changed since the version the target holds (from the change log), or the whole state
when it holds none. Pushes always carry the newest version, so one push covers every change committed
before it, a retried or late push is a no-op, and "exactly once in effect" rests on the version check
(the engine's script, or a per-target lock for Kafka, which cannot check versions itself).

Commits enqueue at most one pending push per target (a Redis flag cleared when the push starts), so a
burst of changes costs a few pushes, not one each; while a group push drains an engine cluster (its lease on the
version row, see ``push_group``) they enqueue none. A target of a connector in ``QUOTAS_PUSH_DIRECT`` (Kafka:
its round trips, not our work, make a push's time) is pushed by the committing process itself, in a thread,
when its lock is free; a busy or failing target falls back to the Celery task. The reconcile job (Celery
beat) catches up targets that are behind, and compares those that are current with desired state: the
differences are drift.

After a restore of the database (``quotas.models.pushes.restore_fence``) the brokers' word stands: pushes send only
what changed since, a target holding a newer version than the database is never written, and heal mode re-applies
over a target only once reconcile has seen it in sync (an admin adopted or re-applied what it held).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import kombu.exceptions
import redis
from celery import current_app
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from engine.config import EntityRef
from engine.entities import DEFAULT
from engine.redis_backend import connect
from quotas import push_format, workflow
from quotas.choices import ConnectorKind
from quotas.connector_registry import connector_for
from quotas.connectors.base import (
    BUDGET_SCOPE,
    QUOTA,
    Applied,
    Connector,
    Credentials,
    Delta,
    Item,
    PushError,
    Target,
    portal_managed,
)
from quotas.models import (
    DRAIN_LEASE_S,
    DRAIN_WINDOW_S,
    Alteration,
    AuditAction,
    Broker,
    Cluster,
    DesiredStateVersion,
    Drift,
    DriftResolution,
    DriftStatus,
    Push,
    PushState,
    QuotaOp,
    audited_alter,
    push_target_pks,
    push_targets,
    push_wanted,
    record,
    rows,
)
from quotas.models.desired import changes_since, desired_state, portal_applied_version
from quotas.models.pushes import item_path, restore_fence

log = logging.getLogger(__name__)
_T = TypeVar("_T")

PENDING_TTL_S = 600  # a pending flag outlives the longest backoff; reconcile re-enqueues if a flag is orphaned
REPORT, HEAL = "report", "heal"
_redis: dict[str, redis.Redis] = {}


def _client() -> redis.Redis:
    """The portal's Redis (pending flags, locks), one client per URL so tests may point settings elsewhere."""
    url = settings.QUOTAS_REDIS_URL
    if url not in _redis:
        _redis[url] = connect(url, 5.0)
    return _redis[url]


# ------------------------------------------------------------------ desired state of a target


def target_of(cluster: Cluster, broker: Broker | None) -> Target:
    """Where a push goes: an engine broker's namespace, the engine's cluster-wide one, or a Kafka cluster through
    its bootstrap servers (the cluster's own, else its brokers' hosts) with its credentials."""
    if cluster.connector == ConnectorKind.KAFKA:
        return Target(cluster.name, None, kafka_bootstrap(cluster), kafka_credentials(cluster))
    if broker is None:
        return Target(cluster.name, None, "")
    return Target(cluster.name, broker.broker_id, broker.engine_url)


def kafka_bootstrap(cluster: Cluster) -> str:
    """The bootstrap servers of a Kafka cluster: its own setting, else every broker's host."""
    if cluster.bootstrap_servers.strip():
        return cluster.bootstrap_servers.strip()
    return ",".join(b.host for b in Broker.objects.filter(cluster=cluster).order_by("broker_id"))


def kafka_credentials(cluster: Cluster) -> Credentials:
    """The connector's credentials for a Kafka cluster; the password from the environment (never the database)."""
    if cluster.security_protocol == "PLAINTEXT":
        return Credentials()
    password = os.environ.get(cluster.password_env)
    if not cluster.sasl_mechanism or not cluster.sasl_username or not password:
        raise PushError(
            "SASL_AUTHENTICATION_FAILED",
            f"Cluster {cluster.name!r} uses {cluster.security_protocol}: it needs a SCRAM mechanism and user (the "
            f"cluster's settings) and the user's password in the environment variable {cluster.password_env} of the "
            "portal's workers.",
            retriable=False,
        )
    return Credentials(cluster.security_protocol, cluster.sasl_mechanism, cluster.sasl_username, password)


# ------------------------------------------------------------------ enqueueing


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


def _flag(cluster_id: int, broker_pk: int | None) -> str:
    return f"portal:push-pending:{cluster_id}:{broker_pk if broker_pk is not None else 'cluster'}"


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
        with _client().pipeline(transaction=False) as p:
            for pk in broker_pks:
                p.set(_flag(cluster_id, pk), 1, nx=True, ex=PENDING_TTL_S)
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
    fmt = push_format.sendable(_client()) if fmt is None else fmt
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


def push_direct(cluster_id: int, broker_pk: int | None) -> PushOutcome | None:
    """The committing process pushes a target it has just claimed (its pending flag set), in a thread of its own:
    the task's body under the same per-target lock (waited for at most DIRECT_WAIT_S: the push before it is ending),
    the flag cleared once the lock is held, so the version it reads covers every commit that found the flag set.
    The Celery task stays the path for the rest: a target held longer (the task waits its turn), and a failed push
    (retried with backoff, as the task's own failures are). Returns the outcome, or None when the task took it."""
    try:
        return push_target(cluster_id, broker_pk, direct=True)
    except TargetBusy:
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
        if claim and not claim_retry(cluster_id, broker_pk):
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


def _stale_flag(cluster_id: int, broker_pk: int | None) -> bool:
    """A pending flag older than two reconcile rounds: its push was lost (not merely slow), so send another."""
    ttl = _client().ttl(_flag(cluster_id, broker_pk))
    return ttl >= 0 and PENDING_TTL_S - ttl > 2 * settings.QUOTAS_RECONCILE_SECONDS


def claim_retry(cluster_id: int, broker_pk: int | None) -> bool:
    """Before scheduling a retry: True unless another push to the target is already pending."""
    return bool(_client().set(_flag(cluster_id, broker_pk), 1, nx=True, ex=PENDING_TTL_S))


def backoff_s(retries: int) -> float:
    """Exponential backoff with full jitter: uniform in [base/2, min(cap, base * 2**retries)]."""
    base, cap = settings.QUOTAS_PUSH_RETRY_BASE_S, settings.QUOTAS_PUSH_RETRY_MAX_S
    high = min(cap, base * 2 ** min(retries, 30))
    return random.uniform(min(base / 2, high), high)


# ------------------------------------------------------------------ pushing


@dataclass(frozen=True)
class PushOutcome:
    """One push: where, from which version to which, and whether the target changed."""

    target: str
    held: int
    version: int
    mode: str
    changed: bool
    answers: Mapping[str, str] = field(default_factory=dict)  # a Kafka cluster: each broker's answer

    def as_dict(self) -> dict[str, Any]:
        out = {"target": self.target, "held": self.held, "version": self.version, "mode": self.mode,
               "changed": self.changed}
        if self.answers:
            out["answers"] = dict(self.answers)
        return out


class _Unlocked:
    """The engine orders pushes itself (its script checks versions): nothing to hold."""

    def acquire(self) -> bool:
        return True

    def release(self) -> None:
        return None

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _target_lock(connector: Connector, cluster: Cluster, broker: Broker | None, wait_s: float | None = None) -> Any:
    """Kafka cannot order writes: one push (or describe) per target at a time. The engine's script orders them.
    Waited for ``wait_s`` (default QUOTAS_PUSH_LOCK_S)."""
    if not connector.needs_lock:
        return _Unlocked()
    name = f"portal:push-lock:{cluster.pk}:{broker.pk if broker is not None else 'cluster'}"
    # polled every 5 ms (redis-py's default 100 ms would add up to a tenth of a second to a push that waits)
    return _client().lock(
        name, timeout=settings.QUOTAS_PUSH_LOCK_S, sleep=0.005,
        blocking_timeout=settings.QUOTAS_PUSH_LOCK_S if wait_s is None else wait_s,
        raise_on_release_error=False,  # expired meanwhile: logged by redis-py, the push stands
    )


#: How long a direct push waits for the previous push of its target to end before handing over to the task.
DIRECT_WAIT_S = 2.0


class TargetBusy(Exception):
    """A direct push found another push holding the target for longer than DIRECT_WAIT_S."""


def portal_lock(name: str, timeout_s: float, wait_s: float) -> Any:
    """A lock in the portal's Redis (``portal:<name>``, released after ``timeout_s`` at the latest), for other work
    on a Kafka cluster that Kafka cannot order either (e.g. ``quotas.scram``'s changes of one principal)."""
    return _client().lock(f"portal:{name}", timeout=timeout_s, blocking_timeout=wait_s)


def _stale(target: Target, held: int, version: int) -> PushError:
    """The refusal to push to a target that holds a version the database has not reached.

    The database went back: restored without ``restore_db``'s fence. Writing would lose what the target holds, and a
    delta from the database's version would leave out what changed since the restore.
    """
    return PushError(
        "STALE_DESIRED_STATE",
        f"{target.label} holds desired-state version {held}, newer than the database's {version}: the database was "
        "restored from a backup without moving its versions past the brokers'. Nothing was pushed; with the portal "
        "stopped, run `python manage.py restore_db --fence-only`, then adopt or re-apply the drift reconcile shows.",
        retriable=False,
    )


def push_target(cluster_id: int, broker_pk: int | None, *, force: bool = False, direct: bool = False) -> PushOutcome:
    """Bring one target to the cluster's current desired-state version; raises PushError when it cannot.

    ``force`` writes the whole state even if the target claims the version (healing drift). ``direct`` (a push by
    the committing process): the pending flag is cleared only once the lock is held, and TargetBusy (the flag left
    set) is raised when another push holds the target for longer than DIRECT_WAIT_S.
    """
    if not direct:
        _client().delete(_flag(cluster_id, broker_pk))  # commits from now on enqueue a new push
    cluster = Cluster.objects.get(pk=cluster_id)
    broker = Broker.objects.get(pk=broker_pk) if broker_pk is not None else None
    return _push(cluster, broker, force=force, direct=direct, record=lambda o: _applied(cluster, [(broker, o)]))


def _push(
    cluster: Cluster, broker: Broker | None, *, force: bool, direct: bool, record: Callable[[PushOutcome], None]
) -> PushOutcome:
    """``push_target`` once the target is known: ``record`` books the outcome, under the target's lock."""
    cluster_id, broker_pk = cluster.pk, broker.pk if broker is not None else None
    connector = connector_for(cluster.connector)
    try:
        target = target_of(cluster, broker)
    except PushError as e:
        if direct:
            _client().delete(_flag(cluster_id, broker_pk))
        _failed(cluster, broker, e)
        raise
    lock = _target_lock(connector, cluster, broker, DIRECT_WAIT_S if direct else None)
    if not lock.acquire():
        if direct:
            raise TargetBusy(target.label)
        message = f"{target.label}: another push held it for {settings.QUOTAS_PUSH_LOCK_S:g}s"
        raise PushError("CONCURRENT_TRANSACTIONS", message, retriable=True)
    try:
        if direct:  # the lock is ours: clear the flag before reading the version, as the task does
            _client().delete(_flag(cluster_id, broker_pk))
        outcome = _push_locked(connector, target, cluster, broker, force)
        # under the lock: the next push reads what this one applied (Kafka's held version is the portal's rows)
        record(outcome)
    except PushError as e:
        _failed(cluster, broker, e)
        raise
    finally:
        lock.release()
    return outcome


def push_group(
    cluster_id: int, broker_pks: Sequence[int | None], *, drain_s: float = 0.0
) -> dict[int | None, PushOutcome | Exception]:
    """Several targets of one cluster in one go (what one task does for a round of commits that left them all
    behind): each pushed as ``push_target`` pushes it, their pending flags cleared together first, then what
    landed booked in one transaction and the cluster's requests settled once.

    A target that failed answers its exception (a PushError is recorded on its rows; the task retries it on its
    own); one that no longer exists is left out. Targets whose last push failed go last, after what the others
    landed is booked, so a broker that is down (its connect timeout) delays no other. A connector that orders
    pushes with a lock (Kafka) books each push under its lock, one target at a time.

    ``drain_s`` > 0 (a connector that orders pushes itself: the engine): while commits keep arriving, keep pushing
    for up to that long instead of leaving each round of commits a message to send. The booking of a round that
    reached every target also reads the cluster's version in the same transaction: newer than what the round
    pushed, it takes the cluster's drain lease (commits that see it enqueue nothing) and pushes again, to every
    current target (the cluster read again: its scope or connector may have changed); not newer, it clears the
    lease and stops (a target the round did not push, added meanwhile or left out of its message, then gets a push
    enqueued as a commit would: a claimed flag, or none when one is pending already). A commit
    and that booking both write the version row, so they take turns: a commit that saw the lease is read by the
    booking after it. However else a drain ends while the lease is ours (a target failed, the time is up, an
    error), the lease is cleared and a push enqueued the usual way for the commits that counted on it. Returns the
    last round's outcomes."""
    with _client().pipeline(transaction=False) as p:
        for pk in broker_pks:
            p.delete(_flag(cluster_id, pk))  # commits from now on enqueue a new push
        p.execute()
    deadline = time.monotonic() + drain_s
    leased = False  # the lease may be ours (a booking of ours took it, or may have): commits may count on us
    known: list[int | None] = list(broker_pks)
    out: dict[int | None, PushOutcome | Exception] = {}
    first = True
    try:
        while True:
            cluster = Cluster.objects.get(pk=cluster_id)
            drain = drain_s > 0 and not connector_for(cluster.connector).needs_lock
            tried: list[bool] = []
            out, again = _group_round(cluster, broker_pks, drain, skip_failing=not first, tried=tried)
            first = False
            leased = leased or bool(tried)
            if again:
                if time.monotonic() < deadline:
                    broker_pks = known = push_target_pks(cluster)  # commits under the lease wrote rows for each
                    continue
            elif again is False:
                leased = False
                _enqueue_behind(cluster, out)
            return out
    finally:
        if leased:
            _hand_over(cluster_id, known, [pk for pk, o in out.items() if isinstance(o, Exception)])


def _enqueue_behind(cluster: Cluster, pushed: Mapping[int | None, object]) -> None:
    """The lease is cleared: a broker that the last round did not push and that has versions waiting (pending
    rows: added during the drain, left out as failing, or left out of a message that came back after its worker
    died under a lease) gets a push as a commit would (its flag claimed: none when one is pending already, as a
    retry waiting out its backoff holds it)."""
    try:
        behind = sorted(
            Push.objects.filter(cluster=cluster, state=PushState.PENDING, broker__isnull=False)
            .exclude(broker__in=[pk for pk in pushed if pk is not None])
            .values_list("broker", flat=True).distinct()
        )  # fmt: skip
        if behind:
            enqueue_pushes(cluster.pk, behind)
    except Exception:  # the next commit, or reconcile, pushes them
        log.exception("Could not enqueue the brokers of %s left behind by a drain", cluster.name)


def _hand_over(cluster_id: int, known: Sequence[int | None], failed: Sequence[int | None]) -> None:
    """A drain ends while its lease may be held: clear it, then enqueue a push as a commit would, except to the
    targets that failed in its last round (the task retries those with backoff; pushing them again at once would
    hammer a broker that is down). If the lease cannot be cleared, the push is sent for when it has run out (a
    commit still in progress under it then enqueues nothing, and a push sent now could read the version before
    it), to the targets this drain knew."""
    try:
        _end_drain(cluster_id)
    except Exception:
        log.exception("Clearing the drain lease of cluster %s failed; a push follows once it has run out", cluster_id)
        try:
            later = [pk for pk in known if pk not in failed]
            _publish(cluster_id, later, several=len(known) > 1, countdown=DRAIN_WINDOW_S)
        except Exception:  # the next commit after the lease, or reconcile, pushes it
            log.exception("Could not enqueue the push of cluster %s after its drain", cluster_id)
        return
    try:
        targets = push_target_pks(Cluster.objects.get(pk=cluster_id))
        due = [pk for pk in targets if pk not in failed]
        if due:
            enqueue_pushes(cluster_id, due)
    except Exception:  # e.g. the database went away: the next commit, or reconcile, pushes it
        log.exception("Could not enqueue the push of cluster %s after its drain", cluster_id)


def _group_round(
    cluster: Cluster, broker_pks: Sequence[int | None], drain: bool, *, skip_failing: bool = False,
    tried: list[bool] | None = None,
) -> tuple[dict[int | None, PushOutcome | Exception], bool | None]:
    """One round of ``push_group``: its outcomes, and (``drain``, every target it tried reached and booked) whether
    the cluster has a newer version than the round brought everywhere (True: the drain lease is taken; False:
    cleared); None when no such check was made (``tried`` gets an entry when one was attempted: its outcome may be
    unknown). ``skip_failing``: targets whose last push failed are left to their own retries (with backoff)."""
    brokers = Broker.objects.in_bulk([pk for pk in broker_pks if pk is not None])
    deferred = not connector_for(cluster.connector).needs_lock
    failing = set(
        Push.objects.filter(cluster=cluster, broker__in=list(brokers), state__in=_NOT_APPLIED, attempts__gt=0)
        .values_list("broker", flat=True)
    )  # fmt: skip
    if skip_failing:
        broker_pks = [pk for pk in broker_pks if pk not in failing]
    landed: list[tuple[Broker | None, PushOutcome]] = []
    out: dict[int | None, PushOutcome | Exception] = {}
    again: bool | None = None
    try:
        for pk in sorted(broker_pks, key=lambda pk: pk in failing):  # stable: the healthy first, in their order
            broker = brokers.get(pk) if pk is not None else None
            if pk is not None and broker is None:
                continue
            if pk in failing and landed:
                _book(cluster, list(landed), out)
                landed.clear()
            if deferred:
                record: Callable[[PushOutcome], None] = lambda o, b=broker: landed.append((b, o))  # noqa: E731
            else:
                record = lambda o, b=broker: _applied(cluster, [(b, o)])  # noqa: E731
            try:
                out[pk] = _push(cluster, broker, force=False, direct=False, record=record)
            except Exception as e:  # a PushError is on the target's rows; anything else is logged here
                if not isinstance(e, PushError):
                    log.exception("Push to %s target %s failed", cluster.name, pk)
                out[pk] = e
    finally:
        if landed:
            reached = [o.version for o in out.values() if isinstance(o, PushOutcome)]
            whole = drain and len(reached) == len(out) and bool(reached)
            if whole and tried is not None:
                tried.append(True)
            current = _book(cluster, landed, out, drained_to=min(reached) if whole else None)
            if whole and current is not None:  # the lease's transaction committed, whatever failed after it
                again = current > min(reached)
    return out, again


def _end_drain(cluster_id: int) -> None:
    """Clear the cluster's drain lease (in a transaction of its own): commits from now on enqueue their pushes."""
    model = DesiredStateVersion
    lease, where = rows.column(model, "drain_until"), rows.column(model, "cluster")
    sql = f"UPDATE {rows.table(model)} SET {lease} = NULL WHERE {where} = %s"
    _bookkeeping(lambda: rows.write(sql, [cluster_id]))


def _book(
    cluster: Cluster, landed: Sequence[tuple[Broker | None, PushOutcome]], out: dict[Any, Any],
    drained_to: int | None = None,
) -> int | None:
    """Book a group's landed pushes (``_applied``); if that fails, they answer the error (the task pushes each again
    on its own: a push that finds its version there books it). Returns the version the booking's transaction read
    with ``drained_to`` once it committed (even if what follows it failed), else None."""
    seen: list[int] = []
    try:
        _applied(cluster, landed, drained_to, seen)
    except Exception as e:
        log.exception("Booking the pushes to %s failed; each target is pushed again on its own", cluster.name)
        for broker, _ in landed:
            out[broker.pk if broker is not None else None] = e
    return seen[0] if seen else None


def _push_locked(
    connector: Connector, target: Target, cluster: Cluster, broker: Broker | None, force: bool
) -> PushOutcome:
    # the version first, then the items: every change logged at or below it is committed (versions are
    # assigned under the cluster's lock), and a snapshot read after it is at least as new (re-sent later: same values)
    version = DesiredStateVersion.objects.get(cluster=cluster).version
    own = connector.applied_version(target)  # None: the connector cannot say (Kafka); the portal's rows tell
    held = portal_applied_version(cluster, broker) if own is None else own
    if held > version and not force:
        raise _stale(target, held, version)
    if held >= version and not force:
        return PushOutcome(target.label, held, held, "none", False)
    fence = restore_fence(version)
    # a target that says it holds nothing takes the whole state; one the portal never booked a push to, unless the
    # database was restored since: the target may hold decisions the restore lost, which reconcile shows instead
    if force or (held < 0 and (own is not None or not fence)):
        return _send(connector, target, Delta(version, held, True, desired_state(cluster, broker), force))
    # after a restore, only what changed since: what the target holds from before it is its word (see restore_fence)
    since = max(held, fence)
    try:
        return _send(connector, target, Delta(version, held, False, changes_since(cluster, broker, since, version)))
    except PushError as e:
        if not e.needs_full:
            raise
        log.warning("%s lost its state (%s); pushing it whole", target.label, e.message)
        return _send(connector, target, Delta(version, -1, True, desired_state(cluster, broker)))


def _send(connector: Connector, target: Target, delta: Delta) -> PushOutcome:
    answer: Applied = connector.apply(target, delta)
    mode = "force" if delta.force else "full" if delta.full else "delta"
    return PushOutcome(target.label, delta.base, answer.version, mode, answer.changed, answer.answers)


#: A target's rows not yet applied, named by their states (not "<> applied"): the index on (cluster, broker, state,
#: version) then reads just them, where a NOT read every row the target ever had, under SQLite's write lock.
_NOT_APPLIED = (str(PushState.PENDING), str(PushState.FAILED))


def _rows(cluster: Cluster, broker: Broker | None, up_to: int) -> Any:
    return Push.objects.filter(cluster=cluster, broker=broker, state__in=_NOT_APPLIED, version__lte=up_to)


#: How long a push's bookkeeping waits for SQLite's write lock (its busy timeout, Python's default).
SQLITE_WRITE_WAIT_S = 5.0


def _bookkeeping(write: Callable[[], _T]) -> _T:
    """Run ``write`` (a push's UPDATE of its Push rows) in a transaction of its own; returns what it returns.

    On SQLite (one writer at a time) the write lock is asked for every 2 ms or so: SQLite's busy handler sleeps up
    to 100 ms between its tries, so behind a process committing in a tight loop (free for a few milliseconds
    between its transactions) a push's bookkeeping waited up to the whole 5 s busy timeout, and every push queued
    behind it waited too (push_bench's p99 was that timeout). An attempt that found the lock taken is rolled back
    whole and ``write`` runs again; elsewhere (PostgreSQL, or inside a caller's transaction) it runs once."""
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        with transaction.atomic():
            return write()
    connection.ensure_connection()
    raw = connection.connection
    (busy_ms,) = raw.execute("PRAGMA busy_timeout").fetchone()
    deadline = time.monotonic() + SQLITE_WRITE_WAIT_S
    raw.execute("PRAGMA busy_timeout = 1")
    try:
        while True:
            try:
                with transaction.atomic():
                    return write()
            except OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
            time.sleep(0.001)
    finally:
        raw.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")


def _applied(
    cluster: Cluster, landed: Sequence[tuple[Broker | None, PushOutcome]], drained_to: int | None = None,
    seen: list[int] | None = None,
) -> None:
    """Every version up to each outcome's is on its target (those it carried count one more attempt), in one
    transaction for all of them; requests all of whose targets hold their version become applied. Written after
    the sends: nothing before a send waits for the database's write lock.

    ``drained_to`` (a draining group push: every target holds at least that version): the same transaction first
    takes the cluster's drain lease if its version is newer, else clears it; the version it read goes to ``seen``
    as soon as the transaction has committed. The version row is written first: a commit holds it from its start,
    so a booking waits for the commit in progress, never the other way round."""
    now = timezone.now()
    c = {name: rows.column(Push, name) for name in (
        "cluster", "broker", "version", "state", "attempts", "error_code", "error", "answers", "updated", "applied_at"
    )}  # fmt: skip
    statements = []
    for broker, outcome in landed:
        # the versions this push carried (above the one the target held) count one more attempt; "none" carried none
        carried = outcome.held if outcome.mode != "none" else outcome.version
        answers: tuple[str, list[Any]] = ("", [])
        if outcome.answers:  # a Kafka cluster: what each broker answered
            answers = (f", {c['answers']} = %s", [rows.prep(Push, "answers", dict(outcome.answers))])
        where_broker = f"{c['broker']} = %s" if broker is not None else f"{c['broker']} IS NULL"
        statements.append((
            f"UPDATE {rows.table(Push)} SET {c['state']} = %s, {c['applied_at']} = %s, {c['updated']} = %s, "
            f"{c['error']} = '', {c['error_code']} = '', {c['attempts']} = CASE WHEN {c['version']} > %s "
            f"THEN {c['attempts']} + 1 ELSE {c['attempts']} END{answers[0]} WHERE {c['cluster']} = %s AND "
            f"{where_broker} AND {c['state']} IN (%s, %s) AND {c['version']} <= %s",
            [str(PushState.APPLIED), rows.prep(Push, "applied_at", now), rows.prep(Push, "updated", now), carried,
             *answers[1], cluster.pk, *([broker.pk] if broker is not None else []), *_NOT_APPLIED, outcome.version],
        ))  # fmt: skip

    drain: tuple[str, list[Any]] | None = None
    if drained_to is not None:
        d = {name: rows.column(DesiredStateVersion, name) for name in ("cluster", "version", "drain_until")}
        lease = rows.prep(DesiredStateVersion, "drain_until", now + timedelta(seconds=DRAIN_LEASE_S))
        drain = (
            f"UPDATE {rows.table(DesiredStateVersion)} SET {d['drain_until']} = CASE WHEN {d['version']} > %s THEN %s "
            f"ELSE NULL END WHERE {d['cluster']} = %s RETURNING {d['version']}",
            [drained_to, lease, cluster.pk],
        )
    current: list[int] = []

    def write() -> list[int]:  # plain statements, made before: the write lock is held for the UPDATEs alone
        if drain is not None:
            current[:] = [int(v) for (v,) in rows.execute(*drain)]
        moved = []
        for (broker, _), (sql, params) in zip(landed, statements, strict=True):
            Push.lock_target(cluster.pk, broker.pk if broker is not None else None)  # concurrent pushes take turns
            moved.append(rows.write(sql, params))
        return moved

    moved = _bookkeeping(write)
    if seen is not None:
        seen.extend(current)
    if any(moved):
        workflow.settle_pushed(cluster)
    for (broker, outcome), n in zip(landed, moved, strict=True):
        if not n and outcome.mode != "none":  # a broker added after the version was committed has no row for it yet
            Push.objects.get_or_create(
                cluster=cluster, broker=broker, version=outcome.version,
                defaults={"state": PushState.APPLIED, "applied_at": now, "attempts": 1},
            )  # fmt: skip


def _failed(cluster: Cluster, broker: Broker | None, e: PushError) -> None:
    """Record the attempt and its error on every version not yet on the target; a refused (non-retriable)
    push fails them."""
    state = PushState.PENDING if e.retriable else PushState.FAILED
    version = DesiredStateVersion.objects.get(cluster=cluster).version
    with transaction.atomic():
        Push.lock_target(cluster.pk, broker.pk if broker is not None else None)
        n = _rows(cluster, broker, version).update(
            state=state, error_code=e.code, error=e.message, updated=timezone.now(), attempts=F("attempts") + 1
        )
    if n and not e.retriable:
        where = _where(cluster, broker)
        record(AuditAction.PUSH_FAILED, None, cluster=cluster, entity=where, comment=f"{e.code}: {e.message}")
        workflow.settle_pushed(cluster)


# ------------------------------------------------------------------ drift


@dataclass(frozen=True)
class Difference:
    item: Item
    status: str
    desired: str | None
    actual: str | None


def _managed(item: Item, desired: Mapping[Item, str]) -> bool:
    """Every quota is the portal's; of configs, those it manages (a broker holds others that are not its business)."""
    return item in desired or item.kind == QUOTA or portal_managed(item)


def _same(item: Item, a: str, b: str) -> bool:
    if item.kind == QUOTA:
        try:
            return float(a) == float(b)
        except ValueError:
            return False
    return a.strip() == b.strip()


def compare(desired: Mapping[Item, str], actual: Mapping[Item, str]) -> list[Difference]:
    """What the target holds against desired state: missing, extra (of what the portal manages) or different."""
    out = []
    for item in sorted(set(desired) | {i for i in actual if _managed(i, desired)}):
        d, a = desired.get(item), actual.get(item)
        if a is None:
            out.append(Difference(item, DriftStatus.MISSING, d, None))
        elif d is None:
            out.append(Difference(item, DriftStatus.EXTRA, None, a))
        elif not _same(item, d, a):
            out.append(Difference(item, DriftStatus.DIFFERENT, d, a))
    return out


@dataclass(frozen=True)
class ReconcileOutcome:
    target: str
    status: str  # "in-sync", "drift", "healed", "behind", "changing", "unreachable"
    version: int
    differences: int = 0


def _record_drift(cluster: Cluster, broker: Broker | None, version: int, diffs: list[Difference]) -> None:
    """Open a Drift row per new difference (audited), update the ones still there, close the ones gone."""
    now = timezone.now()
    current = {d.item: d for d in diffs}
    open_rows = {row.item: row for row in Drift.objects.filter(cluster=cluster, broker=broker, resolved_at=None)}
    with transaction.atomic():
        for item, row in open_rows.items():
            d = current.get(item)
            if d is None:
                row.resolved_at, row.resolution = now, DriftResolution.CONVERGED
                row.save(update_fields=["resolved_at", "resolution"])
            elif (row.status, row.desired, row.actual) != (d.status, d.desired, d.actual):
                row.status, row.desired, row.actual, row.version = d.status, d.desired, d.actual, version
                row.save(update_fields=["status", "desired", "actual", "version"])
        where = _where(cluster, broker)
        for item, d in current.items():
            if item in open_rows:
                continue
            Drift.objects.create(
                cluster=cluster, broker=broker, kind=item.kind, resource=item.resource, key=item.key,
                status=d.status, desired=d.desired, actual=d.actual, version=version, detected_at=now,
            )
            record(
                AuditAction.DRIFT_DETECTED, None, cluster=cluster, entity=item_path(item), key=item.key,
                before=d.desired, after=d.actual, comment=f"{where}: {d.status} at desired-state version {version}",
            )


def _where(cluster: Cluster, broker: Broker | None) -> str:
    if broker is not None:
        return f"broker {broker.broker_id}"
    return "the cluster" if cluster.connector == ConnectorKind.KAFKA else "cluster-wide namespace"


def reconcile_target(cluster: Cluster, broker: Broker | None, *, mode: str | None = None) -> ReconcileOutcome:
    """Compare one target with desired state and record drift; ``heal`` mode re-applies when it drifted.

    A target behind desired state is not drifting, it is waiting: it gets a push instead.
    """
    mode = mode or settings.QUOTAS_DRIFT_MODE
    connector = connector_for(cluster.connector)
    version = DesiredStateVersion.objects.get(cluster=cluster).version
    desired = desired_state(cluster, broker)
    try:
        target = target_of(cluster, broker)
    except PushError as e:
        log.warning("Reconcile cannot reach %s: %s", cluster.name, e)
        return ReconcileOutcome(f"{cluster.name}/cluster", "unreachable", version)
    try:
        with _target_lock(connector, cluster, broker):
            held, actual = connector.describe(target, desired)
            if held is None:
                held = portal_applied_version(cluster, broker)
    except PushError as e:
        log.warning("Reconcile could not describe %s: %s", target.label, e)
        return ReconcileOutcome(target.label, "unreachable", version)
    except redis.exceptions.LockError:
        return ReconcileOutcome(target.label, "changing", version)
    if DesiredStateVersion.objects.get(cluster=cluster).version != version:
        return ReconcileOutcome(target.label, "changing", version)  # compared against a moving state: next round
    pk = broker.pk if broker is not None else None
    if held < version:
        enqueue_pushes(cluster.pk, [pk], force=_stale_flag(cluster.pk, pk))
        return ReconcileOutcome(target.label, "behind", version)
    diffs = compare(desired, actual)
    _record_drift(cluster, broker, version, diffs)
    if held > version:  # the database went back (see _stale): shown, never re-applied by itself
        log.warning("%s", _stale(target, held, version).message)
        return ReconcileOutcome(target.label, "ahead", version, len(diffs))
    if not diffs:
        _seen_in_sync(cluster.pk, pk, version)
        return ReconcileOutcome(target.label, "in-sync", version)
    if mode == HEAL and _may_heal(cluster.pk, pk, version):
        heal(cluster, broker, None)
        return ReconcileOutcome(target.label, "healed", version, len(diffs))
    return ReconcileOutcome(target.label, "drift", version, len(diffs))


def _synced_key(cluster_id: int, broker_pk: int | None) -> str:
    return f"portal:push-synced:{cluster_id}:{broker_pk if broker_pk is not None else 'cluster'}"


def _may_heal(cluster_id: int, broker_pk: int | None, version: int) -> bool:
    """Whether heal mode may re-apply desired state over a drifted target.

    After a restore, only once reconcile has seen the target in sync with the restored state (an admin adopted or
    re-applied what it held): until then its differences are what the brokers kept of decisions the restored
    database lost. Without Redis it cannot tell, and answers no.
    """
    fence = restore_fence(version)
    if not fence:
        return True
    try:
        seen = _client().get(_synced_key(cluster_id, broker_pk))
    except (redis.exceptions.RedisError, OSError):
        return False
    return seen is not None and int(seen) == fence


def _seen_in_sync(cluster_id: int, broker_pk: int | None, version: int) -> None:
    fence = restore_fence(version)
    if fence:
        try:
            _client().set(_synced_key(cluster_id, broker_pk), fence)
        except (redis.exceptions.RedisError, OSError):  # heal mode then waits for the next round in sync
            log.warning("Could not note that cluster %s target %s is in sync", cluster_id, broker_pk)


def forget_in_sync() -> int:
    """Forget which targets reconcile saw in sync (a restore: heal mode waits for them again); returns how many.

    Raises redis.RedisError when the portal's Redis cannot be reached.
    """
    client = _client()
    keys = list(client.scan_iter(match="portal:push-synced:*", count=1000))
    return int(client.delete(*keys)) if keys else 0


def heal(cluster: Cluster, broker: Broker | None, actor: AbstractBaseUser | None) -> PushOutcome:
    """Re-apply the whole desired state to a target; its open drift is closed as healed, and audited."""
    where = _where(cluster, broker)
    try:
        outcome = push_target(cluster.pk, broker.pk if broker is not None else None, force=True)
    except PushError as e:
        why = f"re-apply: {e.code}: {e.message}"
        record(AuditAction.PUSH_FAILED, actor, cluster=cluster, entity=where, comment=why)
        raise
    now = timezone.now()
    comment = f"{where}: re-applied desired-state version {outcome.version}"
    with transaction.atomic():
        rows = list(Drift.objects.filter(cluster=cluster, broker=broker, resolved_at=None))
        if not rows:
            record(AuditAction.DRIFT_HEALED, actor, cluster=cluster, entity=where, comment=comment + " (no open drift)")
        for row in rows:
            row.resolved_at, row.resolution = now, DriftResolution.HEALED
            row.save(update_fields=["resolved_at", "resolution"])
            record(
                AuditAction.DRIFT_HEALED, actor, cluster=cluster, entity=row.path, key=row.key,
                before=row.actual, after=row.desired, comment=comment,
            )
    return outcome


class NotAdoptable(Exception):
    """Drift that cannot be adopted (not a quota, or already resolved); nothing was changed."""


def adopt(cluster: Cluster, drift_ids: Sequence[int], actor: AbstractBaseUser) -> int:
    """Make what the cluster holds the desired state for these quota drifts: an extra or different quota's value is
    written into desired state, a missing one is removed from it; one new version, audited with ``actor`` and the
    drift it came from, the rows closed as adopted. Returns the new version (the push that follows changes nothing
    on the cluster). All or nothing: one row that cannot be adopted refuses the whole call."""
    with transaction.atomic():
        rows = list(
            Drift.objects.select_for_update().filter(cluster=cluster, pk__in=list(drift_ids), resolved_at=None)
        )
        found = {row.pk for row in rows}
        gone = sorted(set(drift_ids) - found)
        if gone:
            raise NotAdoptable(f"Drift {', '.join(map(str, gone))} of {cluster.name} is not open (or does not exist).")
        entries: list[Alteration] = []
        for row in rows:
            if row.kind == BUDGET_SCOPE:
                why = (
                    f"Drift {row.pk} is the budget scope of {row.key} of {row.path} in the engine's Redis: re-apply "
                    "desired state to write it back, or change the value's budget_scope (AlterClientQuotas)."
                )
                raise NotAdoptable(why)
            if row.kind != QUOTA:
                why = f"Drift {row.pk} is a {row.kind} config: only quotas can be adopted; re-apply instead."
                raise NotAdoptable(why)
            ref = EntityRef.from_field(row.resource)
            named = [("user", ref.user), ("client-id", ref.client_id), ("ip", ref.ip)]
            parts = [(k, None if v == DEFAULT else v) for k, v in named if v is not None]
            op = QuotaOp(row.key, remove=True) if row.actual is None else QuotaOp(row.key, float(row.actual))
            entries.append(Alteration(parts, [op]))
        outcome = audited_alter(cluster, entries, actor, comment="adopted from what the cluster holds")
        now = timezone.now()
        for row in rows:
            row.resolved_at, row.resolution = now, DriftResolution.ADOPTED
            row.save(update_fields=["resolved_at", "resolution"])
            record(
                AuditAction.DRIFT_ADOPTED, actor, cluster=cluster, entity=row.path, key=row.key,
                before=row.desired, after=row.actual,
                comment=f"{row.status} on the cluster, adopted at desired-state version {outcome.version}",
            )
    return outcome.version


def reconcile_all(mode: str | None = None) -> list[ReconcileOutcome]:
    """Every target of every cluster (Celery beat runs it every QUOTAS_RECONCILE_SECONDS)."""
    out = []
    for cluster in Cluster.objects.all():
        for broker in push_targets(cluster):
            out.append(reconcile_target(cluster, broker, mode=mode))
    return out
