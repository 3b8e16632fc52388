"""Statements sent to the database together (``quotas.models.rows.pipeline``, one round trip on PostgreSQL): each
answers as it would alone, an error undoes the transaction, a change writes what it wrote one statement at a time,
and a push's booking in a transaction of its own commits without waiting for its flush (an approval still waits)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from quotas.models import (
    Alteration,
    Broker,
    Cluster,
    DesiredChange,
    DesiredStateVersion,
    Push,
    PushState,
    QuotaEntity,
    QuotaOp,
    QuotaValue,
    alter_client_quotas,
    rows,
)
from quotas.push import booking
from tests.database import on_postgres

pytestmark = pytest.mark.django_db(transaction=True)
PBR, CBR = "producer_byte_rate", "consumer_byte_rate"


@pytest.fixture
def cluster() -> Cluster:
    c = Cluster.objects.create(name="pipe")
    for i in (1, 2):
        Broker.objects.create(cluster=c, broker_id=i, host=f"b{i}:9092")
    return c


def _version_sql() -> tuple[str, str]:
    table, version = rows.table(DesiredStateVersion), rows.column(DesiredStateVersion, "version")
    where = f"WHERE {rows.column(DesiredStateVersion, 'cluster')} = %s"
    return f"SELECT {version} FROM {table} {where}", f"UPDATE {table} SET {version} = {version} + %s {where}"


def test_each_statement_of_a_pipeline_answers_in_order_once_its_block_ends(cluster: Cluster) -> None:
    read, add = _version_sql()
    with transaction.atomic():
        with rows.pipeline() as p:
            before = p.execute(read, [cluster.pk])
            moved = p.execute(add, [5, cluster.pk])
            after = p.execute(read, [cluster.pk])
            missed = p.execute(add, [1, -1])
    assert (before.rows, moved.count, after.rows, missed.count) == ([(0,)], 1, [(5,)], 0)
    assert DesiredStateVersion.objects.get(cluster=cluster).version == 5


def test_an_error_in_a_pipeline_is_djangos_and_undoes_its_transaction(cluster: Cluster) -> None:
    read, add = _version_sql()
    table = rows.table(DesiredStateVersion)
    columns = ", ".join(rows.column(DesiredStateVersion, f) for f in ("cluster", "version", "updated"))
    with pytest.raises(IntegrityError), transaction.atomic(), rows.pipeline() as p:
        p.execute(add, [7, cluster.pk])
        p.execute(f"INSERT INTO {table} ({columns}) VALUES (%s, 1, %s)", [cluster.pk, "2026-01-01 00:00:00"])
        p.execute(add, [100, cluster.pk])
    assert DesiredStateVersion.objects.get(cluster=cluster).version == 0


def test_a_batch_of_new_and_held_entities_of_every_shape_writes_every_row(cluster: Cluster) -> None:
    """More new entities than one statement takes (``_NEW_CHUNK``), of every shape, with values held before the
    batch updated and removed (an entity left without values goes)."""
    alter_client_quotas(cluster, [
        Alteration([("user", "kept")], [QuotaOp(PBR, 1000.0)]),
        Alteration([("user", "gone")], [QuotaOp(PBR, 2000.0), QuotaOp(CBR, 2000.0)]),
    ])  # fmt: skip
    users = [f"u{i:03d}" for i in range(150)]
    batch = [Alteration([("user", u)], [QuotaOp(PBR, 1024.0 * (i + 1)), QuotaOp(CBR, 512.0)]) for i, u in
             enumerate(users)]  # fmt: skip
    batch += [
        Alteration([("user", "alice"), ("client-id", "app")], [QuotaOp(PBR, 4096.0)]),
        Alteration([("client-id", "lonely")], [QuotaOp(CBR, 8192.0)]),
        Alteration([("user", None)], [QuotaOp(PBR, 100.0)]),
        Alteration([("ip", "10.0.0.1")], [QuotaOp("connection_creation_rate", 5.0)]),
        Alteration([("user", "kept")], [QuotaOp(PBR, 3000.0), QuotaOp(CBR, remove=True)]),
        Alteration([("user", "gone")], [QuotaOp(PBR, remove=True), QuotaOp(CBR, remove=True)]),
        Alteration([("user", "never")], [QuotaOp(PBR, remove=True)]),
    ]
    outcome = alter_client_quotas(cluster, batch)

    expected = {(u, None, None, PBR, 1024.0 * (i + 1)) for i, u in enumerate(users)}
    expected |= {(u, None, None, CBR, 512.0) for u in users}
    expected |= {
        ("alice", "app", None, PBR, 4096.0), (None, "lonely", None, CBR, 8192.0), ("<default>", None, None, PBR, 100.0),
        (None, None, "10.0.0.1", "connection_creation_rate", 5.0), ("kept", None, None, PBR, 3000.0),
    }  # fmt: skip
    held = QuotaValue.objects.filter(entity__cluster=cluster).values_list(
        "entity__user", "entity__client_id", "entity__ip", "key", "value"
    )
    assert set(held) == expected
    assert not QuotaEntity.objects.filter(cluster=cluster, user__in=["gone", "never"]).exists()
    assert QuotaEntity.objects.filter(cluster=cluster).count() == len(users) + 5
    assert (outcome.version, outcome.changed) == (2, True)
    logged = DesiredChange.objects.filter(cluster=cluster, version=2)
    # the new values, kept's new one and gone's two removals (kept held no CBR, never nothing: no change)
    assert logged.count() == len(users) * 2 + 4 + 1 + 2
    assert sorted(Push.objects.filter(cluster=cluster, version=2).values_list("broker__broker_id", "state")) == [
        (1, PushState.PENDING), (2, PushState.PENDING)
    ]  # fmt: skip


def test_a_bookings_own_transaction_skips_its_flush_and_a_change_keeps_it(cluster: Cluster) -> None:
    if not on_postgres():
        pytest.skip("synchronous_commit is PostgreSQL's: SQLite's bookings commit as every transaction does")

    def show(p: rows.Pipeline) -> object:
        setting = p.execute("SHOW synchronous_commit")
        return lambda: setting.rows[0][0]

    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit TO on")  # the tests' server runs with it off: a deployment's is on
    try:
        assert booking._bookkeeping(show) == "off"
        assert rows.execute("SHOW synchronous_commit") == [("on",)]  # for its own transaction alone
        with transaction.atomic():
            assert booking._bookkeeping(show) == "on"  # inside a caller's transaction: the caller's commit decides
            alter_client_quotas(cluster, [Alteration([("user", "alice")], [QuotaOp(PBR, 1000.0)])])
            assert rows.execute("SHOW synchronous_commit") == [("on",)]  # an approval's commit waits for its flush
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET synchronous_commit")


def _status() -> str:
    """The server-side transaction status psycopg last saw ("idle", "intrans"...), or the vendor's name elsewhere."""
    if not on_postgres():
        return connection.vendor
    return connection.connection.info.transaction_status.name.lower()


