"""Tenants, self-service quota requests, approvals, boosts, the capacity check and the audit trail.

Two tenants (team-a owns svc-a-* and app-a-*, team-b owns svc-b-* and app-b-*), two admins
(staff, and the quota-admins group) and an auditor. Every endpoint is checked for what each
of them may see and do.
"""

from __future__ import annotations

import itertools
import threading
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections
from django.utils import timezone
from rest_framework.test import APIClient

from quotas.models import (
    Alteration,
    Approval,
    AuditEntry,
    Cluster,
    DesiredStateVersion,
    OwnedName,
    QuotaOp,
    QuotaRequest,
    QuotaValue,
    Tenant,
    alter_client_quotas,
)
from quotas.models.capacity import capacity_check
from quotas.tasks import expire_boosts
from quotas.workflow import errors, quota_requests, transitions
from tests.brokers import cluster_with_brokers, push_everywhere
from tests.database import database_url, on_postgres
from tests.people import api, make_tenant, roles
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db

PBR, CBR = "producer_byte_rate", "consumer_byte_rate"
User = get_user_model()


@pytest.fixture
def world(engine_redis: redis.Redis) -> dict[str, Any]:
    """Two tenants with a member each (plus a second member of team-a), two admins and an auditor."""
    w: dict[str, Any] = roles()
    a = make_tenant("team-a", w["alice"], w["alice2"], users=["svc-a-*"], client_ids=["app-a-*"])
    b = make_tenant("team-b", w["bob"], users=["svc-b-*"], client_ids=["app-b-?"])
    cluster = cluster_with_brokers(
        range(3), name="prod", capacity_in_bytes_per_s=10_000, capacity_out_bytes_per_s=50_000
    )
    w.update(a=a, b=b, cluster=cluster)
    return w


def ask(who: Any, **body: Any) -> Any:
    payload = {"tenant": "team-a", "cluster": "prod", "user": "svc-a-1", "key": PBR, "value": 1000, **body}
    return api(who).post("/api/requests/", payload, format="json")


def submitted(w: dict[str, Any], **fields: Any) -> QuotaRequest:
    """A request of team-a's alice, through the workflow."""
    args = {"user": "svc-a-1", "client_id": None, "key": PBR, "value": 1000, **fields}
    return quota_requests.submit(w["alice"], w["a"], w["cluster"], **args)


def stored(cluster: Cluster, user: str | None = "svc-a-1", client_id: str | None = None, key: str = PBR):
    row = QuotaValue.objects.filter(entity__cluster=cluster, entity__user=user, entity__client_id=client_id, key=key)
    return row.values_list("value", flat=True).first()


def version(cluster: Cluster) -> int:
    return DesiredStateVersion.objects.get(cluster=cluster).version


def assert_error(response: Any, status: int, code: str, fragment: str = "") -> None:
    assert response.status_code == status, response.json()
    body = response.json()
    assert body["code"] == code and fragment in body["message"], body
    assert set(body) == {"code", "message", "details"}


# ------------------------------------------------------------------ submit


def test_member_submits_for_an_owned_entity(world: dict[str, Any]) -> None:
    response = ask(world["alice"], client_id="app-a-web", reason="launch")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == "submitted" and body["tenant"] == "team-a" and body["requested_by"] == "alice"
    assert body["entity"] == "/config/users/svc-a-1/clients/app-a-web" and body["approval"] is None
    assert body["value"] == 1000.0 and version(world["cluster"]) == 0  # nothing applied yet
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.actor_name, entry.after, entry.tenant) == (
        "submitted",
        "alice",
        "submitted",
        world["a"],
    )


def test_a_default_client_under_an_owned_user_is_allowed(world: dict[str, Any]) -> None:
    assert ask(world["alice"], client_id="<default>").status_code == 201


@pytest.mark.parametrize(
    ("who", "body", "status", "code", "fragment", "field"),
    [
        ("bob", {}, 403, "PERMISSION_DENIED", "not a member of tenant 'team-a'", "tenant"),
        ("auditor", {}, 403, "PERMISSION_DENIED", "Auditors read everything", None),
        ("alice", {"user": "svc-b-1"}, 403, "PERMISSION_DENIED",
         "does not own the principal 'svc-b-1'; it owns the principals svc-a-*.", "user"),
        ("alice", {"client_id": "app-b-1"}, 403, "PERMISSION_DENIED",
         "does not own the client-id 'app-b-1'; it owns the client-ids app-a-*.", "client_id"),
        ("alice", {"user": "SVC-A-1"}, 403, "PERMISSION_DENIED", "does not own", "user"),  # case-sensitive, as Kafka
        ("alice", {"user": "<default>"}, 403, "PERMISSION_DENIED", "ask a portal admin", "user"),
        ("alice", {"user": None, "client_id": "<default>"}, 403, "PERMISSION_DENIED", "Default entities", "client_id"),
        ("alice", {"user": None}, 400, "INVALID_REQUEST", "Name a principal (user), a client-id, or both.", "user"),
        ("alice", {"value": 10.5}, 400, "INVALID_REQUEST", "cannot be a fractional value", "value"),
        ("alice", {"value": "lots"}, 400, "INVALID_REQUEST", "1536 KiB/s, 1.5 MiB/s, 2 GiB/s", "value"),
        ("alice", {"value": "1.3 B/s"}, 400, "INVALID_REQUEST", "not a whole number of bytes", "value"),
        ("alice", {"value": True}, 400, "INVALID_REQUEST", "must be a number", "value"),
        ("alice", {"value": -1}, 400, "INVALID_REQUEST", "greater than 0", "value"),
        ("alice", {"key": "connection_creation_rate"}, 400, "INVALID_REQUEST", "applies to ip entities", "key"),
        ("alice", {"key": "producer_rate"}, 400, "INVALID_REQUEST", "Invalid configuration key", "key"),
        ("alice", {"expires_at": "2000-01-01T00:00:00Z"}, 400, "INVALID_REQUEST", "(expires_at) is in the past",
         "expires_at"),
        ("alice", {"tenant": "nope"}, 400, "INVALID_REQUEST", "No tenant named 'nope'; GET /api/tenants/", "tenant"),
        ("alice", {"cluster": "nope"}, 400, "INVALID_REQUEST", "No cluster named 'nope'; GET /api/clusters/",
         "cluster"),
    ],
)
def test_submit_refusals(
    world: dict[str, Any], who: str, body: dict, status: int, code: str, fragment: str, field: str | None
) -> None:
    """Each refusal says what to change, and ``details`` names the field to change it in (a form marks that one)."""
    response = ask(world[who], **body)
    assert_error(response, status, code, fragment)
    details = response.json()["details"]
    if field is None:
        assert details is None
    else:
        assert list(details) == [field] and fragment in details[field][0], details
    assert not QuotaRequest.objects.exists() and not AuditEntry.objects.exists()


