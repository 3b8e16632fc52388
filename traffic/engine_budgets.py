"""Cluster-wide budgets on the engine's own brokers: what the Kafka plugin does, for a broker in Redis.

Each engine broker (``traffic.loadgen``) notes what every sensor recorded and whether it was throttled; once a
second it runs the same round as the portal's ``ClientQuotaCallback`` on a Kafka broker: it reports the demand of
each sensor whose quota is cluster-wide (``engine.budget_store``, the scope the portal pushed) and bounds
those sensors by the shares it gets back (``ClientQuotaManager.set_shares``). A round that fails keeps the last
shares for the lease, then falls back to budget / brokers, as the plugin does. The same scope hash carries the
cluster's groups and exempt principals: each time a round reads a new scope, every manager of the broker resolves
with them (``ClientQuotaManager.set_groups``, ``engine.groups.GroupLayer``), and a group's cluster-wide value is
reported and shared like any budget. No Django here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import redis

from engine.budget_store import BudgetReport, BudgetStore, budget_id, scope_field_of
from engine.budgets import BUDGET_TYPES, BudgetParams
from engine.entities import QuotaType, Resolution
from engine.errors import EngineUnavailable
from engine.groups import GroupLayer
from engine.managers import ClientQuotaManager

log = logging.getLogger(__name__)

#: A sensor that recorded nothing for this long is no longer reported (the plugin reports the sensors Kafka has).
FORGET_MS = 60_000


class BrokerBudgets:
    """One engine broker's side of the cluster's budgets.

    A sensor is saturated when a client of it was throttled during the round: it wanted more than its share (the
    plugin on Kafka, which sees no throttles, reads a measured rate at 95 % of its share instead).
    """

    def __init__(
        self,
        store: BudgetStore,
        broker_id: int,
        managers: Mapping[QuotaType, ClientQuotaManager],
        brokers: int,
        params: BudgetParams | None = None,
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.all_managers = dict(managers)
        self.managers = {q: m for q, m in managers.items() if str(q) in BUDGET_TYPES}
        self.brokers = max(1, brokers)
        self.params = params or BudgetParams()
        self.scope: set[str] = set()
        self.scope_version: str | None = None  # None until the first round tells the scope
        # (type, user, client) -> [sum this round, muted until (ms), last record (ms)]
        self.used: dict[tuple[QuotaType, str, str], list] = {}
        self.last_ok_ms: int | None = None
        self._unshared: dict[QuotaType, Callable[[Resolution], float | None]] = {}
        # the budgets the last good round reported: one no longer reported is left at once (its entry would
        # otherwise live on with the broker's rounds)
        self.reported: set[str] = set()
        self.state = "off"

    def note(self, quota_type: QuotaType, user: str, client_id: str, value: float, throttle_ms: int, t: int) -> None:
        """One recorded request of a client on this broker, and the throttle it was answered."""
        if quota_type not in self.managers:
            return
        muted = t + throttle_ms if throttle_ms > 0 else 0  # only a throttle mutes: an answered request does not
        u = self.used.get((quota_type, user, client_id))
        if u is None:
            self.used[(quota_type, user, client_id)] = [value, muted, t]
        else:
            u[0] += value
            u[1] = max(u[1], muted)
            u[2] = t

    def round(self, t: int, elapsed_ms: int = 1000) -> None:
        """Report the budgeted sensors' demand of the last ``elapsed_ms`` and take the shares."""
        sensors: dict[tuple[QuotaType, str], list] = {}  # (type, tags) -> [scope field, budget, demand, saturated]
        for (q, user, client_id), u in list(self.used.items()):
            if t - u[2] > FORGET_MS:
                del self.used[(q, user, client_id)]
                continue
            r = self.managers[q].configured(user, client_id)  # the budget itself, not this broker's share
            field = scope_field_of(str(q), r)
            used, u[0] = u[0], 0.0
            if field is None or (self.scope_version is not None and field not in self.scope):
                continue
            s = sensors.setdefault((q, r.tags), [field, r.bound, 0.0, False])
            s[2] += used * 1000.0 / max(elapsed_ms, 1)
            s[3] = s[3] or u[1] > t - elapsed_ms
        keys = list(sensors)
        reports = [
            BudgetReport(f, budget_id(str(q), *tags.split(":", 1)), b, d, x)
            for (q, tags), (f, b, d, x) in zip(keys, sensors.values(), strict=True)
        ]
        ids = {r.budget_id for r in reports}
        try:
            # every budget in every round (whole): the plugin on Kafka sends only what moved
            answer = self.store.round(self.broker_id, reports, self.params, scope_version=self.scope_version,
                                      leaving=sorted(self.reported - ids), whole=True)
        except (redis.RedisError, OSError, EngineUnavailable) as e:
            self._away(t, e, keys, [s[1] for s in sensors.values()])
            return
        if answer.scope is not None:
            self.scope = set(answer.scope)
            self._unshared = {q: self._fallback_of(str(q)) for q in self.managers}
            groups = GroupLayer.from_scope(self.scope)
            for m in self.all_managers.values():  # an exempt principal has no quota of any type
                m.set_groups(groups)
        self.scope_version, self.reported = answer.scope_version, ids
        shares: dict[QuotaType, dict[str, float]] = {q: {} for q in self.managers}
        for (q, tags), share in zip(keys, answer.shares, strict=True):
            if share is not None:
                shares[q][tags] = share
        for q, m in self.managers.items():
            m.set_shares(shares[q], self._unshared.get(q))
        self.last_ok_ms, self.state = t, "coordinated"

    def _fallback_of(self, quota_type: str) -> Callable[[Resolution], float | None]:
        """A budgeted sensor with no share yet (new on this broker) is bound by budget / brokers, as on a restart."""
        scope, brokers = frozenset(self.scope), self.brokers

        def fallback(r: Resolution) -> float | None:
            return r.bound / brokers if r.bound is not None and scope_field_of(quota_type, r) in scope else None

        return fallback

    def _away(self, t: int, error: Exception, keys: list, budgets: list) -> None:
        """Redis did not answer: the last shares for the lease, then budget / brokers (never unlimited or zero).

        Before any round told the scope, nothing is known to be cluster-wide: every value keeps Kafka's meaning."""
        if self.scope_version is None or (self.last_ok_ms is not None and t - self.last_ok_ms <= self.params.lease_ms):
            return
        if self.state != "fallback":
            log.warning("broker %s: budget rounds fail (%s); shares fall back to budget / %d brokers",
                        self.broker_id, error, self.brokers)
        self.state = "fallback"
        for q, m in self.managers.items():
            shares = {tags: b / self.brokers for (kq, tags), b in zip(keys, budgets, strict=True) if kq == q}
            m.set_shares(shares, self._unshared.get(q))
