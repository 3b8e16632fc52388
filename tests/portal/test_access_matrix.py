"""Who may do what, to whose objects: every route of the portal x every role x objects of tenant A, of tenant B and
shared ones, against one table (issue 20).

The rows are checked against the URL conf and the OpenAPI schema: a route (or an API operation) without a row fails
``test_every_route_and_operation_has_a_row``, so a new endpoint cannot be left out; add its rows to ``MATRIX`` below.

One world for the whole module (one transaction, rolled back at the end; each write is tried inside a savepoint
rolled back at once, so the cells do not change each other's world), asked through Django's test client.

Cells:
  ``see``   2xx and the object shows (its marker is in the body)
  ``hide``  2xx and the object does not show
  ``login`` a page sends the anonymous person to the login page
  ``NNN``   that status (writes, refusals, and rows about no particular object, object ``-``)
"""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.db import connection, transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from quotas.choices import ConnectorKind, EntityType
from quotas.models import (
    Alteration,
    ClientMetricsSubscription,
    Cluster,
    GroupKind,
    OwnedName,
    QuotaEntity,
    QuotaOp,
    Tenant,
    audited_alter,
    create_group,
    set_exempt,
    set_group_values,
)
from quotas.models.webhooks import Webhook, WebhookDelivery
from tests.celery_worker import CELERY_KEYS
from tests.people import make_user
from tests.portal.access_matrix import ROLES, Row, differences, parse
from tests.redis_keys import delete_matching

CLUSTER = "mx-prod"
#: Group quotas and exempt principals exist on Kafka clusters only (nothing listens at its address).
KAFKA_CLUSTER = "mx-kafka"

