"""Webhook signing keys are stored sealed (issue 20: secrets "stored encrypted or as the broker needs them").

The portal signs with a webhook's secret, so it keeps it readable, but only through ``QUOTAS_SECRETS_KEYS``: the
database holds ``fernet:<token>``, never the key itself; a key is rotated by putting the new one first and running
``manage.py reseal``; the migration seals the secrets of an existing install and opens them again backwards.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from rest_framework.test import APIClient

from quotas import notify
from quotas.models import Tenant, Webhook, WebhookDelivery
from quotas.models.sealed import PREFIX, SealedValueError
from tests.people import roles

OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def stored(pk: int) -> str:
    """The column as the database holds it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM quotas_webhook WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def opens_with(key: str, value: str) -> bool:
    try:
        Fernet(key.encode()).decrypt(value[len(PREFIX):].encode())
    except Exception:
        return False
    return True


@pytest.fixture
def admin() -> APIClient:
    client = APIClient()
    client.force_authenticate(roles()["admin"])
    Tenant.objects.create(name="team-a")
    return client


@pytest.mark.django_db
def test_the_database_holds_the_secret_sealed_and_the_portal_reads_it_in_clear(admin: APIClient) -> None:
    created = admin.post("/api/webhooks/", {"tenant": "team-a", "name": "chat", "url": "https://chat.test/h"},
                         format="json")
    assert created.status_code == 201, created.json()
    secret, pk = created.json()["secret"], created.json()["id"]
    column = stored(pk)
    assert column.startswith(PREFIX) and secret not in column
    assert Webhook.objects.get(pk=pk).secret == secret  # what signs the deliveries

    rotated = admin.post(f"/api/webhooks/{pk}/rotate-secret/").json()["secret"]
    assert stored(pk).startswith(PREFIX) and rotated not in stored(pk) and stored(pk) != column
    assert Webhook.objects.get(pk=pk).secret == rotated


@pytest.mark.django_db
def test_a_key_is_rotated_by_putting_the_new_one_first_and_resealing(admin: APIClient, settings: Any) -> None:
    settings.QUOTAS_SECRETS_KEYS = [OLD]
    pk = admin.post("/api/webhooks/", {"tenant": "team-a", "name": "chat", "url": "https://chat.test/h",
                                      "secret": "s" * 40}, format="json").json()["id"]
    assert opens_with(OLD, stored(pk))

    settings.QUOTAS_SECRETS_KEYS = [NEW, OLD]  # the new key seals, the old one still opens
    assert Webhook.objects.get(pk=pk).secret == "s" * 40
    out = io.StringIO()
    call_command("reseal", stdout=out)
    assert "Sealed 1 webhook secret(s)" in out.getvalue()
    assert opens_with(NEW, stored(pk)) and not opens_with(OLD, stored(pk))

    settings.QUOTAS_SECRETS_KEYS = [NEW]  # the old key dropped: nothing was left sealed with it
    assert Webhook.objects.get(pk=pk).secret == "s" * 40

    settings.QUOTAS_SECRETS_KEYS = [OLD]  # a key that never sealed it: the webhook is still listed and changed...
    column = stored(pk)
    assert admin.get("/api/webhooks/").status_code == 200 and admin.get(f"/api/webhooks/{pk}/").status_code == 200
    assert admin.patch(f"/api/webhooks/{pk}/", {"name": "chat-2"}, format="json").status_code == 200
    assert stored(pk) == column  # ...saved back as it was, never opened nor sealed again
    with pytest.raises(SealedValueError, match="QUOTAS_SECRETS_KEYS") as refused:
        Webhook.objects.get(pk=pk).secret  # noqa: B018 (reading it is what fails)
    assert "s" * 40 not in str(refused.value)
    # ...and what signs with it fails for good, saying why, instead of waiting for retries that cannot sign
    delivery = WebhookDelivery.objects.create(webhook_id=pk, event="ping", body="{}", body_sha256="0" * 64)
    outcome = notify.attempt(delivery.pk)
    delivery.refresh_from_db()
    assert (outcome.outcome, delivery.state, delivery.attempts) == ("failed", "failed", 0)
    assert "QUOTAS_SECRETS_KEYS" in delivery.last_error and "s" * 40 not in delivery.last_error


@pytest.mark.django_db(transaction=True)
def test_the_migration_seals_existing_secrets_and_opens_them_backwards() -> None:
    before, sealed = ("quotas", "0012_webhook_deliveries_of_grouped_requests"), ("quotas", "0013_webhook_secret_sealed")
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()  # every app: going back unapplies the migrations that depend on it
    try:
        executor.migrate([before])
        old = executor.loader.project_state([before]).apps
        tenant = old.get_model("quotas", "Tenant").objects.create(name="team-a")
        pk = old.get_model("quotas", "Webhook").objects.create(
            tenant=tenant, name="chat", url="https://chat.test/h", secret="in-clear-" + "x" * 40, events=[]
        ).pk
        assert stored(pk) == "in-clear-" + "x" * 40

        MigrationExecutor(connection).migrate([sealed])
        assert stored(pk).startswith(PREFIX) and "in-clear" not in stored(pk)
        assert Webhook.objects.get(pk=pk).secret == "in-clear-" + "x" * 40

        MigrationExecutor(connection).migrate([before])
        assert stored(pk) == "in-clear-" + "x" * 40
    finally:
        MigrationExecutor(connection).migrate(latest)
