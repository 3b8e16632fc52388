"""The preview of a group's value: who may ask, what it replays, and which values Kafka applies before it.

A group's preview replays its members' landed traffic together (``pipeline.whatif --group``, ``pipeline.group_members``)
with the members as the group's spec says now (without values: a change of value is the proposal, not the members).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser

from engine.entities import DEFAULT, entity_path, validate_quota_value
from engine.errors import QuotaValidationError
from engine.groups import GROUP_KEYS, PER_BROKER_ONLY, GroupSpec
from quotas.models import QuotaGroup, QuotaValue
from quotas.models.tenants import member_tenants, sees_everything
from quotas.workflow.errors import PermissionDenied


def members_of(group: QuotaGroup) -> str:
    """The group's members as the replay takes them: its spec without values (``GroupSpec.to_json``)."""
    return group.spec({}).to_json()


def check_group_proposal(actor: AbstractBaseUser, group: QuotaGroup, key: str, value: Any) -> float:
    """The value as a group of the key accepts it, when the actor may preview the group: admins and auditors any,
    a member its tenants' groups."""
    replayed = [k for k in GROUP_KEYS if k not in PER_BROKER_ONLY]  # a group's mutations are not replayed yet
    if key not in replayed:
        raise QuotaValidationError(f"A group's preview holds {', '.join(replayed)} only, not {key}.")
    checked = validate_quota_value(key, value, "client")
    if not sees_everything(actor) and group.tenant_id not in {t.pk for t in member_tenants(actor)}:
        raise PermissionDenied(f"Group {group.name} belongs to tenant {group.tenant.name}, not one of yours.")
    return checked


def _named(part: str | None) -> bool:
    return part not in (None, DEFAULT)


def _may_name_members(spec: GroupSpec, user: str | None, client_id: str | None) -> bool:
    """Whether an entity can name some member of the group (an absent or ``<default>`` part stands for any)."""
    if _named(client_id) and spec.prefix is not None and not client_id.startswith(spec.prefix):
        return False
    return not _named(user) or spec.matches(user, spec.prefix or "")


def earlier_than_group(cluster_id: int, key: str, spec_json: str) -> list[str]:
    """The cluster's values of ``key`` at a level naming a client (its user or client-id: levels 1, 2, 3, 4, 7)
    that can name a member of the group: Kafka applies them before any group, so the preview shows a quota those
    members would not get."""
    spec = GroupSpec.from_json(spec_json)
    rows = QuotaValue.objects.filter(entity__cluster=cluster_id, entity__ip__isnull=True, key=key)
    return sorted(entity_path(u, c) for u, c in rows.values_list("entity__user", "entity__client_id")
                  if (_named(u) or _named(c)) and _may_name_members(spec, u, c))


__all__ = ["check_group_proposal", "earlier_than_group", "members_of"]
