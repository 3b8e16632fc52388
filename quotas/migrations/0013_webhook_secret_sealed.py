from typing import Any

from django.db import migrations, models

import quotas.models.sealed


def seal_existing(apps: Any, schema_editor: Any) -> None:
    """Every webhook's secret, in clear until now, sealed in place (the model here still reads the column as text)."""
    Webhook = apps.get_model("quotas", "Webhook")
    for pk, secret in Webhook.objects.using(schema_editor.connection.alias).values_list("pk", "secret"):
        if secret is not None and not secret.startswith(quotas.models.sealed.PREFIX):  # "" too: read as sealed
            Webhook.objects.filter(pk=pk).update(secret=quotas.models.sealed.seal(secret))


def open_existing(apps: Any, schema_editor: Any) -> None:
    """Back to secrets in clear (the column is text again), for a migration backwards."""
    Webhook = apps.get_model("quotas", "Webhook")
    for pk, secret in Webhook.objects.using(schema_editor.connection.alias).values_list("pk", "secret"):
        if secret is not None and secret.startswith(quotas.models.sealed.PREFIX):
            Webhook.objects.filter(pk=pk).update(secret=quotas.models.sealed.unseal(secret))


class Migration(migrations.Migration):
    """Webhook secrets stored sealed (encrypted with QUOTAS_SECRETS_KEYS): the column becomes text (a sealed secret
    is longer than 256 characters), the secrets in it are sealed, then the model reads and writes it sealed."""

    dependencies = [
        ("quotas", "0012_webhook_deliveries_of_grouped_requests"),
    ]

    operations = [
        migrations.AlterField(
            model_name="webhook",
            name="secret",
            field=models.TextField(editable=False, help_text="HMAC-SHA256 key of the signature."),
        ),
        migrations.RunPython(seal_existing, open_existing),
        migrations.AlterField(
            model_name="webhook",
            name="secret",
            field=quotas.models.sealed.SealedTextField(
                editable=False, help_text="HMAC-SHA256 key of the signature (stored encrypted)."
            ),
        ),
    ]
