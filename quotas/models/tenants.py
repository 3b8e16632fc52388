"""Tenants (teams), their members, the principals and client-ids they own, and the portal's roles.

Ownership is by fnmatch-style pattern (``fnmatch.fnmatchcase``: ``*`` any run of characters, ``?`` one
character, ``[seq]`` / ``[!seq]`` a set), matched case-sensitively because Kafka principals and client-ids
are case-sensitive. A pattern is owned by one tenant at most; overlapping patterns of two tenants
(``team-*`` and ``team-a-*``) are not prevented, and then both tenants own the names they share.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase, translate

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.validators import RegexValidator
from django.db import models

from quotas.choices import EntityType

#: Group names of the two roles beyond membership (the migration creates both groups).
ADMINS_GROUP = "quota-admins"
AUDITORS_GROUP = "auditors"

tenant_name_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_-]*\Z", "Use letters, digits, '-' and '_' only, starting with a letter or digit."
)

AnyUser = AbstractBaseUser | AnonymousUser

#: Set on the request's user by a tenant-scoped personal access token (access_tokens.authentication): the request
#: then acts as a member of that one tenant, with no admin or auditor role, whatever the account may do otherwise.
TOKEN_TENANT_ATTR = "quota_token_tenant_id"


def token_tenant_id(user: AnyUser) -> int | None:
    """The tenant a tenant-scoped access token confines this request to; None without such a token."""
    return getattr(user, TOKEN_TENANT_ATTR, None)


class Tenant(models.Model):
    """A team that owns principals and client-ids and asks for quotas for them."""

    name = models.CharField(max_length=64, unique=True, validators=[tenant_name_validator])
    description = models.CharField(max_length=200, blank=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="quota_tenants", blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def owns(self, entity_type: str, name: str) -> bool:
        """Whether one of the tenant's patterns of that entity type matches ``name``."""
        return any(fnmatchcase(name, p.pattern) for p in self.owned_names.all() if p.entity_type == entity_type)