# What the rows mean for the objects: A's names all hold "mxa", B's "mxb"; shared objects are the `<default>` quota
# entities, the cluster itself, an admin's client-metrics subscription and a telemetry instance without a client id.
#
MATRIX = """
#method path                                                      object  admin   auditor A       B       anon
GET     /healthz                                                  -       200     200     200     200     200
GET     /metrics                                                  -       200     200     200     200     200
GET     /login/                                                   -       302     302     302     302     200
POST    /logout/                                                  -       302     302     302     302     login
GET     /admin/                                                   -       200     302     302     302     302
GET     /api/me/                                                  -       200     200     200     200     401
GET     /api/schema/                                              -       200     200     200     200     200
GET     /api/schema/swagger-ui/                                   -       200     200     200     200     200
GET     /api/metrics/memory                                       -       200     200     403     403     401
POST    /telemetry/v1/{cluster}/get-subscriptions                 -       200     200     200     200     200
POST    /telemetry/v1/{cluster}/push                              -       400     400     400     400     400
POST    /v1/metrics                                               -       400     400     400     400     400

GET     /api/clusters/                                            shared  see     see     see     see     401
POST    /api/clusters/                                            -       201     403     403     403     401
GET     /api/clusters/{cluster}/                                  shared  see     see     see     see     401
PUT     /api/clusters/{cluster}/                                  shared  400     403     403     403     401
PATCH   /api/clusters/{cluster}/                                  shared  200     403     403     403     401
POST    /api/clusters/{cluster}/adopt/                            shared  400     403     403     403     401
POST    /api/clusters/{cluster}/reapply/                          shared  400     403     403     403     401
GET     /api/clusters/{cluster}/pushes/summary/                   shared  see     see     403     403     401
GET     /api/clusters/{cluster}/broker-configs                    -       200     200     200     200     401
POST    /api/clusters/{cluster}/broker-configs                    shared  200     403     403     403     401

POST    /api/clusters/{cluster}/client-quotas/describe            A       see     see     see     hide    401
POST    /api/clusters/{cluster}/client-quotas/describe            B       see     see     hide    see     401
POST    /api/clusters/{cluster}/client-quotas/describe            shared  see     see     see     see     401
POST    /api/clusters/{cluster}/client-quotas/alter               A       200     403     403     403     401
POST    /api/clusters/{cluster}/client-quotas/alter               shared  200     403     403     403     401
GET     /api/clusters/{cluster}/effective-quota                   A       see     see     see     403     401
GET     /api/clusters/{cluster}/effective-quota                   B       see     see     403     see     401
GET     /api/clusters/{cluster}/effective-quota                   shared  see     see     403     403     401

GET     /api/clusters/{cluster}/client-metrics/                   A       see     see     see     hide    401
GET     /api/clusters/{cluster}/client-metrics/                   B       see     see     hide    see     401
GET     /api/clusters/{cluster}/client-metrics/                   shared  see     see     see     see     401
POST    /api/clusters/{cluster}/client-metrics/                   -       201     403     403     403     401
GET     /api/clusters/{cluster}/client-metrics/{subscription}/    A       see     see     see     404     401
GET     /api/clusters/{cluster}/client-metrics/{subscription}/    B       see     see     404     see     401
GET     /api/clusters/{cluster}/client-metrics/{subscription}/    shared  see     see     see     see     401
PUT     /api/clusters/{cluster}/client-metrics/{subscription}/    A       200     403     403     403     401
PATCH   /api/clusters/{cluster}/client-metrics/{subscription}/    A       200     403     403     403     401
DELETE  /api/clusters/{cluster}/client-metrics/{subscription}/    A       200     403     403     403     401

GET     /api/clusters/{cluster}/scram-credentials/                -       200     200     200     200     401
POST    /api/clusters/{cluster}/scram-credentials/                A       400     403     400     403     401
GET     /api/clusters/{cluster}/scram-credentials/{user}/         A       404     404     404     404     401
DELETE  /api/clusters/{cluster}/scram-credentials/{user}/         A       400     403     400     403     401
POST    /api/clusters/{cluster}/scram-credentials/{user}/rotate/  A       400     403     400     403     401

GET     /api/clusters/{cluster}/groups/                           A       see     see     see     hide    401
GET     /api/clusters/{cluster}/groups/                           B       see     see     hide    see     401
POST    /api/clusters/{cluster}/groups/                           -       201     403     403     403     401
GET     /api/clusters/{cluster}/groups/{group}/                   A       see     see     see     404     401
GET     /api/clusters/{cluster}/groups/{group}/                   B       see     see     404     see     401
PATCH   /api/clusters/{cluster}/groups/{group}/                   A       200     403     403     403     401
DELETE  /api/clusters/{cluster}/groups/{group}/                   A       204     403     403     403     401
POST    /api/clusters/{cluster}/groups/{group}/values             A       200     403     403     403     401
GET     /api/clusters/{cluster}/exempt-principals/                shared  see     see     see     see     401
POST    /api/clusters/{cluster}/exempt-principals/                -       201     403     403     403     401
DELETE  /api/clusters/{cluster}/exempt-principals/{principal}/    shared  204     403     403     403     401

GET     /api/clusters/{cluster}/usage-history/                    A       see     see     see     403     401
GET     /api/clusters/{cluster}/usage-history/                    B       see     see     403     see     401
GET     /api/monitor/{cluster}/recent/                            A       see     see     see     403     401
GET     /api/monitor/{cluster}/recent/                            B       see     see     403     see     401
GET     /api/monitor/{cluster}/history/                           A       see     see     see     403     401
GET     /api/monitor/{cluster}/history/                           B       see     see     403     see     401

GET     /api/tenants/                                             A       see     see     see     hide    401
GET     /api/tenants/                                             B       see     see     hide    see     401
POST    /api/tenants/                                             -       201     403     403     403     401
GET     /api/tenants/{name}/                                      A       see     see     see     404     401
GET     /api/tenants/{name}/                                      B       see     see     404     see     401
PUT     /api/tenants/{name}/                                      A       200     403     403     403     401
PATCH   /api/tenants/{name}/                                      A       200     403     403     403     401
DELETE  /api/tenants/{name}/                                      A       409     403     403     403     401

GET     /api/requests/                                            A       see     see     see     hide    401
GET     /api/requests/                                            B       see     see     hide    see     401
POST    /api/requests/                                            A       403     403     201     403     401
POST    /api/requests/                                            B       403     403     403     201     401
GET     /api/requests/{id}/                                       A       see     see     see     404     401
GET     /api/requests/{id}/                                       B       see     see     404     see     401
POST    /api/requests/{id}/approve/                               A       200     403     403     404     401
POST    /api/requests/{id}/reject/                                A       200     403     403     404     401
POST    /api/requests/{id}/withdraw/                              A       403     403     200     404     401
POST    /api/requests/{id}/withdraw/                              B       403     403     404     200     401

GET     /api/subscription-requests/                               A       see     see     see     hide    401
GET     /api/subscription-requests/                               B       see     see     hide    see     401
POST    /api/subscription-requests/                               A       403     403     201     403     401
GET     /api/subscription-requests/{id}/                          A       see     see     see     404     401
GET     /api/subscription-requests/{id}/                          B       see     see     404     see     401
POST    /api/subscription-requests/{id}/approve/                  A       200     403     403     404     401
POST    /api/subscription-requests/{id}/reject/                   A       200     403     403     404     401
POST    /api/subscription-requests/{id}/withdraw/                 A       403     403     200     404     401

GET     /api/previews/{id}/                                       A       see     see     see     404     401
GET     /api/previews/{id}/                                       B       see     see     404     see     401
POST    /api/previews/                                            A       202     202     202     403     401

GET     /api/audit/                                               A       see     see     see     hide    401
GET     /api/audit/                                               B       see     see     hide    see     401
GET     /api/audit/                                               shared  see     see     hide    hide    401
GET     /api/pushes/                                              -       200     200     403     403     401
GET     /api/drift/                                               -       200     200     403     403     401

GET     /api/webhooks/                                            A       see     see     403     403     401
POST    /api/webhooks/                                            A       201     403     403     403     401
GET     /api/webhooks/{id}/                                       A       see     see     403     403     401
PUT     /api/webhooks/{id}/                                       A       200     403     403     403     401
PATCH   /api/webhooks/{id}/                                       A       200     403     403     403     401
DELETE  /api/webhooks/{id}/                                       A       204     403     403     403     401
POST    /api/webhooks/{id}/ping/                                  A       202     403     403     403     401
POST    /api/webhooks/{id}/rotate-secret/                         A       200     403     403     403     401
GET     /api/webhook-deliveries/                                  A       see     see     403     403     401
GET     /api/webhook-deliveries/{id}/                             A       see     see     403     403     401

GET     /api/tokens/                                              A       see     see     see     hide    401
GET     /api/tokens/                                              B       see     see     hide    see     401
POST    /api/tokens/                                              -       201     201     201     201     401
GET     /api/tokens/{id}/                                         A       see     see     see     404     401
GET     /api/tokens/{id}/                                         B       see     see     404     see     401
POST    /api/tokens/{id}/revoke/                                  A       200     403     200     404     401

GET     /api/schema/quotas-file.json                              -       200     200     200     200     200
GET     /api/clusters/{cluster}/state.yaml                        A       see     see     see     hide    401
GET     /api/clusters/{cluster}/state.yaml                        B       see     see     hide    see     401
GET     /api/clusters/{cluster}/state.yaml                        shared  see     see     see     see     401
POST    /api/clusters/{cluster}/plans/                            A       201     201     201     403     401
POST    /api/clusters/{cluster}/plans/                            B       201     201     403     201     401
GET     /api/plans/{id}/                                          A       see     see     see     404     401
GET     /api/plans/{id}/                                          B       see     see     404     see     401
POST    /api/plans/{id}/apply/                                    A       200     403     202     404     401
GET     /api/plan-requests/                                       A       see     see     see     hide    401
GET     /api/plan-requests/                                       B       see     see     hide    see     401
GET     /api/plan-requests/{id}/                                  A       see     see     see     404     401
GET     /api/plan-requests/{id}/                                  B       see     see     404     see     401
POST    /api/plan-requests/{id}/approve/                          A       200     403     403     404     401
POST    /api/plan-requests/{id}/reject/                           A       200     403     403     404     401
POST    /api/plan-requests/{id}/withdraw/                         A       403     403     200     404     401

GET     /                                                         -       200     200     200     200     200
GET     /entities/                                                A       see     see     see     hide    login
GET     /entities/                                                B       see     see     hide    see     login
GET     /entities/                                                shared  see     see     see     see     login
GET     /entities/{id}/                                           A       see     see     see     404     login
GET     /entities/{id}/                                           B       see     see     404     see     login
GET     /entities/{id}/                                           shared  see     see     see     see     login
GET     /requests/                                                A       see     see     see     hide    login
GET     /requests/                                                B       see     see     hide    see     login
GET     /requests/new/                                            -       200     403     200     200     login
POST    /requests/new/                                            A       403     403     302     403     login
GET     /requests/{id}/                                           A       see     see     see     404     login
GET     /requests/{id}/                                           B       see     see     404     see     login
POST    /requests/{id}/approve/                                   A       302     403     403     404     login
POST    /requests/{id}/reject/                                    A       302     403     403     404     login
POST    /requests/{id}/withdraw/                                  A       403     403     302     404     login
GET     /previews/{id}/                                           A       see     see     see     404     login
GET     /previews/{id}/                                           B       see     see     404     see     login
GET     /approvals/                                               A       see     see     403     403     login
GET     /plans/{id}/                                              A       see     see     see     404     login
GET     /plans/{id}/                                              B       see     see     404     see     login
POST    /plan-requests/{id}/approve/                              A       302     403     403     404     login
POST    /plan-requests/{id}/reject/                               A       302     403     403     404     login
GET     /audit/                                                   A       see     see     see     hide    login
GET     /audit/                                                   B       see     see     hide    see     login
GET     /clusters/                                                shared  see     see     see     see     login
GET     /clusters/{name}/                                         shared  see     see     see     see     login
GET     /clusters/{name}/client-metrics/                          A       see     see     see     hide    login
POST    /clusters/{name}/groups/                                  -       400     403     403     403     login
POST    /clusters/{name}/exempt/                                  -       400     403     403     403     login
GET     /clusters/{cluster}/groups/{name}/                        A       see     see     see     404     login
GET     /clusters/{cluster}/groups/{name}/                        B       see     see     404     see     login
POST    /clusters/{cluster}/groups/{name}/                        A       400     400     400     404     login
GET     /clusters/{name}/client-metrics/                          B       see     see     hide    see     login
GET     /tenants/                                                 A       see     see     see     hide    login
GET     /tenants/                                                 B       see     see     hide    see     login
GET     /credentials/                                             -       200     200     200     200     login
GET     /drift/                                                   -       200     200     403     403     login
POST    /drift/reapply/                                           shared  400     403     403     403     login
GET     /monitor/                                                 -       200     200     200     200     login
GET     /monitor/{cluster}/entity/                                A       see     see     see     403     login
GET     /monitor/{cluster}/entity/                                B       see     see     403     see     login
GET     /telemetry/                                               shared  see     see     see     see     login
GET     /telemetry/{cluster}/                                     A       see     see     see     hide    login
GET     /telemetry/{cluster}/                                     B       see     see     hide    see     login
GET     /telemetry/{cluster}/                                     shared  see     see     hide    hide    login
GET     /telemetry/{cluster}/instance/{instance}/                 A       see     see     see     403     login
GET     /telemetry/{cluster}/instance/{instance}/                 B       see     see     403     see     login
GET     /telemetry/{cluster}/client/{client_id}/                  A       see     see     see     403     login
GET     /telemetry/{cluster}/client/{client_id}/                  B       see     see     403     see     login
"""

