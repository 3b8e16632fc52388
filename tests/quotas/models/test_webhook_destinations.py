"""Webhooks never reach loopback, link-local or private addresses unless an admin allows them (issue 30).

A webhook makes the portal's workers POST from inside the network; a URL naming 127.0.0.1, the metadata service or
a private host would be server-side request forgery. Every address of the host is checked when a webhook is made or
changed (API and admin: 400 POLICY_VIOLATION, nothing saved) and at each delivery (failed at once, not retried,
nothing sent), whose connection goes only to the addresses checked. ``QUOTAS_WEBHOOK_ALLOWED_NETWORKS`` lets chosen
networks through. The receivers here are real HTTP servers on 127.0.0.1.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from quotas import notify
from quotas.models import Tenant, Webhook, WebhookDelivery
from quotas.models.webhook_destinations import ForbiddenDestination, connect, opener
from tests.people import api, make_user
from tests.portal.test_secure_defaults import settings_in_each

pytestmark = pytest.mark.django_db

SECRET = "s3cret-for-the-tests-only-0123456789"
#: url -> the kind of address the refusal names
INTERNAL = {
    "http://127.0.0.1:8080/hook": "loopback",
    "http://localhost/hook": "loopback",  # a name: what it resolves to counts
    "http://[::1]/hook": "loopback",
    "http://[::ffff:127.0.0.1]/hook": "loopback",  # IPv4 inside IPv6
    "http://169.254.169.254/latest/meta-data/": "link-local",  # clouds' metadata service
    "http://0.0.0.0:8000/hook": "unspecified",
    "http://224.0.0.1/hook": "multicast",
    "http://10.1.2.3/hook": "private",
    "http://192.168.0.10/hook": "private",
    "https://[fd00::1]/hook": "private",
    "http://100.64.0.1/hook": "non-public",  # carrier-grade NAT
}


class Receiver:
    """An HTTP server on 127.0.0.1 that answers 200 to every POST and counts them."""

    def __init__(self) -> None:
        self.calls = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.calls += 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}/hook"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture
def w() -> dict[str, Any]:
    admin = make_user("root", staff=True)
    return {"admin": admin, "tenant": Tenant.objects.create(name="team-a")}


def test_a_webhook_to_an_internal_address_is_refused_with_a_typed_error(w: dict[str, Any]) -> None:
    admin = api(w["admin"])
    for url, kind in INTERNAL.items():
        answer = admin.post("/api/webhooks/", {"tenant": "team-a", "name": "chat", "url": url}, format="json")
        body = answer.json()
        assert (answer.status_code, body["code"]) == (400, "POLICY_VIOLATION"), (url, body)
        assert f"a {kind} address" in body["message"] and "QUOTAS_WEBHOOK_ALLOWED_NETWORKS" in body["message"], body
        assert list(body["details"]) == ["url"]
    assert not Webhook.objects.exists()
    # a public address, and a name that does not resolve now (its deliveries check it), are taken
    for name, url in (("public", "https://93.184.215.14/hook"), ("later", "https://chat.test/hook")):
        answer = admin.post("/api/webhooks/", {"tenant": "team-a", "name": name, "url": url}, format="json")
        assert answer.status_code == 201, answer.json()
    hook = Webhook.objects.get(name="public")
    moved = admin.patch(f"/api/webhooks/{hook.pk}/", {"url": "http://10.0.0.7/hook"}, format="json")
    assert (moved.status_code, moved.json()["code"]) == (400, "POLICY_VIOLATION")
    hook.refresh_from_db()
    assert hook.url == "https://93.184.215.14/hook"


def test_an_allowed_network_lets_its_addresses_through_and_no_other(w: dict[str, Any], settings: Any) -> None:
    settings.QUOTAS_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8", "10.20.0.0/16"]
    admin = api(w["admin"])
    for name, url in (("loop", "http://127.0.0.1:9000/hook"), ("lan", "http://10.20.1.2/hook")):
        assert admin.post("/api/webhooks/", {"tenant": "team-a", "name": name, "url": url},
                          format="json").status_code == 201
    for url in ("http://10.21.0.1/hook", "http://[::1]/hook", "http://169.254.169.254/"):
        answer = admin.post("/api/webhooks/", {"tenant": "team-a", "name": "no", "url": url}, format="json")
        assert answer.json()["code"] == "POLICY_VIOLATION", url


def test_a_delivery_to_an_internal_address_is_refused_at_once_and_nothing_is_sent(
    w: dict[str, Any], receiver: Receiver, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # made before the policy, or a name that resolves elsewhere now: the delivery checks again
    hook = Webhook.objects.create(tenant=w["tenant"], name="chat", url=receiver.url("localhost"), secret=SECRET)
    delivery = notify.ping(hook, w["admin"])
    outcome = notify.attempt(delivery.pk)
    delivery.refresh_from_db()
    assert (outcome.outcome, delivery.state, delivery.attempts, delivery.next_attempt_at) == (
        "failed", "failed", 0, None
    )
    assert delivery.last_error.startswith("POLICY_VIOLATION: ") and "'localhost'" in delivery.last_error
    assert receiver.calls == 0
    settings.QUOTAS_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
    allowed = notify.ping(hook, w["admin"])
    assert notify.attempt(allowed.pk).outcome == "delivered"
    assert receiver.calls == 1
    assert WebhookDelivery.objects.get(pk=allowed.pk).state == "delivered"


def test_the_connection_itself_goes_only_to_checked_addresses(receiver: Receiver, settings: Any) -> None:
    """What a name resolves to when the POST connects is checked there, whatever was checked before (rebinding)."""
    with pytest.raises(ForbiddenDestination, match="'localhost' is or resolves to a loopback address"):
        connect(("localhost", receiver.port), 5.0)
    with pytest.raises(ForbiddenDestination):
        opener(receiver.url("localhost")).open(receiver.url("localhost"), data=b"{}", timeout=5.0)
    assert receiver.calls == 0
    settings.QUOTAS_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128"]
    with opener(receiver.url()).open(receiver.url(), data=b"{}", timeout=5.0) as answer:
        assert answer.status == 200
    assert receiver.calls == 1


def test_the_admin_form_refuses_an_internal_address(w: dict[str, Any]) -> None:
    root = get_user_model().objects.create_superuser("super", "super@ops.test", None)
    client = Client()
    client.force_login(root)
    form = {"tenant": w["tenant"].pk, "name": "chat", "url": "http://169.254.169.254/latest/", "events": '["ping"]',
            "active": "on", "new_secret": ""}
    answer = client.post("/admin/quotas/webhook/add/", form)
    assert answer.status_code == 200  # the form again, with the error
    assert "is or resolves to a link-local address" in answer.content.decode()
    assert not Webhook.objects.exists()
    answer = client.post("/admin/quotas/webhook/add/", {**form, "url": "https://chat.test/hook"})
    assert answer.status_code == 302 and Webhook.objects.filter(name="chat").exists()


def test_an_allowed_network_that_is_not_one_stops_the_start() -> None:
    (refused,) = settings_in_each({"DJANGO_DEBUG": "1", "QUOTAS_WEBHOOK_ALLOWED_NETWORKS": "10.0.0.0/8,intranet"})
    assert refused["error"] == "ImproperlyConfigured" and "'intranet'" in refused["message"]