# ------------------------------------------------------------------ values in units


@pytest.mark.parametrize(
    ("key", "value", "stored"),
    [
        (PBR, "1.5 MiB/s", 1_572_864),
        (PBR, "1536 KiB/s", 1_572_864),
        (PBR, "1572864", 1_572_864),
        (PBR, 1_572_864, 1_572_864),
        (CBR, "2 GiB/s", 2 * 1024**3),
        (CBR, "512kib", 524_288),
        ("request_percentage", "50 %", 50),
        ("controller_mutation_rate", "2.5 mutations/s", 2.5),
    ],
)
def test_a_value_may_be_written_with_its_unit_and_the_api_keeps_the_number(
    world: dict[str, Any], key: str, value: Any, stored: float
) -> None:
    response = ask(world["alice"], key=key, value=value)
    assert response.status_code == 201, response.json()
    answered = response.json()["value"]
    assert answered == stored and QuotaRequest.objects.get().value == stored
    if key in (PBR, CBR):  # Kafka's LONG: whole bytes/s, answered as an integer
        assert isinstance(answered, int)
        detail = api(world["alice"]).get(f"/api/requests/{response.json()['id']}/").json()
        assert isinstance(detail["value"], int) and detail["value"] == stored


@pytest.mark.parametrize("value", ["lots", "1.5 MB/s", "1,5 MiB/s", "1e6", "NaN", "0.1 KiB/s", "1.3 B/s"])
def test_text_in_no_accepted_form_is_refused_naming_the_forms(world: dict[str, Any], value: str) -> None:
    response = ask(world["alice"], value=value)
    assert_error(response, 400, "INVALID_REQUEST", "1536 KiB/s, 1.5 MiB/s, 2 GiB/s")
    body = response.json()
    assert body["message"].startswith("value: ") and "1572864" in body["message"]
    assert list(body["details"]) == ["value"] and "B/s, KiB/s, MiB/s, GiB/s" in body["details"]["value"][0]
    assert not QuotaRequest.objects.exists()


def test_the_workflow_reads_units_too(world: dict[str, Any]) -> None:
    assert submitted(world, value="6 MiB/s").value == 6 * 1024**2
    with pytest.raises(errors.InvalidRequest, match="not a whole number of bytes") as refused:
        submitted(world, value="0.3 KiB/s")
    assert refused.value.field == "value"


# ------------------------------------------------------------------ which tenant


def test_a_member_of_one_tenant_never_names_it(world: dict[str, Any]) -> None:
    response = ask(world["alice"], tenant=None)
    assert response.status_code == 201, response.json()
    assert response.json()["tenant"] == "team-a"
    body = {"cluster": "prod", "user": "svc-a-1", "key": PBR, "value": "1 MiB/s"}  # no tenant key at all
    response = api(world["alice"]).post("/api/requests/", body, format="json")
    assert response.status_code == 201 and response.json()["tenant"] == "team-a"
    inferred = quota_requests.submit(world["bob"], None, world["cluster"], user="svc-b-1", client_id=None, key=PBR,
                                     value=10)
    assert inferred.tenant == world["b"]


def test_a_member_of_several_tenants_is_asked_which_naming_the_choices(world: dict[str, Any]) -> None:
    world["b"].members.add(world["alice"])
    response = ask(world["alice"], tenant=None)
    assert_error(response, 400, "INVALID_REQUEST", "You are a member of 2 tenants, team-a, team-b")
    body = response.json()
    assert "name the one this request is for in tenant" in body["message"]
    assert "; team-a owns what you ask for" in body["message"]  # svc-a-1 is team-a's
    assert body["details"] == {"tenant": [body["message"]]}
    assert not QuotaRequest.objects.exists()
    # naming one of them is enough
    assert ask(world["alice"], tenant="team-a").status_code == 201
    assert ask(world["alice"], tenant="team-b", user="svc-b-1").status_code == 201


def test_naming_a_tenant_one_is_not_a_member_of_is_still_refused(world: dict[str, Any]) -> None:
    response = ask(world["bob"], tenant="team-a")
    assert_error(response, 403, "PERMISSION_DENIED", "not a member of tenant 'team-a'")
    assert response.json()["details"] == {"tenant": [response.json()["message"]]}
    world["b"].members.add(world["alice"])  # a member of several names only its own
    team_c = Tenant.objects.create(name="team-c")
    assert_error(ask(world["alice"], tenant=team_c.name), 403, "PERMISSION_DENIED", "not a member of tenant 'team-c'")
    assert_error(ask(world["alice"], tenant="nope"), 400, "INVALID_REQUEST", "tenant")


def test_someone_in_no_tenant_is_told_so(world: dict[str, Any]) -> None:
    assert_error(ask(world["admin"], tenant=None), 403, "PERMISSION_DENIED", "not a member of any tenant")
    assert_error(ask(world["auditor"], tenant=None), 403, "PERMISSION_DENIED", "Auditors read everything")