#: Routes no row names one by one: Django's admin site (its own staff check, the /admin/ row shows it).
COVERED_BY_PREFIX = ("/admin/",)

GOOD_QUOTA = {"key": "producer_byte_rate", "value": 2048}

ROWS = parse(MATRIX, ("method", "path"))


# ------------------------------------------------------------------ the routes the portal has


def _template(route: str) -> str:
    """A URL conf route (``<str:cluster>`` or a router's regex) as an OpenAPI-style path (``{cluster}``)."""
    route = route.replace("^", "").replace("$", "")
    route = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", route)
    route = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)
    return "/" + route


def _normal(path: str) -> str:
    """Parameter names aside (the schema says ``{id}`` where the router says ``{pk}``)."""
    return re.sub(r"\{\w+\}", "{}", path)


def url_routes() -> dict[str, set[str]]:
    """Every route of the URL conf -> the methods its view answers (a router's actions; else unknown: empty)."""
    found: dict[str, set[str]] = {}

    def walk(patterns: list[Any], prefix: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                actions = getattr(p.callback, "actions", None) or {}
                # HEAD is GET without a body (DRF adds it to a viewset's actions once a GET was served, so whether it
                # shows depends on the tests run before): the GET row covers it
                methods = {m.upper() for m in actions} - {"HEAD"}
                found.setdefault(_template(prefix + str(p.pattern)), set()).update(methods)

    walk(get_resolver().url_patterns, "")
    return found


def schema_operations() -> set[tuple[str, str]]:
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    return {
        (method.upper(), path)
        for path, item in schema["paths"].items()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    }


def test_every_route_and_operation_has_a_row() -> None:
    """A route of the URL conf, an action of a router or an operation of the schema without a row fails here."""
    have = {(r.method, _normal(r.path)) for r in ROWS}
    have_paths = {p for _, p in have}
    missing = []
    for path, methods in sorted(url_routes().items()):
        if path.startswith(COVERED_BY_PREFIX):
            continue
        if _normal(path) not in have_paths:
            missing.append(f"route {path} (URL conf)")
        missing += [f"{m} {path} (URL conf)" for m in sorted(methods) if (m, _normal(path)) not in have]
    missing += [f"{m} {p} (OpenAPI schema)" for m, p in sorted(schema_operations()) if (m, _normal(p)) not in have]
    assert not missing, (
        "These routes have no row in the access matrix; add one row per method and object (A, B, shared, or - for "
        "none) to MATRIX in tests/portal/test_access_matrix.py, saying what admin, auditor, a member of A, a member "
        "of B and an anonymous person get:\n  " + "\n  ".join(dict.fromkeys(missing))
    )


# ------------------------------------------------------------------ the world


@pytest.fixture(scope="module")
def world(django_db_setup: None, django_db_blocker: Any, redis_url: str) -> Iterator[dict[str, Any]]:
    """Two tenants with their quotas, requests, previews, subscriptions, webhooks and telemetry; shared defaults."""
    from history.models import ImpactPreview
    from quotas.workflow import plan_requests, quota_requests, subscription_requests

    r = redis.Redis.from_url(redis_url)
    tel_keys = f"tel:{{{CLUSTER}}}*"
    delete_matching(r, tel_keys)
    with django_db_blocker.unblock(), transaction.atomic():
        assert "test" in connection.settings_dict["NAME"], "the matrix's world goes into the test database only"
        w: dict[str, Any] = {}
        cluster = Cluster.objects.create(name=CLUSTER)
        admin, auditor = make_user("mx-root", staff=True), make_user("mx-audit", groups=("auditors",))
        amy, ben = make_user("amy"), make_user("ben")
        for name, member, tag in (("team-mxa", amy, "mxa"), ("team-mxb", ben, "mxb")):
            tenant = Tenant.objects.create(name=name)
            OwnedName.objects.create(tenant=tenant, entity_type=EntityType.USER, pattern=f"svc-{tag}-*")
            OwnedName.objects.create(tenant=tenant, entity_type=EntityType.CLIENT_ID, pattern=f"app-{tag}-*")
            tenant.members.add(member)
            w[f"tenant-{tag}"] = tenant
        audited_alter(cluster, [
            Alteration([("user", "svc-mxa-1")], [QuotaOp("producer_byte_rate", 1111)]),
            Alteration([("user", "svc-mxb-1")], [QuotaOp("producer_byte_rate", 2222)]),
            Alteration([("user", "<default>")], [QuotaOp("producer_byte_rate", 3333)]),
        ], admin)
        entities = {e.user: e for e in QuotaEntity.objects.filter(cluster=cluster)}
        w["entity"] = {"A": entities["svc-mxa-1"].pk, "B": entities["svc-mxb-1"].pk, "shared": entities["<default>"].pk}
        kafka = Cluster.objects.create(name=KAFKA_CLUSTER, connector=ConnectorKind.KAFKA,
                                       bootstrap_servers="127.0.0.1:9")
        for tag in ("mxa", "mxb"):
            group = create_group(admin, kafka, w[f"tenant-{tag}"], f"grp-{tag}", GroupKind.PRINCIPALS,
                                 principals=[f"svc-{tag}-1"])
            set_group_values(admin, group, {"producer_byte_rate": (4096, None)})
        set_exempt(admin, kafka, "exempt-mx", True, "replicator")
        submit = quota_requests.submit
        req_a = submit(amy, None, cluster, user="svc-mxa-1", client_id=None, reason="why-mxa", **GOOD_QUOTA)
        req_b = submit(ben, None, cluster, user="svc-mxb-1", client_id=None, reason="why-mxb", **GOOD_QUOTA)
        w["request"] = {"A": req_a.pk, "B": req_b.pk}
        ClientMetricsSubscription.objects.create(cluster=cluster, name="sub-shared", metrics="*", match="")
        for tag, member in (("mxa", amy), ("mxb", ben)):
            sub = subscription_requests.submit_subscription(
                member, None, cluster, name=f"sub-{tag}",
                configs={"metrics": "org.apache.kafka.", "interval.ms": 60000, "match": f"client_id=app-{tag}-.*"},
            )
            subscription_requests.approve_subscription(admin, sub.pk)
        subs = {
            obj: subscription_requests.submit_subscription(
                member, None, cluster, name=f"sub-{tag}-2",
                configs={"metrics": "org.apache.kafka.", "interval.ms": 60000, "match": f"client_id=app-{tag}-9"},
            ).pk
            for obj, tag, member in (("A", "mxa", amy), ("B", "mxb", ben))
        }
        w["subscription-request"] = subs
        previews = {}
        for obj, tag, member in (("A", "mxa", amy), ("B", "mxb", ben)):
            previews[obj] = ImpactPreview.objects.create(
                cluster=cluster, user=f"svc-{tag}-1", client_id=None, key="producer_byte_rate", value=4096,
                proposal=f"p-{tag}", data_version="v", requested_by=member, state="failed", error_code="NO_HISTORY",
                error_message=f"No recorded traffic of svc-{tag}-1 yet.",
            ).pk
        w["preview"] = previews
        hook = Webhook.objects.create(tenant=w["tenant-mxa"], name="hook-mxa", url="https://hooks.test/mxa",
                                      secret="s" * 32)
        w["webhook"] = {"A": hook.pk}
        w["webhook-delivery"] = {"A": WebhookDelivery.objects.create(
            webhook=hook, event="request.submitted", request=req_a, body='{"event": "request.submitted"}',
            body_sha256="0" * 64).pk}
        now = int(time.time() * 1000)
        from telemetry_ui.live.monitoring import tel_instances_key

        for iid, client_id in (("inst-mxa", "app-mxa-1"), ("inst-mxb", "app-mxb-1"), ("inst-shared", "")):
            r.hset(tel_instances_key(CLUSTER), iid, json.dumps({
                "instance": iid, "client_id": client_id, "software_name": "apache-kafka-java",
                "software_version": "3.9.0", "last_get_ms": now, "last_push_ms": now, "pushes": 1, "errors": 0}))
        from plans.services import build_plan

        plans, grouped = {}, {}
        for obj, tag, member in (("A", "mxa", amy), ("B", "mxb", ben)):
            plans[obj] = build_plan(member, cluster, plan_file(tag, 1200), False).pk
            asked = build_plan(member, cluster, plan_file(tag, 1250), False)
            grouped[obj] = plan_requests.submit_plan(member, asked).pk
        w["plan"], w["plan-request"] = plans, grouped
        from access_tokens.models import AccessToken

        w["token"] = {
            obj: AccessToken.issue(member, f"token-{tag}", Tenant.objects.get(name=f"team-{tag}"), member)[0].pk
            for obj, tag, member in (("A", "mxa", amy), ("B", "mxb", ben))
        }
        w["clients"] = {}
        for role, user in (("admin", admin), ("auditor", auditor), ("A", amy), ("B", ben)):
            c = Client()
            c.force_login(user)
            w["clients"][role] = c
        w["clients"]["anon"] = Client()
        w["users"] = {"admin": admin, "auditor": auditor, "A": amy, "B": ben}
        yield w
        transaction.set_rollback(True)
    delete_matching(r, tel_keys, *CELERY_KEYS)
    r.close()


# ------------------------------------------------------------------ one cell

NAMES = {"A": "mxa", "B": "mxb"}
#: Which world object a ``{pk}``/``{id}`` stands for, by the path's first part.
ID_OF = {"requests": "request", "subscription-requests": "subscription-request", "previews": "preview",
         "webhooks": "webhook", "webhook-deliveries": "webhook-delivery", "entities": "entity", "plans": "plan",
         "plan-requests": "plan-request", "tokens": "token"}
SUB = {"metrics": "org.apache.kafka.", "interval.ms": 60000}


def _tag(obj: str) -> str:
    return NAMES.get(obj, "mxa")


def url_of(row: Row, w: dict[str, Any]) -> str:
    """The row's path with its parameters filled for its object (and the query a GET of it needs)."""
    tag, obj = _tag(row.obj), row.obj if row.obj in ("A", "B", "shared") else "A"
    first = row.path.strip("/").split("/")[1 if row.path.startswith("/api/") else 0]
    values = {
        "cluster": KAFKA_CLUSTER if "/groups/" in row.path or "/exempt-principals/" in row.path else CLUSTER,
        "group": f"grp-{tag}",
        "principal": "exempt-mx",
        "name": f"grp-{tag}" if row.path.startswith("/clusters/{cluster}/groups/")
        else KAFKA_CLUSTER if row.path.startswith("/clusters/{name}/groups/") or "/exempt/" in row.path
        else CLUSTER if row.path.startswith("/clusters/") else f"team-{tag}",
        "subscription": "sub-shared" if obj == "shared" else f"sub-{tag}",
        "user": f"svc-{tag}-1",
        "instance": "inst-shared" if obj == "shared" else f"inst-{tag}",
        "client_id": f"app-{tag}-1",
    }
    path = row.path
    for name in re.findall(r"\{(\w+)\}", path):
        value = w[ID_OF[first]][obj] if name in ("id", "pk") else values[name]
        path = path.replace("{" + name + "}", str(value))
    if row.method != "GET":
        return path
    tags = f"svc-{tag}-1:"
    query = {
        "effective-quota": "user=svc-other&client_id="
        if obj == "shared" else f"user=svc-{tag}-1&client_id=app-{tag}-1",
        "usage-history": f"entity={tags}", "recent": f"entity={tags}", "history": f"entity={tags}",
        "entity": f"e={tags}",
    }.get(path.rstrip("/").split("/")[-1])
    return f"{path}?{query}" if query else path


def plan_file(tag: str, value: int) -> str:
    """A quota file of one tenant's entity (quotas as code), changing its producer_byte_rate."""
    return (f"apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: {CLUSTER}\nquotas:\n"
            f"  - entity: {{user: svc-{tag}-1}}\n    producer_byte_rate: {value}\n")


def body_of(row: Row) -> dict[str, Any] | None:
    """A body the row's operation accepts from someone allowed to do it (so refusals are about who, not what)."""
    tag = _tag(row.obj)
    p, m = row.path, row.method
    if m == "GET":
        return None
    if p.endswith("/client-quotas/describe"):
        return {"components": [], "strict": False}
    if p.endswith("/client-quotas/alter"):
        user = "<default>" if row.obj == "shared" else f"svc-{tag}-1"
        return {"entries": [{"entity": [{"entity_type": "user", "name": None if user == "<default>" else user}],
                             "ops": [{"key": "producer_byte_rate", "value": 5000}]}]}
    if p.endswith("/broker-configs"):
        return {"resource": {"broker": None}, "ops": [{"key": "max.connections", "value": "100", "op": "SET"}]}
    if p.endswith("/adopt/"):
        return {"drift": []}
    if p.endswith("/reapply/"):
        return {"broker": None}
    if p == "/api/clusters/":
        return {"name": "mx-new", "connector": "engine"}
    if p == "/api/clusters/{cluster}/":
        return {"description": "changed"} if m == "PATCH" else {}
    if p.endswith("/client-metrics/"):
        return {"name": "sub-new", "configs": {**SUB, "match": "client_id=app-x-.*"}}
    if "/client-metrics/{subscription}/" in p:
        return {"configs": {**SUB, "match": f"client_id=app-{tag}-.*"}}
    if p.endswith("/groups/"):
        return {"name": "grp-new", "tenant": f"team-{tag}", "kind": "principals", "principals": [f"svc-{tag}-9"]}
    if p.endswith("/groups/{group}/"):
        return {"principals": [f"svc-{tag}-2"]}
    if p.endswith("/values"):
        return {"ops": [{"key": "producer_byte_rate", "value": 8192}]}
    if p.endswith("/exempt-principals/"):
        return {"principal": "svc-new", "reason": "matrix"}
    if "/scram-credentials/" in p:
        return {"user": f"svc-{tag}-1"} if p.endswith("scram-credentials/") else {}
    if p == "/api/tenants/":
        return {"name": "team-new"}
    if p == "/api/tenants/{name}/":
        return {"name": f"team-{tag}"} if m == "PUT" else {"description": "changed"}
    if p == "/api/requests/":
        return {"cluster": CLUSTER, "user": f"svc-{tag}-2", **GOOD_QUOTA}
    if p == "/api/subscription-requests/":
        return {"cluster": CLUSTER, "name": f"sub-{tag}-3", "configs": {**SUB, "match": f"client_id=app-{tag}-3"}}
    if p == "/api/clusters/{cluster}/plans/":
        return {"document": plan_file(tag, 1300), "prune": False}
    if p == "/api/tokens/":
        return {"name": "matrix"}  # members: their only tenant; admins and auditors: all of their rights
    if p == "/api/previews/":
        return {"cluster": CLUSTER, "user": f"svc-{tag}-1", "client_id": None, **GOOD_QUOTA}
    if p == "/api/webhooks/":
        return {"tenant": f"team-{tag}", "name": "hook-new", "url": "https://hooks.test/new"}
    if p == "/api/webhooks/{id}/":
        return {"tenant": "team-mxa", "name": "hook-mxa", "url": "https://hooks.test/mxa"} if m == "PUT" else {
            "active": False}
    if p.endswith(("/approve/", "/reject/", "/withdraw/")):
        return {"comment": "matrix"}
    if p == "/requests/new/":
        return {"cluster": CLUSTER, "user": f"svc-{tag}-4", "client_id": "", **GOOD_QUOTA}
    if p == "/drift/reapply/":
        return {"cluster": CLUSTER, "broker": ""}
    if p.endswith("/get-subscriptions"):
        return {"client_instance_id": "00000000-0000-0000-0000-000000000000", "client_id": "app-mxa-1"}
    return {}


def markers(row: Row, w: dict[str, Any]) -> list[str]:
    """What shows the row's object in an answer."""
    if row.obj in NAMES:
        return [NAMES[row.obj]]
    first = row.path.strip("/").split("/")[1 if row.path.startswith("/api/") else 0]
    if "/client-quotas/" in row.path or "/effective-quota" in row.path or first == "audit":
        return ["<default>"]
    if first == "entities":
        return [f"/entities/{w['entity']['shared']}/", "/config/users/<default>"]
    if "client-metrics" in row.path:
        return ["sub-shared"]
    if "exempt-principals" in row.path:
        return ["exempt-mx"]
    if first == "telemetry":
        return ["inst-shared"] if "{cluster}" in row.path else [CLUSTER]
    if first in ("clusters", "drift", "pushes"):
        return [CLUSTER]
    return ["<default>"]


def outcome(row: Row, role: str, w: dict[str, Any]) -> str:
    client: Client = w["clients"][role]
    if row.path == "/logout/":  # signing out ends the session: a session of its own, not the role's
        client = Client()
        if role in w["users"]:
            client.force_login(w["users"][role])
    url, body = url_of(row, w), body_of(row)
    pages = not url.startswith("/api/") and row.path not in ("/healthz", "/metrics", "/v1/metrics") and \
        not url.startswith("/telemetry/v1/")
    with transaction.atomic():
        if body is None:
            response = client.get(url)
        elif pages or row.path == "/logout/":
            response = client.generic(row.method, url, _form(body), content_type="application/x-www-form-urlencoded")
        else:
            response = client.generic(row.method, url, json.dumps(body), content_type="application/json")
        transaction.set_rollback(True)
    status = response.status_code
    if status == 302 and role == "anon" and pages and response["Location"].startswith("/login/"):
        return "login"
    if 200 <= status < 300 and row.obj != "-" and row.method in ("GET", "POST") and _reads(row):
        text = response.content.decode(errors="replace")
        shown = any(m in text or html.escape(m) in text for m in markers(row, w))
        return "see" if shown else "hide"
    return str(status)


def _reads(row: Row) -> bool:
    """Rows whose 2xx is judged by what it shows: reads (describe is a POST that reads)."""
    return row.method == "GET" or row.path.endswith("/client-quotas/describe")


def _form(body: dict[str, Any]) -> str:
    from urllib.parse import urlencode

    return urlencode({k: "" if v is None else v for k, v in body.items()})


@pytest.mark.django_db  # (the mark is also what makes pytest-django create the test database for the world)
@pytest.mark.parametrize("row", ROWS, ids=[f"{r.method} {r.path} {r.obj}" for r in ROWS])
def test_every_role_gets_what_the_table_says(row: Row, world: dict[str, Any]) -> None:
    got = {role: outcome(row, role, world) for role in ROLES}
    if got != row.expected:
        cells = differences(got, row)
        pytest.fail(f"{row.method} {row.path} {row.obj}: {cells}\nThe access matrix is MATRIX in {__file__}; "
                    "fix the code, or the row when the table was wrong.", pytrace=False)


@pytest.mark.django_db
def test_a_default_entity_page_probes_only_the_members_own_connections(world: dict[str, Any]) -> None:
    """The `<default>` entity's page lets a person type a principal to see what applies to it; a member typing
    another tenant's principal learns nothing of that tenant's quotas (as GET .../effective-quota answers 403)."""
    page_of = f"/entities/{world['entity']['shared']}/"
    other = world["clients"]["A"].get(page_of, {"as_user": "svc-mxb-1", "as_client_id": "app-mxb-1"})
    assert other.status_code == 200
    assert "/config/users/svc-mxb-1" not in other.content.decode() and "None of your tenants owns" in html.unescape(
        other.content.decode())
    own = world["clients"]["A"].get(page_of, {"as_user": "svc-mxa-1", "as_client_id": "app-mxa-1"}).content.decode()
    assert "/config/users/svc-mxa-1" in own  # its own principal's quota is the level that applies
    admin = world["clients"]["admin"].get(page_of, {"as_user": "svc-mxb-1", "as_client_id": "app-mxb-1"})
    assert "/config/users/svc-mxb-1" in admin.content.decode()
