"""``python manage.py restore_db FILE``: the portal's database back from a ``backup_db`` file, with the portal stopped.

The backup is restored beside the portal's database, its migrations applied and its desired-state versions fenced
(``quotas.models.pushes.fence_restored``); only then does it take the database's place. Nothing pushes the restored
(older) desired state over what the brokers hold: reconcile shows the differences as drift, for an admin to adopt or
re-apply (docs/operations/backup-restore.md). ``--fence-only`` fences a database restored by other means.
"""

from __future__ import annotations

import getpass
import io
from pathlib import Path
from typing import Any

import redis
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from portal import backups
from quotas.models.audit import AuditAction, record
from quotas.models.pushes import fence_restored
from quotas.push.reconcile import forget_in_sync


class Command(BaseCommand):
    help = "Restore the portal's database from a backup_db FILE (stop the portal and its workers first)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, nargs="?", help="the backup file (made by backup_db)")
        parser.add_argument(
            "--replace", action="store_true", help="replace a database that holds tables (it is kept until the "
            "restored one is complete)",
        )
        parser.add_argument(
            "--fence-only", action="store_true", help="restore nothing: fence the versions of a database restored "
            "by other means (a snapshot, point-in-time recovery)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path, fence_only = options["file"], options["fence_only"]
        if (path is None) != fence_only:
            raise CommandError("Name the backup FILE to restore, or pass --fence-only without one.")
        self.fences: list[tuple[Any, int, int]] = []
        self.source = f"the backup {path.name}" if path is not None else "a database restored by other means"
        try:
            if fence_only:
                self.stdout.write(f"Fencing {backups.describe()} (restored by other means).")
                self._prepare()
            else:
                self.stdout.write(backups.restore(path, replace=options["replace"], prepare=self._prepare))
        except backups.BackupError as e:
            raise CommandError(str(e)) from None
        for cluster, before, fence in self.fences:
            self.stdout.write(f"  {cluster.name}: desired-state version {before} -> {fence} (restore fence)")
        try:
            forget_in_sync()
        except (redis.exceptions.RedisError, OSError) as e:
            self.stderr.write(
                f"Could not reach the portal's Redis ({e}): heal mode may re-apply desired state over targets it saw "
                "in sync before the restore. Run this again with --fence-only once Redis is back."
            )
        self.stdout.write(
            "Start the portal and its workers: pushes send only what changes from now on, reconcile shows what the "
            "brokers hold beyond the backup as drift, for an admin to adopt or re-apply (/drift/)."
        )

    def _prepare(self) -> None:
        """On the restored database: the migrations it lacks, then the fence of every cluster's versions."""
        executor = MigrationExecutor(connection)
        missing = len(executor.migration_plan(executor.loader.graph.leaf_nodes()))
        if missing:
            call_command("migrate", interactive=False, verbosity=0, stdout=io.StringIO())
            self.stdout.write(f"Applied {missing} migrations the backup lacked.")
        self.fences = fence_restored()
        for cluster, before, fence in self.fences:  # in the restored database, so that its history says what happened
            record(
                AuditAction.DATABASE_RESTORED, None, cluster=cluster, before=before, after=fence,
                comment=f"Restored from {self.source} by {_operator()} with manage.py restore_db: desired-state "
                f"versions fenced; what the brokers hold beyond the backup shows as drift.",
            )


def _operator() -> str:
    """Who ran the command, as the operating system knows them (the portal has no signed-in user here)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container's uid with no passwd entry
        return "an operator"
