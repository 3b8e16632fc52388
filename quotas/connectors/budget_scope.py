"""A cluster's budget scopes: which of its quota values are cluster-wide budgets, kept in the engine's Redis.

Kafka holds every quota value itself (AlterClientQuotas, so ``kafka-configs.sh --describe`` shows a budget's value);
the brokers' budget plugin (a KIP-257 ``ClientQuotaCallback``) reads from the cluster's scope hash
(``qb:{<cluster>}:scope``, written with ``engine.budget_store.BudgetStore.set_scope``) which of them are
cluster-wide, and shares each of those out between the brokers. An engine cluster's brokers do the same
(``traffic.engine_budgets``), with the hash in their own Redis. A ``budget-scope`` item of the desired state
(``resource`` the entity's ``EntityRef.field()``, ``key`` the quota key) is one field of that hash: ``<quota type>
<entity field>``, e.g. ``produce {"user":"alice"}``. The protocol is ``docs/internals/cluster-budgets-protocol.md``.

Around a push's Kafka write the scope moves in two steps, so that while Kafka and Redis disagree a client is held
to what the old or the new state allows, never to brokers x a budget neither meant: a value that becomes cluster-wide
joins the scope *before* Kafka takes its new value, and Kafka takes it once every live broker has read the scope
(until then it is its old value shared out, never the new value on every broker), and one that stops being
cluster-wide leaves it *after* (until then its new value is shared out, never the old budget on every broker). Each
step replaces the whole hash with one script (idempotent) and is skipped when the hash already says it, so a retried
push writes nothing twice and the plugin re-reads the scope only when it changed.

The same hash carries the cluster's group quotas (``group <spec JSON>``, ``engine.groups``) and exempt principals
(``exempt <principal>``): items of kinds ``group`` and ``exempt``, moved with the same steps (a group joins before
Kafka's write and leaves after it, like a budget).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import redis

from engine.budget_store import BudgetStore, scope_field
from engine.budgets import BUDGET_TYPES
from engine.entities import QuotaType
from engine.errors import QuotaValidationError
from engine.groups import GroupSpec
from engine.redis_backend import connect

from .base import BUDGET_SCOPE, CLUSTER_WIDE, EXEMPT, EXEMPT_KEY, GROUP, GROUP_SPEC, Item, PushError, State

#: Quota key -> the quota type the plugin names it by (``produce``, ``fetch``, ``request``).
TYPE_OF_BUDGET_KEY = {QuotaType(t).config_key: t for t in BUDGET_TYPES}
#: What a connector answers for a Redis it cannot reach: the push is retried (Kafka's part is idempotent).
UNAVAILABLE = "BUDGET_STORE_UNAVAILABLE"
_T = TypeVar("_T")
#: How long a push that makes values cluster-wide waits for the brokers to read the scope: two rounds and a margin.
ROUND_WAIT_S = 2.5


def field_of(item: Item, value: str = CLUSTER_WIDE) -> str:
    """The scope hash's field of a ``budget-scope``, ``group`` or ``exempt`` item with ``value``; PushError (not
    retriable) for one that can never be written."""
    if item.kind == GROUP:
        try:
            spec = GroupSpec.from_json(value)
        except QuotaValidationError as e:
            raise PushError("INVALID_REQUEST", f"Group {item.resource}: {e.message}", retriable=False) from e
        if spec.name != item.resource:
            raise PushError("INVALID_REQUEST", f"Group {item.resource}: its spec names {spec.name!r}.",
                            retriable=False)
        return f"{GROUP} {spec.to_json()}"
    if item.kind == EXEMPT:
        if not item.resource:
            raise PushError("INVALID_REQUEST", "An exempt principal has a name.", retriable=False)
        return f"{EXEMPT} {item.resource}"
    quota_type = TYPE_OF_BUDGET_KEY.get(item.key, item.key)
    try:
        return scope_field(quota_type, item.resource)
    except QuotaValidationError as e:
        raise PushError("INVALID_REQUEST", f"Budget scope of {item.key} of {item.resource}: {e.message}",
                        retriable=False) from e


def item_of(field: str) -> tuple[Item, str]:
    """The item and value of a scope hash field (a field the portal would not write stays visible, as a
    ``budget-scope`` item of key ``unknown``, so reconcile reports it as extra)."""
    head, _, rest = field.partition(" ")
    if head == GROUP and rest:
        try:
            spec = GroupSpec.from_json(rest)
        except QuotaValidationError:
            return Item(BUDGET_SCOPE, field, "unknown"), CLUSTER_WIDE
        return Item(GROUP, spec.name, GROUP_SPEC), rest
    if head == EXEMPT and rest:
        return Item(EXEMPT, rest, EXEMPT_KEY), EXEMPT_KEY
    if head in BUDGET_TYPES and rest:
        return Item(BUDGET_SCOPE, rest, QuotaType(head).config_key), CLUSTER_WIDE
    return Item(BUDGET_SCOPE, field, "unknown"), CLUSTER_WIDE


def _group_name(field: str) -> str | None:
    head, _, rest = field.partition(" ")
    if head != GROUP:
        return None
    try:
        return GroupSpec.from_json(rest).name
    except QuotaValidationError:
        return None


def scope_after(held: Iterable[str], changes: Mapping[Item, str | None], full: bool) -> set[str]:
    """The scope hash's fields once ``changes`` (scope items only) are applied to ``held``: exactly the changes' when
    ``full``. A group's item replaces whatever spec of that group the hash holds."""
    after = set() if full else set(held)
    for item, value in changes.items():
        if item.kind == GROUP:
            after -= {f for f in after if _group_name(f) == item.resource}
            if value is not None:
                after.add(field_of(item, value))
            continue
        if item.kind == EXEMPT:
            if value is not None and value != EXEMPT_KEY:
                raise PushError("INVALID_REQUEST", f"Exempt principal {item.resource} has the value {value!r}; only "
                                f"{EXEMPT_KEY!r} (or a removal) is one.", retriable=False)
            (after.add if value is not None else after.discard)(field_of(item))
            continue
        name = field_of(item)
        if value is None:
            after.discard(name)
        elif value == CLUSTER_WIDE:
            after.add(name)
        else:
            raise PushError("INVALID_REQUEST", f"Budget scope {item} has the value {value!r}; only "
                            f"{CLUSTER_WIDE!r} (or a removal) is one.", retriable=False)
    return after