class OwnedName(models.Model):
    """A principal or client-id pattern a tenant owns (fnmatch-style, case-sensitive)."""

    OWNABLE = [(EntityType.USER.value, EntityType.USER.label), (EntityType.CLIENT_ID.value, EntityType.CLIENT_ID.label)]

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="owned_names")
    entity_type = models.CharField(max_length=16, choices=OWNABLE)
    pattern = models.CharField(max_length=255)

    class Meta:
        ordering = ["tenant", "entity_type", "pattern"]
        constraints = [
            models.UniqueConstraint(fields=["entity_type", "pattern"], name="quotas_owned_name_unique_pattern"),
            models.CheckConstraint(
                condition=models.Q(entity_type__in=[EntityType.USER, EntityType.CLIENT_ID]),
                name="quotas_owned_name_user_or_client",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.name}: {self.entity_type} {self.pattern}"


# ------------------------------------------------------------------ roles


def _in_group(user: AnyUser, name: str) -> bool:
    return bool(user.is_authenticated) and user.groups.filter(name=name).exists()


def is_auditor(user: AnyUser) -> bool:
    """Auditors read everything and change nothing (the group wins over staff, so an auditor account never writes)."""
    return token_tenant_id(user) is None and _in_group(user, AUDITORS_GROUP)


def is_admin(user: AnyUser) -> bool:
    """Admins (staff or the quota-admins group, never an auditor) approve requests and change quotas directly."""
    return roles(user).is_admin


@dataclass(frozen=True)
class Roles:
    """The portal's roles of one user beyond membership, read in one query (``is_admin``, ``is_auditor``)."""

    is_admin: bool
    is_auditor: bool

    @property
    def sees_everything(self) -> bool:
        return self.is_admin or self.is_auditor


def roles(user: AnyUser) -> Roles:
    """Both roles from one query of the user's role groups (a page asks for both, and ``sees_everything``)."""
    if not user.is_authenticated or token_tenant_id(user) is not None:
        return Roles(is_admin=False, is_auditor=False)
    names = set(user.groups.filter(name__in=(ADMINS_GROUP, AUDITORS_GROUP)).values_list("name", flat=True))
    auditor = AUDITORS_GROUP in names  # the group wins over staff
    admin = bool(user.is_active) and not auditor and (bool(user.is_staff) or ADMINS_GROUP in names)
    return Roles(is_admin=admin, is_auditor=auditor)


def admin_users() -> models.QuerySet:
    """The accounts ``is_admin`` holds for, as a query (whom to tell that a request waits)."""
    from django.contrib.auth import get_user_model

    admins = get_user_model().objects.filter(is_active=True).filter(
        models.Q(is_staff=True) | models.Q(groups__name=ADMINS_GROUP)
    )
    return admins.exclude(groups__name=AUDITORS_GROUP).distinct()


def sees_everything(user: AnyUser) -> bool:
    """Admins and auditors read every tenant's requests and audit entries."""
    return roles(user).sees_everything


def tenants_of(user: AnyUser) -> models.QuerySet[Tenant]:
    """The tenants the user is a member of."""
    if not user.is_authenticated:
        return Tenant.objects.none()
    scoped = token_tenant_id(user)
    tenants = Tenant.objects.filter(members=user)
    return tenants if scoped is None else tenants.filter(pk=scoped)


def member_tenants(user: AnyUser) -> list[Tenant]:
    """The user's tenants with their owned names and quota groups loaded, for deciding many entities without more
    queries (the live monitor decides in async code, where none may run)."""
    return list(tenants_of(user).prefetch_related("owned_names", "quota_groups__cluster"))


class TenantPatterns:
    """A tenant's patterns read once, each entity type's as one regular expression: ``Tenant.owns`` without a query
    set per call, for deciding hundreds of names in one request (the member's overview)."""

    def __init__(self, tenant: Tenant) -> None:
        self.tenant = tenant
        by_type: dict[str, list[str]] = {}
        for p in tenant.owned_names.all():
            by_type.setdefault(p.entity_type, []).append(p.pattern)
        # fnmatchcase is re.match of translate(pattern): one of them matches iff their alternation does
        self._match = {t: re.compile("|".join(f"(?:{translate(p)})" for p in ps)).match for t, ps in by_type.items()}

    def owns(self, entity_type: str, name: str) -> bool:
        """``Tenant.owns``: whether one of the tenant's patterns of that entity type matches ``name``."""
        match = self._match.get(entity_type)
        return match is not None and match(name) is not None


def owned_by_any(tenants: Iterable[Tenant | TenantPatterns], user: str | None, client_id: str | None) -> bool:
    """Whether one of the tenants owns the entity (``entity_owned_by``): what a member may ask for and see."""
    return any(entity_owned(t, user, client_id) for t in tenants)


def entity_owned(tenant: Tenant | TenantPatterns, user: str | None, client_id: str | None) -> bool:
    """Whether the tenant may ask for this user/client-id entity: ``entity_refusal`` is None, decided without
    writing the refusal (the overview decides this for every sensor a member's clusters sample)."""
    from engine.entities import DEFAULT

    if user is None and client_id is None:
        return False
    if user == DEFAULT or (user is None and client_id == DEFAULT):
        return False
    if user is not None and not tenant.owns(EntityType.USER, user):
        return False
    return client_id is None or client_id == DEFAULT or tenant.owns(EntityType.CLIENT_ID, client_id)


def quota_visible(tenants: Iterable[Tenant], user: str | None, client_id: str | None, ip: str | None = None) -> bool:
    """Whether a member of ``tenants`` may read the quotas of this entity (DescribeClientQuotas, its values).

    Wider than asking for it (``owned_by_any``) by the defaults, which apply to the member's own clients too
    and name nobody: an all-``<default>`` entity (``ip`` included) is visible to every member, and a default
    part beside a named one (``/config/users/<default>/clients/app-1``) counts as owned. Every named part must be
    owned by one tenant; named ips are nobody's, so members never read them.
    """
    from engine.entities import DEFAULT

    if ip is not None:
        return ip == DEFAULT
    if user is None and client_id is None:
        return False
    if user in (None, DEFAULT) and client_id in (None, DEFAULT):
        return True
    if user == DEFAULT:  # the client-id is named here
        return any(t.owns(EntityType.CLIENT_ID, str(client_id)) for t in tenants)
    return owned_by_any(tenants, user, client_id)


def pattern_prefix(pattern: str) -> str:
    """The literal start of an fnmatch pattern (up to its first ``*``, ``?`` or ``[``): every name it matches starts
    with it, so a prefix search narrows the names to decide to those that may match."""
    cut = min((i for i in (pattern.find(c) for c in "*?[") if i >= 0), default=len(pattern))
    return pattern[:cut]


def owned_prefixes(tenants: Iterable[Tenant], entity_type: str) -> set[str]:
    """The literal prefixes (``pattern_prefix``) of the tenants' patterns of one entity type; ``""`` when a pattern
    starts with a wildcard (every name may match)."""
    return {pattern_prefix(p.pattern) for t in tenants for p in t.owned_names.all() if p.entity_type == entity_type}


def owning_tenant(user: str | None, client_id: str | None) -> Tenant | None:
    """The single tenant owning every named part of an entity (None when none or several do); for the audit."""
    owners = [t for t in Tenant.objects.prefetch_related("owned_names") if entity_owned_by(t, user, client_id) is None]
    return owners[0] if len(owners) == 1 else None


#: How many of a tenant's patterns a refusal lists before "and N more" (a refusal is read, not scrolled).
OWNED_SHOWN = 5


def owned_patterns(tenant: Tenant, entity_type: str) -> str:
    """What the tenant owns of one entity type, for a refusal: ``the principals svc-a-*, svc-a2-*`` (at most
    ``OWNED_SHOWN`` patterns, then how many more), or ``no principals`` when it owns none."""
    noun = "principals" if entity_type == EntityType.USER else "client-ids"
    patterns = sorted(p.pattern for p in tenant.owned_names.all() if p.entity_type == entity_type)
    if not patterns:
        return f"no {noun}"
    shown = ", ".join(patterns[:OWNED_SHOWN])
    more = len(patterns) - OWNED_SHOWN
    return f"the {noun} {shown}" + (f" and {more} more" if more > 0 else "")


def entity_refusal(tenant: Tenant, user: str | None, client_id: str | None) -> tuple[str, str | None] | None:
    """Why the tenant may not ask for this user/client-id entity and the field to blame (``user``, ``client_id``
    or None), or None when it may.

    Every named part must be owned. The default user (``<default>``) reaches every tenant's clients,
    so only admins set it; a default client-id under an owned user reaches only that user's clients.
    A refusal of a name says what the tenant owns, so the asker can pick one of those instead.
    """
    from engine.entities import DEFAULT

    if user is None and client_id is None:
        return "Name a principal (user), a client-id, or both.", "user"
    if user == DEFAULT or (user is None and client_id == DEFAULT):
        field = "user" if user == DEFAULT else "client_id"
        return "Default entities apply to every tenant's clients; ask a portal admin to change them.", field
    if user is not None and not tenant.owns(EntityType.USER, user):
        owns = owned_patterns(tenant, EntityType.USER)
        return (f"Tenant {tenant.name!r} does not own the principal {user!r}; it owns {owns}. Ask an admin to add "
                "the principal to the tenant if it is yours.", "user")
    if client_id is not None and client_id != DEFAULT and not tenant.owns(EntityType.CLIENT_ID, client_id):
        owns = owned_patterns(tenant, EntityType.CLIENT_ID)
        return (f"Tenant {tenant.name!r} does not own the client-id {client_id!r}; it owns {owns}. Ask an admin to "
                "add the client-id to the tenant if it is yours.", "client_id")
    return None


def entity_owned_by(tenant: Tenant, user: str | None, client_id: str | None) -> str | None:
    """Why the tenant may not ask for this user/client-id entity, or None when it may (``entity_refusal``)."""
    refusal = entity_refusal(tenant, user, client_id)
    return None if refusal is None else refusal[0]
