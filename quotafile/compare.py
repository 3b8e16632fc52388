"""Comparing quota states: the changes between two, in Kafka's precedence order, and what shadows what (no Django)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from engine.config import EntityRef
from engine.entities import (
    DEFAULT,
    PRECEDENCE,
    QUOTA_KEYS,
    ClientEntity,
    QuotaOverrides,
    entity_path,
)
from quotafile import groups as _groups
from quotafile.common import (
    ADD,
    BROKER,
    CHANGE,
    CLIENT_METRICS,
    QUOTA,
    REMOVE,
    TOPIC,
    Change,
    _number,
)
from quotafile.state import (
    QuotaState,
    broker_order,
    entity_dict,
    entity_order,
    precedence_level,
)
from quotafile.writer import (
    _key_rank,
)


def _keyed_diff(
    old: Mapping[str, Any], new: Mapping[str, Any] | None, prune_entity: bool
) -> list[tuple[str, str, Any, Any]]:
    """(action, key, old, new) of one entity. ``new`` None: the entity is not in the file (removed only when
    ``prune_entity``). Keys the file's entity leaves out are removed: the entry describes the whole entity."""
    out = []
    if new is None:
        return [(REMOVE, k, v, None) for k, v in old.items()] if prune_entity else []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        action = ADD if before is None else REMOVE if after is None else CHANGE
        out.append((action, key, before, after))
    return out


Removable = Callable[[str, Any], bool]


def diff(current: QuotaState, desired: QuotaState, prune: bool = False,
         removable: Removable | None = None) -> list[Change]:
    """The changes that make ``current`` what ``desired`` says, in Kafka's precedence order.

    Only the sections present in ``desired`` are compared. An entity listed in the file is its whole state (keys it
    leaves out are removed); an entity missing from the file is removed only with ``prune`` and when
    ``removable(section, identity)`` allows it (a tenant member's prune reaches only what its tenant owns).
    """
    allowed = removable or (lambda _section, _ident: True)
    changes: list[Change] = []
    if desired.quotas is not None:
        old_q = current.quotas or {}
        for ref in set(old_q) | set(desired.quotas):
            new = desired.quotas.get(ref)
            found = _keyed_diff(old_q.get(ref, {}), new, prune and allowed(QUOTA, ref))
            differing = {key for _, key, _, _ in found}
            for key in sorted(set(old_q.get(ref, {})) & set(new or {}), key=_key_rank):
                if key not in differing and current.scope(ref, key) != desired.scope(ref, key):
                    value = old_q[ref][key]
                    found.append((CHANGE, key, value, value))  # the same number with another scope: a change
            for action, key, before, after in found:
                changes.append(Change(action, QUOTA, entity_dict(ref), key, _number(key, before),
                                      _number(key, after), entity_path(ref.user, ref.client_id, ref.ip),
                                      (0, *entity_order(ref), _key_rank(key), key),
                                      old_scope=current.scope(ref, key),
                                      new_scope=desired.scope(ref, key) if after is not None else None))
    for section, attr, rank in ((BROKER, "broker_configs", 1), (TOPIC, "topic_configs", 2)):
        wanted = getattr(desired, attr)
        if wanted is None:
            continue
        have = getattr(current, attr) or {}
        for name in set(have) | set(wanted):
            order = broker_order(name) if section == BROKER else (0, name)
            path = f"/config/brokers/{name}" if section == BROKER else f"/config/topics/{name}"
            for action, key, before, after in _keyed_diff(have.get(name, {}), wanted.get(name),
                                                         prune and allowed(section, name)):
                changes.append(Change(action, section, {section: name}, key, before, after, path,
                                      (rank, *order, key)))
    if desired.client_metrics is not None:
        have_s = current.client_metrics or {}
        for name in set(have_s) | set(desired.client_metrics):
            old_c = have_s[name].configs() if name in have_s else {}
            new_c = desired.client_metrics[name].configs() if name in desired.client_metrics else None
            for action, key, before, after in _keyed_diff(old_c, new_c, prune and allowed(CLIENT_METRICS, name)):
                changes.append(Change(action, CLIENT_METRICS, {CLIENT_METRICS: name}, key, before, after,
                                      f"/config/client-metrics/{name}", (3, name, key)))
    changes.extend(_groups.diff_groups(current, desired, prune, allowed))
    changes.sort(key=lambda c: c.order)
    return changes


def apply_changes(current: QuotaState, changes: Iterable[Change]) -> dict[EntityRef, dict[str, float]]:
    """The client quotas after the changes (for resolving which level applies afterwards)."""
    after = {ref: dict(values) for ref, values in (current.quotas or {}).items()}
    for c in changes:
        if c.section != QUOTA:
            continue
        ref = EntityRef.parse(c.entity)
        values = after.setdefault(ref, {})
        if c.new is None:
            values.pop(c.key, None)
        else:
            values[c.key] = float(c.new)
        if not values:
            after.pop(ref, None)
    return after


