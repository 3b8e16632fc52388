"""A world where every kind of object the API shows is present, and each nullable field is null somewhere.

The schema fuzz (``test_api_schema_fuzz.py``) runs over it, so that every answer's shape is checked on real rows,
nulls included: a schema that says "integer" where the data has null fails there. ``test_the_world_has_every_kind``
(in that file) holds it to this: a model the schema shows without a row here, or a nullable field it shows that is
never null here, fails naming it.

Built through the workflow where it can be (requests, approvals, plans, subscriptions: their audit entries and
pushes come with them), and by hand for what only time or a failure makes (drift, failed pushes, deliveries).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone

from access_tokens.models import AccessToken
from history.models import ImpactPreview
from plans.services import build_plan
from quotas.choices import ConnectorKind, EntityType, QuotaScope
from quotas.models import (
    Alteration,
    AuditEntry,
    ClientMetricsSubscription,
    Cluster,
    Drift,
    GroupKind,
    OwnedName,
    Push,
    QuotaOp,
    QuotaRequest,
    ScramCredential,
    Tenant,
    Webhook,
    WebhookDelivery,
    alter_client_quotas,
    create_group,
    set_exempt,
    set_group_values,
)
from quotas.models.broker_configs import ConfigOp, ConfigResource, alter_configs
from quotas.workflow import plan_requests, quota_requests, subscription_requests
from tests.people import make_user

SECRET = "s" * 32


def plan_file(user: str, value: int) -> str:
    """A quota file (quotas as code) giving one principal of prod a producer_byte_rate."""
    return (f"apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: prod\nquotas:\n"
            f"  - entity: {{user: {user}}}\n    producer_byte_rate: {value}\n")


def build() -> dict[str, Any]:
    """The world; returns the people (admin ``root``, member ``alice`` of team-a) by role."""
    now = timezone.now()
    admin, member, other = make_user("root", staff=True), make_user("alice"), make_user("bob")
    gone = make_user("gone", staff=True)  # deleted at the end: what it made keeps a null creator

    prod = Cluster.objects.create(name="prod", capacity_in_bytes_per_s=60 << 20, capacity_out_bytes_per_s=120 << 20)
    staging = Cluster.objects.create(name="staging", scope=QuotaScope.CLUSTER_WIDE)  # no capacity: nulls
    for broker_id in (1, 2):
        prod.brokers.create(broker_id=broker_id, host=f"b{broker_id}:9092")
    prod.listeners.create(name="PLAINTEXT")

    teams = {}
    for name, person, tag in (("team-a", member, "a"), ("team-b", other, "b")):
        tenant = teams[tag] = Tenant.objects.create(name=name)
        tenant.members.add(person)
        OwnedName.objects.create(tenant=tenant, entity_type=EntityType.USER, pattern=f"svc-{tag}-*")
        OwnedName.objects.create(tenant=tenant, entity_type=EntityType.CLIENT_ID, pattern=f"app-{tag}-*")

    alter_client_quotas(prod, [
        Alteration([("user", "svc-a-1")], [QuotaOp("producer_byte_rate", 1024)]),
        Alteration([("user", "svc-a-1"), ("client-id", "app-a-1")], [QuotaOp("consumer_byte_rate", 4096)]),
        Alteration([("client-id", "app-b-1")], [QuotaOp("request_percentage", 25)]),
        Alteration([("user", "<default>")], [QuotaOp("producer_byte_rate", 2048)]),
    ])
    alter_client_quotas(staging, [Alteration([("user", "svc-b-1")], [QuotaOp("producer_byte_rate", 1024)])])
    alter_configs(prod, ConfigResource(broker_id=1), [ConfigOp("max.connections", 100)], admin)
    alter_configs(prod, ConfigResource(topic="orders"), [ConfigOp("leader.replication.throttled.replicas", "0:1")],
                  admin)

    # quota requests in every state, with a null user, a null client-id, a boost
    ask = {"key": "producer_byte_rate", "value": 2048}
    quota_requests.submit(member, None, prod, user="svc-a-2", client_id=None, reason="fuzz", **ask)
    quota_requests.submit(member, None, prod, user=None, client_id="app-a-2", reason="client-id only", **ask)
    quota_requests.submit(member, None, prod, user="svc-a-3", client_id="app-a-3", reason="a boost",
                          expires_at=now + timedelta(hours=1), **ask)
    approved = quota_requests.submit(member, None, prod, user="svc-a-4", client_id=None, reason="go", **ask)
    quota_requests.approve(admin, approved.pk, "ok")
    rejected = quota_requests.submit(member, None, prod, user="svc-a-5", client_id=None, reason="no", **ask)
    quota_requests.reject(admin, rejected.pk, "too much")
    withdrawn = quota_requests.submit(member, None, prod, user="svc-a-6", client_id=None, reason="oops", **ask)
    quota_requests.withdraw(member, withdrawn.pk)
    # submitted before the portal kept what a request was submitted against
    QuotaRequest.objects.filter(pk=withdrawn.pk).update(submitted_against=None)

    # client-metrics subscriptions and their requests (one decided, one not)
    ClientMetricsSubscription.objects.create(cluster=prod, name="sub-shared", metrics="*", match="")
    sub_config = {"metrics": "org.apache.kafka.", "interval.ms": 60000, "match": "client_id=app-a-.*"}
    sub = subscription_requests.submit_subscription(member, None, prod, name="sub-a", configs=sub_config)
    subscription_requests.approve_subscription(admin, sub.pk)
    pending_sub = subscription_requests.submit_subscription(member, None, prod, name="sub-a-2", configs=sub_config)

    # plans: one as it was made, one asked for (undecided), one approved
    build_plan(member, prod, plan_file("svc-a-7", 1200), False)
    asked = plan_requests.submit_plan(member, build_plan(member, prod, plan_file("svc-a-8", 1250), False))
    decided = plan_requests.submit_plan(member, build_plan(member, prod, plan_file("svc-a-9", 1300), False))
    plan_requests.approve_plan(admin, decided.pk)

    # impact previews: failed (no result), and one for a client-id alone (no user)
    for user, client_id in (("svc-a-1", None), (None, "app-a-1")):
        ImpactPreview.objects.create(
            cluster=prod, user=user, client_id=client_id, key="producer_byte_rate", value=4096,
            proposal=f"p-{user}-{client_id}", data_version="v", requested_by=member, state="failed",
            error_code="NO_HISTORY", error_message="No recorded traffic yet.",
        )

    # webhooks and their deliveries: a ping (about no request), and one of each kind of request
    hook = Webhook.objects.create(tenant=teams["a"], name="chat", url="https://hooks.test/a", secret=SECRET,
                                  created_by=gone)
    Webhook.objects.create(tenant=teams["b"], name="chat", url="https://hooks.test/b", secret=SECRET,
                           created_by=admin)
    body = {"body": '{"event": "ping"}', "body_sha256": "0" * 64}
    WebhookDelivery.objects.create(webhook=hook, event="ping", **body)
    WebhookDelivery.objects.create(webhook=hook, event="request.approved", request=approved, state="delivered",
                                   attempts=1, status_code=200, last_attempt_at=now, delivered_at=now, **body)
    WebhookDelivery.objects.create(webhook=hook, event="request.submitted", subscription_request=pending_sub,
                                   attempts=1, status_code=503, last_attempt_at=now, next_attempt_at=now, **body)
    WebhookDelivery.objects.create(webhook=hook, event="request.submitted", plan_request=asked, state="failed",
                                   attempts=8, last_error="no answer", last_attempt_at=now, **body)

    # SCRAM credentials: one of no tenant, never rotated; one rotated
    ScramCredential.objects.create(cluster=prod, user="svc-shared", mechanism="SCRAM-SHA-256", iterations=8192,
                                   tenant=None, created_by=admin, created_by_name="root")
    ScramCredential.objects.create(cluster=prod, user="svc-a-1", mechanism="SCRAM-SHA-512", iterations=4096,
                                   tenant=teams["a"], created_by=member, created_by_name="alice", rotated=now,
                                   rotated_by=member, rotated_by_name="alice")

    # group quotas on a Kafka cluster (nothing listens at its address: a push there fails at once), a group's
    # request, and exempt principals (one whose creator is deleted below: a null created_by)
    kafka = Cluster.objects.create(name="kafka-prod", connector=ConnectorKind.KAFKA, bootstrap_servers="127.0.0.1:9")
    group = create_group(admin, kafka, teams["a"], "team-a-all", GroupKind.TENANT)
    set_group_values(admin, group, {"producer_byte_rate": (4 << 20, "cluster_wide")})
    create_group(admin, kafka, teams["b"], "b-apps", GroupKind.CLIENT_PREFIX, client_id_prefix="app-b-")
    quota_requests.submit(member, None, kafka, user=None, client_id=None, key="consumer_byte_rate", value=8192,
                          group=group)
    set_exempt(admin, kafka, "mm2-replicator", True, "MirrorMaker 2")
    set_exempt(gone, kafka, "svc-monitor", True)

    # what only time and failures make: a system audit entry, pushes that failed or landed, drift
    AuditEntry.objects.create(action="expired", actor=None, actor_name="system", comment="a boost ended")
    broker = prod.brokers.get(broker_id=1)
    version = prod.desired_state.version
    Push.objects.create(cluster=prod, broker=broker, version=version + 100, state="failed", attempts=3,
                        error_code="NETWORK_EXCEPTION", error="b1:9092 did not answer")
    Push.objects.create(cluster=staging, broker=None, version=1000, state="applied", attempts=1, applied_at=now)
    Drift.objects.create(cluster=prod, broker=broker, kind="quota", resource="/config/users/svc-x",
                         key="producer_byte_rate", status="extra", desired=None, actual="512", version=version,
                         detected_at=now)
    Drift.objects.create(cluster=staging, broker=None, kind="quota", resource="/config/users/svc-b-1",
                         key="producer_byte_rate", status="missing", desired="1024", actual=None, version=1,
                         detected_at=now - timedelta(hours=1), resolved_at=now, resolution="healed")

    # personal access tokens: a member's for its tenant, an admin's for all its rights, one revoked and expiring
    AccessToken.issue(member, "ci", teams["a"], member)
    AccessToken.issue(admin, "ops", None, gone)
    revoked, _ = AccessToken.issue(member, "old", teams["a"], member, expires_at=now + timedelta(days=30))
    revoked.revoked_at, revoked.revoked_by = now, admin
    revoked.save(update_fields=["revoked_at", "revoked_by"])

    get_user_model().objects.filter(pk=gone.pk).delete()
    return {"admin": admin, "member": member}