def test_a_commit_pipeline_of_an_outermost_block_ends_the_transaction_in_its_own_query(cluster: Cluster) -> None:
    if not on_postgres():
        pytest.skip("SQLite runs each statement as it is sent: there is no round trip for the commit to share")
    read, add = _version_sql()
    committed: list[bool] = []
    with transaction.atomic():
        with rows.pipeline(commit=True) as p:
            p.execute(add, [3, cluster.pk])
        seen = _status()  # before Django's commit at the block's end: the server already ended the transaction
        transaction.on_commit(lambda: committed.append(True))
    assert (seen, committed) == ("idle", [True])
    assert rows.execute(read, [cluster.pk]) == [(3,)]


def test_a_commit_pipeline_inside_an_outer_block_leaves_the_commit_to_it(cluster: Cluster) -> None:
    """A change made inside a caller's transaction (an approval) is undone with it: no COMMIT of its own."""
    read, _add = _version_sql()
    with pytest.raises(RuntimeError), transaction.atomic():
        alter_client_quotas(cluster, [Alteration([("user", "alice")], [QuotaOp(PBR, 1000.0)])])
        assert _status() in ("intrans", "sqlite")
        raise RuntimeError("the approval failed after the change")
    assert rows.execute(read, [cluster.pk]) == [(0,)]
    assert not QuotaValue.objects.filter(entity__cluster=cluster).exists()


def test_an_error_in_a_commit_pipeline_stops_before_its_commit(cluster: Cluster) -> None:
    read, add = _version_sql()
    table = rows.table(DesiredStateVersion)
    columns = ", ".join(rows.column(DesiredStateVersion, f) for f in ("cluster", "version", "updated"))
    with pytest.raises(IntegrityError), transaction.atomic():
        with rows.pipeline(commit=True) as p:
            p.execute(add, [7, cluster.pk])
            p.execute(f"INSERT INTO {table} ({columns}) VALUES (%s, 1, %s)", [cluster.pk, "2026-01-01 00:00:00"])
    assert rows.execute(read, [cluster.pk]) == [(0,)]
    alter_client_quotas(cluster, [Alteration([("user", "alice")], [QuotaOp(PBR, 1000.0)])])  # the connection works on
    assert rows.execute(read, [cluster.pk]) == [(1,)]
