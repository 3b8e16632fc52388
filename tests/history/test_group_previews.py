"""The preview of a group's value: asked for a group request (its page) or through the API, run by a real Celery
worker as a Spark job over the members' landed traffic together (one sensor, as the brokers enforce a group)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from history import services
from history.models import ImpactPreview, PreviewState
from quotas.choices import ConnectorKind
from quotas.models import Alteration, Cluster, GroupKind, QuotaOp, Tenant, alter_client_quotas, create_group
from quotas.workflow import quota_requests
from tests.people import api

from .conftest import CLUSTER, T0, steady, worker_env
from .test_previews import expected, finished

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]
PBR = "producer_byte_rate"


def test_a_group_requests_preview_replays_its_members_together(
    world: dict[str, Any], land: Callable, worker_factory: Callable
) -> None:
    # two members at 600 B/s each on each broker (1200 B/s together), a client of another tenant at 5000 B/s
    members = {b: sorted(steady("svc-a-1", "app-a-1", 30, size=60.0)
                         + steady("svc-a-2", "app-a-2", 30, start_ms=T0 + 50, size=60.0), key=lambda r: r[3])
               for b in (1, 2)}
    land(1, sorted(members[1] + steady("svc-b-1", "app-b", 30, start_ms=T0 + 25, size=500.0), key=lambda r: r[3]))
    root = land(2, members[2])
    Cluster.objects.filter(name=CLUSTER).update(connector=ConnectorKind.KAFKA)
    cluster = Cluster.objects.get(name=CLUSTER)
    group = create_group(None, cluster, Tenant.objects.get(name="team-a"), "team-a", GroupKind.TENANT)
    worker_factory(**worker_env(root))

    request = quota_requests.submit(world["alice"], None, cluster, user=None, client_id=None, key=PBR, value=1000,
                                    group=group)
    page = Client()
    page.force_login(world["admin"])
    assert page.get(f"/requests/{request.pk}/").status_code == 200  # the page asks for the request's preview
    preview = ImpactPreview.objects.get(group_name="team-a")
    assert (preview.user, preview.client_id, preview.entity) == (None, None, "/groups/team-a")
    preview = finished(preview.pk)
    assert preview.state == PreviewState.DONE, (preview.error_code, preview.error_message)

    shared = {b: [("group@team-a", "", v, t) for _, _, v, t in records] for b, records in members.items()}
    want, advised = expected(shared, 1000.0, entity=("group@team-a", None))
    got = preview.result
    assert got["group"] == "team-a" and got["clients"] == 2 and got["brokers"] == 2, "svc-b-1 is no member"
    for name in ("requests", "throttle_events", "total_delay_ms", "p99_delay_ms", "bytes"):
        assert got[name] == want[name], name
    assert got["throttle_events"] > 0, "together 1200 B/s per broker over 1000"
    assert got["advice"]["entities"][0]["quota"] == advised

    # the API answers the same proposal with the same preview; only the group's tenant (and admins) see it
    alice, bob = api(world["alice"]), api(world["bob"])
    body = {"cluster": CLUSTER, "group": "team-a", "key": PBR, "value": 1000}
    again = alice.post("/api/previews/", body, format="json")
    assert (again.status_code, again.json()["id"], again.json()["group"]) == (200, preview.pk, "team-a")
    assert bob.post("/api/previews/", body, format="json").status_code == 403
    assert bob.get(f"/api/previews/{preview.pk}/").status_code == 404
    both = alice.post("/api/previews/", {**body, "user": "svc-a-1"}, format="json")
    assert (both.status_code, both.json()["code"]) == (400, "INVALID_REQUEST")
    assert alice.post("/api/previews/", {**body, "group": "nope"}, format="json").status_code == 404
    refused = alice.post("/api/previews/", {**body, "key": "controller_mutation_rate", "value": 5}, format="json")
    assert refused.status_code == 400 and "A group's preview holds" in refused.json()["message"]

    # a member's own value beats the group: the preview names it
    alter_client_quotas(cluster, [Alteration([("user", "svc-a-2")], [QuotaOp(PBR, 5000)]),
                                  Alteration([("user", "svc-b-1")], [QuotaOp(PBR, 5000)]),
                                  Alteration([("user", None)], [QuotaOp(PBR, 5000)])])
    assert services.earlier_quotas(preview) == ["/config/users/svc-a-2"]
