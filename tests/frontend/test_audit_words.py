"""The audit log and the capacity check word what the group and exemption changes record: a group by its name, an
exempt principal as one, a flag as yes/no, a group's fields as pairs (its values in their units), a budget scope by
its label; never a Python dict, True/False or a raw choice value (walking the README's first hour found them)."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.test import Client

from quotas.models import AuditEntry, Cluster
from quotas.models.audit import AuditAction
from tests.people import make_user

pytestmark = pytest.mark.django_db


def cells(page: str) -> list[str]:
    """The audit table's cells as text, in order."""
    body = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)]


def test_group_and_exemption_changes_read_as_words() -> None:
    admin = make_user("root", staff=True)
    cluster = Cluster.objects.create(name="prod", capacity_in_bytes_per_s=10_000, capacity_out_bytes_per_s=50_000)
    entries: list[dict[str, Any]] = [
        {"action": AuditAction.GROUP_CHANGED, "entity": "/groups/analytics",
         "after": {"kind": "tenant", "members": "the principals tenant analytics owns"}},
        {"action": AuditAction.GROUP_CHANGED, "entity": "/groups/analytics",
         "before": {"kind": "tenant", "members": "svc-a", "values": {"producer_byte_rate": 196_608}}},
        {"action": AuditAction.BUDGET_SCOPE_ALTERED, "entity": "/groups/analytics", "key": "producer_byte_rate",
         "before": "per_broker", "after": "cluster_wide"},
        {"action": AuditAction.EXEMPT_CHANGED, "entity": "/users/portal-admin", "before": False, "after": True},
    ]
    for e in entries:
        AuditEntry.objects.create(actor=admin, actor_name="root", cluster=cluster, **e)
    client = Client()
    client.force_login(admin)
    page = client.get("/audit/").content.decode()
    text = cells(page)
    for raw in ("{'", "True", "False", "cluster_wide", "per_broker", ">/groups/", ">/users/"):
        assert raw not in page.split("<tbody>", 1)[1], raw
    newest = text[:9]  # the exemption: newest first
    assert newest[4] == "principal portal-admin on prod" and newest[6:8] == ["no", "yes"]
    assert text[9 + 4] == "group analytics on prod"
    assert text[9 + 6: 9 + 8] == ["Per broker (Kafka's meaning)", "Cluster-wide budget (the sum over brokers)"]
    # (jsonb keeps its own order of a dict's keys)
    deleted = ["kind: tenant", "members: svc-a", "values: producer_byte_rate: 192 KiB/s"]
    assert sorted(text[18 + 6].split("; ")) == deleted
    assert sorted(text[27 + 7].split("; ")) == ["kind: tenant", "members: the principals tenant analytics owns"]
    assert 'title="/groups/analytics">group analytics<' in page  # Kafka's name on hover
