"""``manage.py backup_db`` and ``restore_db``: a lost database restored, and nothing the brokers hold overwritten.

The story runs on the session's database (PostgreSQL, or SQLite in the short second run) and on engine brokers in
the test Redis: approvals pushed, a backup, more approvals pushed, the database dropped and restored from the backup
(by ``manage.py restore_db`` in a process of its own, as an operator runs it). The brokers then hold values the
restored desired state does not know: pushes, and reconcile in heal mode, leave them alone; reconcile shows them as
drift; an admin adopts them; from then on desired state and the brokers agree, and heal mode heals again.
"""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from engine.config import KEY_SEP, EntityRef, namespace_for_broker
from engine.desired import NamespaceState
from portal import backups
from portal.backups import PG_MAGIC, SQLITE_MAGIC, BackupError
from quotas.connectors.base import QUOTA
from quotas.models import AuditEntry, DesiredStateVersion, Drift, QuotaValue
from quotas.models.pushes import RESTORE_FENCE
from quotas.push import reconcile, resolve
from quotas.workflow import quota_requests
from tests.brokers import cluster_with_brokers, push_everywhere
from tests.database import database_url, drop_database, on_postgres
from tests.people import make_tenant, make_user

pytestmark = pytest.mark.django_db(transaction=True)  # the backup and the restore see what the test committed

ROOT = Path(__file__).resolve().parents[2]
PBR, CBR = "producer_byte_rate", "consumer_byte_rate"


@pytest.fixture
def w(engine_redis: redis.Redis) -> dict[str, Any]:
    """team-a (alice asks for svc-a-*), two admins, and cluster prod with two engine brokers."""
    a = make_tenant("team-a", users=["svc-a-*"])
    alice = make_user("alice")
    a.members.add(alice)
    prod = cluster_with_brokers((1, 2), name="prod")
    return {"a": a, "alice": alice, "root": make_user("root", staff=True), "ops": make_user("ops", staff=True),
            "prod": prod, "redis": engine_redis}  # fmt: skip


def approved(w: dict[str, Any], user: str, key: str, value: float) -> None:
    """alice asks, root approves, and the change is pushed to both brokers as the worker would."""
    request = quota_requests.submit(w["alice"], w["a"], w["prod"], user=user, client_id=None, key=key, value=value)
    quota_requests.approve(w["root"], request.pk)
    push_everywhere(w["prod"])


def on_brokers(w: dict[str, Any]) -> dict[int, dict[tuple[str, str], str]]:
    """What each broker holds: (user, key) -> value."""
    out = {}
    for b in (1, 2):
        _, items = NamespaceState(w["redis"], namespace_for_broker("prod", b), b).read()
        out[b] = {(EntityRef.from_field(r).user, k): v for (kind, r, k), v in items.items() if kind == QUOTA}
    return out


def desired(w: dict[str, Any]) -> dict[tuple[str, str], float]:
    rows = QuotaValue.objects.filter(entity__cluster__name="prod").values_list("entity__user", "key", "value")
    return {(user, key): float(value) for user, key, value in rows}


def version() -> int:
    return DesiredStateVersion.objects.get(cluster__name="prod").version


def manage(*args: str) -> subprocess.CompletedProcess[str]:
    """``python manage.py ARGS`` on the test database and Redis, as an operator runs it."""
    env = {**os.environ, "DATABASE_URL": database_url(), "QUOTAS_REDIS_URL": settings.QUOTAS_REDIS_URL}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=90
    )


def other_kind(tmp_path: Path) -> Path:
    """A backup of the kind this database is not: a SQLite file, or the start of a pg_dump archive."""
    other = tmp_path / "other"
    if on_postgres():
        with closing(sqlite3.connect(other)) as db:
            db.execute("CREATE TABLE django_migrations (id INTEGER)")
    else:
        other.write_bytes(PG_MAGIC + b"\x01\x0e\x00")
    return other


def failing_migration() -> None:
    raise RuntimeError("a migration that fails")


def restoring_copies() -> list[str]:
    """The fresh copies a restore makes beside the database, if any was left."""
    if not on_postgres():
        return [str(p) for p in Path(connection.settings_dict["NAME"]).parent.glob("*.restoring*")]
    with connection.cursor() as cursor:
        cursor.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", ["%\\_restoring"])
        return [name for (name,) in cursor.fetchall()]


def refused(code: str, *args: Any, **options: Any) -> str:
    """``call_command`` refuses with ``code``; returns the message."""
    with pytest.raises(CommandError) as e:
        call_command(*args, stdout=io.StringIO(), **options)
    assert str(e.value).startswith(f"{code}: "), e.value
    return str(e.value)