def test_subscription_requests_infer_the_tenant_too(world: dict[str, Any]) -> None:
    OwnedName.objects.create(tenant=world["a"], entity_type="client-id", pattern="app-1")
    body = {"cluster": "prod", "name": "mine", "metrics": "*", "match": "client_id=app-1"}
    response = api(world["alice"]).post("/api/subscription-requests/", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["tenant"] == "team-a"
    world["b"].members.add(world["alice"])
    response = api(world["alice"]).post("/api/subscription-requests/", {**body, "name": "again"}, format="json")
    assert_error(response, 400, "INVALID_REQUEST", "You are a member of 2 tenants, team-a, team-b")
    assert "; team-a owns what you ask for" in response.json()["message"]
    response = api(world["alice"]).post(
        "/api/subscription-requests/", {**body, "name": "again", "tenant": "team-a"}, format="json"
    )
    assert response.status_code == 201


# ------------------------------------------------------------------ approve, reject, withdraw


def test_approve_applies_to_the_desired_state_and_audits(world: dict[str, Any]) -> None:
    seed = Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 500)])
    alter_client_quotas(world["cluster"], [seed])
    request = submitted(world)
    response = api(world["admin2"]).post(f"/api/requests/{request.pk}/approve/", {"comment": "ok"}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["state"] == "applying" and body["previous_value"] == 500.0 and body["applied_version"] == 2
    assert body["approval"]["approver"] == "ops" and body["approval"]["decision"] == "approved"
    assert body["approval"]["comment"] == "ok"
    assert stored(world["cluster"]) == 1000.0 and version(world["cluster"]) == 2
    body = api(world["alice"]).get(f"/api/requests/{request.pk}/").json()
    assert [(p["broker"], p["state"]) for p in body["pushes"]] == [(i, "pending") for i in range(3)]  # one per broker
    push_everywhere(world["cluster"])  # what the Celery task does after the commit
    body = api(world["alice"]).get(f"/api/requests/{request.pk}/").json()
    assert body["state"] == "applied"
    assert [(p["broker"], p["state"], p["attempts"]) for p in body["pushes"]] == [(i, "applied", 1) for i in range(3)]
    trail = list(AuditEntry.objects.filter(request=request).order_by("pk").values_list("action", "before", "after"))
    assert trail == [
        ("submitted", None, "submitted"),
        ("approved", "submitted", "approved"),
        ("quota_altered", 500.0, 1000.0),
        ("applying", "approved", "applying"),
        ("applied", "applying", "applied"),
    ]  # no gap: every row starts where the one before it ended
    moves = AuditEntry.objects.filter(request=request).exclude(action="quota_altered").order_by("pk")
    steps = list(moves.values_list("before", "after"))
    assert all(before == prior for (_, prior), (before, _) in zip(steps, steps[1:], strict=False))
    applying = moves.get(action="applying")
    assert (applying.actor_name, applying.comment) == ("ops", "desired-state version 2")
    altered = AuditEntry.objects.get(action="quota_altered")
    assert altered.actor_name == "ops" and altered.entity == "/config/users/svc-a-1" and altered.key == PBR


def test_reject_needs_a_comment_and_changes_no_quota(world: dict[str, Any]) -> None:
    request = submitted(world)
    admin = api(world["admin"])
    assert_error(admin.post(f"/api/requests/{request.pk}/reject/", {}, format="json"), 400, "INVALID_REQUEST", "why")
    response = admin.post(f"/api/requests/{request.pk}/reject/", {"comment": "too big, try 500"}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "rejected"
    assert response.json()["approval"]["comment"] == "too big, try 500"
    assert stored(world["cluster"]) is None and version(world["cluster"]) == 0
    assert AuditEntry.objects.filter(request=request, action="rejected", comment="too big, try 500").exists()


def test_withdraw_by_the_requester_or_a_tenant_mate(world: dict[str, Any]) -> None:
    first, second = submitted(world), submitted(world, value=2000)
    response = api(world["alice"]).post(f"/api/requests/{first.pk}/withdraw/", {"comment": "oops"}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "withdrawn"
    response = api(world["alice2"]).post(f"/api/requests/{second.pk}/withdraw/", {}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "withdrawn"
    assert AuditEntry.objects.filter(action="withdrawn").count() == 2


@pytest.mark.parametrize(
    ("first", "then"), [("approve", "approve"), ("approve", "reject"), ("reject", "approve"), ("approve", "withdraw")]
)
def test_a_decided_request_is_a_conflict(world: dict[str, Any], first: str, then: str) -> None:
    request = submitted(world)
    body = {"comment": "because"}
    assert api(world["admin"]).post(f"/api/requests/{request.pk}/{first}/", body, format="json").status_code == 200
    actor = world["alice"] if then == "withdraw" else world["admin2"]
    response = api(actor).post(f"/api/requests/{request.pk}/{then}/", body, format="json")
    assert_error(response, 409, "CONFLICT", f"Request #{request.pk} is ")
    assert Approval.objects.filter(request=request).count() == 1


def test_withdrawn_request_cannot_be_approved(world: dict[str, Any]) -> None:
    request = submitted(world)
    quota_requests.withdraw(world["alice"], request.pk)
    response = api(world["admin"]).post(f"/api/requests/{request.pk}/approve/", {}, format="json")
    assert_error(response, 409, "CONFLICT", "withdrawn")
    assert stored(world["cluster"]) is None


def test_nobody_approves_their_own_request(world: dict[str, Any]) -> None:
    world["a"].members.add(world["admin"])  # an admin who is also a member of team-a asks for a quota
    response = ask(world["admin"])
    assert response.status_code == 201
    pk = response.json()["id"]
    for verb in ("approve", "reject"):
        response = api(world["admin"]).post(f"/api/requests/{pk}/{verb}/", {"comment": "mine"}, format="json")
        assert_error(response, 403, "PERMISSION_DENIED", "Nobody approves or rejects their own request")
    assert api(world["admin2"]).post(f"/api/requests/{pk}/approve/", {}, format="json").status_code == 200


@pytest.mark.parametrize("who", ["alice", "alice2", "auditor"])
def test_only_admins_decide(world: dict[str, Any], who: str) -> None:
    request = submitted(world)
    for verb in ("approve", "reject"):
        response = api(world[who]).post(f"/api/requests/{request.pk}/{verb}/", {"comment": "x"}, format="json")
        assert_error(response, 403, "PERMISSION_DENIED")
    assert QuotaRequest.objects.get().state == "submitted"


def test_an_auditor_cannot_withdraw_even_as_a_member(world: dict[str, Any]) -> None:
    world["a"].members.add(world["auditor"])
    request = submitted(world)
    response = api(world["auditor"]).post(f"/api/requests/{request.pk}/withdraw/", {}, format="json")
    assert_error(response, 403, "PERMISSION_DENIED", "Auditors")


def test_an_expired_boost_cannot_be_approved(world: dict[str, Any]) -> None:
    now = timezone.now()
    request = submitted(world, expires_at=now + timedelta(hours=1), now=now)
    with pytest.raises(errors.InvalidRequest, match="has passed"):
        quota_requests.approve(world["admin"], request.pk, now=now + timedelta(hours=2))


def test_a_change_refused_by_the_desired_state_fails_the_request(world: dict[str, Any]) -> None:
    request = submitted(world)
    QuotaRequest.objects.filter(pk=request.pk).update(value=10.5)  # rules "changed" after submission
    quota_requests.approve(world["admin"], request.pk)
    request.refresh_from_db()
    assert request.state == "failed" and "fractional" in request.failure
    assert stored(world["cluster"]) is None and version(world["cluster"]) == 0


# ------------------------------------------------------------------ the race


def test_the_conditional_update_refuses_a_stale_state(world: dict[str, Any]) -> None:
    """The guard itself: a request read as submitted, decided by someone else before our UPDATE, is a conflict."""
    request = submitted(world)
    stale = QuotaRequest.objects.get(pk=request.pk)
    quota_requests.approve(world["admin"], request.pk)
    with pytest.raises(errors.Conflict, match="was applying meanwhile"):
        transitions._move(stale, "rejected")
    assert QuotaRequest.objects.get(pk=request.pk).state == "applying"


@pytest.mark.django_db(transaction=True)
def test_two_admins_approving_at_once_exactly_one_counts(world: dict[str, Any]) -> None:
    """Two threads, two database connections, released together: one approval, one CONFLICT, one apply.

    SQLite (test database in a file, ``transaction_mode=IMMEDIATE``) serializes the two transactions, so the
    second reads the decided state; PostgreSQL would block the second UPDATE on the row lock and match 0 rows.
    Either way exactly one decision counts.
    """
    request = submitted(world)
    barrier, outcomes = threading.Barrier(2), {}

    def decide(name: str, verb: str) -> None:
        try:
            barrier.wait()
            getattr(quota_requests, verb)(world[name], request.pk, "at once")
            outcomes[name] = "ok"
        except errors.Conflict as e:
            outcomes[name] = e.code
        finally:
            connections.close_all()

    threads = [threading.Thread(target=decide, args=a) for a in (("admin", "approve"), ("admin2", "approve"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes.values()) == ["CONFLICT", "ok"], outcomes
    assert Approval.objects.filter(request=request).count() == 1
    assert AuditEntry.objects.filter(request=request, action="approved").count() == 1
    assert AuditEntry.objects.filter(request=request, action="quota_altered").count() == 1
    assert version(world["cluster"]) == 1 and stored(world["cluster"]) == 1000.0


@pytest.mark.django_db(transaction=True)
def test_on_postgresql_deciders_queued_behind_the_first_get_conflict(world: dict[str, Any]) -> None:
    """PostgreSQL's row locks, made to interleave: the first approval holds the request's row (its conditional
    UPDATE) while it waits for the cluster's version lock, which the test holds from another connection; two more
    deciders (an approval and a rejection) queue on that row lock. When the version lock goes, the first commits,
    and each queued UPDATE re-reads the row (READ COMMITTED), matches 0 rows and answers CONFLICT: no deadlock,
    no second decision, no database error reaching the caller."""
    if not on_postgres():
        pytest.skip("row-lock queueing is PostgreSQL's (scripts/run_tests.sh runs the suite on it); SQLite "
                    "serializes whole transactions, which test_two_admins_approving_at_once_exactly_one_counts covers")
    import psycopg

    request = submitted(world)
    outcomes: dict[str, str] = {}
    table = DesiredStateVersion._meta.db_table

    def decide(name: str, who: str, verb: str) -> None:
        try:
            args = (world[who], request.pk, "at once")
            getattr(quota_requests, verb)(*args)
            outcomes[name] = "ok"
        except errors.WorkflowError as e:
            outcomes[name] = f"{e.code}: {e.message}"
        except Exception as e:  # a deadlock or serialization error would land here: the test names it
            outcomes[name] = f"{type(e).__name__}: {e}"
        finally:
            connections.close_all()

    with psycopg.connect(database_url().replace("postgres://", "postgresql://", 1), autocommit=True) as watch:
        def waiting() -> int:
            row = watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            return row[0] if row else 0

        with psycopg.connect(database_url().replace("postgres://", "postgresql://", 1)) as holder:
            holder.execute(f"SELECT version FROM {table} WHERE cluster_id = %s FOR UPDATE", [world["cluster"].pk])
            threads = [threading.Thread(target=decide, args=("first", "admin", "approve"))]
            threads[0].start()
            wait_for("the first approval to wait for the version lock", lambda: waiting() == 1, 15, 0.02)
            for args in (("second", "admin2", "approve"), ("third", "admin", "reject")):
                threads.append(threading.Thread(target=decide, args=args))
                threads[-1].start()
            wait_for("both latecomers to queue on the request's row", lambda: waiting() == 3, 15, 0.02)
            holder.commit()
    for t in threads:
        t.join(timeout=30)
    assert outcomes["first"] == "ok", outcomes
    for late in ("second", "third"):
        assert outcomes[late] == f"CONFLICT: Request #{request.pk} was applying meanwhile (another change came " \
            "first); reload it.", outcomes
    assert Approval.objects.filter(request=request).count() == 1
    assert AuditEntry.objects.filter(request=request, action__in=("approved", "rejected")).count() == 1
    assert version(world["cluster"]) == 1 and stored(world["cluster"]) == 1000.0


# ------------------------------------------------------------------ boosts


def test_boost_expiry_restores_the_previous_value(world: dict[str, Any]) -> None:
    t0 = timezone.now()
    alter_client_quotas(world["cluster"], [Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 500)])])
    boost = submitted(world, value=5000, expires_at=t0 + timedelta(hours=1), now=t0)
    quota_requests.approve(world["admin"], boost.pk, now=t0)
    assert stored(world["cluster"]) == 5000.0
    assert expire_boosts(now=t0 + timedelta(hours=2)) == []  # not on the brokers yet: nothing to expire
    push_everywhere(world["cluster"])

    assert expire_boosts(now=t0 + timedelta(minutes=59)) == []  # the Celery task, called directly
    assert stored(world["cluster"]) == 5000.0
    assert expire_boosts(now=t0 + timedelta(hours=1)) == [boost.pk]
    assert stored(world["cluster"]) == 500.0 and version(world["cluster"]) == 3
    boost.refresh_from_db()
    assert boost.state == "expired"
    restored = AuditEntry.objects.get(request=boost, action="quota_altered", before=5000.0)
    assert restored.after == 500.0 and restored.actor_name == "system" and restored.actor is None
    assert AuditEntry.objects.filter(request=boost, action="expired", comment="previous value restored").exists()
    assert expire_boosts(now=t0 + timedelta(hours=2)) == []  # once only


def test_boost_without_a_previous_value_removes_the_key(world: dict[str, Any]) -> None:
    t0 = timezone.now()
    boost = submitted(world, expires_at=t0 + timedelta(minutes=5), now=t0)
    quota_requests.approve(world["admin"], boost.pk, now=t0)
    push_everywhere(world["cluster"])
    expire_boosts(now=t0 + timedelta(minutes=5))
    assert stored(world["cluster"]) is None
    assert AuditEntry.objects.filter(request=boost, action="quota_altered", before=1000.0, after__isnull=True).exists()


def test_boost_expiry_leaves_a_value_changed_since(world: dict[str, Any]) -> None:
    t0 = timezone.now()
    boost = submitted(world, expires_at=t0 + timedelta(minutes=5), now=t0)
    quota_requests.approve(world["admin"], boost.pk, now=t0)
    push_everywhere(world["cluster"])
    alter_client_quotas(world["cluster"], [Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 7000)])])
    expire_boosts(now=t0 + timedelta(minutes=5))
    assert stored(world["cluster"]) == 7000.0
    assert AuditEntry.objects.get(request=boost, action="expired").comment.startswith("value changed since")


