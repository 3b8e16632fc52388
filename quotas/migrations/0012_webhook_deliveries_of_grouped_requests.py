import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    """Webhook deliveries of subscription and plan requests: one foreign key per kind, each with its "once per
    webhook, request and event" rule, and at most one request per delivery."""

    dependencies = [
        ("quotas", "0011_audit_applying"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhookdelivery",
            name="subscription_request",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="webhook_deliveries",
                to="quotas.subscriptionrequest",
            ),
        ),
        migrations.AddField(
            model_name="webhookdelivery",
            name="plan_request",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="webhook_deliveries",
                to="quotas.planrequest",
            ),
        ),
        migrations.AddConstraint(
            model_name="webhookdelivery",
            constraint=models.UniqueConstraint(
                condition=models.Q(("subscription_request__isnull", False)),
                fields=("webhook", "subscription_request", "event"),
                name="quotas_delivery_once_per_subreq_event",
            ),
        ),
        migrations.AddConstraint(
            model_name="webhookdelivery",
            constraint=models.UniqueConstraint(
                condition=models.Q(("plan_request__isnull", False)),
                fields=("webhook", "plan_request", "event"),
                name="quotas_delivery_once_per_planreq_event",
            ),
        ),
        migrations.AddConstraint(
            model_name="webhookdelivery",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("plan_request__isnull", True), ("subscription_request__isnull", True)),
                    models.Q(("plan_request__isnull", True), ("request__isnull", True)),
                    models.Q(("request__isnull", True), ("subscription_request__isnull", True)),
                    _connector="OR",
                ),
                name="quotas_delivery_one_request",
            ),
        ),
    ]
