"""Pushing several targets of one cluster in one go, in rounds, with the cluster's drain lease.

What one task does for a round of commits that left them all behind; for the engine (which orders pushes itself) it
keeps pushing the commits made meanwhile for up to ``QUOTAS_PUSH_DRAIN_S``, holding the drain lease on the cluster's
version row so that those commits enqueue nothing of their own."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from quotas.connector_registry import connector_for
from quotas.connectors.base import PushError
from quotas.models import DRAIN_WINDOW_S, Broker, Cluster, DesiredStateVersion, Push, PushState, push_target_pks, rows
from quotas.push import booking, dispatch, flags, target_push

log = logging.getLogger(__name__)


def push_group(
    cluster_id: int, broker_pks: Sequence[int | None], *, drain_s: float = 0.0
) -> dict[int | None, target_push.PushOutcome | Exception]:
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
    with flags._client().pipeline(transaction=False) as p:
        for pk in broker_pks:
            p.delete(flags._flag(cluster_id, pk))  # commits from now on enqueue a new push
        p.execute()
    deadline = time.monotonic() + drain_s
    leased = False  # the lease may be ours (a booking of ours took it, or may have): commits may count on us
    known: list[int | None] = list(broker_pks)
    out: dict[int | None, target_push.PushOutcome | Exception] = {}
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
            dispatch.enqueue_pushes(cluster.pk, behind)
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
            dispatch._publish(cluster_id, later, several=len(known) > 1, countdown=DRAIN_WINDOW_S)
        except Exception:  # the next commit after the lease, or reconcile, pushes it
            log.exception("Could not enqueue the push of cluster %s after its drain", cluster_id)
        return
    try:
        targets = push_target_pks(Cluster.objects.get(pk=cluster_id))
        due = [pk for pk in targets if pk not in failed]
        if due:
            dispatch.enqueue_pushes(cluster_id, due)
    except Exception:  # e.g. the database went away: the next commit, or reconcile, pushes it
        log.exception("Could not enqueue the push of cluster %s after its drain", cluster_id)


def _group_round(
    cluster: Cluster, broker_pks: Sequence[int | None], drain: bool, *, skip_failing: bool = False,
    tried: list[bool] | None = None,
) -> tuple[dict[int | None, target_push.PushOutcome | Exception], bool | None]:
    """One round of ``push_group``: its outcomes, and (``drain``, every target it tried reached and booked) whether
    the cluster has a newer version than the round brought everywhere (True: the drain lease is taken; False:
    cleared); None when no such check was made (``tried`` gets an entry when one was attempted: its outcome may be
    unknown). ``skip_failing``: targets whose last push failed are left to their own retries (with backoff)."""
    brokers = Broker.objects.in_bulk([pk for pk in broker_pks if pk is not None])
    deferred = not connector_for(cluster.connector).needs_lock
    failing = set(
        Push.objects.filter(cluster=cluster, broker__in=list(brokers), state__in=booking._NOT_APPLIED, attempts__gt=0)
        .values_list("broker", flat=True)
    )  # fmt: skip
    if skip_failing:
        broker_pks = [pk for pk in broker_pks if pk not in failing]
    landed: list[tuple[Broker | None, target_push.PushOutcome]] = []
    out: dict[int | None, target_push.PushOutcome | Exception] = {}
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
                record: Callable[[target_push.PushOutcome], None] = lambda o, b=broker: landed.append((b, o))  # noqa: E731
            else:
                record = lambda o, b=broker: booking._applied(cluster, [(b, o)])  # noqa: E731
            try:
                out[pk] = target_push._push(cluster, broker, force=False, direct=False, record=record)
            except Exception as e:  # a PushError is on the target's rows; anything else is logged here
                if not isinstance(e, PushError):
                    log.exception("Push to %s target %s failed", cluster.name, pk)
                out[pk] = e
    finally:
        if landed:
            reached = [o.version for o in out.values() if isinstance(o, target_push.PushOutcome)]
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

    def write(p: rows.Pipeline) -> Callable[[], None]:
        p.execute(sql, [cluster_id])
        return lambda: None

    booking._bookkeeping(write)


def _book(
    cluster: Cluster, landed: Sequence[tuple[Broker | None, target_push.PushOutcome]], out: dict[Any, Any],
    drained_to: int | None = None,
) -> int | None:
    """Book a group's landed pushes (``_applied``); if that fails, they answer the error (the task pushes each again
    on its own: a push that finds its version there books it). Returns the version the booking's transaction read
    with ``drained_to`` once it committed (even if what follows it failed), else None."""
    seen: list[int] = []
    try:
        booking._applied(cluster, landed, drained_to, seen)
    except Exception as e:
        log.exception("Booking the pushes to %s failed; each target is pushed again on its own", cluster.name)
        for broker, _ in landed:
            out[broker.pk if broker is not None else None] = e
    return seen[0] if seen else None
