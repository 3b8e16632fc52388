from django.db import migrations, models


class Migration(migrations.Migration):
    """The drain lease of a cluster's version row (``quotas.push.group_push``): NULL on every existing row."""

    dependencies = [
        ("quotas", "0013_webhook_secret_sealed"),
    ]

    operations = [
        migrations.AddField(
            model_name="desiredstateversion",
            name="drain_until",
            field=models.DateTimeField(
                blank=True,
                editable=False,
                help_text="A worker's drain lease: until then it pushes each commit of the cluster (quotas.push).",
                null=True,
            ),
        ),
    ]
