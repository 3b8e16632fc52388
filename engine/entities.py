"""Quota entities, config keys and Kafka's 8-level (user, client-id) precedence.

Shared by the reference model and the Redis engine: resolving which configured
entity applies is configuration logic, done where the config is cached (as a
broker does), so the Redis scripts only ever touch one sensor's keys.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import re
import urllib.parse
from dataclasses import dataclass
from enum import StrEnum

from .errors import QuotaValidationError, UnknownQuotaKey
from .javamath import INT_MAX, LONG_MAX

DEFAULT = "<default>"


class QuotaType(StrEnum):
    """The client quota types and the config key of each (``QuotaConfig``)."""

    PRODUCE = "produce"
    FETCH = "fetch"
    REQUEST = "request"
    CONTROLLER_MUTATION = "controller_mutation"

    @property
    def config_key(self) -> str:
        return _KEY_OF_TYPE[self]

    @property
    def sensor_prefix(self) -> str:
        return _SENSOR_PREFIX[self]


_KEY_OF_TYPE = {
    QuotaType.PRODUCE: "producer_byte_rate",
    QuotaType.FETCH: "consumer_byte_rate",
    QuotaType.REQUEST: "request_percentage",
    QuotaType.CONTROLLER_MUTATION: "controller_mutation_rate",
}
_SENSOR_PREFIX = {
    QuotaType.PRODUCE: "Produce",
    QuotaType.FETCH: "Fetch",
    QuotaType.REQUEST: "Request",
    QuotaType.CONTROLLER_MUTATION: "ControllerMutation",
}
TYPE_OF_KEY = {v: k for k, v in _KEY_OF_TYPE.items()}


class KeyType(StrEnum):
    LONG = "LONG"
    INT = "INT"
    DOUBLE = "DOUBLE"


#: Kafka's client-quota config keys, their types, and the entity kinds they apply to.
QUOTA_KEYS: dict[str, tuple[KeyType, frozenset[str]]] = {
    "producer_byte_rate": (KeyType.LONG, frozenset({"client"})),
    "consumer_byte_rate": (KeyType.LONG, frozenset({"client"})),
    "request_percentage": (KeyType.DOUBLE, frozenset({"client"})),
    "controller_mutation_rate": (KeyType.DOUBLE, frozenset({"client"})),
    "connection_creation_rate": (KeyType.INT, frozenset({"ip"})),
}
_TYPE_MAX = {KeyType.LONG: LONG_MAX, KeyType.INT: INT_MAX}


def validate_quota_key(key: str, entity_kind: str = "client") -> KeyType:
    """The key must be one Kafka knows, for this kind of entity; returns its Java type."""
    spec = QUOTA_KEYS.get(key)
    if spec is None:
        raise UnknownQuotaKey(f"Invalid configuration key {key!r}; valid keys are {', '.join(sorted(QUOTA_KEYS))}.")
    key_type, kinds = spec
    if entity_kind not in kinds:
        raise QuotaValidationError(f"{key} applies to {' or '.join(sorted(kinds))} entities, not to {entity_kind}.")
    return key_type


def validate_quota_value(key: str, value: object, entity_kind: str = "client") -> float:
    """Check one (key, value) as Kafka's AlterClientQuotas does; return the value as a double.

    Refuses unknown keys, keys of another entity kind, non-numbers, NaN and
    infinities, values <= 0 (a quota of 0 overflows Kafka's int throttle to -1 ms),
    fractions for LONG/INT keys and values beyond the key's Java type.
    """
    key_type = validate_quota_key(key, entity_kind)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise QuotaValidationError(f"{key} must be a number, got {type(value).__name__} {value!r}.")
    try:
        v = float(value)
    except OverflowError:  # an int beyond any double: as Kafka, too large for the key
        bits = value.bit_length() if isinstance(value, int) else "many"
        raise QuotaValidationError(f"{key} is too large for a double (an integer of {bits} bits).") from None
    if math.isnan(v) or math.isinf(v):
        raise QuotaValidationError(f"{key} must be a finite number, got {value!r}.")
    if v <= 0.0:
        raise QuotaValidationError(f"Quota {key} must be greater than 0, got {value!r}.")
    if key_type in _TYPE_MAX:
        if v != math.floor(v):
            raise QuotaValidationError(f"{key} is a {key_type.value} and cannot be a fractional value ({value!r}).")
        if v > float(_TYPE_MAX[key_type]):  # compared as doubles: Long.MAX_VALUE itself is allowed
            raise QuotaValidationError(f"{key}={value!r} is too large for a {key_type.value}.")
    return v


_UNRESERVED = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


@functools.lru_cache(maxsize=65536)
def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: URL-encode, with ``*`` as %2A and space as %20."""
    out = []
    for byte in name.encode("utf-8"):
        if byte in _UNRESERVED:
            out.append(chr(byte))
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


@dataclass(frozen=True)
class ClientEntity:
    """A configured client-quota entity: user and/or client-id; ``None`` = absent, ``<default>`` = default."""

    user: str | None = None
    client_id: str | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise QuotaValidationError("A client quota entity names a user, a client-id, or both.")

    @property
    def mask_bit(self) -> int:
        if self.user is not None:
            return USER_CLIENT_ID_QUOTA_ENABLED if self.client_id is not None else USER_QUOTA_ENABLED
        return CLIENT_ID_QUOTA_ENABLED

    def sanitized(self) -> ClientEntity:
        """The entity as Kafka keys it: user names sanitized, client-ids raw."""
        user = self.user if self.user in (None, DEFAULT) else sanitize(self.user)
        return ClientEntity(user, self.client_id)


NO_QUOTAS = 0
CLIENT_ID_QUOTA_ENABLED = 1
USER_QUOTA_ENABLED = 2
USER_CLIENT_ID_QUOTA_ENABLED = 4

#: The eight precedence levels, most specific first: (user part, client part) of the entity probed.
#: "u"/"c" = the connection's own name, DEFAULT = the default entity, None = absent.
PRECEDENCE: tuple[tuple[str | None, str | None], ...] = (
    ("u", "c"),
    ("u", DEFAULT),
    ("u", None),
    (DEFAULT, "c"),
    (DEFAULT, DEFAULT),
    (DEFAULT, None),
    (None, "c"),
    (None, DEFAULT),
)


def level_entity(level: int, user: str, client_id: str) -> ClientEntity:
    """The config entity probed at precedence ``level`` (1..8) for a sanitized user and a client-id."""
    u, c = PRECEDENCE[level - 1]
    return ClientEntity(user if u == "u" else u, client_id if c == "c" else c)


@dataclass(frozen=True)
class Resolution:
    """How a (user, client-id) resolves for one quota type: the sensor tags and the bound."""

    user_tag: str
    client_tag: str
    bound: float | None
    level: int | None  # 1..8 of the entity that supplied the bound, None when no quota applies
    skipped: tuple[int, ...] = ()
    group: str | None = None  # the group whose value is the bound (``engine.groups``), level None then
    exempt: bool = False  # an exempt principal: no quota, whatever is configured

    @property
    def tags(self) -> str:
        return f"{self.user_tag}:{self.client_tag}"


class QuotaOverrides:
    """The configured limits of one quota type, and Kafka's ``quotaTypesEnabled`` bitmask.

    The bitmask is only ever OR-ed in (as Kafka at the conformance commit does), so
    removing the last quota at a level keeps the full resolution, never the fast path.
    """

    def __init__(self) -> None:
        self.limits: dict[ClientEntity, float] = {}
        self.types_enabled = NO_QUOTAS

    def update(self, entity: ClientEntity, bound: float | None) -> None:
        entity = entity.sanitized()
        self.types_enabled |= entity.mask_bit
        if bound is None:
            self.limits.pop(entity, None)
        else:
            self.limits[entity] = bound

    def metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """``DefaultQuotaCallback.quotaMetricTags``: tags name the level that matched, not the raw pair."""
        su = sanitize(user)
        mask = self.types_enabled
        if mask in (NO_QUOTAS, CLIENT_ID_QUOTA_ENABLED):
            return "", client_id
        if mask == USER_QUOTA_ENABLED:
            return su, ""
        if mask == USER_CLIENT_ID_QUOTA_ENABLED:
            return su, client_id
        tags_before_level = {
            1: (su, client_id),
            2: (su, client_id),
            3: (su, ""),
            4: (su, client_id),
            5: (su, client_id),
            6: (su, ""),
        }
        for level in range(1, 7):
            if level_entity(level, su, client_id) in self.limits:
                return tags_before_level[level]
        return "", client_id

    def limit_for_tags(self, user_tag: str, client_tag: str) -> tuple[float | None, int | None, tuple[int, ...]]:
        """``DefaultQuotaCallback.quotaLimit``: the bound for sensor tags, the level it came from, levels skipped."""
        if user_tag and client_tag:
            levels: tuple[int, ...] = (1, 2, 4, 5)
        elif user_tag:
            levels = (3, 6)
        elif client_tag:
            levels = (7, 8)
        else:
            return None, None, ()
        skipped = []
        for level in levels:
            bound = self.limits.get(level_entity(level, user_tag, client_tag))
            if bound is not None:
                return bound, level, tuple(skipped)
            skipped.append(level)
        return None, None, tuple(skipped)

    def resolve(self, user: str, client_id: str) -> Resolution:
        user_tag, client_tag = self.metric_tags(user, client_id)
        bound, level, skipped = self.limit_for_tags(user_tag, client_tag)
        return Resolution(user_tag, client_tag, bound, level, skipped)


@functools.lru_cache(maxsize=65536)
def normalize_ip(ip: str) -> str:
    """An IPv4 or IPv6 literal in canonical form; anything else is a typed error."""
    try:
        return str(ipaddress.ip_address(ip.strip() if isinstance(ip, str) else ip))
    except ValueError:
        raise QuotaValidationError(f"{ip!r} is not a valid IPv4 or IPv6 address.") from None


def entity_path(user: str | None = None, client_id: str | None = None, ip: str | None = None) -> str:
    """Kafka's config path of an entity (names shown raw, the default as ``<default>``)."""
    if ip is not None:
        return f"/config/ips/{ip}"
    path = "/config"
    if user is not None:
        path += f"/users/{user}"
    if client_id is not None:
        path += f"/clients/{client_id}"
    return path


# ------------------------------------------------------------------ names people read

#: Kafka's principal of a connection that did not authenticate (a PLAINTEXT listener, or SSL without client auth).
ANONYMOUS = "ANONYMOUS"


def display_name(user: str | None = None, client_id: str | None = None, ip: str | None = None) -> str:
    """An entity as a person reads it: ``svc-a (all client-ids)``, ``client-id app (any principal)``,
    ``<default> principal``, ``anonymous (PLAINTEXT listener)``, ``svc-a, client-id app``, ``ip 10.0.0.1``.

    Names are as Kafka's config names them (``None`` absent, ``<default>`` the default entity); the same form for
    Kafka's eight (user, client-id) levels, the two ip levels and a sensor's tags (``display_tags``). What it names
    exactly is ``entity_path`` (shown beside it, or on hover).
    """
    if ip is not None:
        return "<default> ip" if ip == DEFAULT else f"ip {ip}"
    if user is None and client_id is None:
        return "no entity"
    client = None
    if client_id == DEFAULT:
        client = "<default> client-id"
    elif client_id is not None:
        client = f"client-id {client_id}" if client_id else "empty client-id"
    if user is None:
        return client if client_id == DEFAULT else f"{client} (any principal)"
    if user == DEFAULT:
        who = "<default> principal"
    elif user == ANONYMOUS:
        who = "anonymous (PLAINTEXT listener)"
    else:
        who = user
    if client is None:
        return who if user in (DEFAULT, ANONYMOUS) else f"{who} (all client-ids)"
    return f"{who}, {client}"


def tags_entity(tags: str) -> tuple[str | None, str | None]:
    """(user, client-id) a sensor's tags ``"<sanitized user>:<client-id>"`` are named for: the user unsanitized,
    an empty part absent (``":"``, no user and an empty client-id, is the client-id ``""``)."""
    user_tag, _, client_id = tags.partition(":")
    user = urllib.parse.unquote(user_tag) if user_tag else None
    return user, (client_id if client_id or user is None else None)


#: The user tag prefix of a quota group's shared sensor (``group@<name>``: a sanitized user never holds a raw '@'),
#: and what a group's name may hold (``engine.groups``).
GROUP_TAG_PREFIX = "group@"
GROUP_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}\Z")


