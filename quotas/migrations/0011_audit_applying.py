from django.db import migrations, models


class Migration(migrations.Migration):
    """A request's move into ``applying`` is audited, so its history has no gap before "from applying"."""

    dependencies = [
        ("quotas", "0010_broker_engine_url_redis_cluster"),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditentry",
            name="action",
            field=models.CharField(
                choices=[
                    ("quota_altered", "Quota value changed"),
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
    ]