def _boost(world: dict[str, Any], value: int, until: Any, now: Any) -> QuotaRequest:
    """A boost of svc-a-1's producer rate, approved and on every broker."""
    request = submitted(world, value=value, expires_at=until, now=now)
    quota_requests.approve(world["admin"], request.pk, now=now)
    push_everywhere(world["cluster"])
    request.refresh_from_db()
    assert request.state == "applied"
    return request


ORDERS = [*itertools.permutations(range(2)), *itertools.permutations(range(3))]


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(map(str, o)) for o in ORDERS])
def test_overlapping_boosts_end_at_the_value_before_the_first_whatever_order_they_expire_in(
    world: dict[str, Any], order: tuple[int, ...]
) -> None:
    """Boosts applied one on top of another (5000, then 8000, then 9000 over a base of 500): while any runs, the
    entity has the value of the newest one still running; when the last ends, the base comes back."""
    t0 = timezone.now()
    cluster = world["cluster"]
    alter_client_quotas(cluster, [Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 500)])])
    values = [5000, 8000, 9000][: len(order)]
    ends = {boost: t0 + timedelta(hours=k + 1) for k, boost in enumerate(order)}  # order[k] ends k-th
    boosts = [_boost(world, v, ends[i], t0) for i, v in enumerate(values)]
    assert stored(cluster) == values[-1]
    running = set(range(len(values)))
    for k, ending in enumerate(order):
        assert expire_boosts(now=t0 + timedelta(hours=k + 1)) == [boosts[ending].pk]
        running.discard(ending)
        expected = values[max(running)] if running else 500.0
        assert stored(cluster) == expected, (order, k)
        push_everywhere(cluster)
    assert all(QuotaRequest.objects.get(pk=b.pk).state == "expired" for b in boosts)
    trail = AuditEntry.objects.filter(action="quota_altered", key=PBR, entity="/config/users/svc-a-1")
    assert trail.order_by("-pk").values_list("after", flat=True).first() == 500.0


