"""What the overview needs of the whole cluster, kept by the samplers as they publish (``engine.monitor``).

Each broker's ``Sampler`` already walks every sample it publishes; it leaves, beside the latest hash:

- ``mon:{<cluster>}:summary``: hash ``<broker>`` -> JSON ``BrokerSummary`` of that sampler's latest fields: how many
  fields it holds, its samples' count and times, the brokers they name, every entity (tags) throttled on it with its
  highest time throttled and throttle (the reader merges the brokers' into the cluster's order), and the ``TOP``
  most utilized, ties at the cut included (an entity among the cluster's top N by its highest utilization is
  among the top N of the broker where that utilization was measured);
- ``mon:{<cluster>}:where:all|bound``: hashes ``<tags>`` -> ``,<b>,...``, the brokers whose latest samples of
  those tags are sampled / have a utilization (>= 0); their lengths are the cluster's counts of distinct
  entities, written only as an entity's state on a broker changes.

A reader that finds every summary fresh and the hash holding exactly the fields the summaries count gets the
overview's figures from O(brokers + shown) reads (``frontend.monitor_summary``); anything else (a sampler gone
quiet, fields left by a sampler that restarted, samples written by something else) reads the hash whole.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: The most utilized entities per broker (the overview's heatmap shows 50 per cluster).
TOP = 50
#: Ties at the cut beyond this leave the candidates out (``BrokerSummary.complete`` false): read the hash whole.
MAX_CANDIDATES = 2_000
WHERE = ("all", "bound")


def summary_key(cluster: str) -> str:
    return f"mon:{{{cluster}}}:summary"


def where_key(cluster: str, kind: str) -> str:
    return f"mon:{{{cluster}}}:where:{kind}"


# One broker's changes to the where hashes: ARGV[1] its token ",<b>,", ARGV[2] JSON {kind: [[tags, 0|1], ...]}
# for KEYS in WHERE's order. Setting a membership twice changes nothing, so a restarted sampler repeats none.
WHERE_LUA = """
local token = ARGV[1]
local changes = cjson.decode(ARGV[2])
local kinds = {'all', 'bound'}
for i, kind in ipairs(kinds) do
  local list = changes[kind]
  if list then
    for _, c in ipairs(list) do
      local tags, on = c[1], c[2]
      local v = redis.call('HGET', KEYS[i], tags) or ''
      local at = string.find(v, token, 1, true)
      if on == 1 and not at then
        redis.call('HSET', KEYS[i], tags, v .. token)
      elseif on == 0 and at then
        local left = string.sub(v, 1, at - 1) .. string.sub(v, at + string.len(token))
        if left == '' then redis.call('HDEL', KEYS[i], tags) else redis.call('HSET', KEYS[i], tags, left) end
      end
    end
  end
end
return 1
"""


@dataclass
class BrokerSummary:
    """One sampler's latest fields summed up as the overview sums them (``frontend.monitoring``)."""

    fields: int = 0  # every field it wrote, connection samples included
    samples: int = 0  # the samples the overview counts (not connection, with a time)
    t_min: int | None = None
    t_max: int | None = None
    brokers: set[int] = field(default_factory=set)
    # per tags: [highest utilization or -1, highest thr_frac, highest thr_max of the throttled samples] over its
    # quota types on this broker
    entities: dict[str, list[float]] = field(default_factory=dict)

    def add(self, s: Mapping[str, Any]) -> None:
        """One sample, read as the overview reads it (one it would skip is skipped here too)."""
        self.add_all((s,))

    def add_all(self, samples: Iterable[Mapping[str, Any]]) -> None:
        """``add`` of each sample, in one loop over locals: a sampler's tick holds up to 100,000."""
        entities, brokers = self.entities, self.brokers
        t_min, t_max, added = self.t_min, self.t_max, 0
        for s in samples:
            try:
                t = s["t"] + 0  # a time that is no number is skipped, as the overview skips it
                get = s.get
                u, f = get("util"), get("thr_frac") or 0.0
                e = s["e"]
                a = entities.get(e) or [-1.0, 0.0, 0.0]
                if u is not None and u > a[0]:
                    a[0] = u
                if f > 0:
                    m = get("thr_max") or 0.0
                    if f > a[1]:
                        a[1] = f
                    if m > a[2]:
                        a[2] = m
                t_min = t if t_min is None or t < t_min else t_min
                t_max = t if t_max is None or t > t_max else t_max
            except (TypeError, KeyError):
                continue
            entities[e] = a
            added += 1
            b = get("b")
            if isinstance(b, int):
                brokers.add(b)
        self.t_min, self.t_max = t_min, t_max
        self.samples += added

    def where(self) -> dict[str, set[str]]:
        """The tags of each where hash this broker belongs to."""
        return {
            "all": set(self.entities),
            "bound": {e for e, a in self.entities.items() if a[0] >= 0},
        }

    def to_json(self) -> str:
        util = _top([(a[0], e) for e, a in self.entities.items() if a[0] >= 0])
        return json.dumps({
            "fields": self.fields, "samples": self.samples, "t_min": self.t_min, "t_max": self.t_max,
            "brokers": sorted(self.brokers), "complete": util is not None, "util": util or [],
            "thr": [[e, a[1], a[2]] for e, a in self.entities.items() if a[1] > 0],
        })  # fmt: skip


def _top(scored: list[tuple[float, str]]) -> list[str] | None:
    """The tags of the ``TOP`` highest scores and of every score tied with the last of them (None: too many)."""
    if len(scored) > TOP:
        # the TOP-th highest score, then only the scores at or above it sorted (stable, as the whole list sorted
        # would leave them): a broker samples up to 100,000 entities a tick
        cut = heapq.nlargest(TOP, [x[0] for x in scored])[-1]
        scored = sorted((x for x in scored if x[0] >= cut), key=lambda x: -x[0])
    return [e for _s, e in scored] if len(scored) <= MAX_CANDIDATES else None


def where_changes(before: Mapping[str, set[str]], now: Mapping[str, set[str]], first: bool) -> dict[str, list[Any]]:
    """What changed in a broker's memberships since its last tick. On its first tick it states every tags it
    samples now (in or out), so what a previous sampler of the broker left is corrected, not repeated."""
    out: dict[str, list[Any]] = {}
    sampled = now["all"]
    for kind in WHERE:
        was, kept = before.get(kind, set()), now[kind]
        changes = [[e, 1] for e in kept - was] + [[e, 0] for e in was - kept]
        if first:
            changes += [[e, 0] for e in sampled - kept - was]
        if changes:
            out[kind] = changes
    return out
