"""SCRAM credentials managed in the portal, against the session's real Kafka cluster.

A member creates, rotates and deletes the SASL/SCRAM credentials of principals its tenant owns (through the API and
the page); the generated password is shown once and is nowhere else: not in the database, not in the audit trail,
not in the session, not in a log line. Other tenants' principals and auditors are refused. A principal made this
way logs in and is throttled by the user-level quota the portal pushed for it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from confluent_kafka import Producer
from django.db import connection
from django.test import Client

from kafka_wire import (
    AdminClient,
    NewTopic,
    SaslAuthenticationError,
    ScramCredentialError,
)
from quotas import scram
from quotas.choices import ConnectorKind
from quotas.models import (
    Alteration,
    AuditEntry,
    Cluster,
    OwnedName,
    Push,
    PushState,
    QuotaOp,
    ScramCredential,
    Tenant,
    audited_alter,
    effective_client_quotas,
)
from quotas.push import flags, target_push
from tests.people import api, make_user
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db
SHA256, SHA512 = scram.MECHANISMS
#: How long a SCRAM change may take to reach every broker (each applies the metadata log on its own).
PROPAGATION_S = 15.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def kafka_admin(kafka_cluster: Any) -> Iterator[AdminClient]:
    """The test's own PLAINTEXT Admin client, to see what Kafka holds."""
    with AdminClient(kafka_cluster.bootstrap(), request_timeout=30.0) as client:
        yield client