def test_a_boost_ending_under_a_later_one_hands_down_what_it_replaced(world: dict[str, Any]) -> None:
    t0 = timezone.now()
    alter_client_quotas(world["cluster"], [Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 500)])])
    first = _boost(world, 5000, t0 + timedelta(hours=1), t0)
    second = _boost(world, 8000, t0 + timedelta(hours=2), t0)
    assert second.previous_value == 5000.0  # it replaced the first boost's value
    expire_boosts(now=t0 + timedelta(hours=1))
    second.refresh_from_db()
    assert second.previous_value == 500.0 and stored(world["cluster"]) == 8000.0  # the later one still runs
    note = AuditEntry.objects.get(request=first, action="expired").comment
    assert note == f"boost #{second.pk}, applied on top of this one, now gives back 500 B/s when it ends"
    assert not AuditEntry.objects.filter(request=first, action="quota_altered", before=5000.0).exists()


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_a_manual_change_during_overlapping_boosts_still_stands(world: dict[str, Any], order: tuple[int, int]) -> None:
    t0 = timezone.now()
    cluster = world["cluster"]
    alter_client_quotas(cluster, [Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 500)])])
    ends = {boost: t0 + timedelta(hours=k + 1) for k, boost in enumerate(order)}
    _boost(world, 5000, ends[0], t0)
    _boost(world, 8000, ends[1], t0)
    alter_client_quotas(cluster, [Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 7000)])])  # an admin, meanwhile
    push_everywhere(cluster)
    for k in range(2):
        assert len(expire_boosts(now=t0 + timedelta(hours=k + 1))) == 1
        assert stored(cluster) == 7000.0
    assert expire_boosts(now=t0 + timedelta(hours=3)) == []


