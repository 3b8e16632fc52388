"""Group quotas: one quota for a set of principals, a tenant's principals, or a client-id prefix.

Kafka's client quotas know a user, a client-id or both (8 levels); a group puts several clients behind one sensor.
The brokers' quota callback enforces groups (``broker-plugins/quota-callback``); this module is the same rules in
Python, for the portal's resolver, its checks, the scope hash the plugin reads them from, and the engine's own
brokers (``GroupLayer``, consulted by the managers' resolution).

Precedence, per quota type (``docs/capabilities/group-quotas.md``):

1. an exempt principal: no quota at all;
2. a value at a level that names the client (its user and/or client-id, levels 1, 2, 3, 4 and 7): Kafka's answer;
3. the first group, in ``order`` then name, the client is a member of and that holds a value of the type;
4. Kafka's defaults (levels 5, 6 and 8), or nothing.

A group is written to the scope hash as ``group <spec JSON>``; its sensor's tags are ``user=group@<name>`` and an
empty client-id (a sanitized user never holds a raw ``@``); its value, when cluster-wide, is the scope field
``<type> {"group":"<name>"}``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from .entities import GROUP_NAME_RE as NAME_RE
from .entities import GROUP_TAG_PREFIX as TAG_PREFIX
from .entities import QuotaOverrides, Resolution, group_of_tags, sanitize
from .errors import QuotaValidationError

log = logging.getLogger(__name__)

#: The quota keys a group can hold: the brokers' callback enforces the first three, the controller's callback
#: instance the last (per broker only: Kafka's controller enforces it once, see ``PER_BROKER_ONLY``).
GROUP_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
#: The group keys that cannot be a cluster-wide budget: the controller is one enforcer, not one per broker.
PER_BROKER_ONLY = frozenset({"controller_mutation_rate"})
#: The levels of Kafka's precedence that name the client: a value there wins over any group.
NAMING_LEVELS = frozenset({1, 2, 3, 4, 7})

#: ``order`` tiers: a prefix under one principal, then principal groups, then a prefix alone; within a prefix tier the
#: longer prefix first.
PREFIX_UNDER_PRINCIPAL, PRINCIPALS, PREFIX_ALONE = 0, 1, 2
_MAX_PREFIX = 255


def check_name(name: str) -> str:
    """The group name, or QuotaValidationError saying what a name may hold."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise QuotaValidationError(
            f"A group name is 1 to 64 letters, digits, '.', '_' or '-', not {name!r}."
        )
    return name


def order_of(tier: int, prefix: str | None) -> int:
    """A group's place in the matching order (smaller first): its tier, then the longer prefix."""
    return tier * 1000 + (_MAX_PREFIX - len(prefix or ""))


def entity_field(name: str) -> str:
    """The group as a config entity field (``{"group":"<name>"}``): how its scope fields name it."""
    return json.dumps({"group": name}, separators=(",", ":"))


def group_of_field(field: str) -> str | None:
    """The group a config entity field names (``{"group":"<name>"}``), None for any other field."""
    try:
        parsed = json.loads(field)
    except ValueError:
        return None
    if isinstance(parsed, dict) and list(parsed) == ["group"] and isinstance(parsed["group"], str):
        return parsed["group"]
    return None


def tag(name: str) -> str:
    """The ``user`` metric tag of the group's sensor."""
    return TAG_PREFIX + name


