"""``python manage.py reseal``: every sealed secret written again with the first of ``QUOTAS_SECRETS_KEYS``.

Rotating the key that seals webhook secrets: put the new key first in ``QUOTAS_SECRETS_KEYS`` and keep the old one
after it (every key opens), run this, then drop the old key. Each row is opened with whichever key sealed it and
sealed again with the first one, in one transaction.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from quotas.models import Webhook
from quotas.models.sealed import SealedValueError


class Command(BaseCommand):
    help = "Seal every stored secret (webhook signing keys) again with the first key of QUOTAS_SECRETS_KEYS."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            with transaction.atomic():
                hooks = list(Webhook.objects.select_for_update().only("pk", "secret"))
                for hook in hooks:
                    Webhook.objects.filter(pk=hook.pk).update(secret=hook.secret)
        except SealedValueError as e:
            raise CommandError(f"Nothing was changed: {e}") from None
        self.stdout.write(f"Sealed {len(hooks)} webhook secret(s) again with the first key of QUOTAS_SECRETS_KEYS.")
