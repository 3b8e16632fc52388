from django.db import migrations, models

BUDGET_SCOPES = [
    ("per_broker", "Per broker (Kafka's meaning)"),
    ("cluster_wide", "Cluster-wide budget (the sum over brokers)"),
]
KINDS = [
    ("quota", "quota"),
    ("broker", "broker"),
    ("topic", "topic"),
    ("client-metrics", "client-metrics"),
    ("budget-scope", "budget-scope"),
]


class Migration(migrations.Migration):
    """A budget scope per quota value (and per quota request): per_broker, Kafka's meaning, on every existing row;
    cluster_wide only for the keys a budget can be shared out for. Budget scopes as items of the change log and of
    drift, and their own audit action."""

    dependencies = [
        ("quotas", "0014_drain_lease"),
    ]

    operations = [
        migrations.AddField(
            model_name="quotavalue",
            name="budget_scope",
            field=models.CharField(
                choices=BUDGET_SCOPES,
                default="per_broker",
                help_text="per_broker: a limit on each broker (Kafka's meaning); cluster_wide: a budget for the sum "
                "over the cluster's brokers, shared out between them by their budget plugin.",
                max_length=16,
            ),
        ),
        migrations.AddConstraint(
            model_name="quotavalue",
            constraint=models.CheckConstraint(
                condition=models.Q(("budget_scope", "per_broker"))
                | models.Q(
                    ("budget_scope", "cluster_wide"),
                    ("key__in", ["producer_byte_rate", "consumer_byte_rate", "request_percentage"]),
                ),
                name="quotas_value_budget_scope",
                violation_error_message="Only producer_byte_rate, consumer_byte_rate and request_percentage values "
                "can be cluster_wide.",
            ),
        ),
        migrations.AddField(
            model_name="quotarequest",
            name="budget_scope",
            field=models.CharField(
                choices=BUDGET_SCOPES,
                default="per_broker",
                help_text="The value's budget scope once applied: per_broker (Kafka's meaning) or cluster_wide.",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="quotarequest",
            name="previous_budget_scope",
            field=models.CharField(
                blank=True,
                choices=BUDGET_SCOPES,
                help_text="The budget scope of the value before applying; null = no value.",
                max_length=16,
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="auditentry",
            name="action",
            field=models.CharField(
                choices=[
                    ("quota_altered", "Quota value changed"),
                    ("budget_scope_altered", "Quota value made cluster-wide or per broker"),
                    ("submitted", "Request submitted"),
                    ("withdrawn", "Request withdrawn"),
                    ("approved", "Request approved"),
                    ("rejected", "Request rejected"),
                    ("applying", "Request being pushed to the brokers"),
                    ("applied", "Request applied to the desired state"),
                    ("failed", "Request failed to apply"),
                    ("expired", "Boost expired"),
                    ("config_altered", "Broker or topic config changed"),
                    ("push_failed", "A push to a broker failed"),
                    ("drift_detected", "A broker differs from desired state"),
                    ("drift_healed", "Desired state re-applied to a broker"),
                    ("drift_adopted", "What a broker held adopted into desired state"),
                    ("subscription_altered", "Client-metrics subscription changed"),
                    ("scram_created", "SCRAM credential created"),
                    ("scram_rotated", "SCRAM credential rotated"),
                    ("scram_deleted", "SCRAM credential deleted"),
                    ("webhook_changed", "Tenant webhook created, changed, re-keyed or deleted"),
                ],
                max_length=32,
            ),
        ),
        migrations.AlterField(
            model_name="desiredchange",
            name="kind",
            field=models.CharField(choices=KINDS, max_length=16),
        ),
        migrations.AlterField(
            model_name="drift",
            name="kind",
            field=models.CharField(choices=KINDS, max_length=16),
        ),
    ]
