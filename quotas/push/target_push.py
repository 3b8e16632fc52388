"""Pushing one target: the cluster's current desired-state version (the items changed since the version the target
holds, or the whole state when it holds none), under the target's lock when its connector cannot order writes.

Pushes always carry the newest version, so one push covers every change committed before it, a retried or late push
is a no-op, and "exactly once in effect" rests on the version check (the engine's script, or a per-target lock for
Kafka, which cannot check versions itself). After a restore of the database (``quotas.models.pushes.restore_fence``)
a push sends only what changed since, and a target holding a newer version than the database is never written."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from quotas.connector_registry import connector_for
from quotas.connectors.base import Applied, Connector, Delta, PushError, Target
from quotas.models import Broker, Cluster, DesiredStateVersion
from quotas.models.desired import changes_since, desired_state, portal_applied_version
from quotas.models.pushes import restore_fence
from quotas.push import address, booking, flags

log = logging.getLogger(__name__)


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
    return flags._client().lock(
        name, timeout=settings.QUOTAS_PUSH_LOCK_S, sleep=0.005,
        blocking_timeout=settings.QUOTAS_PUSH_LOCK_S if wait_s is None else wait_s,
        raise_on_release_error=False,  # expired meanwhile: logged by redis-py, the push stands
    )


#: How long a direct push waits for the previous push of its target to end before handing over to the task.
DIRECT_WAIT_S = 2.0


class TargetBusy(Exception):
    """A direct push found another push holding the target for longer than DIRECT_WAIT_S."""


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
        flags._client().delete(flags._flag(cluster_id, broker_pk))  # commits from now on enqueue a new push
    cluster = Cluster.objects.get(pk=cluster_id)
    broker = Broker.objects.get(pk=broker_pk) if broker_pk is not None else None
    return _push(cluster, broker, force=force, direct=direct, record=lambda o: booking._applied(cluster, [(broker, o)]))


def _push(
    cluster: Cluster, broker: Broker | None, *, force: bool, direct: bool, record: Callable[[PushOutcome], None]
) -> PushOutcome:
    """``push_target`` once the target is known: ``record`` books the outcome, under the target's lock."""
    cluster_id, broker_pk = cluster.pk, broker.pk if broker is not None else None
    connector = connector_for(cluster.connector)
    try:
        target = address.target_of(cluster, broker)
    except PushError as e:
        if direct:
            flags._client().delete(flags._flag(cluster_id, broker_pk))
        booking._failed(cluster, broker, e)
        raise
    lock = _target_lock(connector, cluster, broker, DIRECT_WAIT_S if direct else None)
    if not lock.acquire():
        if direct:
            raise TargetBusy(target.label)
        message = f"{target.label}: another push held it for {settings.QUOTAS_PUSH_LOCK_S:g}s"
        raise PushError("CONCURRENT_TRANSACTIONS", message, retriable=True)
    try:
        if direct:  # the lock is ours: clear the flag before reading the version, as the task does
            flags._client().delete(flags._flag(cluster_id, broker_pk))
        outcome = _push_locked(connector, target, cluster, broker, force)
        # under the lock: the next push reads what this one applied (Kafka's held version is the portal's rows)
        record(outcome)
    except PushError as e:
        booking._failed(cluster, broker, e)
        raise
    finally:
        lock.release()
    return outcome


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