def test_a_manual_change_between_two_boosts_is_what_the_second_gives_back(world: dict[str, Any]) -> None:
    t0 = timezone.now()
    cluster = world["cluster"]
    alter_client_quotas(cluster, [Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 500)])])
    first = _boost(world, 5000, t0 + timedelta(hours=1), t0)
    alter_client_quotas(cluster, [Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 7000)])])  # stands
    push_everywhere(cluster)
    _boost(world, 9000, t0 + timedelta(hours=2), t0)
    expire_boosts(now=t0 + timedelta(hours=1))
    assert stored(cluster) == 9000.0
    assert "left as it is" in AuditEntry.objects.get(request=first, action="expired").comment
    expire_boosts(now=t0 + timedelta(hours=2))
    assert stored(cluster) == 7000.0


def test_a_boost_asking_for_the_value_in_force_still_stacks(world: dict[str, Any]) -> None:
    """The second boost changes nothing (same value, same desired-state version): it still counts as on top."""
    t0 = timezone.now()
    cluster = world["cluster"]
    alter_client_quotas(cluster, [Alteration([("user", "svc-a-1")], [QuotaOp(PBR, 500)])])
    first = _boost(world, 5000, t0 + timedelta(hours=1), t0)
    second = _boost(world, 5000, t0 + timedelta(hours=2), t0)
    assert second.applied_version == first.applied_version
    expire_boosts(now=t0 + timedelta(hours=1))
    assert stored(cluster) == 5000.0  # the second still runs
    expire_boosts(now=t0 + timedelta(hours=2))
    assert stored(cluster) == 500.0


def test_expiry_runs_every_minute_in_celery_beat() -> None:
    schedule = settings.CELERY_BEAT_SCHEDULE["expire-boosts"]
    assert schedule == {"task": "quotas.tasks.expire_boosts", "schedule": 60.0}
    assert expire_boosts.name == "quotas.tasks.expire_boosts"


# ------------------------------------------------------------------ capacity


def test_capacity_check_warns_above_the_cluster_capacity(world: dict[str, Any]) -> None:
    cluster = world["cluster"]  # per broker, 3 brokers, 10,000 B/s in
    alter_client_quotas(cluster, [Alteration([("user", "svc-b-1")], [QuotaOp(PBR, 1000)])])
    small, big = submitted(world, value=2000), submitted(world, value=3000)
    admin = api(world["admin"])

    check = admin.get(f"/api/requests/{small.pk}/").json()["capacity"]
    assert check["brokers"] == 3 and check["multiplier"] == 3 and check["capacity"] == 10_000
    assert (check["granted_without"], check["granted_with"]) == (3000.0, 9000.0)
    assert check["exceeds"] is False and check["warning"] is None

    check = admin.get(f"/api/requests/{big.pk}/").json()["capacity"]
    assert (check["granted_without"], check["granted_with"]) == (3000.0, 12000.0)
    assert check["exceeds"] is True
    assert "grants 11.72 KiB/s (12,000 B/s)" in check["warning"]
    assert "above its capacity of 9.77 KiB/s (10,000 B/s)" in check["warning"]

    cluster.scope = "cluster_wide"  # one shared budget: the value counts once
    cluster.save()
    check = admin.get(f"/api/requests/{big.pk}/").json()["capacity"]
    assert (check["multiplier"], check["granted_with"], check["exceeds"]) == (1, 4000.0, False)


def test_capacity_check_counts_a_default_once_for_each_known_entity_it_applies_to(world: dict[str, Any]) -> None:
    """``<default>`` quotas are granted too: each known entity without a more specific quota gets one (its own
    sensor), as Kafka's precedence decides; the check says how many entities are known and how it counted."""
    cluster = world["cluster"]  # per broker, 3 brokers, 10,000 B/s in
    alter_client_quotas(
        cluster,
        [
            Alteration([("user", "svc-b-1")], [QuotaOp(PBR, 1000)]),  # level 3: svc-b-1's own
            Alteration([("user", "svc-b-2"), ("client-id", "app-b-1")], [QuotaOp(PBR, 500)]),  # level 1
            Alteration([("user", "svc-a-7")], [QuotaOp(CBR, 100)]),  # known, but no producer quota of its own
            Alteration([("user", "<default>")], [QuotaOp(PBR, 200)]),  # level 6: every principal without its own
            Alteration([("client-id", "<default>")], [QuotaOp(PBR, 300)]),  # level 8: every known one is taken
        ],
    )
    request = submitted(world, value=2000)  # svc-a-1, which gets the <default> principal's 200 today

    check = api(world["admin"]).get(f"/api/requests/{request.pk}/").json()["capacity"]
    # known: svc-b-1, svc-b-2 with app-b-1, svc-a-7 and svc-a-1 (the request's)
    assert check["known"] == 4
    # without: 1000 + 500 + 200 (svc-a-7) + 200 (svc-a-1), x 3 brokers; with: svc-a-1's 2000 replaces its 200
    assert (check["granted_without"], check["granted_with"]) == (5700.0, 11100.0)
    assert check["exceeds"] is True
    assert check["defaults"] == [
        {"entity": "/config/clients/<default>", "value": 300.0, "applies_to": 0, "applies_to_without": 0},
        # svc-a-7, and svc-a-1 too until the request gives it its own
        {"entity": "/config/users/<default>", "value": 200.0, "applies_to": 1, "applies_to_without": 2},
    ]
    assert check["counted"].startswith("Over 4 known entities")
    assert "/config/users/<default> = 200 B/s applies to 1 of them (2 without the request)" in check["counted"]
    assert "x 3 brokers" in check["counted"]


