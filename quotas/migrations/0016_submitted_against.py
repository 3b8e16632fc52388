from django.db import migrations, models

REASONS = [("", "—"), ("superseded", "Superseded: the value changed since it was submitted")]


def _path(user, client_id):
    """Kafka's config path of a user/client-id entity, as the audit trail names it (``entity_path``)."""
    return "/config" + (f"/users/{user}" if user is not None else "") + (
        f"/clients/{client_id}" if client_id is not None else ""
    )


def record_waiting(apps, schema_editor):
    """Requests still waiting for a decision get what they were most likely submitted against: the ``before`` of the
    first audited change of their key after they were submitted (the value they found), else the value now (nothing
    changed it since). Decided requests keep null: nobody approves them again."""
    QuotaRequest = apps.get_model("quotas", "QuotaRequest")
    QuotaValue = apps.get_model("quotas", "QuotaValue")
    AuditEntry = apps.get_model("quotas", "AuditEntry")
    for request in QuotaRequest.objects.filter(state="submitted", submitted_against__isnull=True).iterator():
        where = {"cluster_id": request.cluster_id, "entity": _path(request.user, request.client_id),
                 "key": request.key, "created__gte": request.created}
        row = QuotaValue.objects.filter(
            entity__cluster_id=request.cluster_id, entity__user=request.user, entity__client_id=request.client_id,
            entity__ip__isnull=True, key=request.key,
        ).values_list("value", "budget_scope").first()
        value, scope = row if row is not None else (None, None)
        first = AuditEntry.objects.filter(action="quota_altered", **where).order_by("pk").first()
        if first is not None:
            value = first.before
            scope = None if value is None else scope or "per_broker"
        first_scope = AuditEntry.objects.filter(action="budget_scope_altered", **where).order_by("pk").first()
        if first_scope is not None and value is not None:
            scope = first_scope.before or "per_broker"
        request.submitted_against = {request.key: {"value": value, "budget_scope": scope}}
        request.save(update_fields=["submitted_against"])


class Migration(migrations.Migration):
    """What a quota request was submitted against (its key's value and budget scope then), so an approval can say
    that it moved on since; a decision's reason (a reject as superseded) on approvals and plan requests. Requests
    still waiting get the value from the audit trail (``record_waiting``)."""

    dependencies = [
        ("quotas", "0015_budget_scope"),
    ]

    operations = [
        migrations.AddField(
            model_name="approval",
            name="decision_reason",
            field=models.CharField(blank=True, choices=REASONS, default="", max_length=16),
        ),
        migrations.AddField(
            model_name="planrequest",
            name="decision_reason",
            field=models.CharField(blank=True, choices=REASONS, default="", max_length=16),
        ),
        migrations.AddField(
            model_name="quotarequest",
            name="submitted_against",
            field=models.JSONField(
                blank=True,
                help_text='The value it was submitted against: {key: {"value", "budget_scope"}} (both null: no value); '
                "null: not recorded (decided before it was kept).",
                null=True,
            ),
        ),
        migrations.RunPython(record_waiting, migrations.RunPython.noop),
    ]