def group_of_tags(tags: str) -> str | None:
    """The group whose shared sensor has these sensor tags (``group@<name>:``, as the live monitor names sensors),
    None for any other sensor."""
    user, _, client_id = tags.partition(":")
    name = user[len(GROUP_TAG_PREFIX):] if user.startswith(GROUP_TAG_PREFIX) and not client_id else ""
    return name if GROUP_NAME_RE.match(name) else None


def display_tags(tags: str) -> str:
    """A sensor's tags (``svc-a:``, ``:1``, ``ANONYMOUS:app``) as ``display_name`` words them; the live monitor's
    connection sensors ``ip:<address>`` and ``listener:<name>`` as ``ip 10.0.0.1`` and ``listener PLAINTEXT``, a
    quota group's sensor ``group@<name>:`` as ``group <name>``."""
    kind, _, name = tags.partition(":")
    if kind in ("ip", "listener") and name:
        return f"{kind} {name}"
    group = group_of_tags(tags)
    if group is not None:  # a quota group's members share one sensor (``group@<name>``)
        return f"group {group}"
    return display_name(*tags_entity(tags))


def path_entity(path: str) -> tuple[str | None, str | None, str | None]:
    """(user, client-id, ip) of a config path ``entity_path`` made (None each for a path of anything else)."""
    if path.startswith("/config/ips/"):
        return None, None, path[len("/config/ips/"):]
    user = client_id = None
    rest = path
    if rest.startswith("/config/users/"):
        user, has_client, client_id = rest[len("/config/users/"):].partition("/clients/")
        client_id = client_id if has_client else None
    elif rest.startswith("/config/clients/"):
        client_id = rest[len("/config/clients/"):]
    return user or None, client_id, None


def display_path(path: str) -> str:
    """A config path (``/config/users/svc-a``) as ``display_name`` words it; any other path as it is."""
    user, client_id, ip = path_entity(path)
    return display_name(user, client_id, ip) if (user, client_id, ip) != (None, None, None) else path
