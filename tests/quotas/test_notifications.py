"""Notifications of requests (quota, client-metrics subscription and plan requests), for real: mail through a local
SMTP server (aiosmtpd) and signed webhooks to a local HTTP receiver.

Most tests run the Celery tasks in the test process: the queue (``quotas.notify``'s ``current_app``) is replaced by
one that runs each task it is sent by name, eagerly (so a retry runs at once, without its countdown), after checking
that its arguments survive JSON as a real message's would. The commit hooks run through
``django_capture_on_commit_callbacks``. The last test runs a real Celery worker: submit and approve through the
API, the worker mails the SMTP server and delivers to the receiver, retrying a receiver that answers 500 twice.
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import hmac
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis
from aiosmtpd.controller import Controller
from django.contrib.auth import get_user_model
from django.db import transaction

from portal.celery import app as celery_app
from quotas import notify, tasks
from quotas.connectors.base import PushError
from quotas.models import (
    Alteration,
    AuditEntry,
    Cluster,
    OwnedName,
    PlanRequest,
    QuotaOp,
    QuotaRequest,
    SubscriptionRequest,
    Webhook,
    WebhookDelivery,
    alter_client_quotas,
    alter_subscription,
)
from quotas.push import target_push
from quotas.workflow import errors, plan_requests, quota_requests, subscription_requests
from tests.brokers import cluster_with_brokers, push_everywhere
from tests.celery_worker import celery_queue_clean, worker_factory  # noqa: F401 (fixtures)
from tests.people import api, make_tenant, roles
from tests.waiting import wait_for

assert tasks.deliver_webhook.name in celery_app.tasks  # the tasks are registered (as in a worker)
PBR = "producer_byte_rate"
MIB_1_5 = 1_572_864  # 1.5 MiB/s
SECRET = "s3cret-for-the-tests-only-0123456789"
User = get_user_model()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ a real SMTP server


class Inbox:
    """aiosmtpd handler: every message it accepts, parsed."""

    def __init__(self) -> None:
        self.messages: list[tuple[list[str], EmailMessage]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 (aiosmtpd's name)
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.messages.append((list(envelope.rcpt_tos), parsed))
        return "250 Message accepted for delivery"

    def to(self, address: str) -> list[EmailMessage]:
        return [m for rcpt, m in self.messages if address in rcpt]

    def subjects(self, address: str) -> list[str]:
        return [str(m["Subject"]) for m in self.to(address)]


@pytest.fixture
def smtp() -> Iterator[tuple[Inbox, int]]:
    inbox, port = Inbox(), free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield inbox, port
    controller.stop()


@pytest.fixture
def mailbox(smtp: tuple[Inbox, int], settings: Any) -> Inbox:
    """The portal's mail goes to the local SMTP server through Django's SMTP backend."""
    inbox, port = smtp
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.DEFAULT_FROM_EMAIL = "portal@quotas.test"
    settings.PORTAL_BASE_URL = "https://quotas.example"
    return inbox


def body_of(message: EmailMessage) -> str:
    return message.get_content()


# ------------------------------------------------------------------ a real HTTP receiver


#: Webhooks may send to loopback only where an admin allows it (quotas.models.webhook_destinations).
LOOPBACK = ["127.0.0.0/8"]


class Receiver:
    """An HTTP server in a thread answering POSTs with the scripted statuses (the last one repeats)."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = list(statuses)
        self.calls: list[tuple[dict[str, str], bytes, str]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.calls.append((dict(self.headers.items()), body, self.path))
                status = receiver.statuses.pop(0) if len(receiver.statuses) > 1 else receiver.statuses[0]
                answer = b"ok" if status < 300 else b"nope"
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/quotas"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver_factory(settings: Any) -> Iterator[Callable[[list[int]], Receiver]]:
    settings.QUOTAS_WEBHOOK_ALLOWED_NETWORKS = LOOPBACK  # the receivers listen on 127.0.0.1
    started: list[Receiver] = []

    def make(statuses: list[int]) -> Receiver:
        started.append(Receiver(statuses))
        return started[-1]

    yield make
    for r in started:
        r.stop()


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """What a receiver does: recompute the HMAC of the raw body and compare in constant time."""
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, headers["X-Quotas-Signature"])


# ------------------------------------------------------------------ the queue, run in-process


