"""Cluster-wide budgets in Redis: the scope the portal pushes and the shares brokers take.

One key space per cluster, all under the hash tag ``{<cluster>}`` so that a
round touches one Redis Cluster slot. Brokers (the Kafka plugin, or the
engine's own brokers) call ``lua/budget_share.lua``; the portal writes the
scope and reads the enforcement state. The arithmetic is ``budgets.py``'s.
"""

from __future__ import annotations

import json
import secrets
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

from .budgets import BUDGET_TYPES, BudgetParams
from .config import EntityRef
from .entities import DEFAULT, Resolution, level_entity
from .errors import QuotaValidationError
from .groups import entity_field

DEFAULT_PARAMS = BudgetParams()
BUDGET_LUA = (Path(__file__).parent / "lua" / "budget_share.lua").read_text()
#: Reads one budget's state (the hash ``budget_share.lua`` keeps) and its brokers' last rounds, five strings each.
BUDGET_STATE_LUA = (Path(__file__).parent / "lua" / "budget_state.lua").read_text()

#: Replaces a cluster's scope whole, with a new version: KEYS[1] scope; ARGV[1] a random epoch for a hash that has
#: none (a scope lost with its Redis starts a new epoch, so no broker mistakes a new version 1 for the old one), then
#: the fields.
_SET_SCOPE_LUA = """
local old = redis.call('HGET', KEYS[1], '#version') or ''
local epoch, n = string.match(old, '^(.+):(%d+)$')
if not epoch then epoch, n = ARGV[1], 0 end
local version = epoch .. ':' .. (tonumber(n) + 1)
redis.call('HSET', KEYS[1], '#version', version)
table.remove(ARGV, 1)
local keep = {['#version'] = true}
for _, f in ipairs(ARGV) do keep[f] = true end
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if not keep[f] then redis.call('HDEL', KEYS[1], f) end
end
for _, f in ipairs(ARGV) do redis.call('HSET', KEYS[1], f, 'cluster') end
return version
"""

COORDINATED, FALLBACK, OFF = "coordinated", "fallback", "off"


def tags_field(user: str, client_id: str) -> str:
    """A sensor's metric tags as the protocol names them (compact JSON, sorted keys)."""
    return json.dumps({"client-id": client_id, "user": user}, sort_keys=True, separators=(",", ":"))


def scope_field(quota_type: str, entity_field: str) -> str:
    """``<quota type> <config entity field>``: one quota value that is cluster-wide."""
    if quota_type not in BUDGET_TYPES:
        raise QuotaValidationError(
            f"A {quota_type} quota cannot be cluster-wide; only {', '.join(BUDGET_TYPES)} quotas can."
        )
    return f"{quota_type} {entity_field}"


def scope_field_of(quota_type: str, r: Resolution) -> str | None:
    """The scope field of the config entity that supplied a resolution's bound (None: no quota applies)."""
    if quota_type not in BUDGET_TYPES:
        return None
    if r.group is not None:
        return f"{quota_type} {entity_field(r.group)}"
    if r.level is None:
        return None
    e = level_entity(r.level, r.user_tag, r.client_tag)
    user = e.user if e.user in (None, DEFAULT) else urllib.parse.unquote(e.user)  # tags carry Kafka's sanitized name
    return f"{quota_type} {EntityRef(user, e.client_id).field()}"


def budget_id(quota_type: str, user: str, client_id: str) -> str:
    """``<quota type> <sensor tags field>``: one budget as brokers share it out."""
    return f"{quota_type} {tags_field(user, client_id)}"


@dataclass(frozen=True)
class BudgetReport:
    """One budget in a broker's round: which scope field resolved it, its value B and what the broker saw."""

    scope_field: str
    budget_id: str
    budget: float
    demand: float
    saturated: bool


@dataclass(frozen=True)
class Round:
    """What a round answered: the engine's clock, the scope (when it changed) and a share per report; the shares of
    budgets not in the report that other brokers' rounds moved (budget id -> share); and whether the broker's lease
    had run out (or it never reported), so that its next report must carry every budget it holds."""

    now_ms: int
    scope_version: str
    scope: list[str] | None
    shares: list[float | None]
    moved: dict[str, float] = field(default_factory=dict)
    resync: bool = False


