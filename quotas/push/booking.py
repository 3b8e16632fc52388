"""Booking pushes in the database: the Push rows of what landed on each target (and the requests that became
applied), or the attempt and error of a push that failed.

Written after the sends, in transactions of their own: nothing before a send waits for the database's write lock."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from quotas.connectors.base import PushError
from quotas.models import (
    DRAIN_LEASE_S,
    AuditAction,
    Broker,
    Cluster,
    DesiredStateVersion,
    Push,
    PushState,
    record,
    rows,
)
from quotas.push import address
from quotas.workflow import quota_requests

if TYPE_CHECKING:
    from quotas.push.target_push import PushOutcome

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: A target's rows not yet applied, named by their states (not "<> applied"): the index on (cluster, broker, state,
#: version) then reads just them, where a NOT read every row the target ever had, under SQLite's write lock.
_NOT_APPLIED = (str(PushState.PENDING), str(PushState.FAILED))


def _rows(cluster: Cluster, broker: Broker | None, up_to: int) -> Any:
    return Push.objects.filter(cluster=cluster, broker=broker, state__in=_NOT_APPLIED, version__lte=up_to)


#: How long a push's bookkeeping waits for SQLite's write lock (its busy timeout, Python's default).
SQLITE_WRITE_WAIT_S = 5.0


def _bookkeeping(write: Callable[[rows.Pipeline], Callable[[], _T]]) -> _T:
    """Run ``write`` (a push's UPDATE of its Push rows) in a transaction of its own: it sends its statements in the
    pipeline it is given (``rows.pipeline``: one round trip on PostgreSQL) and returns what reads their answers
    once the pipeline's block has ended; returns what that returns.

    On SQLite (one writer at a time) the write lock is asked for every 2 ms or so: SQLite's busy handler sleeps up
    to 100 ms between its tries, so behind a process committing in a tight loop (free for a few milliseconds
    between its transactions) a push's bookkeeping waited up to the whole 5 s busy timeout, and every push queued
    behind it waited too (push_bench's p99 was that timeout). An attempt that found the lock taken is rolled back
    whole and ``write`` runs again; elsewhere (PostgreSQL, or inside a caller's transaction) it runs once.

    A transaction of its own on PostgreSQL commits without waiting for its flush to disk (``synchronous_commit``
    off for it alone): what it writes is the brokers' word, written down again by the next push to the target
    (which finds its version there) or by reconcile if a crash loses it, and any later commit flushes it too. A
    push then costs the disk no flush of its own, which a committing approval would wait behind (the approval's
    own commit stays synchronous), and its locks go at once."""
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        own = connection.vendor == "postgresql" and not connection.in_atomic_block
        with transaction.atomic():
            with rows.pipeline() as p:
                if own:
                    p.execute("SET LOCAL synchronous_commit TO OFF")
                finish = write(p)
            return finish()
    connection.ensure_connection()
    raw = connection.connection
    (busy_ms,) = raw.execute("PRAGMA busy_timeout").fetchone()
    deadline = time.monotonic() + SQLITE_WRITE_WAIT_S
    raw.execute("PRAGMA busy_timeout = 1")
    try:
        while True:
            try:
                with transaction.atomic():
                    with rows.pipeline() as p:
                        finish = write(p)
                    return finish()
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

    def write(p: rows.Pipeline) -> Callable[[], list[int]]:
        # plain statements, made before, sent together: the version row, locked first, is held the shortest time
        lease = p.execute(*drain) if drain is not None else None
        updates = []
        for (broker, _), (sql, params) in zip(landed, statements, strict=True):
            Push.lock_target(cluster.pk, broker.pk if broker is not None else None, via=p)  # pushes take turns
            updates.append(p.execute(sql, params))

        def finish() -> list[int]:
            if lease is not None:
                current[:] = [int(v) for (v,) in lease.rows]
            return [u.count for u in updates]

        return finish

    moved = _bookkeeping(write)
    if seen is not None:
        seen.extend(current)
    if any(moved):
        quota_requests.settle_pushed(cluster)
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
        where = address._where(cluster, broker)
        record(AuditAction.PUSH_FAILED, None, cluster=cluster, entity=where, comment=f"{e.code}: {e.message}")
        quota_requests.settle_pushed(cluster)