def test_capacity_check_counts_client_id_defaults_per_client_id(world: dict[str, Any]) -> None:
    cluster = world["cluster"]
    cluster.scope = "cluster_wide"  # one budget: counted once
    cluster.save()
    alter_client_quotas(
        cluster,
        [
            Alteration([("client-id", "app-a-1")], [QuotaOp(PBR, 1000)]),
            Alteration([("client-id", "app-a-2")], [QuotaOp(CBR, 64)]),  # known client-id, no producer quota
            Alteration([("client-id", "<default>")], [QuotaOp(PBR, 300)]),
        ],
    )
    request = submitted(world, user=None, client_id="app-a-3", value=700)
    check = capacity_check(request)
    assert check is not None and check.known == 3 and check.multiplier == 1
    # app-a-1 its own 1000; app-a-2 and (without the request) app-a-3 the default's 300 each
    assert (check.granted_without, check.granted_with) == (1600.0, 2000.0)
    assert [(d.entity, d.applies_to, d.applies_to_without) for d in check.defaults] == [
        ("/config/clients/<default>", 1, 2)
    ]


def test_capacity_check_of_an_applied_request_puts_back_the_value_it_replaced(world: dict[str, Any]) -> None:
    alter_client_quotas(world["cluster"], [Alteration([("user", "<default>")], [QuotaOp(PBR, 400)])])
    request = submitted(world, value=1500)
    quota_requests.approve(world["admin"], request.pk)
    push_everywhere(world["cluster"])
    request.refresh_from_db()
    assert request.state == "applied" and request.previous_value is None
    check = capacity_check(request)
    assert check is not None
    # without it, svc-a-1 falls back to the <default> principal's 400
    assert (check.granted_without, check.granted_with) == (1200.0, 4500.0)


def test_capacity_check_replaces_the_current_value_and_uses_egress_for_consumers(world: dict[str, Any]) -> None:
    alter_client_quotas(world["cluster"], [Alteration([("user", "svc-a-1")], [QuotaOp(CBR, 10_000)])])
    request = submitted(world, key=CBR, value=20_000)
    check = capacity_check(request)
    assert check is not None and check.capacity == 50_000
    assert (check.granted_without, check.granted_with, check.exceeds) == (30_000, 60_000, True)
    assert capacity_check(submitted(world, key="request_percentage", value=50)) is None


# ------------------------------------------------------------------ audit of direct alters


def test_direct_alter_is_audited_for_the_owning_tenant(world: dict[str, Any]) -> None:
    body = {"entries": [{"entity": [{"entity_type": "user", "name": "svc-a-9"}], "ops": [{"key": PBR, "value": 64}]}]}
    admin = api(world["admin"])
    assert admin.post("/api/clusters/prod/client-quotas/alter", body, format="json").status_code == 200
    body["entries"][0]["ops"] = [{"key": PBR, "remove": True}]
    assert admin.post("/api/clusters/prod/client-quotas/alter", body, format="json").status_code == 200
    body["validate_only"] = True
    assert admin.post("/api/clusters/prod/client-quotas/alter", body, format="json").status_code == 200
    trail = list(AuditEntry.objects.order_by("pk").values_list("actor_name", "entity", "before", "after", "tenant"))
    assert trail == [
        ("root", "/config/users/svc-a-9", None, 64.0, world["a"].pk),
        ("root", "/config/users/svc-a-9", 64.0, None, world["a"].pk),
    ]  # validate_only changed nothing and audited nothing
    assert [e["after"] for e in api(world["alice"]).get("/api/audit/").json()["results"]] == [None, 64.0]
    assert api(world["bob"]).get("/api/audit/").json()["results"] == []


def test_auditor_cannot_alter_even_as_staff(world: dict[str, Any]) -> None:
    world["auditor"].is_staff = True
    world["auditor"].save()
    body = {"entries": [{"entity": [{"entity_type": "user", "name": "x"}], "ops": [{"key": PBR, "value": 64}]}]}
    response = api(world["auditor"]).post("/api/clusters/prod/client-quotas/alter", body, format="json")
    assert_error(response, 403, "PERMISSION_DENIED", "Only admins")
    assert api(world["admin2"]).post("/api/clusters/prod/client-quotas/alter", body, format="json").status_code == 200


# ------------------------------------------------------------------ RBAC: two tenants and the auditor


def names(response: Any, field: str = "name") -> list[Any]:
    assert response.status_code == 200, response.json()
    return sorted(r[field] for r in response.json()["results"])


def test_tenants_endpoint_access(world: dict[str, Any]) -> None:
    assert names(api(world["alice"]).get("/api/tenants/")) == ["team-a"]
    assert names(api(world["bob"]).get("/api/tenants/")) == ["team-b"]
    assert names(api(world["auditor"]).get("/api/tenants/")) == ["team-a", "team-b"]
    assert names(api(world["admin2"]).get("/api/tenants/")) == ["team-a", "team-b"]
    got = api(world["alice"]).get("/api/tenants/team-a/").json()
    assert (
        got["members"] == ["alice", "alice2"] and got["principals"] == ["svc-a-*"] and got["client_ids"] == ["app-a-*"]
    )
    assert_error(api(world["bob"]).get("/api/tenants/team-a/"), 404, "NOT_FOUND")

    body = {"name": "team-c", "members": ["bob"], "principals": ["svc-c-*"]}
    for who in ("alice", "bob", "auditor"):
        assert_error(api(world[who]).post("/api/tenants/", body, format="json"), 403, "PERMISSION_DENIED")
        response = api(world[who]).patch("/api/tenants/team-a/", {"description": "x"}, format="json")
        assert response.status_code in (403, 404) and response.json()["code"] in ("PERMISSION_DENIED", "NOT_FOUND")
        assert api(world[who]).delete("/api/tenants/team-b/").status_code in (403, 404)
    assert not Tenant.objects.filter(name="team-c").exists() and Tenant.objects.get(name="team-a").description == ""

    admin = api(world["admin2"])
    assert admin.post("/api/tenants/", body, format="json").status_code == 201
    response = admin.patch("/api/tenants/team-c/", {"client_ids": ["app-c-*"]}, format="json")
    assert response.json()["client_ids"] == ["app-c-*"] and response.json()["principals"] == ["svc-c-*"]
    assert names(api(world["bob"]).get("/api/tenants/")) == ["team-b", "team-c"]
    assert admin.delete("/api/tenants/team-c/").status_code == 204