class InlineQueue:
    """Stands in for Celery's ``current_app`` in ``quotas.notify``: runs each task sent by name, eagerly."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def send_task(self, name: str, args: Any = (), kwargs: Any = None, **_: Any) -> None:
        self.sent.append(name)
        args, kwargs = json.loads(json.dumps([list(args or ()), kwargs or {}]))  # what a JSON message carries
        celery_app.tasks[name].apply(args=args, kwargs=kwargs).get()


@pytest.fixture
def queue(monkeypatch: pytest.MonkeyPatch) -> InlineQueue:
    q = InlineQueue()
    monkeypatch.setattr(notify, "current_app", q)
    return q


@pytest.fixture
def w(engine_redis: redis.Redis) -> dict[str, Any]:
    """team-a (alice, who has an email; alice2 without), team-b (bob), the admins with emails, cluster prod."""
    people: dict[str, Any] = roles()
    for name, address in (("alice", "alice@team-a.test"), ("admin", "root@ops.test"), ("admin2", "ops@ops.test"),
                          ("auditor", "audit@ops.test"), ("bob", "bob@team-b.test")):
        User.objects.filter(pk=people[name].pk).update(email=address)
        people[name].refresh_from_db()
    a = make_tenant("team-a", people["alice"], people["alice2"], users=["svc-a-*"])
    b = make_tenant("team-b", people["bob"], users=["svc-b-*"])
    cluster = cluster_with_brokers(range(2), name="prod")
    people.update(a=a, b=b, cluster=cluster)
    return people


def submitted(w: dict[str, Any], who: str = "alice", tenant: str = "a", user: str = "svc-a-1", **fields: Any) -> Any:
    return quota_requests.submit(w[who], w[tenant], w["cluster"], user=user, client_id=None, key=PBR, value=MIB_1_5,
                                 **fields)


# ------------------------------------------------------------------ mail


@pytest.mark.django_db
def test_a_request_for_a_cluster_wide_budget_says_so_in_its_mail(
    w: dict[str, Any], mailbox: Inbox, queue: InlineQueue, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        request = submitted(w, budget_scope="cluster_wide")
    message = mailbox.to("ops@ops.test")[0]
    assert message["Subject"] == (
        f"[Quota portal] Request #{request.pk} waits for approval: producer_byte_rate = 1.5 MiB/s (cluster-wide) "
        "for svc-a-1 (all client-ids) on prod"
    )
    assert "scope:    cluster-wide (a budget for the sum over the brokers)" in body_of(message)


@pytest.mark.django_db
def test_submitting_mails_the_admins_that_a_request_waits(
    w: dict[str, Any], mailbox: Inbox, queue: InlineQueue, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        request = submitted(w, reason="launch week")
    assert queue.sent == ["quotas.tasks.notify"]
    # both admins, one message each; not the auditor (staff or not, it decides nothing), not the requester
    assert sorted(a for rcpt, _ in mailbox.messages for a in rcpt) == ["ops@ops.test", "root@ops.test"]
    message = mailbox.to("ops@ops.test")[0]
    assert message["From"] == "portal@quotas.test" and message["To"] == "ops@ops.test"
    assert message["Subject"] == (
        f"[Quota portal] Request #{request.pk} waits for approval: producer_byte_rate = 1.5 MiB/s for "
        "svc-a-1 (all client-ids) on prod"
    )
    text = body_of(message)
    assert f"Quota request #{request.pk} of tenant team-a waits for approval." in text
    assert "1.5 MiB/s (1,572,864 B/s)" in text and "asked by: alice" in text and "reason:   launch week" in text
    assert f"Decide at https://quotas.example/requests/{request.pk}/" in text


@pytest.mark.django_db
def test_approving_mails_the_requester_approved_then_applied(
    w: dict[str, Any], mailbox: Inbox, queue: InlineQueue, django_capture_on_commit_callbacks: Any
) -> None:
    request = submitted(w)  # outside the capture: its commit hook never runs, so no "waiting" mail
    with django_capture_on_commit_callbacks(execute=True):
        quota_requests.approve(w["admin2"], request.pk, comment="fine for the launch")
    assert mailbox.subjects("alice@team-a.test") == [
        f"[Quota portal] Request #{request.pk} approved: producer_byte_rate = 1.5 MiB/s for svc-a-1 (all client-ids) "
        "on prod"
    ]
    text = body_of(mailbox.to("alice@team-a.test")[0])
    assert f"Quota request #{request.pk} of tenant team-a approved (ops)." in text
    assert "entity:   svc-a-1 (all client-ids) (/config/users/svc-a-1)" in text  # in words, then Kafka's path
    assert "key:      producer_byte_rate" in text
    assert "value:    1.5 MiB/s (1,572,864 B/s)" in text and "comment:  fine for the launch" in text
    assert f"See it at https://quotas.example/requests/{request.pk}/" in text
    with django_capture_on_commit_callbacks(execute=True):
        push_everywhere(w["cluster"])  # what the push task does: every broker holds it, the request is applied
    assert QuotaRequest.objects.get(pk=request.pk).state == "applied"
    assert [s.split(":")[0] for s in mailbox.subjects("alice@team-a.test")] == [
        f"[Quota portal] Request #{request.pk} approved", f"[Quota portal] Request #{request.pk} applied"
    ]
    assert "desired-state version 1 is on every broker" in body_of(mailbox.to("alice@team-a.test")[1])
    assert {a for rcpt, _ in mailbox.messages for a in rcpt} == {"alice@team-a.test"}  # nobody else


@pytest.mark.django_db
def test_rejecting_mails_the_requester_why(
    w: dict[str, Any], mailbox: Inbox, queue: InlineQueue, django_capture_on_commit_callbacks: Any
) -> None:
    request = submitted(w)
    with django_capture_on_commit_callbacks(execute=True):
        quota_requests.reject(w["admin"], request.pk, comment="too much for prod; ask for 1 MiB/s")
    (message,) = mailbox.to("alice@team-a.test")
    assert message["Subject"].startswith(f"[Quota portal] Request #{request.pk} rejected: ")
    assert "comment:  too much for prod; ask for 1 MiB/s" in body_of(message)


@pytest.mark.django_db
def test_a_push_refused_by_the_cluster_mails_failed(
    w: dict[str, Any], mailbox: Inbox, queue: InlineQueue, django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Kafka cluster whose SCRAM password is not in the workers' environment refuses every push (not retried)."""
    kafka = Cluster.objects.create(
        name="kafka-prod", connector="kafka", bootstrap_servers="127.0.0.1:1", security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256", sasl_username="portal-admin",
    )
    monkeypatch.delenv(kafka.password_env, raising=False)
    request = quota_requests.submit(w["alice"], w["a"], kafka, user="svc-a-1", client_id=None, key=PBR, value=MIB_1_5)
    quota_requests.approve(w["admin"], request.pk)  # no mail: this commit hook is not run
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(PushError) as refused:
        target_push.push_target(kafka.pk, None)
    assert (refused.value.code, refused.value.retriable) == ("SASL_AUTHENTICATION_FAILED", False)
    assert QuotaRequest.objects.get(pk=request.pk).state == "failed"
    (message,) = mailbox.to("alice@team-a.test")
    assert message["Subject"] == (
        f"[Quota portal] Request #{request.pk} failed: producer_byte_rate = 1.5 MiB/s for svc-a-1 (all client-ids) "
        "on kafka-prod"
    )
    text = body_of(message)
    assert "of tenant team-a failed (the portal)." in text
    assert "why:      the cluster-wide namespace refused the push: SASL_AUTHENTICATION_FAILED" in text