@pytest.fixture
def sasl_addresses(kafka_cluster: Any) -> list[str]:
    """Every broker's SASL_PLAINTEXT address: a password must work (or fail) at each one."""
    creds = kafka_cluster.admin_credentials()
    with AdminClient(kafka_cluster.bootstrap("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                     sasl_mechanism=SHA512, sasl_username=creds["username"], sasl_password=creds["password"]) as c:
        return list(c.describe_cluster().addresses.values())


@pytest.fixture
def w(kafka_cluster: Any, kafka_admin: AdminClient, engine_redis: redis.Redis) -> Iterator[dict[str, Any]]:
    """A Kafka cluster of the portal (PLAINTEXT), an engine cluster, two tenants owning ``<prefix>-a-*`` and
    ``<prefix>-b-*``, their members alice and bob, an admin and an auditor. The principals this test made are
    removed from Kafka afterwards (the cluster is shared with other tests)."""
    prefix = unique("scram")
    kafka = Cluster.objects.create(name=unique("kscram"), connector=ConnectorKind.KAFKA,
                                   bootstrap_servers=kafka_cluster.bootstrap())
    engine = Cluster.objects.create(name=unique("escram"))
    people = {
        "admin": make_user(unique("root"), staff=True),
        "auditor": make_user(unique("audit"), groups=("auditors",)),
        "alice": make_user(unique("alice")),
        "bob": make_user(unique("bob")),
    }
    teams = {}
    for member, team in (("alice", "a"), ("bob", "b")):
        tenant = Tenant.objects.create(name=unique(f"team-{team}"))
        tenant.members.add(people[member])
        OwnedName.objects.create(tenant=tenant, entity_type="user", pattern=f"{prefix}-{team}-*")
        teams[team] = tenant
    yield {"prefix": prefix, "kafka": kafka, "engine": engine, "a": teams["a"], "b": teams["b"], **people}
    mine = [u for u in kafka_admin.describe_user_scram_credentials(None) if u.startswith(prefix)]
    described = kafka_admin.describe_user_scram_credentials(mine) if mine else {}
    deletions = [(user, mechanism) for user, creds in described.items() for mechanism, _ in creds]
    if deletions:
        kafka_admin.alter_user_scram_credentials(deletions=deletions)


def url(cluster: Cluster, *rest: str) -> str:
    return "/".join([f"/api/clusters/{cluster.name}/scram-credentials", *rest, ""])


def on_kafka(client: AdminClient, user: str) -> dict[str, int]:
    try:
        return dict(client.describe_user_scram_credentials([user])[user])
    except ScramCredentialError as e:
        assert e.code == "RESOURCE_NOT_FOUND", e
        return {}


def logs_in(address: str, mechanism: str, user: str, password: str) -> bool:
    """Whether ``user`` logs in at ``address`` with ``password`` (other failures raise)."""
    try:
        with AdminClient(address, connect_timeout=5.0, request_timeout=15.0, security_protocol="SASL_PLAINTEXT",
                         sasl_mechanism=mechanism, sasl_username=user, sasl_password=password) as client:
            client.connect()
        return True
    except SaslAuthenticationError:
        return False


def text_columns_hold(table: str, secret: str) -> list[str]:
    """The columns of ``table``'s rows whose text holds ``secret``."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
        names = [c[0] for c in cursor.description]
        return [f"{table}.{name}" for row in cursor.fetchall() for name, value in zip(names, row, strict=True)
                if secret in str(value)]


def create(client: Any, cluster: Cluster, user: str, **body: Any) -> dict[str, Any]:
    response = client.post(url(cluster), {"user": user, **body}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


# ------------------------------------------------------------------ create, list, scope


def test_a_member_creates_credentials_for_an_owned_principal(w: dict[str, Any], kafka_admin: AdminClient,
                                                             sasl_addresses: list[str]) -> None:
    principal = f"{w['prefix']}-a-orders"
    response = api(w["alice"]).post(url(w["kafka"]), {"user": principal}, format="json")

    assert response.status_code == 201, response.json()
    assert "no-store" in response["Cache-Control"]
    body = response.json()
    password = body["password"]
    assert len(password) == 32 and body["user"] == principal and body["tenant"] == w["a"].name
    assert "shown once" in body["warning"]
    assert sorted((c["mechanism"], c["iterations"]) for c in body["credentials"]) == [(SHA256, 8192), (SHA512, 8192)]
    # Kafka holds both mechanisms, and the password opens both at every broker
    assert on_kafka(kafka_admin, principal) == {SHA256: 8192, SHA512: 8192}
    for mechanism in (SHA256, SHA512):
        wait_for(f"{mechanism} logins everywhere", lambda m=mechanism: all(
            logs_in(a, m, principal, password) for a in sasl_addresses), timeout=PROPAGATION_S)

    listed = api(w["alice"]).get(url(w["kafka"]))
    assert listed.status_code == 200
    rows = listed.json()["results"]
    assert [(r["user"], r["mechanism"], r["iterations"], r["tenant"], r["created_by"], r["rotated"])
            for r in rows] == [(principal, m, 8192, w["a"].name, w["alice"].username, None) for m in (SHA256, SHA512)]
    assert all(r["created"] for r in rows)
    assert password not in listed.content.decode() and "password" not in rows[0]
    entries = AuditEntry.objects.filter(action="scram_created", cluster=w["kafka"]).order_by("key")
    assert [(e.actor, e.tenant, e.entity, e.key, e.before, e.after) for e in entries] == [
        (w["alice"], w["a"], f"/config/users/{principal}", m, None, {"iterations": 8192}) for m in (SHA256, SHA512)
    ]

    # one mechanism with other iterations for a second principal; a third try on the first is a conflict
    other = create(api(w["alice"]), w["kafka"], f"{w['prefix']}-a-billing", mechanisms=[SHA512], iterations=4096)
    assert [(c["mechanism"], c["iterations"]) for c in other["credentials"]] == [(SHA512, 4096)]
    again = api(w["alice"]).post(url(w["kafka"]), {"user": principal, "mechanisms": [SHA256]}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "CONFLICT", again.json()


def test_a_member_cannot_touch_another_tenants_principal(w: dict[str, Any], kafka_admin: AdminClient) -> None:
    bobs = f"{w['prefix']}-b-search"
    create(api(w["bob"]), w["kafka"], bobs)
    alice = api(w["alice"])

    for response in (
        alice.post(url(w["kafka"]), {"user": f"{w['prefix']}-b-other"}, format="json"),
        alice.post(url(w["kafka"], bobs, "rotate"), {}, format="json"),
        alice.delete(url(w["kafka"], bobs)),
    ):
        assert response.status_code == 403, response.json()
        assert response.json()["code"] == "PERMISSION_DENIED"
        assert "owns the principal" in response.json()["message"]
    assert on_kafka(kafka_admin, f"{w['prefix']}-b-other") == {}
    assert on_kafka(kafka_admin, bobs) == {SHA256: 8192, SHA512: 8192}  # untouched
    # alice does not see bob's credentials at all
    assert alice.get(url(w["kafka"])).json()["results"] == []
    assert alice.get(url(w["kafka"], bobs)).status_code == 404
    # the admin sees and may manage every principal, bob's included
    assert len(api(w["admin"]).get(url(w["kafka"])).json()["results"]) == 2
    assert api(w["admin"]).get(url(w["kafka"], bobs)).status_code == 200
    assert api(w["admin"]).delete(url(w["kafka"], bobs) + f"?mechanism={SHA256}").status_code == 204
    wait_for("one mechanism left", lambda: on_kafka(kafka_admin, bobs) == {SHA512: 8192}, timeout=PROPAGATION_S)
    # the default entity and nonsense are refused before Kafka is asked
    for bad in ({"user": "<default>"}, {"user": "x", "iterations": 1000}, {"user": "x", "mechanisms": ["PLAIN"]}):
        response = api(w["admin"]).post(url(w["kafka"]), bad, format="json")
        assert (response.status_code, response.json()["code"]) == (400, "INVALID_REQUEST"), response.json()


def test_an_auditor_reads_everything_and_changes_nothing(w: dict[str, Any], kafka_admin: AdminClient) -> None:
    principal = f"{w['prefix']}-a-app"
    create(api(w["alice"]), w["kafka"], principal)
    auditor = api(w["auditor"])

    assert [r["user"] for r in auditor.get(url(w["kafka"])).json()["results"]] == [principal, principal]
    for response in (
        auditor.post(url(w["kafka"]), {"user": f"{w['prefix']}-a-new"}, format="json"),
        auditor.post(url(w["kafka"], principal, "rotate"), {}, format="json"),
        auditor.delete(url(w["kafka"], principal)),
    ):
        assert (response.status_code, response.json()["code"]) == (403, "PERMISSION_DENIED"), response.json()
    page = Client()
    page.force_login(w["auditor"])
    listed = page.get("/credentials/")
    assert listed.status_code == 200 and principal in listed.content.decode()
    assert b"Create credentials" not in listed.content and b"Rotate " not in listed.content
    refused = page.post("/credentials/", {"action": "delete", "cluster": w["kafka"].name, "user": principal})
    assert refused.status_code == 403
    assert on_kafka(kafka_admin, principal) == {SHA256: 8192, SHA512: 8192}
    assert ScramCredential.objects.filter(user=principal).count() == 2


def test_an_engine_cluster_has_no_scram_credentials(w: dict[str, Any]) -> None:
    response = api(w["admin"]).post(url(w["engine"]), {"user": f"{w['prefix']}-a-x"}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_REQUEST" and "need a Kafka cluster" in response.json()["message"]


def test_kafkas_refusals_and_failures_keep_their_names(w: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    user = f"{w['prefix']}-a-refused"
    with pytest.raises(scram.ScramError) as raised, scram.kafka_admin(w["kafka"]) as client:
        client.alter_user_scram_credentials([(user, SHA256, 100, "x")])  # below Kafka's bounds: Kafka says so
    assert (raised.value.code, raised.value.status) == ("UNACCEPTABLE_CREDENTIAL", 400)
    assert "Too few iterations" in raised.value.message
    with pytest.raises(scram.ScramError) as raised, scram.kafka_admin(w["kafka"]) as client:
        client.alter_user_scram_credentials(deletions=[(user, SHA256)])
    assert (raised.value.code, raised.value.status) == ("RESOURCE_NOT_FOUND", 404)

    down = Cluster.objects.create(name=unique("kdown"), connector=ConnectorKind.KAFKA, bootstrap_servers="127.0.0.1:1")
    response = api(w["alice"]).post(url(down), {"user": user}, format="json")
    assert (response.status_code, response.json()["code"]) == (503, "NETWORK_EXCEPTION"), response.json()
    sasl = Cluster.objects.create(name=unique("ksasl"), connector=ConnectorKind.KAFKA, bootstrap_servers="127.0.0.1:1",
                                  security_protocol="SASL_PLAINTEXT", sasl_mechanism=SHA512, sasl_username="portal")
    monkeypatch.delenv(sasl.password_env, raising=False)
    response = api(w["alice"]).post(url(sasl), {"user": user}, format="json")
    assert (response.status_code, response.json()["code"]) == (502, "SASL_AUTHENTICATION_FAILED"), response.json()
    assert sasl.password_env in response.json()["message"]

    # one change of a principal at a time: a second one waits for the first, then gives up
    monkeypatch.setattr(scram, "LOCK_WAIT_S", 0.2)
    with flags.portal_lock(f"scram-lock:{w['kafka'].pk}:{user}", 10, 1):
        busy = api(w["alice"]).post(url(w["kafka"]), {"user": user}, format="json")
    assert (busy.status_code, busy.json()["code"]) == (409, "CONCURRENT_TRANSACTIONS"), busy.json()
    assert not ScramCredential.objects.filter(user=user).exists()


# ------------------------------------------------------------------ rotate, delete


def test_rotating_makes_the_old_password_fail_and_the_new_one_work(
    w: dict[str, Any], kafka_admin: AdminClient, sasl_addresses: list[str]
) -> None:
    principal = f"{w['prefix']}-a-rotating"
    old = create(api(w["alice"]), w["kafka"], principal)["password"]
    wait_for("the first password", lambda: all(logs_in(a, SHA512, principal, old) for a in sasl_addresses),
             timeout=PROPAGATION_S)

    response = api(w["alice"]).post(url(w["kafka"], principal, "rotate"), {}, format="json")

    assert response.status_code == 200, response.json()
    assert "no-store" in response["Cache-Control"]
    new = response.json()["password"]
    assert new != old and len(new) == 32
    for mechanism in (SHA256, SHA512):
        wait_for(f"the new {mechanism} password everywhere", lambda m=mechanism: all(
            logs_in(a, m, principal, new) for a in sasl_addresses), timeout=PROPAGATION_S)
    # a refused login costs the broker's delay: checked at one broker per mechanism
    assert not logs_in(sasl_addresses[0], SHA256, principal, old)
    assert not logs_in(sasl_addresses[1], SHA512, principal, old)
    rows = {r["mechanism"]: r for r in api(w["admin"]).get(url(w["kafka"], principal)).json()}
    assert {m: (r["rotated_by"], r["created_by"]) for m, r in rows.items()} == {
        m: (w["alice"].username, w["alice"].username) for m in (SHA256, SHA512)}
    assert all(r["rotated"] >= r["created"] for r in rows.values())
    assert AuditEntry.objects.filter(action="scram_rotated", entity=f"/config/users/{principal}").count() == 2

    # one mechanism, other iterations
    only = api(w["alice"]).post(url(w["kafka"], principal, "rotate"), {"mechanisms": [SHA256], "iterations": 4096},
                                format="json")
    assert only.status_code == 200 and [c["mechanism"] for c in only.json()["credentials"]] == [SHA256]
    wait_for("the new iterations", lambda: on_kafka(kafka_admin, principal) == {SHA256: 4096, SHA512: 8192},
             timeout=PROPAGATION_S)
    nothing = api(w["alice"]).post(url(w["kafka"], f"{w['prefix']}-a-none", "rotate"), {}, format="json")
    assert (nothing.status_code, nothing.json()["code"]) == (404, "RESOURCE_NOT_FOUND")


def test_deleting_removes_the_credentials_on_kafka(w: dict[str, Any], kafka_admin: AdminClient,
                                                   sasl_addresses: list[str]) -> None:
    principal = f"{w['prefix']}-a-leaving"
    password = create(api(w["alice"]), w["kafka"], principal)["password"]

    response = api(w["alice"]).delete(url(w["kafka"], principal))

    assert response.status_code == 204
    assert on_kafka(kafka_admin, principal) == {}
    wait_for("the login to end", lambda: not logs_in(sasl_addresses[2], SHA256, principal, password),
             timeout=PROPAGATION_S)
    assert not ScramCredential.objects.filter(user=principal).exists()
    assert AuditEntry.objects.filter(action="scram_deleted", entity=f"/config/users/{principal}").count() == 2
    again = api(w["alice"]).delete(url(w["kafka"], principal))
    assert (again.status_code, again.json()["code"]) == (404, "RESOURCE_NOT_FOUND")
    assert "has no SCRAM credentials" in again.json()["message"]


# ------------------------------------------------------------------ the password is nowhere


def test_the_password_is_never_stored_or_logged(w: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    principal = f"{w['prefix']}-a-secret"
    page = Client()
    page.force_login(w["alice"])
    with caplog.at_level("DEBUG"):
        first = create(api(w["alice"]), w["kafka"], principal)["password"]
        second = api(w["alice"]).post(url(w["kafka"], principal, "rotate"), {}, format="json").json()["password"]
        # the page renders the new password into the POST's own response, with no redirect
        shown = page.post("/credentials/", {"action": "rotate", "cluster": w["kafka"].name, "user": principal})
        assert shown.status_code == 200 and "no-store" in shown["Cache-Control"]
        third = shown.context["issued"].password
        assert third in shown.content.decode() and "shown once" in shown.content.decode()
        listed = page.get("/credentials/")
    passwords = [first, second, third]
    assert len(set(passwords)) == 3
    assert "scram" in caplog.text.lower()  # the changes are logged, ...
    for password in passwords:  # ... their passwords are not, nor stored anywhere
        assert password not in caplog.text
        assert password not in listed.content.decode()
        for table in (ScramCredential._meta.db_table, AuditEntry._meta.db_table, "django_session"):
            assert text_columns_hold(table, password) == []
        assert password not in repr(scram.Issued("c", principal, password, [], None))
    assert AuditEntry.objects.filter(entity=f"/config/users/{principal}").count() == 6


def test_the_page_creates_rotates_and_deletes(w: dict[str, Any], kafka_admin: AdminClient) -> None:
    principal = f"{w['prefix']}-a-paged"
    page = Client()
    page.force_login(w["alice"])
    assert b'<a href="/credentials/">Credentials</a>' in page.get("/entities/").content  # in the navigation

    made = page.post("/credentials/", {"action": "create", "cluster": w["kafka"].name, "user": principal,
                                       "mechanisms": [SHA512], "iterations": "4096"})
    assert made.status_code == 201
    assert "Copy the password now" in made.content.decode()
    assert made.context["issued"].password in made.content.decode()
    assert on_kafka(kafka_admin, principal) == {SHA512: 4096}
    listed = page.get("/credentials/", {"cluster": w["kafka"].name}).content.decode()
    assert principal in listed and SHA512 in listed and "never" in listed
    unticked = page.post("/credentials/", {"action": "create", "cluster": w["kafka"].name, "user": principal + "-2"})
    assert unticked.status_code == 400 and "Mechanisms are" in unticked.content.decode()
    refused = page.post("/credentials/", {"action": "create", "cluster": w["kafka"].name,
                                          "user": f"{w['prefix']}-b-not-mine", "mechanisms": [SHA256]})
    assert refused.status_code == 403 and "owns the principal" in refused.content.decode()

    gone = page.post("/credentials/", {"action": "delete", "cluster": w["kafka"].name, "user": principal})
    assert gone.status_code == 302
    assert on_kafka(kafka_admin, principal) == {}


# ------------------------------------------------------------------ end to end: a throttled principal


def test_a_principal_made_here_connects_and_is_throttled_by_its_user_quota(
    w: dict[str, Any], kafka_cluster: Any, kafka_admin: AdminClient, sasl_addresses: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the portal talks to this cluster as its SCRAM super user, its password in the environment only
    creds = kafka_cluster.admin_credentials()
    cluster = w["kafka"]
    cluster.bootstrap_servers = kafka_cluster.bootstrap("SASL_PLAINTEXT")
    cluster.security_protocol, cluster.sasl_mechanism, cluster.sasl_username = "SASL_PLAINTEXT", SHA512, creds[
        "username"]
    cluster.save()
    monkeypatch.setenv(cluster.password_env, creds["password"])
    principal, client_id, topic = f"{w['prefix']}-a-producer", unique("app"), unique("scram-quota")
    password = create(api(w["alice"]), cluster, principal)["password"]
    wait_for("logins everywhere", lambda: all(logs_in(a, SHA512, principal, password) for a in sasl_addresses),
             timeout=PROPAGATION_S)
    kafka_admin.create_topics([NewTopic(topic, 1, 3)]).raise_for_errors()
    # The shared cluster holds other tests' quotas: the portal pushes only what changed since version 0 (as if it
    # had pushed its empty start), never the whole state, which would remove theirs.
    Push.objects.create(cluster=cluster, broker=None, version=0, state=PushState.APPLIED)
    try:
        audited_alter(cluster, [Alteration([("user", principal)], [QuotaOp("producer_byte_rate", 1024)])], w["admin"])
        outcome = target_push.push_target(cluster.pk, None)
        assert outcome.changed and outcome.mode == "delta"
        found = effective_client_quotas(cluster, principal, client_id)
        [effective] = [e for e in found if e.key == "producer_byte_rate"]
        assert (effective.value, effective.entity) == (1024, f"/config/users/{principal}")  # the user level

        anonymous = produce(kafka_cluster.client_config(), topic, client_id, wait_s=2.0)
        assert not any(t > 0 for t in anonymous), "the same client-id without the principal is not throttled"
        throttled = produce({"bootstrap.servers": kafka_cluster.bootstrap("SASL_PLAINTEXT"),
                             "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": SHA512,
                             "sasl.username": principal, "sasl.password": password}, topic, client_id, wait_s=20.0)
        assert any(t > 0 for t in throttled), f"no throttle reported to {principal}: {throttled}"
    finally:
        kafka_admin.alter_client_quotas([({"user": principal}, {"producer_byte_rate": None})])
        kafka_admin.delete_topics([topic])


def produce(config: dict[str, Any], topic: str, client_id: str, wait_s: float, total: int = 300 * 1024) -> list[int]:
    """Produce ``total`` bytes in 10 KiB messages; the broker throttle times (ms) the producer was told of, until
    the first one or ``wait_s`` (as tests/kafka/test_cluster.py)."""
    throttles: list[int] = []
    errors: list[Any] = []
    producer = Producer({**config, "client.id": client_id, "linger.ms": 5, "log_level": 0,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time),
                         "error_cb": errors.append})
    payload, sent = b"q" * 10240, 0
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not any(t > 0 for t in throttles):
        if sent < total:
            producer.produce(topic, payload)
            sent += len(payload)
        producer.poll(0.02)
    if not any(t > 0 for t in throttles):
        producer.flush(10)
    producer.purge()
    producer.poll(0)
    assert not [e for e in errors if e.fatal()], errors
    return throttles