#: Stand-ins for a principal / client-id no quota names (they resolve as any such name would).
OTHER_USER, OTHER_CLIENT = "\x00another principal", "\x00another client-id"


def _applies(ref: EntityRef, user: str, client_id: str) -> bool:
    """Whether the entity's quota is a candidate for this client (its parts name it or are defaults/absent)."""
    return ref.user in (None, DEFAULT, user) and ref.client_id in (None, DEFAULT, client_id)


#: How many entities a warning names before it counts the rest.
NAMED_WINNERS = 5


def _who(user: str, client_id: str) -> str:
    if user == OTHER_USER and client_id == OTHER_CLIENT:
        return "any other client"
    if client_id == OTHER_CLIENT:
        return f"the clients of user {user!r}"
    if user == OTHER_USER:
        return f"client-id {client_id!r}"
    return f"user {user!r} with client-id {client_id!r}"


def _named(part: str | None, fallback: str | None, other: str) -> str:
    """A name a client can have for this part: the entity's own, else the other entity's, else a stand-in."""
    if part not in (None, DEFAULT):
        return part
    return fallback if fallback not in (None, DEFAULT) else other


class Shadows:
    """Which level wins for the clients an entity's quota is meant for, after a plan (built once per plan).

    For each key it keeps the engine's resolver (``QuotaOverrides``, Kafka's 8 levels) over the state after the plan
    and the entities holding the key, so each change costs one pass over the more specific entities, not over every
    principal x client-id pair.
    """

    def __init__(self, after: Mapping[EntityRef, Mapping[str, float]]) -> None:
        self.after = after
        self._keys: dict[str, tuple[QuotaOverrides, list[tuple[int, EntityRef]]]] = {}

    def resolver(self, key: str) -> tuple[QuotaOverrides, list[tuple[int, EntityRef]]]:
        if key not in self._keys:
            overrides, holders = QuotaOverrides(), []
            for ref, values in self.after.items():
                if ref.ip is None and key in values:
                    overrides.update(ClientEntity(ref.user, ref.client_id), values[key])
                    holders.append((precedence_level(ref), ref))
            self._keys[key] = (overrides, sorted(holders, key=lambda lr: entity_order(lr[1])))
        return self._keys[key]

    def warnings(self, ref: EntityRef, key: str) -> list[str]:
        """Where a more specific level still wins over ``ref``'s ``key`` for some client it applies to: each entity
        of an earlier level that can name the same client, checked with the resolver on a client both name."""
        if ref.ip is not None or key not in QUOTA_KEYS or key == "connection_creation_rate":
            return []
        overrides, holders = self.resolver(key)
        mine = precedence_level(ref)
        winners: dict[str, list[str]] = {}
        for level, other in holders:
            if level >= mine:
                continue
            user = _named(other.user, ref.user, OTHER_USER)
            client_id = _named(other.client_id, ref.client_id, OTHER_CLIENT)
            if not _applies(ref, user, client_id) or not _applies(other, user, client_id):
                continue
            resolved = overrides.resolve(user, client_id)
            if resolved.level is None or resolved.level >= mine:
                continue
            winners.setdefault(_winner(resolved.level, user, client_id), []).append(_who(user, client_id))
        path = entity_path(ref.user, ref.client_id, ref.ip)
        out = [
            f"{path} {key} does not apply to {', '.join(sorted(set(who)))}: {winner} (a more specific level in "
            "Kafka's precedence) still wins."
            for winner, who in list(winners.items())[:NAMED_WINNERS]
        ]
        if len(winners) > NAMED_WINNERS:
            out.append(f"... and {len(winners) - NAMED_WINNERS} more entities of more specific levels win over "
                       f"{path} {key} for their clients.")
        return out

    def fallback(self, ref: EntityRef, key: str) -> str | None:
        """After ``ref``'s ``key`` is removed, the entity its clients get the key from (None: no quota applies)."""
        overrides, _ = self.resolver(key)
        user = ref.user if ref.user not in (None, DEFAULT) else OTHER_USER
        client_id = ref.client_id if ref.client_id not in (None, DEFAULT) else OTHER_CLIENT
        resolved = overrides.resolve(user, client_id)
        if resolved.level is None:
            return None
        return _winner(resolved.level, user, client_id).replace(OTHER_USER, "<user>").replace(OTHER_CLIENT,
                                                                                             "<client-id>")


def shadow_warnings(after: Mapping[EntityRef, Mapping[str, float]], ref: EntityRef, key: str) -> list[str]:
    """``Shadows(after).warnings(ref, key)`` for one change."""
    return Shadows(after).warnings(ref, key)


def _winner(level: int, user: str, client_id: str) -> str:
    """Kafka's config path of the entity supplying ``level`` for this client."""
    u, c = PRECEDENCE[level - 1]
    return entity_path(user if u == "u" else u, client_id if c == "c" else c)