def test_tenant_patterns_belong_to_one_tenant(world: dict[str, Any]) -> None:
    body = {"name": "team-c", "principals": ["svc-a-*"]}
    assert_error(api(world["admin"]).post("/api/tenants/", body, format="json"), 400, "INVALID_REQUEST", "team-a")
    body = {"name": "team-c", "principals": ["<default>"]}
    assert_error(api(world["admin"]).post("/api/tenants/", body, format="json"), 400, "INVALID_REQUEST", "default")


def test_a_tenant_with_requests_is_not_deleted(world: dict[str, Any]) -> None:
    submitted(world)
    assert_error(api(world["admin"]).delete("/api/tenants/team-a/"), 409, "CONFLICT", "has quota requests")


def test_requests_endpoint_access(world: dict[str, Any]) -> None:
    mine = submitted(world)
    theirs = quota_requests.submit(
        world["bob"], world["b"], world["cluster"], user="svc-b-1", client_id=None, key=PBR, value=10
    )
    assert names(api(world["alice"]).get("/api/requests/"), "id") == [mine.pk]
    assert names(api(world["alice2"]).get("/api/requests/"), "id") == [mine.pk]
    assert names(api(world["bob"]).get("/api/requests/"), "id") == [theirs.pk]
    assert names(api(world["auditor"]).get("/api/requests/"), "id") == [mine.pk, theirs.pk]
    assert names(api(world["admin"]).get("/api/requests/", {"tenant": "team-b"}), "id") == [theirs.pk]
    assert names(api(world["admin"]).get("/api/requests/", {"state": "applied"}), "id") == []

    bob = api(world["bob"])
    assert_error(bob.get(f"/api/requests/{mine.pk}/"), 404, "NOT_FOUND")
    for verb in ("withdraw", "approve", "reject"):
        assert_error(bob.post(f"/api/requests/{mine.pk}/{verb}/", {"comment": "x"}, format="json"), 404, "NOT_FOUND")
    assert api(world["auditor"]).get(f"/api/requests/{mine.pk}/").status_code == 200
    assert api(world["alice"]).get(f"/api/requests/{mine.pk}/").json()["capacity"]["brokers"] == 3
    assert QuotaRequest.objects.get(pk=mine.pk).state == "submitted"


def test_audit_endpoint_access(world: dict[str, Any]) -> None:
    mine = submitted(world)
    quota_requests.approve(world["admin"], mine.pk)
    push_everywhere(world["cluster"])
    quota_requests.submit(world["bob"], world["b"], world["cluster"], user="svc-b-1", client_id=None, key=PBR, value=10)
    alice = {e["tenant"] for e in api(world["alice"]).get("/api/audit/").json()["results"]}
    bob = [e["action"] for e in api(world["bob"]).get("/api/audit/").json()["results"]]
    assert alice == {"team-a"} and bob == ["submitted"]
    everything = api(world["auditor"]).get("/api/audit/").json()["results"]
    assert len(everything) == AuditEntry.objects.count() == 6
    assert names(api(world["auditor"]).get("/api/audit/", {"request": mine.pk}), "action") == [
        "applied",
        "applying",
        "approved",
        "quota_altered",
        "submitted",
    ]
    for who in ("alice", "auditor", "admin"):  # read-only for everyone
        assert_error(api(world[who]).post("/api/audit/", {}, format="json"), 405, "METHOD_NOT_ALLOWED")


def test_lists_are_cursor_paginated(world: dict[str, Any]) -> None:
    for value in (1000, 2000, 3000):
        submitted(world, value=value)
    Tenant.objects.create(name="team-c")
    client = api(world["auditor"])
    for url in ("/api/requests/", "/api/audit/", "/api/tenants/"):
        page = client.get(url, {"page_size": 2}).json()
        assert len(page["results"]) == 2 and "cursor=" in page["next"] and page["previous"] is None
        assert client.get(page["next"]).json()["results"]


def test_new_endpoints_need_authentication(world: dict[str, Any]) -> None:
    anonymous = APIClient()
    for response in (
        anonymous.get("/api/tenants/"),
        anonymous.get("/api/requests/"),
        anonymous.post("/api/requests/", {}, format="json"),
        anonymous.post("/api/requests/1/approve/", {}, format="json"),
        anonymous.get("/api/audit/"),
    ):
        assert_error(response, 401, "NOT_AUTHENTICATED")


def test_session_writes_need_the_csrf_token(world: dict[str, Any]) -> None:
    """Pages use the session: a cross-site form post without the CSRF token is refused."""
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(world["alice"])
    assert client.get("/api/requests/").status_code == 200
    response = client.post("/api/requests/", {"tenant": "team-a"}, format="json")
    assert_error(response, 403, "PERMISSION_DENIED", "CSRF")


def test_requests_order_newest_first(world: dict[str, Any]) -> None:
    first, second = submitted(world), submitted(world)
    got = [r["id"] for r in api(world["alice"]).get("/api/requests/").json()["results"]]
    assert got == [second.pk, first.pk]