class BudgetStore:
    """One cluster's budgets in Redis."""

    def __init__(self, client: redis.Redis, cluster: str) -> None:
        self.client = client
        self.cluster = cluster
        self.prefix = f"qb:{{{cluster}}}:"
        self._share = client.register_script(BUDGET_LUA)
        self._set_scope = client.register_script(_SET_SCOPE_LUA)
        self._state = client.register_script(BUDGET_STATE_LUA)

    @property
    def scope_key(self) -> str:
        return self.prefix + "scope"

    @property
    def brokers_key(self) -> str:
        return self.prefix + "brokers"

    def budget_key(self, budget_id: str) -> str:
        return self.prefix + "b:" + budget_id

    def set_scope(self, fields: Sequence[str]) -> str:
        """Make exactly ``fields`` cluster-wide, in one step; returns the scope's new version (``<epoch>:<n>``)."""
        answer = self._set_scope(keys=[self.scope_key], args=[secrets.token_hex(4), *sorted(set(fields))])
        return answer.decode() if isinstance(answer, bytes) else str(answer)

    def scope(self) -> set[str]:
        """The scope fields that are cluster-wide now."""
        return {f.decode() for f in self.client.hkeys(self.scope_key)} - {"#version"}

    def round(
        self,
        broker: int,
        reports: Sequence[BudgetReport],
        params: BudgetParams = DEFAULT_PARAMS,
        now_ms: int | None = None,
        scope_version: str | None = None,
        leaving: Sequence[str] = (),
        whole: bool = False,
    ) -> Round:
        """One broker's round (what the plugin does every second), through ``budget_share.lua``.

        ``reports`` are the budgets whose report moved (or all of them: the answer is the same); the others keep
        the entries of their last report while the broker's rounds go on. ``leaving``: budget ids the broker
        holds no more (its share returns at once). ``whole``: ``reports`` carries every budget the broker holds."""
        args: list[str] = [
            str(broker),
            str(params.lease_ms),
            repr(float(params.floor_fraction)),
            repr(float(params.headroom)),
            "" if now_ms is None else str(now_ms),
            scope_version or "",
            "1" if whole else "0",
        ]
        for r in reports:
            args += [r.scope_field, repr(float(r.budget)), repr(float(r.demand)), "1" if r.saturated else "0"]
        for _ in leaving:
            args += ["", "", "", "-"]
        keys = [self.scope_key, self.brokers_key] + [self.budget_key(r.budget_id) for r in reports]
        keys += [self.budget_key(b) for b in leaving]
        now, version, scope, shares, moved, resync = self._share(keys=keys, args=args)
        held = version.decode() if version else ""
        changed = [f.decode() for f in scope] if held != (scope_version or "") else None
        others = {moved[j].decode(): float(moved[j + 1]) for j in range(0, len(moved), 2)}
        mine = [float(s) if s else None for s in shares[: len(reports)]]
        return Round(int(now), held, changed, mine, others, bool(resync))

    def shares(self, budget_id: str) -> dict[int, dict[str, float]]:
        """Per broker of one budget: its held share ``s`` (absent before its first share), demand ``d``, saturation
        ``x`` (1.0 or 0.0) and last round ``t`` (ms)."""
        flat = [v.decode() for v in self._state(keys=[self.budget_key(budget_id)])]
        out: dict[int, dict[str, float]] = {}
        for j in range(0, len(flat), 5):
            broker, demand, saturated, reported, share = flat[j : j + 5]
            entry = {"d": float(demand), "x": float(saturated), "t": float(reported or "nan")}
            if share:
                entry["s"] = float(share)
            out[int(broker)] = entry
        return out

    def broker_rounds(self) -> dict[int, int]:
        """Each broker's last round, in the engine's ms."""
        return {int(k): int(v) for k, v in self.client.hgetall(self.brokers_key).items()}

    def enforcement(self, now_ms: int, lease_ms: int = BudgetParams.lease_ms, brokers: int | None = None) -> str:
        """``coordinated`` (every broker's last round within the lease), ``fallback`` or ``off`` (never reported).

        With ``brokers`` (how many the cluster has), as many fresh rounds as that are enough: a broker that was
        decommissioned or renumbered leaves a stale entry that must not keep the cluster in fallback for ever."""
        rounds = self.broker_rounds()
        if not rounds:
            return OFF
        fresh = [b for b, t in rounds.items() if now_ms - t <= lease_ms]
        wanted = len(rounds) if brokers is None else brokers
        return COORDINATED if len(fresh) >= wanted else FALLBACK

    def wait_for_rounds(self, since_ms: int, timeout_s: float = 3.0, lease_ms: int = BudgetParams.lease_ms) -> bool:
        """Wait until every broker with a live lease at ``since_ms`` (Redis's clock) has run a round after it and
        then one more; False when one has not within ``timeout_s``.

        A round after ``since_ms`` read what was written before it (the scope); a broker runs its rounds one after
        another, so its next round began after it had applied that answer: a value Kafka takes after this is
        enforced with the scope it was meant for, never as a per-broker value for the rest of a round."""
        live = {b for b, t in self.broker_rounds().items() if since_ms - t <= lease_ms}
        first: dict[int, int] = {}
        deadline = time.monotonic() + timeout_s
        while True:
            rounds = self.broker_rounds()
            for broker in live - set(first):
                if rounds.get(broker, 0) > since_ms:
                    first[broker] = rounds[broker]
            if all(b in first and rounds[b] > first[b] for b in live):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)

    def redis_now_ms(self) -> int:
        """Redis's clock in ms: the clock rounds are judged by."""
        sec, usec = self.client.time()
        return int(sec) * 1000 + int(usec) // 1000