def test_a_restored_database_leaves_what_the_brokers_hold_until_an_admin_adopts_it(
    w: dict[str, Any], tmp_path: Path
) -> None:
    approved(w, "svc-a-1", PBR, 1000)
    backup, out = tmp_path / "portal.backup", io.StringIO()
    call_command("backup_db", str(backup), stdout=out)
    assert f"to {backup} (" in out.getvalue()
    assert backup.read_bytes().startswith(PG_MAGIC if on_postgres() else SQLITE_MAGIC)
    refused("FILE_EXISTS", "backup_db", str(backup))
    before = version()

    approved(w, "svc-a-1", PBR, 2000)  # after the backup: a new value, and a new quota
    approved(w, "svc-a-2", CBR, 3000)
    newer = {("svc-a-1", PBR): "2000.0", ("svc-a-2", CBR): "3000.0"}
    assert on_brokers(w) == {1: newer, 2: newer}

    # the database still there: refused, and a damaged backup never half-restores it
    failed = manage("restore_db", str(backup))
    assert failed.returncode == 1 and "NOT_EMPTY: " in failed.stderr and "Traceback" not in failed.stderr
    damaged = tmp_path / "damaged.backup"
    damaged.write_bytes(backup.read_bytes()[: backup.stat().st_size * 99 // 100])
    refused("RESTORE_FAILED" if on_postgres() else "NOT_A_BACKUP", "restore_db", str(damaged), replace=True)
    refused("WRONG_FORMAT", "restore_db", str(other_kind(tmp_path)), replace=True)
    refused("NOT_A_BACKUP", "restore_db", __file__, replace=True)
    refused("NO_SUCH_FILE", "restore_db", str(tmp_path / "nothing"))
    with pytest.raises(BackupError) as failing:  # restored beside the database, then its preparation fails
        backups.restore(backup, replace=True, prepare=failing_migration)
    assert failing.value.code == "RESTORE_FAILED" and "a migration that fails" in failing.value.message
    assert desired(w) == {("svc-a-1", PBR): 2000, ("svc-a-2", CBR): 3000} and version() == before + 2
    assert not restoring_copies()

    drop_database()
    done = manage("restore_db", str(backup))

    assert done.returncode == 0, done.stderr
    assert f"from {backup}." in done.stdout
    assert f"prod: desired-state version {before} -> {RESTORE_FENCE} (restore fence)" in done.stdout
    assert desired(w) == {("svc-a-1", PBR): 1000} and version() == RESTORE_FENCE
    restored = AuditEntry.objects.filter(action="database_restored")
    assert list(restored.values_list("cluster__name", "actor_name", "before", "after")) == [
        ("prod", "system", before, RESTORE_FENCE)
    ]
    assert f"from the backup {backup.name} by " in restored.get().comment
    # a push after the restart, and the worker's reconcile in heal mode: the brokers keep what they hold
    assert {o.mode for o in push_everywhere(w["prod"])} == {"delta"}  # of nothing: the fence's version
    assert {o.status for o in reconcile.reconcile_all(mode="heal")} == {"drift"}
    assert on_brokers(w) == {1: newer, 2: newer}
    b1 = w["prod"].brokers.get(broker_id=1)
    found = {(d.resource, d.key): (d.status, d.desired, d.actual) for d in Drift.objects.filter(broker=b1)}
    assert found == {
        (EntityRef(user="svc-a-1").field(), PBR): ("different", "1000.0", "2000.0"),
        (EntityRef(user="svc-a-2").field(), CBR): ("extra", None, "3000.0"),
    }
    # a decision after the restore reaches the brokers; versions the lost database gave out are never reused
    approved(w, "svc-a-3", PBR, 500)
    newest = {**newer, ("svc-a-3", PBR): "500.0"}
    assert on_brokers(w) == {1: newest, 2: newest}

    adopted = resolve.adopt(w["prod"], list(Drift.objects.filter(broker=b1).values_list("pk", flat=True)), w["ops"])

    assert desired(w) == {("svc-a-1", PBR): 2000, ("svc-a-2", CBR): 3000, ("svc-a-3", PBR): 500}
    assert {o.mode for o in push_everywhere(w["prod"])} == {"delta"}  # what the brokers hold already
    assert {o.status for o in reconcile.reconcile_all(mode="heal")} == {"in-sync"}
    assert on_brokers(w) == {1: newest, 2: newest} and version() == adopted
    entries = AuditEntry.objects.filter(action="drift_adopted").values_list("actor_name", "entity", "before", "after")
    assert sorted(entries) == [
        ("ops", "/config/users/svc-a-1", "1000.0", "2000.0"),
        ("ops", "/config/users/svc-a-2", None, "3000.0"),
    ]
    assert set(Drift.objects.values_list("broker__broker_id", "resolution")) == {(1, "adopted"), (2, "converged")}

    # seen in sync since the restore: heal mode re-applies desired state over a broker changed behind its back again
    config = NamespaceState(w["redis"], namespace_for_broker("prod", 2), 2).stores[0].hash_key
    w["redis"].hset(config, EntityRef(user="svc-a-1").field() + KEY_SEP + PBR, "5.0")
    assert {o.target: o.status for o in reconcile.reconcile_all(mode="heal")} == {
        "prod/broker-1": "in-sync", "prod/broker-2": "healed"
    }
    assert on_brokers(w)[2] == newest