class BudgetScopes:
    """The scope hashes of clusters in one Redis: for Kafka clusters the engine's Redis (``QUOTAS_BUDGET_REDIS_URL``)
    their brokers' plugin reads, for an engine cluster the Redis of its brokers' engine (``client``: theirs)."""

    def __init__(
        self, url: str, timeout_s: float = 2.0, client: redis.Redis | None = None, unavailable: str = UNAVAILABLE
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._client = client
        self._own = client is None
        self.unavailable = unavailable

    def _store(self, cluster: str) -> BudgetStore:
        if self._client is None:
            self._client = connect(self.url, self.timeout_s)
        return BudgetStore(self._client, cluster)

    def steps(self, cluster: str, scopes: Mapping[Item, str | None], full: bool) -> list[set[str]]:
        """The cluster's scope now, once the fields joining it are added, and once those leaving it are dropped:
        what a push writes before its values land (step 0 -> 1) and after (step 1 -> 2). A scope no value can have is
        refused before anything is read."""
        scope_after(set(), scopes, full)
        held = self.held(cluster)
        after = scope_after(held, scopes, full)
        renamed = {_group_name(f) for f in after} - {None}
        kept = {f for f in held if _group_name(f) not in renamed}  # a group's old spec gives way to its new one
        return [held, kept | after, after]

    def _unavailable(self, cluster: str, doing: str, error: Exception) -> PushError:
        return PushError(
            self.unavailable,
            f"{cluster}: could not {doing} the budget scope in the engine's Redis ({type(error).__name__}: "
            f"{error}); the push is retried until it can (what Kafka took stays, the same values are sent again).",
            retriable=True,
        )

    def around(
        self, cluster: str, scopes: Mapping[Item, str | None], full: bool, send: Callable[[], _T]
    ) -> tuple[_T, bool]:
        """``send()`` (the push's write of the values) between the scope's two steps; returns what it returned and
        whether the scope changed. Without scope changes nothing is read before ``send`` (its own errors come first);
        a full push then drops, after it, what the hash holds beyond the (empty) desired scope."""
        if scopes:
            steps = self.steps(cluster, scopes, full)
            moved = self.write(cluster, steps[0], steps[1])
            if steps[1] - steps[0]:
                self.taken(cluster)
            sent = send()
            return sent, self.write(cluster, steps[1], steps[2]) or moved
        sent = send()
        return sent, full and self.write(cluster, self.held(cluster), set())

    def taken(self, cluster: str) -> bool:
        """Wait (a round or two of the brokers, at most ``ROUND_WAIT_S``) until every live broker has read the scope
        just written: a value Kafka takes before a broker has is enforced on it per broker for the rest of its round,
        and a new sensor admits ten seconds of that value at once. False (and the push goes on) when one has not."""
        try:
            store = self._store(cluster)
            return store.wait_for_rounds(store.redis_now_ms(), ROUND_WAIT_S)
        except (redis.RedisError, OSError) as e:
            raise self._unavailable(cluster, "read", e) from e

    def held(self, cluster: str) -> set[str]:
        """The cluster's cluster-wide scope fields now."""
        try:
            return self._store(cluster).scope()
        except (redis.RedisError, OSError) as e:
            raise self._unavailable(cluster, "read", e) from e

    def write(self, cluster: str, held: set[str], wanted: set[str]) -> bool:
        """Make the scope ``wanted`` (``held``: what it is) in one step; False when it already was."""
        if wanted == held:
            return False
        try:
            self._store(cluster).set_scope(sorted(wanted))
        except (redis.RedisError, OSError) as e:
            raise self._unavailable(cluster, "write", e) from e
        return True

    def describe(self, cluster: str) -> State:
        """The cluster's scope hash as desired-state items: budget scopes, groups and exempt principals."""
        return dict(item_of(name) for name in self.held(cluster))

    def close(self) -> None:
        if self._client is not None and self._own:
            self._client.close()
            self._client = None
