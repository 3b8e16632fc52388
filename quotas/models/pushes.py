"""What was changed at each desired-state version, where each version has landed, and what drifted.

``DesiredChange`` is the cluster's change log: every committed change writes its items here under the
version it bumped to, so a push can send a broker only what changed since the version it holds.
``Push`` is the status of one version on one broker (or the cluster-wide namespace): pending, applied
or failed, with the attempts and the last error. ``Drift`` is what the reconcile job found on a broker
that desired state does not say (missing, extra or different), until it converges or is healed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta

from django.db import connection, models, transaction
from django.db.models import Q
from django.db.models.signals import post_save
from django.dispatch import receiver
from django.utils import timezone

from engine.config import EntityRef
from engine.entities import DEFAULT, entity_path
from engine.errors import QuotaEngineError
from engine.groups import group_of_field
from quotas.choices import ConnectorKind, QuotaScope
from quotas.connectors.base import BROKER, BUDGET_SCOPE, CLIENT_METRICS, EXEMPT, GROUP, KINDS, QUOTA, TOPIC, Item
from quotas.models import rows
from quotas.models.clusters import Broker, Cluster, push_wanted

KIND_CHOICES = [(k, k) for k in KINDS]

#: How far ahead a draining group push sets its cluster's lease (``DesiredStateVersion.drain_until``) at each round:
#: commits under it enqueue nothing, so a worker that dies mid-drain holds their pushes back about this long (then
#: the next commit enqueues one as usual; reconcile catches up a target left behind meanwhile).
DRAIN_LEASE_S = 10.0
#: A commit honours a lease only this far ahead of its own clock: a worker whose clock runs ahead cannot make an
#: orphaned lease last much longer (one set further ahead is ignored: the commit enqueues, which is always safe).
DRAIN_WINDOW_S = 2 * DRAIN_LEASE_S


class DesiredStateVersion(models.Model):
    """The version of a cluster's desired quota state, bumped in the transaction of every change.

    Pushes to brokers carry it, so a broker (or the reconcile job) can tell which state it holds.
    """

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, primary_key=True, related_name="desired_state")
    version = models.PositiveBigIntegerField(default=0)
    updated = models.DateTimeField(auto_now=True)
    drain_until = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,  # a worker's, never an admin's
        help_text="A worker's drain lease: until then it pushes each commit of the cluster (quotas.push).",
    )

    #: Set by ``lock``: a worker holds the cluster's drain lease, so a commit made under this lock is pushed by it
    #: (its next round reads the version after this transaction) and enqueues no push of its own.
    drained = False
    #: Set by ``lock``: the cluster's push targets (``push_target_pks``), read under the lock; None: read at ``bump``.
    targets: list[int | None] | None = None

    def __str__(self) -> str:
        return f"{self.cluster.name}@{self.version}"

    @classmethod
    def lock(cls, cluster: Cluster) -> DesiredStateVersion:
        """The cluster's version row, locked until the surrounding transaction ends (serializes changes): ``SELECT
        ... FOR UPDATE`` on PostgreSQL; on SQLite the transaction itself (IMMEDIATE: one writer at a time)."""
        with rows.pipeline() as p:
            take = cls.lock_in(p, cluster)
        return take()

    @classmethod
    def lock_in(cls, p: rows.Pipeline, cluster: Cluster) -> Callable[[], DesiredStateVersion]:
        """``lock`` sent in a pipeline (``rows.pipeline``), with the read of the cluster's push targets: statements
        sent after it in the pipeline run under the lock. Returns what gives the locked row once the pipeline's
        block has ended."""
        if connection.get_autocommit():
            raise transaction.TransactionManagementError("DesiredStateVersion.lock() outside a transaction")
        drain = rows.column(cls, "drain_until")
        sql = (
            f"SELECT {rows.column(cls, 'version')}, CASE WHEN {drain} > %s AND {drain} <= %s THEN 1 ELSE 0 END "
            f"FROM {rows.table(cls)} WHERE {rows.column(cls, 'cluster')} = %s"
        )
        if connection.features.has_select_for_update:
            sql += " FOR UPDATE"
        now = timezone.now()
        window = (now, now + timedelta(seconds=DRAIN_WINDOW_S))
        params = [*(rows.prep(cls, "drain_until", t) for t in window), cluster.pk]
        found = p.execute(sql, params)
        # read under the lock (the server runs it after the lock is taken), as bump would: no round trip of its own
        targets = None if _one_target(cluster) else p.execute(*_targets_statement(cluster))

        def take() -> DesiredStateVersion:
            got = found.rows
            if not got:  # clusters made before versions existed; Cluster.save makes the row
                cls.objects.get_or_create(cluster=cluster)
                got = rows.execute(sql, params)
            row = cls.from_db(connection.alias, ["cluster_id", "version"], [cluster.pk, got[0][0]])
            row.cluster = cluster  # known already: bump() needs it without another query
            row.drained = bool(got[0][1])
            row.targets = [None] if targets is None else [pk for (pk,) in targets.rows]
            return row

        return take

    def bump(self, changes: Mapping[Item, str | None], via: rows.Pipeline | None = None) -> int:
        """One more version for ``changes`` (item -> new text, None = removed); call it on the row ``lock``
        returned, inside the changes' transaction.

        The items are logged under the new version and a push to every broker follows the commit (by the worker
        holding the cluster's drain lease when ``lock`` saw one, else enqueued after the commit). Its statements
        go to the server together (``via``: in that pipeline, with the caller's own writes).
        """
        if via is None:
            with rows.pipeline() as p:
                return self.bump(changes, p)
        self.version += 1  # the row is locked: nobody else moves it until we commit
        self.updated = timezone.now()
        model = type(self)
        via.execute(
            f"UPDATE {rows.table(model)} SET {rows.column(model, 'version')} = %s, {rows.column(model, 'updated')} = %s"
            f" WHERE {rows.column(model, 'cluster')} = %s",
            [self.version, rows.prep(model, "updated", self.updated), self.pk],
        )
        log_version(self.cluster, self.version, changes, enqueue=not self.drained, targets=self.targets, via=via)
        return self.version


#: A restored database's versions start again at the next multiple of this (``fence_restored``): far above any version
#: the lost database can have handed out since the backup (it would take a billion changes of one cluster), so no
#: version is ever given twice, and the versions below a cluster's fence are those the backup knew.
RESTORE_FENCE = 10**9


def restore_fence(version: int) -> int:
    """The version at which a cluster's database was last restored (0: never), from its current ``version``.

    Pushes send no change logged at or below it: what the brokers hold of those is the brokers' word, compared by
    reconcile and left to an admin (``quotas.push``).
    """
    return version - version % RESTORE_FENCE


def fence_restored() -> list[tuple[Cluster, int, int]]:
    """Move every cluster's desired-state version up to its next fence, after a restore; (cluster, before, fence).

    Each cluster in a transaction of its own, under its version lock: the fence logs no change (desired state is
    the backup's) and a pending push per target, and clears a drain lease the backup may hold. Call it once per
    restore, with the portal stopped: a second call only moves the fence up again.
    """
    out = []
    for cluster in Cluster.objects.order_by("name"):
        with transaction.atomic():
            row = DesiredStateVersion.lock(cluster)
            fence = restore_fence(row.version) + RESTORE_FENCE
            DesiredStateVersion.objects.filter(pk=cluster.pk).update(
                version=fence, drain_until=None, updated=timezone.now()
            )
            log_version(cluster, fence, {}, enqueue=False)  # reconcile finds the targets behind and pushes
        out.append((cluster, row.version, fence))
    return out


@receiver(post_save, sender=Cluster)
def _version_row(sender: type[Cluster], instance: Cluster, created: bool, raw: bool = False, **_: object) -> None:
    """A new cluster starts at desired-state version 0 (in ``Cluster.save``'s transaction), so a quota change
    only ever bumps an existing row."""
    if created and not raw:
        DesiredStateVersion.objects.get_or_create(cluster=instance)


class DesiredChange(models.Model):
    """One item changed at one version: its new value, or NULL when it was removed."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="desired_changes")
    version = models.PositiveBigIntegerField()
    kind = models.CharField(max_length=16, choices=KIND_CHOICES)
    resource = models.CharField(max_length=600, blank=True, help_text="Entity (JSON), broker id, topic or name.")
    key = models.CharField(max_length=255)
    value = models.TextField(null=True, blank=True, help_text="NULL: removed at this version.")

    class Meta:
        ordering = ["cluster", "version", "pk"]
        indexes = [models.Index(fields=["cluster", "version"], name="quotas_change_by_version")]

    def __str__(self) -> str:
        return f"{self.cluster_id}@{self.version} {self.kind} {self.resource} {self.key}={self.value!r}"

    @property
    def item(self) -> Item:
        return Item(self.kind, self.resource, self.key)


class PushState(models.TextChoices):
    PENDING = "pending", "Pending"
    APPLIED = "applied", "Applied"
    FAILED = "failed", "Failed"


class Push(models.Model):
    """The status of one desired-state version on one target (``broker`` NULL: the cluster-wide namespace)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pushes")
    broker = models.ForeignKey(Broker, null=True, blank=True, on_delete=models.CASCADE, related_name="pushes")
    version = models.PositiveBigIntegerField()
    state = models.CharField(max_length=16, choices=PushState.choices, default=PushState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    error_code = models.CharField(max_length=64, blank=True, help_text="Kafka's error name of the last failure.")
    error = models.TextField(blank=True)
    answers = models.JSONField(
        default=dict,
        blank=True,
        help_text="Kafka: what each broker answered from its own metadata (broker id -> text).",
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster", "-version", "broker"]
        indexes = [models.Index(fields=["cluster", "broker", "state", "version"], name="quotas_push_by_target")]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "version", "broker"], condition=Q(broker__isnull=False), name="quotas_push_unique"
            ),
            models.UniqueConstraint(
                fields=["cluster", "version"], condition=Q(broker__isnull=True), name="quotas_push_unique_cluster"
            ),
            models.CheckConstraint(condition=Q(state__in=PushState.values), name="quotas_push_known_state"),
        ]

    def __str__(self) -> str:
        where = f"broker-{self.broker.broker_id}" if self.broker else "cluster"
        return f"{self.cluster.name}@{self.version} {where}: {self.state}"

    @staticmethod
    def lock_target(cluster_id: int, broker_pk: int | None, via: rows.Pipeline | None = None) -> None:
        """Inside a transaction: serialize the bookkeeping of one target's pushes until it ends.

        Two workers may push one target at once (a commit during a push enqueues the next one); each then marks
        the target's rows up to its version applied (or failed) with one UPDATE over overlapping rows, and two such
        UPDATEs locking those rows in different orders would deadlock on PostgreSQL. A transaction-scoped advisory
        lock per target (``pg_advisory_xact_lock``, keyed by the hash of ``quotas.push:<cluster>:<target>``) makes
        them take turns; it is released at commit and needs no row to exist. SQLite's IMMEDIATE transactions
        already run one at a time. What reaches the broker is ordered elsewhere: the engine script's version
        check, the Redis lock of a Kafka cluster. ``via``: sent in that pipeline (``rows.pipeline``).
        """
        if connection.vendor != "postgresql":
            return
        key = f"quotas.push:{cluster_id}:{broker_pk if broker_pk is not None else 'cluster'}"
        (via or rows).execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [key])


class DriftStatus(models.TextChoices):
    MISSING = "missing", "Missing on the broker"
    EXTRA = "extra", "On the broker, not desired"
    DIFFERENT = "different", "Different value"


class DriftResolution(models.TextChoices):
    OPEN = "", "Open"
    HEALED = "healed", "Healed by re-applying desired state"
    ADOPTED = "adopted", "Adopted into desired state"
    CONVERGED = "converged", "Gone (the broker or desired state changed)"


class Drift(models.Model):
    """One difference between what a broker holds and desired state, while it lasts."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="drift")
    broker = models.ForeignKey(Broker, null=True, blank=True, on_delete=models.CASCADE, related_name="drift")
    kind = models.CharField(max_length=16, choices=KIND_CHOICES)
    resource = models.CharField(max_length=600, blank=True)
    key = models.CharField(max_length=255)
    status = models.CharField(max_length=16, choices=DriftStatus.choices)
    desired = models.TextField(null=True, blank=True)
    actual = models.TextField(null=True, blank=True)
    version = models.PositiveBigIntegerField(help_text="The desired-state version it was compared with.")
    detected_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution = models.CharField(max_length=16, choices=DriftResolution.choices, blank=True, default="")

    class Meta:
        ordering = ["-detected_at", "pk"]
        indexes = [models.Index(fields=["cluster", "broker", "resolved_at"], name="quotas_drift_open")]

    def __str__(self) -> str:
        return f"{self.cluster.name} {self.kind} {self.resource} {self.key}: {self.status}"

    @property
    def item(self) -> Item:
        return Item(self.kind, self.resource, self.key)

    @property
    def path(self) -> str:
        return item_path(self.item)


def item_path(item: Item) -> str:
    """Kafka's config path of what an item configures: ``/config/users/alice``, ``/config/brokers/<default>``,
    ``/config/brokers/1``, ``/config/topics/t``, ``/config/client-metrics/name`` (a budget scope: its quota's)."""
    if item.kind == GROUP:
        return f"/groups/{item.resource}"
    if item.kind == EXEMPT:
        return f"exempt principal {item.resource}"
    group = group_of_field(item.resource) if item.kind == BUDGET_SCOPE else None
    if group is not None:
        return f"/groups/{group}"
    if item.kind in (QUOTA, BUDGET_SCOPE):
        try:
            ref = EntityRef.from_field(item.resource)
        except (QuotaEngineError, ValueError, TypeError, AttributeError):
            return f"quota {item.resource}"  # not an entity the portal writes (something else put it on the broker)
        return entity_path(ref.user, ref.client_id, ref.ip)
    if item.kind == BROKER:
        return f"/config/brokers/{item.resource or DEFAULT}"
    if item.kind == TOPIC:
        return f"/config/topics/{item.resource}"
    if item.kind == CLIENT_METRICS:
        return f"/config/client-metrics/{item.resource}"
    return f"{item.kind} {item.resource}".strip()


def push_targets(cluster: Cluster) -> list[Broker | None]:
    """Where a cluster's versions land: each broker of the engine, or once the whole cluster (None): the engine's
    cluster-wide namespace, or a Kafka cluster (KRaft keeps quotas and dynamic configs in the metadata log: one
    write reaches every broker; the push then asks each broker what it answers)."""
    if _one_target(cluster):
        return [None]
    return list(Broker.objects.filter(cluster=cluster).order_by("broker_id"))


def _one_target(cluster: Cluster) -> bool:
    return cluster.scope == QuotaScope.CLUSTER_WIDE or cluster.connector == ConnectorKind.KAFKA


def push_target_pks(cluster: Cluster) -> list[int | None]:
    """``push_targets`` as primary keys (None: the whole cluster), in one plain statement: every change runs it."""
    if _one_target(cluster):
        return [None]
    return [pk for (pk,) in rows.execute(*_targets_statement(cluster))]


def _targets_statement(cluster: Cluster) -> tuple[str, list[int]]:
    """The read of a per-broker cluster's push targets (``push_target_pks``), in the order of their broker ids."""
    sql = (
        f"SELECT {rows.column(Broker, 'id')} FROM {rows.table(Broker)} WHERE {rows.column(Broker, 'cluster')} = %s "
        f"ORDER BY {rows.column(Broker, 'broker_id')}"
    )
    return sql, [cluster.pk]


_CHANGE_FIELDS = ("cluster", "version", "kind", "resource", "key", "value")
_PUSH_FIELDS = ("cluster", "broker", "version", "state", "attempts", "error_code", "error", "answers", "created",
                "updated", "applied_at")  # fmt: skip


def log_version(
    cluster: Cluster, version: int, changes: Mapping[Item, str | None], *, enqueue: bool = True,
    targets: list[int | None] | None = None, via: rows.Pipeline | None = None,
) -> None:
    """Inside the change's transaction: log its items, add a pending push per target, push after commit (unless
    ``enqueue`` is False: a worker draining the cluster pushes it). ``targets``: the cluster's push targets when
    the caller read them already (``DesiredStateVersion.lock``); ``via``: the writes sent in that pipeline."""
    rows.insert(
        DesiredChange, _CHANGE_FIELDS, ((cluster.pk, version, *item, v) for item, v in changes.items()), via=via
    )
    pks = push_target_pks(cluster) if targets is None else targets
    now = timezone.now()
    rows.insert(Push, _PUSH_FIELDS, ((cluster.pk, pk, version, PushState.PENDING, 0, "", "", {}, now, now, None)
                                     for pk in pks), via=via)  # fmt: skip
    if not enqueue:
        return
    cluster_id, kind = cluster.pk, cluster.connector

    def after_commit() -> None:
        push_wanted.send(sender=Cluster, cluster_id=cluster_id, broker_pks=pks, connector=kind)

    transaction.on_commit(after_commit)