@pytest.mark.django_db
def test_people_without_an_email_get_none(
    w: dict[str, Any], mailbox: Inbox, queue: InlineQueue, django_capture_on_commit_callbacks: Any
) -> None:
    User.objects.exclude(username="alice2").update(email="")
    request = quota_requests.submit(w["alice2"], w["a"], w["cluster"], user="svc-a-1", client_id=None, key=PBR, value=5)
    with django_capture_on_commit_callbacks(execute=True):
        quota_requests.approve(w["admin"], request.pk)
    assert mailbox.messages == []  # alice2 has no address
    done = notify.notify(request.pk, "submitted", w["alice2"].pk, "", "2026-01-01T00:00:00+00:00")
    assert done.mailed == [] and mailbox.messages == []  # nor have the admins now


@pytest.mark.django_db
def test_a_transaction_that_rolls_back_sends_nothing(
    w: dict[str, Any], mailbox: Inbox, queue: InlineQueue, django_capture_on_commit_callbacks: Any
) -> None:
    request = submitted(w)
    with django_capture_on_commit_callbacks(execute=True) as hooks:
        with pytest.raises(RuntimeError), transaction.atomic():
            quota_requests.approve(w["admin"], request.pk, comment="ok")
            raise RuntimeError("something after the approval failed")
        with pytest.raises(errors.PermissionDenied):  # and a refused transition announces nothing either
            quota_requests.approve(w["alice"], request.pk)
    assert hooks == [] and queue.sent == [] and mailbox.messages == []
    assert QuotaRequest.objects.get(pk=request.pk).state == "submitted"


