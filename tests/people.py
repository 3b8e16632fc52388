"""The people of the portal tests: users in the role groups the migrations create, their clients, their tenants."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from quotas.models import OwnedName, Tenant


def make_user(username: str, *, staff: bool = False, groups: tuple[str, ...] = ()) -> Any:
    """A user in the given role groups (``quota-admins``, ``auditors``); no password: no slow hashing."""
    user = get_user_model().objects.create_user(username, is_staff=staff)
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])  # a transactional test before may have flushed it
    return user


def api(user: Any) -> APIClient:
    """An API client authenticated with the user's token, as scripts and the CLI are."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def roles() -> dict[str, Any]:
    """Two admins (staff, and the quota-admins group), an auditor, and three plain users for two tenants."""
    return {
        "admin": make_user("root", staff=True),
        "admin2": make_user("ops", groups=("quota-admins",)),
        "auditor": make_user("audit", groups=("auditors",)),
        "alice": make_user("alice"),
        "alice2": make_user("alice2"),
        "bob": make_user("bob"),
    }


def make_tenant(name: str, *members: Any, users: Sequence[str] = (), client_ids: Sequence[str] = ()) -> Tenant:
    """A tenant with these members, owning the principals (``users``) and client-ids of these name patterns."""
    tenant = Tenant.objects.create(name=name)
    if members:
        tenant.members.add(*members)
    for kind, patterns in (("user", users), ("client-id", client_ids)):
        for pattern in patterns:
            OwnedName.objects.create(tenant=tenant, entity_type=kind, pattern=pattern)
    return tenant