@dataclass(frozen=True)
class GroupSpec:
    """One group as the brokers take it: who is a member, its place in the order, and its values."""

    name: str
    order: int
    users: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    any_user: bool = False
    prefix: str | None = None
    quotas: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_name(self.name)
        unknown = sorted(set(self.quotas) - set(GROUP_KEYS))
        if unknown:
            raise QuotaValidationError(
                f"A group holds {', '.join(GROUP_KEYS)} only, not {', '.join(unknown)}."
            )

    def matches(self, principal: str, client_id: str) -> bool:
        """Whether a client (principal name, client-id) is a member."""
        if self.prefix is not None and not client_id.startswith(self.prefix):
            return False
        if self.any_user or principal in self.users:
            return True
        return any(fnmatchcase(principal, p) for p in self.patterns)

    def to_json(self) -> str:
        """The spec as the scope hash holds it: compact JSON, sorted keys (a stable field)."""
        body = {
            "any": self.any_user,
            "name": self.name,
            "order": self.order,
            "patterns": sorted(self.patterns),
            "prefix": self.prefix,
            "quotas": {k: float(v) for k, v in sorted(self.quotas.items())},
            "users": sorted(self.users),
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> GroupSpec:
        """The spec of a scope hash field's JSON; QuotaValidationError when it is not one."""
        try:
            body = json.loads(text)
            return cls(
                name=body["name"],
                order=int(body["order"]),
                users=tuple(body.get("users") or ()),
                patterns=tuple(body.get("patterns") or ()),
                any_user=bool(body.get("any")),
                prefix=body.get("prefix"),
                quotas={k: float(v) for k, v in (body.get("quotas") or {}).items()},
            )
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise QuotaValidationError(f"Not a group spec: {text[:80]!r} ({e}).") from None


def in_order(groups: Iterable[GroupSpec]) -> list[GroupSpec]:
    """Groups in the order the brokers try them."""
    return sorted(groups, key=lambda g: (g.order, g.name))


def first_group(groups: Sequence[GroupSpec], key: str, principal: str, client_id: str) -> GroupSpec | None:
    """The group whose value of ``key`` applies to a client (groups already ``in_order``), or None."""
    for g in groups:
        if key in g.quotas and g.matches(principal, client_id):
            return g
    return None


@dataclass(frozen=True)
class GroupLayer:
    """A cluster's groups (``in_order``) and exempt principals, as its scope hash holds them: what the engine's
    resolution consults beside Kafka's 8 levels. An empty layer changes nothing."""

    groups: tuple[GroupSpec, ...] = ()
    exempt: frozenset[str] = frozenset()

    @classmethod
    def from_scope(cls, fields: Iterable[str]) -> GroupLayer:
        """The groups and exempt principals among a scope hash's fields (``group <spec>``, ``exempt <principal>``);
        a spec that does not parse is skipped with a warning, as the brokers' callback skips it."""
        groups, exempt = [], set()
        for f in fields:
            head, _, rest = f.partition(" ")
            if head == "exempt" and rest:
                exempt.add(rest)
            elif head == "group" and rest:
                try:
                    groups.append(GroupSpec.from_json(rest))
                except QuotaValidationError as e:
                    log.warning("Skipping a group the scope hash holds: %s", e.message)
        return cls(tuple(in_order(groups)), frozenset(exempt))

    def __bool__(self) -> bool:
        return bool(self.groups or self.exempt)

    def holds(self, key: str) -> bool:
        """Whether some group has a value of ``key`` (then the quota type is enforced even with no Kafka value)."""
        return any(key in g.quotas for g in self.groups)

    def resolve(self, overrides: QuotaOverrides, key: str, user: str, client_id: str) -> Resolution:
        """The precedence of ``docs/capabilities/group-quotas.md`` for one quota type (``key``) of a client.

        An exempt principal records on its own sensor (its sanitized name and client-id) with no bound; a client
        whose Kafka answer is a level that names it keeps that answer; else the first group with a value of the
        type bounds the group's sensor (tags ``group@<name>:``); else Kafka's answer (the defaults, or nothing).
        """
        if user in self.exempt:
            return Resolution(sanitize(user), client_id, None, None, exempt=True)
        r = overrides.resolve(user, client_id)
        if r.level in NAMING_LEVELS:
            return r
        g = first_group(self.groups, key, user, client_id)
        if g is None:
            return r
        return Resolution(tag(g.name), "", g.quotas[key], None, r.skipped, group=g.name)


__all__ = [
    "GROUP_KEYS",
    "GroupLayer",
    "GroupSpec",
    "NAMING_LEVELS",
    "PER_BROKER_ONLY",
    "PREFIX_ALONE",
    "PREFIX_UNDER_PRINCIPAL",
    "PRINCIPALS",
    "TAG_PREFIX",
    "check_name",
    "entity_field",
    "first_group",
    "group_of_field",
    "group_of_tags",
    "in_order",
    "order_of",
    "tag",
]
