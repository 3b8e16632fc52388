"""``python manage.py backup_db FILE``: the portal's whole database in one file (see docs/operations/backup-restore.md).

PostgreSQL: a ``pg_dump`` custom-format archive; SQLite: a copy made with SQLite's online backup API. Safe while the
portal runs: each is a consistent snapshot. ``restore_db`` takes the file back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal import backups


class Command(BaseCommand):
    help = "Back up the portal's database to FILE (PostgreSQL: pg_dump custom format; SQLite: a database file)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="the backup file to write")
        parser.add_argument("--force", action="store_true", help="overwrite FILE if it exists")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            self.stdout.write(backups.backup(options["file"], force=options["force"]))
        except backups.BackupError as e:
            raise CommandError(str(e)) from None
