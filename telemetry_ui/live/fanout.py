"""Group sends in bulk through the Channels layer: what the relay sends each iteration, in two Redis round trips.

``channels_redis``' ``group_send`` costs four round trips per group (expire members, read members, expire
messages, a Lua send). The relay sends to many groups at once (a cluster's batch, and the points of every
watched entity), so ``Fanout`` does the same work for all of them at once: one script reads the members of
every group (dropping members past ``group_expiry``, as ``group_send`` does), one script per Redis host
pushes every message onto its channel keys with ``group_send``'s capacity check and expiry. The messages are
stored exactly as ``group_send`` stores them (the layer's own serializer, ``__asgi_channel__`` listing the
process-local channels of each key), so consumers receive them as if sent by ``group_send``.

All the consumers of one server process share one channel key, and so the layer's ``capacity`` (100 messages
by default): a relay iteration may well hold more messages for one process than that (a batch plus the points
of every entity watched there). Where ``group_send`` drops what does not fit, ``Fanout`` gives the process up
to ``max_wait_s`` to make room (in order: what did not fit is sent again, after a short pause, before
anything newer), then drops the rest; a key that stays full (its process is gone, its channels are still in
the groups until ``group_expiry``) gets no more waiting until it takes messages again.

Other layers (the in-memory layer, the pub/sub layer) get plain ``group_send`` calls.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

try:
    from channels_redis.core import RedisChannelLayer
except ImportError:  # pragma: no cover - channels_redis is in requirements.txt
    RedisChannelLayer = None  # type: ignore[assignment,misc]

#: Members of every group in KEYS (after dropping members older than ARGV[1], the layer's group_expiry).
MEMBERS_LUA = """
local out = {}
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, 0, ARGV[1])
  out[i] = redis.call('ZRANGE', key, 0, -1)
end
return out
"""

#: channels_redis' group_send script, one message per key (KEYS may repeat): ARGV = n messages, n capacities,
#: n scores, then now and the layer's expiry. Messages older than expiry go first, as in group_send. Returns the
#: (1-based) positions of the messages that did not fit (the key was at its capacity).
SEND_LUA = """
local n = #KEYS
local now = tonumber(ARGV[3 * n + 1])
local expiry = tonumber(ARGV[3 * n + 2])
local full = {}
for i = 1, n do
  local key = KEYS[i]
  redis.call('ZREMRANGEBYSCORE', key, 0, now - expiry)
  if redis.call('ZCOUNT', key, '-inf', '+inf') < tonumber(ARGV[n + i]) then
    redis.call('ZADD', key, ARGV[2 * n + i], ARGV[i])
    redis.call('EXPIRE', key, expiry)
  else
    full[#full + 1] = i
  end
end
return full
"""

#: A delivery: the group, its members (from ``members``) and the message.
Delivery = tuple[str, list[str], dict[str, Any]]


class Fanout:
    """Bulk group sends through one channel layer (bound to the event loop it is first used on)."""

    def __init__(self, layer: Any, max_wait_s: float = 0.5) -> None:
        self.layer = layer
        self.max_wait_s = max_wait_s
        self.full_keys: set[str] = set()  # channel keys still full after max_wait_s: not waited for again
        self.bulk = RedisChannelLayer is not None and isinstance(layer, RedisChannelLayer)
        self._scripts: dict[int, tuple[Any, Any]] = {}

    def _script(self, index: int) -> tuple[Any, Any]:
        found = self._scripts.get(index)
        if found is None:
            conn = self.layer.connection(index)
            found = self._scripts[index] = (conn.register_script(MEMBERS_LUA), conn.register_script(SEND_LUA))
        return found

    async def members(self, groups: list[str]) -> dict[str, list[str]]:
        """The channels in each group now. Layers other than Redis cannot say: every group counts as non-empty."""
        if not groups:
            return {}
        if not self.bulk:
            return {g: ["?"] for g in groups}
        layer = self.layer
        by_host: dict[int, list[str]] = defaultdict(list)
        for g in groups:
            by_host[layer.consistent_hash(g)].append(g)
        expired = int(time.time()) - int(layer.group_expiry)
        found: dict[str, list[str]] = {}
        for index, names in by_host.items():
            members_script, _ = self._script(index)
            rows = await members_script(keys=[layer._group_key(g) for g in names], args=[expired])
            for g, row in zip(names, rows, strict=True):
                if row:
                    found[g] = [m.decode() for m in row]
        return found

    async def send(self, deliveries: list[Delivery]) -> int:
        """Send every message to its group's channels; returns how many messages were dropped (over capacity)."""
        if not deliveries:
            return 0
        if not self.bulk:
            await asyncio.gather(*(self.layer.group_send(g, m) for g, _members, m in deliveries))
            return 0
        layer = self.layer
        per_host: dict[int, list[tuple[str, bytes, int]]] = defaultdict(list)
        for _group, channels, message in deliveries:
            per_key: dict[str, list[str]] = {}
            for channel in channels:
                non_local = layer.non_local_name(channel) if "!" in channel else channel
                per_key.setdefault(non_local, []).append(channel)
            for non_local, names in per_key.items():
                payload = layer.serialize({**message, "__asgi_channel__": names})
                per_host[layer.consistent_hash(non_local)].append(
                    (layer.prefix + non_local, payload, layer.get_capacity(names[0]))
                )
        dropped = 0
        for index, items in per_host.items():
            dropped += await self._send_host(index, items)
        return dropped

    async def _send_host(self, index: int, items: list[tuple[str, bytes, int]]) -> int:
        _, send_script = self._script(index)
        deadline = time.monotonic() + self.max_wait_s
        pause = 0.002
        while True:
            now = time.time()
            # Distinct, increasing scores keep the messages of one key in the order they were built (and a message
            # sent again after a pause comes after those of the same key that fitted before it).
            scores = [repr(now + i * 1e-6) for i in range(len(items))]
            args = [p for _k, p, _c in items] + [c for _k, _p, c in items] + scores + [int(now), int(self.layer.expiry)]
            full = await send_script(keys=[k for k, _p, _c in items], args=args)
            if self.full_keys:
                refused = set(full)
                self.full_keys -= {k for i, (k, _p, _c) in enumerate(items, 1) if i not in refused}  # it reads again
            if not full:
                return 0
            # Wait for room only on keys that took messages lately: a key that stays full has no reader.
            waiting = [items[i - 1] for i in full if items[i - 1][0] not in self.full_keys]
            dropped = len(full) - len(waiting)
            if not waiting:
                return dropped
            if time.monotonic() + pause > deadline:
                self.full_keys |= {k for k, _p, _c in waiting}
                return dropped + len(waiting)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)
            items = waiting

    async def has_members(self, group: str) -> bool:
        """Whether anyone (any process) is in the group; True when the layer cannot say."""
        if not self.bulk:
            return True
        layer = self.layer
        conn = layer.connection(layer.consistent_hash(group))
        return bool(await conn.zcard(layer._group_key(group)))