@pytest.mark.django_db
def test_a_mail_server_that_is_down_is_retried_then_given_up(
    w: dict[str, Any], settings: Any, queue: InlineQueue
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", free_port(), 2
    request = submitted(w)
    result = celery_app.tasks["quotas.tasks.notify"].apply(
        kwargs={"request_id": request.pk, "state": "approved", "actor_id": w["admin"].pk}
    )
    assert isinstance(result.result, ConnectionRefusedError) and result.state == "FAILURE"


# ------------------------------------------------------------------ webhooks


def hook(w: dict[str, Any], url: str, tenant: str = "a", **fields: Any) -> Webhook:
    return Webhook.objects.create(tenant=w[tenant], name=fields.pop("name", "chat"), url=url, secret=SECRET, **fields)


@pytest.mark.django_db
def test_webhook_body_and_signature_verify_with_the_secret(
    w: dict[str, Any], receiver_factory: Callable[[list[int]], Receiver], queue: InlineQueue,
    django_capture_on_commit_callbacks: Any, settings: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    settings.PORTAL_BASE_URL = "https://quotas.example"
    receiver = receiver_factory([200])
    hook(w, receiver.url)
    request = submitted(w, reason="launch")
    caplog.set_level(logging.DEBUG)
    with django_capture_on_commit_callbacks(execute=True):
        quota_requests.approve(w["admin2"], request.pk, comment="go")
    (headers, body, path), = receiver.calls
    assert path == "/hooks/quotas" and headers["Content-Type"] == "application/json"
    assert verify(SECRET, headers, body) and not verify("another secret", headers, body)
    delivery = WebhookDelivery.objects.get()
    assert headers["X-Quotas-Event"] == "request.approved" and headers["X-Quotas-Delivery"] == str(delivery.uuid)
    sent = json.loads(body)
    assert sent == {
        "event": "request.approved", "request_id": request.pk, "state": "approved", "tenant": "team-a",
        "cluster": "prod", "entity": "/config/users/svc-a-1", "display": "svc-a-1 (all client-ids)",
        "user": "svc-a-1", "client_id": None,
        "key": PBR, "value": float(MIB_1_5), "value_human": "1.5 MiB/s", "expires_at": None, "actor": "ops",
        "comment": "go", "time": sent["time"], "url": f"https://quotas.example/requests/{request.pk}/",
        "kind": "quota",  # added since there are other kinds
        "budget_scope": "per_broker",  # added with budget scopes: the rest is as it always was
        "group": None,  # added with group quotas: a group request's group (user and client_id null then)
    }
    assert (delivery.kind, delivery.request_id, delivery.subscription_request_id, delivery.plan_request_id) == (
        "quota", request.pk, None, None
    )
    assert (delivery.state, delivery.attempts, delivery.status_code, delivery.body.encode()) == (
        "delivered", 1, 200, body
    )
    assert delivery.body_sha256 == hashlib.sha256(body).hexdigest() and delivery.delivered_at is not None
    assert SECRET not in caplog.text and SECRET not in str(delivery.__dict__)


@pytest.mark.django_db
def test_a_receiver_failing_twice_is_retried_and_the_log_shows_three_attempts(
    w: dict[str, Any], receiver_factory: Callable[[list[int]], Receiver], queue: InlineQueue,
    django_capture_on_commit_callbacks: Any,
) -> None:
    receiver = receiver_factory([500, 500, 200])
    hook(w, receiver.url)
    request = submitted(w)
    with django_capture_on_commit_callbacks(execute=True):
        quota_requests.reject(w["admin"], request.pk, comment="no")
    assert len(receiver.calls) == 3
    assert len({h["X-Quotas-Delivery"] for h, _, _ in receiver.calls}) == 1  # one delivery, three attempts
    assert len({b for _, b, _ in receiver.calls}) == 1 and all(verify(SECRET, h, b) for h, b, _ in receiver.calls)
    delivery = WebhookDelivery.objects.get()
    assert (delivery.event, delivery.state, delivery.attempts, delivery.status_code) == (
        "request.rejected", "delivered", 3, 200
    )
    assert delivery.last_error == "" and delivery.next_attempt_at is None
    rows = api(w["admin"]).get("/api/webhook-deliveries/", {"request": request.pk}).json()["results"]
    assert [(r["state"], r["attempts"], r["status_code"], r["event"]) for r in rows] == [
        ("delivered", 3, 200, "request.rejected")
    ]


@pytest.mark.django_db
def test_a_404_is_not_retried(
    w: dict[str, Any], receiver_factory: Callable[[list[int]], Receiver], queue: InlineQueue,
    django_capture_on_commit_callbacks: Any,
) -> None:
    receiver = receiver_factory([404, 200])
    hook(w, receiver.url)
    request = submitted(w)
    with django_capture_on_commit_callbacks(execute=True):
        quota_requests.reject(w["admin"], request.pk, comment="no")
    assert len(receiver.calls) == 1
    delivery = WebhookDelivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.status_code) == ("failed", 1, 404)
    assert delivery.last_error == "HTTP 404 Not Found: nope"


@pytest.mark.django_db
def test_retries_are_bounded_and_a_receiver_that_is_down_is_retried(
    w: dict[str, Any], receiver_factory: Callable[[list[int]], Receiver], queue: InlineQueue, settings: Any,
) -> None:
    settings.QUOTAS_WEBHOOK_MAX_ATTEMPTS = 4
    busy = receiver_factory([503])
    request = submitted(w)
    deliveries = notify.fan_out(request, "request.submitted", {"event": "request.submitted"})
    assert deliveries == []  # no webhook yet
    hook(w, busy.url, name="busy")
    hook(w, f"http://127.0.0.1:{free_port()}/nobody-listens", name="down")
    made = notify.fan_out(request, "request.submitted", {"event": "request.submitted"})
    for pk in made:
        celery_app.tasks["quotas.tasks.deliver_webhook"].apply(args=[pk]).get()
    rows = {d.webhook.name: d for d in WebhookDelivery.objects.select_related("webhook")}
    assert len(busy.calls) == 4
    assert (rows["busy"].state, rows["busy"].attempts, rows["busy"].status_code) == ("failed", 4, 503)
    assert rows["busy"].last_error.endswith("(gave up after 4 attempts)")
    assert (rows["down"].state, rows["down"].attempts, rows["down"].status_code) == ("failed", 4, None)
    assert rows["down"].last_error.startswith("no answer: ")
    # the same event of the same request is not queued twice (the notify task may run again)
    assert notify.fan_out(request, "request.submitted", {"event": "request.submitted"}) == []


def test_backoff_grows_exponentially_with_jitter_and_heeds_retry_after(settings: Any) -> None:
    settings.QUOTAS_WEBHOOK_RETRY_BASE_S, settings.QUOTAS_WEBHOOK_RETRY_MAX_S = 2.0, 60.0
    for attempts, high in ((1, 2.0), (2, 4.0), (3, 8.0), (6, 60.0), (40, 60.0)):
        waits = [notify.backoff_s(attempts) for _ in range(50)]
        assert all(high / 2 <= x <= high for x in waits) and len(set(waits)) > 1
    assert notify.backoff_s(1, retry_after=30.0) == 30.0 and notify.backoff_s(1, retry_after=3600.0) == 60.0
    assert [notify.retriable(s) for s in (None, 408, 429, 500, 503, 400, 401, 404, 410, 302)] == [
        True, True, True, True, True, False, False, False, False, False
    ]


@pytest.mark.django_db
def test_webhooks_hear_their_tenant_and_their_events_only(
    w: dict[str, Any], receiver_factory: Callable[[list[int]], Receiver], queue: InlineQueue,
    django_capture_on_commit_callbacks: Any,
) -> None:
    everything, applied_only, other, off = (receiver_factory([200]) for _ in range(4))
    hook(w, everything.url, name="all")
    hook(w, applied_only.url, name="applied", events=["request.applied"])
    hook(w, other.url, tenant="b", name="b")
    hook(w, off.url, name="off", active=False)
    with django_capture_on_commit_callbacks(execute=True):
        request = submitted(w)
    with django_capture_on_commit_callbacks(execute=True):
        quota_requests.approve(w["admin"], request.pk)
    with django_capture_on_commit_callbacks(execute=True):
        push_everywhere(w["cluster"])
    events = [json.loads(b)["event"] for _, b, _ in everything.calls]
    assert events == ["request.submitted", "request.approved", "request.applied"]
    assert [json.loads(b)["event"] for _, b, _ in applied_only.calls] == ["request.applied"]
    assert other.calls == [] and off.calls == []


# ------------------------------------------------------------------ subscription and plan requests


def subscription_asked(w: dict[str, Any], **fields: Any) -> SubscriptionRequest:
    """team-a asks for a client-metrics subscription of its own clients (it owns client-ids app-*)."""
    OwnedName.objects.get_or_create(tenant=w["a"], entity_type="client-id", pattern="app-*")
    configs = {"metrics": "org.apache.kafka.producer.", "match": "client_id=app-1"}
    return subscription_requests.submit_subscription(
        w["alice"], w["a"], w["cluster"], name=fields.pop("name", "team-a-apps"), configs=configs, **fields
    )


PLAN_FILE = "apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: prod\nquotas:\n"


def plan_asked(w: dict[str, Any], user: str = "svc-a-1", percentage: int = 50) -> PlanRequest:
    """alice plans a quota file for team-a through the API and applies it: one grouped plan request."""
    document = PLAN_FILE + f"  - entity: {{user: {user}}}\n    request_percentage: {percentage}\n"
    alice = api(w["alice"])
    made = alice.post("/api/clusters/prod/plans/", {"document": document}, format="json")
    assert made.status_code == 201, made.content
    applied = alice.post(f"/api/plans/{made.json()['id']}/apply/", {"reason": "launch"}, format="json")
    assert applied.status_code == 202, applied.content
    return PlanRequest.objects.select_related("plan").get(pk=applied.json()["request"])


def bodies(receiver: Receiver) -> list[dict[str, Any]]:
    """What the receiver was sent, parsed, after checking every signature."""
    assert all(verify(SECRET, headers, body) for headers, body, _ in receiver.calls)
    assert all(h["X-Quotas-Event"] == json.loads(b)["event"] for h, b, _ in receiver.calls)
    return [json.loads(body) for _, body, _ in receiver.calls]


@pytest.mark.django_db
def test_a_subscription_request_is_mailed_and_signed_like_a_quota_request(
    w: dict[str, Any], mailbox: Inbox, queue: InlineQueue, receiver_factory: Callable[[list[int]], Receiver],
    django_capture_on_commit_callbacks: Any,
) -> None:
    receiver = receiver_factory([200])
    hook(w, receiver.url)
    with django_capture_on_commit_callbacks(execute=True):
        request = subscription_asked(w, reason="producer latency")
    link = f"https://quotas.example/clusters/prod/client-metrics/#subscription-request-{request.pk}"
    # the admins (not the auditor, not the requester) are told it waits, with what it asks for and where to decide
    assert sorted(a for rcpt, _ in mailbox.messages for a in rcpt) == ["ops@ops.test", "root@ops.test"]
    message = mailbox.to("root@ops.test")[0]
    assert message["Subject"] == (
        f"[Quota portal] Subscription request #{request.pk} waits for approval: create or replace client-metrics "
        "subscription team-a-apps on prod"
    )
    text = body_of(message)
    assert f"Subscription request #{request.pk} of tenant team-a waits for approval." in text
    assert "entity:   /config/client-metrics/team-a-apps" in text and "match:    client_id=app-1" in text
    assert "metrics:  org.apache.kafka.producer." in text and "interval.ms: 300000" in text
    assert "asked by: alice" in text and "reason:   producer latency" in text and f"Decide at {link}" in text

    with django_capture_on_commit_callbacks(execute=True):
        subscription_requests.approve_subscription(w["admin2"], request.pk, comment="go")
    with django_capture_on_commit_callbacks(execute=True):
        push_everywhere(w["cluster"])  # every broker holds it: applied
    assert SubscriptionRequest.objects.get(pk=request.pk).state == "applied"
    subjects = mailbox.subjects("alice@team-a.test")
    assert [s.split(":")[0] for s in subjects] == [
        f"[Quota portal] Subscription request #{request.pk} approved",
        f"[Quota portal] Subscription request #{request.pk} applied",
    ]
    approved, applied = (body_of(m) for m in mailbox.to("alice@team-a.test"))
    assert "approved (ops)." in approved and "comment:  go" in approved and f"See it at {link}" in approved
    assert "applied (the portal)." in applied and "is on every broker" in applied

    sent = bodies(receiver)
    assert [b["event"] for b in sent] == ["request.submitted", "request.approved", "request.applied"]
    assert {(b["kind"], b["request_id"], b["url"]) for b in sent} == {("subscription", request.pk, link)}
    assert sent[1] == {
        "event": "request.approved", "kind": "subscription", "request_id": request.pk, "state": "approved",
        "tenant": "team-a", "cluster": "prod", "entity": "/config/client-metrics/team-a-apps",
        "subscription": "team-a-apps", "operation": "set",
        "configs": {"metrics": "org.apache.kafka.producer.", "interval.ms": "300000", "match": "client_id=app-1"},
        "actor": "ops", "comment": "go", "time": sent[1]["time"], "url": link,
    }
    # the delivery log names the subscription request, not a quota request that may share its id
    deliveries = WebhookDelivery.objects.order_by("pk")
    assert [(d.kind, d.subscription_request_id, d.request_id, d.state) for d in deliveries] == [
        ("subscription", request.pk, None, "delivered")
    ] * 3
    rows = api(w["admin"]).get("/api/webhook-deliveries/", {"subscription_request": request.pk}).json()["results"]
    assert sorted((r["event"], r["kind"], r["subscription_request"], r["request"]) for r in rows) == [
        (f"request.{state}", "subscription", request.pk, None) for state in ("applied", "approved", "submitted")
    ]
    assert api(w["admin"]).get("/api/webhook-deliveries/", {"kind": "quota"}).json()["results"] == []
    # the task running again (a retried mail) queues no second delivery of the same event
    again = notify.notify(request.pk, "approved", w["admin2"].pk, "go", sent[1]["time"], kind="subscription")
    assert again.deliveries == [] and again.kind == "subscription" and len(receiver.calls) == 3


@pytest.mark.django_db
def test_a_plan_request_is_mailed_and_signed_with_its_kind_and_link(
    w: dict[str, Any], mailbox: Inbox, queue: InlineQueue, receiver_factory: Callable[[list[int]], Receiver],
    django_capture_on_commit_callbacks: Any,
) -> None:
    receiver = receiver_factory([200])
    hook(w, receiver.url)
    with django_capture_on_commit_callbacks(execute=True):
        request = plan_asked(w)
    link = f"https://quotas.example/plans/{request.plan_id}/"
    assert sorted(a for rcpt, _ in mailbox.messages for a in rcpt) == ["ops@ops.test", "root@ops.test"]
    message = mailbox.to("ops@ops.test")[0]
    assert message["Subject"] == (
        f"[Quota portal] Plan request #{request.pk} waits for approval: plan #{request.plan_id} on prod "
        "(1 add, 0 change, 0 remove)"
    )
    text = body_of(message)
    assert f"Plan request #{request.pk} of tenant team-a waits for approval." in text
    assert "add:      svc-a-1 (all client-ids) request_percentage: none -> " in text
    assert "asked by: alice" in text and "reason:   launch" in text and f"Decide at {link}" in text

    with django_capture_on_commit_callbacks(execute=True):
        plan_requests.approve_plan(w["admin"], request.pk, comment="ok")
    with django_capture_on_commit_callbacks(execute=True):
        push_everywhere(w["cluster"])
    assert PlanRequest.objects.get(pk=request.pk).state == "applied"
    assert [s.split(":")[0] for s in mailbox.subjects("alice@team-a.test")] == [
        f"[Quota portal] Plan request #{request.pk} approved", f"[Quota portal] Plan request #{request.pk} applied"
    ]
    assert f"See it at {link}" in body_of(mailbox.to("alice@team-a.test")[0])

    sent = bodies(receiver)
    assert [b["event"] for b in sent] == ["request.submitted", "request.approved", "request.applied"]
    assert {(b["kind"], b["request_id"], b["url"], b["plan_id"]) for b in sent} == {
        ("plan", request.pk, link, request.plan_id)
    }
    assert sent[1]["summary"] == {"add": 1, "change": 0, "remove": 0} and sent[1]["actor"] == "root"
    assert [(d.kind, d.plan_request_id, d.request_id) for d in WebhookDelivery.objects.all()] == [
        ("plan", request.pk, None)
    ] * 3


@pytest.mark.django_db
def test_grouped_requests_rejected_or_failed_tell_the_requester_why(
    w: dict[str, Any], mailbox: Inbox, queue: InlineQueue, receiver_factory: Callable[[list[int]], Receiver],
    django_capture_on_commit_callbacks: Any,
) -> None:
    receiver = receiver_factory([200])
    hook(w, receiver.url, events=["request.rejected", "request.failed", "request.withdrawn"])
    plan = plan_asked(w)
    with django_capture_on_commit_callbacks(execute=True):
        plan_requests.reject_plan(w["admin"], plan.pk, "50 % is too much; ask for 20")
    # deleting a subscription that is gone by the time it is approved: approved, then failed with the reason
    OwnedName.objects.get_or_create(tenant=w["a"], entity_type="client-id", pattern="app-*")
    alter_subscription(w["cluster"], "old", {"metrics": "*", "match": "client_id=app-1"}, None)
    deleting = subscription_requests.submit_subscription(w["alice"], w["a"], w["cluster"], name="old", configs=None)
    alter_subscription(w["cluster"], "old", None, None)
    with django_capture_on_commit_callbacks(execute=True):
        subscription_requests.approve_subscription(w["admin2"], deleting.pk)
    withdrawn = subscription_asked(w, name="never-mind")
    with django_capture_on_commit_callbacks(execute=True):
        subscription_requests.withdraw_subscription(w["alice"], withdrawn.pk)

    subjects = mailbox.subjects("alice@team-a.test")
    assert [s.split(":")[0] for s in subjects] == [
        f"[Quota portal] Plan request #{plan.pk} rejected",
        f"[Quota portal] Subscription request #{deleting.pk} approved",
        f"[Quota portal] Subscription request #{deleting.pk} failed",
    ]  # a withdrawal is the requester's own doing: no mail
    rejected, _, failed = (body_of(m) for m in mailbox.to("alice@team-a.test"))
    assert "comment:  50 % is too much; ask for 20" in rejected
    assert "operation: delete" in failed and "why:      " in failed and "no client-metrics subscription" in failed
    assert [(b["event"], b["kind"], b["request_id"]) for b in bodies(receiver)] == [
        ("request.rejected", "plan", plan.pk),
        ("request.failed", "subscription", deleting.pk),
        ("request.withdrawn", "subscription", withdrawn.pk),
    ]


@pytest.mark.django_db
def test_a_rolled_back_grouped_transition_sends_nothing(
    w: dict[str, Any], mailbox: Inbox, queue: InlineQueue, receiver_factory: Callable[[list[int]], Receiver],
    django_capture_on_commit_callbacks: Any,
) -> None:
    receiver = receiver_factory([200])
    hook(w, receiver.url)
    subscription, plan = subscription_asked(w), plan_asked(w)  # outside the capture: their hooks never run
    alter_client_quotas(w["cluster"], [Alteration([("user", "svc-a-1")], [QuotaOp("request_percentage", 80)])])
    with django_capture_on_commit_callbacks(execute=True) as hooks:
        with pytest.raises(RuntimeError), transaction.atomic():
            subscription_requests.approve_subscription(w["admin"], subscription.pk, comment="ok")
            raise RuntimeError("something after the approval failed")
        with pytest.raises(errors.PlanStaleError):  # approved, then refused in the same transaction: rolled back
            plan_requests.approve_plan(w["admin"], plan.pk, comment="ok")
        with pytest.raises(RuntimeError), transaction.atomic():
            plan_requests.reject_plan(w["admin2"], plan.pk, "no")
            raise RuntimeError("something after the rejection failed")
        with pytest.raises(errors.PermissionDenied):  # and a refused transition announces nothing either
            subscription_requests.approve_subscription(w["alice"], subscription.pk)
    assert hooks == [] and queue.sent == [] and mailbox.messages == [] and receiver.calls == []
    assert not WebhookDelivery.objects.exists()
    assert SubscriptionRequest.objects.get(pk=subscription.pk).state == "submitted"
    assert PlanRequest.objects.get(pk=plan.pk).state == "submitted"


# ------------------------------------------------------------------ the API


@pytest.mark.django_db
def test_admins_manage_webhooks_and_the_secret_is_shown_once(
    w: dict[str, Any], receiver_factory: Callable[[list[int]], Receiver], queue: InlineQueue,
    django_capture_on_commit_callbacks: Any,
) -> None:
    receiver = receiver_factory([200])
    admin = api(w["admin"])
    created = admin.post("/api/webhooks/", {"tenant": "team-a", "name": "chat", "url": receiver.url}, format="json")
    assert created.status_code == 201, created.json()
    assert "no-store" in created["Cache-Control"]
    body = created.json()
    secret, pk = body["secret"], body["id"]
    assert len(secret) >= 32 and body["events"] == [
        "request.submitted", "request.approved", "request.rejected", "request.withdrawn", "request.applied",
        "request.failed", "request.expired",
    ]
    assert (body["tenant"], body["active"], body["created_by"]) == ("team-a", True, "root")
    # never again: not in the detail, the list, the audit trail
    for response in (admin.get(f"/api/webhooks/{pk}/"), admin.get("/api/webhooks/"), admin.get("/api/audit/")):
        assert response.status_code == 200 and secret not in response.content.decode()
    assert "secret" not in admin.get(f"/api/webhooks/{pk}/").json()
    entry = AuditEntry.objects.get(action="webhook_changed")
    assert (entry.key, entry.tenant, entry.after) == (
        "created", w["a"], {"name": "chat", "host": "127.0.0.1", "events": body["events"], "active": True}
    )
    # a ping is signed with that secret
    with django_capture_on_commit_callbacks(execute=True):
        pinged = admin.post(f"/api/webhooks/{pk}/ping/")
    assert pinged.status_code == 202, pinged.json()
    (headers, raw, _), = receiver.calls
    assert verify(secret, headers, raw) and json.loads(raw)["event"] == "ping"
    detail = admin.get(f"/api/webhook-deliveries/{pinged.json()['delivery']}/").json()
    assert (detail["state"], detail["attempts"], detail["body"]["webhook"], detail["tenant"]) == (
        "delivered", 1, "chat", "team-a"
    )
    assert secret not in json.dumps(detail)
    # rotating: a new secret, once; deliveries are signed with it from now on
    rotated = admin.post(f"/api/webhooks/{pk}/rotate-secret/")
    assert rotated.status_code == 200 and rotated.json()["secret"] not in (secret, "")
    with django_capture_on_commit_callbacks(execute=True):
        admin.post(f"/api/webhooks/{pk}/ping/")
    assert verify(rotated.json()["secret"], *receiver.calls[1][:2]) and not verify(secret, *receiver.calls[1][:2])
    # change and delete
    changed = admin.patch(f"/api/webhooks/{pk}/", {"events": ["request.failed"], "active": False}, format="json")
    assert changed.status_code == 200 and changed.json()["events"] == ["request.failed"]
    moved = admin.patch(f"/api/webhooks/{pk}/", {"tenant": "team-b"}, format="json")
    assert moved.status_code == 400 and "stays with its tenant" in moved.json()["message"]
    assert admin.delete(f"/api/webhooks/{pk}/").status_code == 204 and not WebhookDelivery.objects.exists()
    assert list(AuditEntry.objects.filter(action="webhook_changed").order_by("pk").values_list("key", flat=True)) == [
        "created", "secret_rotated", "changed", "deleted"
    ]


@pytest.mark.django_db
def test_webhook_validation(w: dict[str, Any]) -> None:
    admin = api(w["admin"])
    base = {"tenant": "team-a", "name": "chat", "url": "https://chat.example/hook"}
    for body, field in (
        ({**base, "url": "ftp://chat.example/hook"}, "url"),
        ({**base, "events": ["request.exploded"]}, "events"),
        ({**base, "events": []}, "events"),
        ({**base, "secret": "short"}, "secret"),
        ({**base, "tenant": "nobody"}, "tenant"),
    ):
        response = admin.post("/api/webhooks/", body, format="json")
        assert response.status_code == 400 and field in response.json()["details"], (body, response.json())
    given = admin.post("/api/webhooks/", {**base, "secret": SECRET}, format="json")
    assert given.status_code == 201 and given.json()["secret"] == SECRET
    assert Webhook.objects.get().secret == SECRET
    again = admin.post("/api/webhooks/", base, format="json")
    assert again.status_code == 400, again.json()  # one name per tenant
    bad = admin.get("/api/webhook-deliveries/", {"state": "lost"})
    assert bad.status_code == 400 and bad.json()["code"] == "INVALID_REQUEST"


@pytest.mark.django_db
def test_who_may_see_and_manage_webhooks(w: dict[str, Any]) -> None:
    made = hook(w, "https://chat.example/hook")
    body = {"tenant": "team-a", "name": "mine", "url": "https://chat.example/other"}
    for who in ("alice", "bob", "auditor"):
        client = api(w[who])
        assert client.post("/api/webhooks/", body, format="json").status_code == 403
        assert client.patch(f"/api/webhooks/{made.pk}/", {"active": False}, format="json").status_code == 403
        assert client.post(f"/api/webhooks/{made.pk}/ping/").status_code == 403
    for who in ("alice", "bob"):  # members: neither the webhooks nor the log
        assert api(w[who]).get("/api/webhooks/").status_code == 403
        assert api(w[who]).get("/api/webhook-deliveries/").status_code == 403
    listed = api(w["auditor"]).get("/api/webhooks/", {"tenant": "team-a"})
    assert listed.status_code == 200 and [h["name"] for h in listed.json()["results"]] == ["chat"]
    assert api(w["auditor"]).get("/api/webhook-deliveries/").status_code == 200
    assert api(w["admin2"]).get("/api/webhooks/", {"tenant": "team-b"}).json()["results"] == []


# ------------------------------------------------------------------ a real worker, end to end


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_mails_and_delivers_with_retries(
    smtp: tuple[Inbox, int], receiver_factory: Callable[[list[int]], Receiver],
    worker_factory: Callable[..., Any],  # noqa: F811 (the fixture imported above)
) -> None:
    inbox, port = smtp
    receiver = receiver_factory([500, 500, 200])
    people = roles()
    User.objects.filter(pk=people["alice"].pk).update(email="alice@team-a.test")
    User.objects.filter(pk=people["admin2"].pk).update(email="ops@ops.test")
    tenant = make_tenant("team-a", people["alice"], users=["svc-a-*"])
    Cluster.objects.create(name="prod").brokers.create(broker_id=0, host="b0:9092")
    Webhook.objects.create(tenant=tenant, name="chat", url=receiver.url, secret=SECRET, events=["request.approved"])
    worker_factory(
        EMAIL_HOST="127.0.0.1", EMAIL_PORT=str(port), DEFAULT_FROM_EMAIL="portal@quotas.test",
        QUOTAS_WEBHOOK_RETRY_BASE_S="0.2", QUOTAS_WEBHOOK_RETRY_MAX_S="1",
        QUOTAS_WEBHOOK_ALLOWED_NETWORKS=",".join(LOOPBACK),
    )
    asked = api(people["alice"]).post(
        "/api/requests/", {"cluster": "prod", "user": "svc-a-1", "key": PBR, "value": "1.5 MiB/s"}, format="json"
    )
    assert asked.status_code == 201, asked.json()
    pk = asked.json()["id"]
    wait_for("the waiting mail", lambda: inbox.to("ops@ops.test"), 60)
    approved = api(people["admin2"]).post(f"/api/requests/{pk}/approve/", {"comment": "ok"}, format="json")
    assert approved.status_code == 200, approved.json()
    wait_for("the applied mail", lambda: len(inbox.to("alice@team-a.test")) == 2, 60)
    assert [s.split(":")[0] for s in inbox.subjects("alice@team-a.test")] == [
        f"[Quota portal] Request #{pk} approved", f"[Quota portal] Request #{pk} applied"
    ]
    delivered = wait_for(
        "the webhook delivery", lambda: WebhookDelivery.objects.filter(state="delivered").first(), 60
    )
    assert (delivered.attempts, delivered.status_code, delivered.event) == (3, 200, "request.approved")
    assert len(receiver.calls) == 3 and all(verify(SECRET, h, b) for h, b, _ in receiver.calls)
