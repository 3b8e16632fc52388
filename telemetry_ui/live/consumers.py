"""``/ws/monitor/``: live quota samples over a WebSocket, as ``telemetry_ui/README.md`` (the contract) says.

Client -> server (JSON text frames): ``subscribe`` (cluster, entity, optional since_ms), ``unsubscribe``
(cluster, entity), ``subscribe_cluster`` (cluster) and ``unsubscribe_cluster`` (cluster).
Server -> client: ``subscribed`` (``entity`` null for a whole cluster), ``backfill``, ``points``, ``batch`` and
``error`` (``INVALID_REQUEST``, ``PERMISSION_DENIED``, ``NOT_FOUND``; ``UNAVAILABLE`` when Redis or the
database cannot be reached), with the request's ``action``, ``cluster`` and ``entity`` when it had them; an error
never closes the connection. Anonymous sockets are closed with 4401.

Subscribing joins the entity's Channels group *before* reading the backfill (the relay's next points come to
the group, and the consumer handles them only after the backfill was sent), then renews the entity's entry in
``mon:watched`` every ``RENEW_S`` so the relay keeps sending its points; the entry goes on unsubscribe or
disconnect once no consumer of any process is left in the group. Live points whose (broker, quota type) are no
newer than what was already sent (the backfill) are dropped, so no point is sent twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import DatabaseError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from telemetry_ui.clusters import check_cluster_name

from .fanout import Fanout
from .monitoring import (
    BACKFILL_MS,
    CLOCK_SLACK_MS,
    RENEW_S,
    TEL_BACKFILL_MS,
    WATCH_TTL_S,
    WATCHED_KEY,
    Viewer,
    check_instance,
    check_tags,
    client_tags,
    cluster_exists,
    cluster_group,
    decode_entries,
    entity_group,
    load_viewer,
    now_ms,
    parse_instance,
    recent_async,
    requests_group,
    tel_instance_group,
    tel_instance_key,
    tel_instances_key,
    tel_watched_member,
    watched_member,
)

log = logging.getLogger("telemetry_ui.consumers")

MAX_FRAME_CHARS = 16 * 1024
MAX_SUBSCRIPTIONS = 200
ACTIONS = (
    "subscribe", "unsubscribe", "subscribe_cluster", "unsubscribe_cluster", "subscribe_telemetry",
    "unsubscribe_telemetry", "subscribe_requests", "unsubscribe_requests",
)

#: One redis.asyncio client per event loop (uvicorn runs one per process).
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aioredis.Redis] = weakref.WeakKeyDictionary()
#: (cluster, tags) -> how many consumers of this process watch it (the last one out may remove it from mon:watched).
_local_watchers: Counter[tuple[str, str]] = Counter()


def monitor_redis() -> aioredis.Redis:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = aioredis.Redis.from_url(
            settings.QUOTAS_REDIS_URL, socket_connect_timeout=5, socket_timeout=10
        )
    return client


def _forget(task: asyncio.Future[Any]) -> None:
    """Retrieve what an abandoned task ended with (asyncio would log it as never retrieved)."""
    if not task.cancelled():
        task.exception()


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


class FrameError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Subscription:
    viewer: Viewer
    sent: dict[tuple[Any, Any], Any] = field(default_factory=dict)  # (broker, quota type) -> newest t sent


@dataclass
class TelemetrySub:
    client_id: str
    sent_t: int = -1  # newest push time (``t``) sent: live entries no newer were in the backfill


class MonitorConsumer(AsyncWebsocketConsumer):
    """One browser tab's live charts: entity subscriptions and cluster subscriptions."""

    #: The frames' actions this consumer answers (the WebSocket access matrix has a row for each).
    ACTIONS = ACTIONS
    subs: dict[tuple[str, str], Subscription]
    cluster_subs: dict[str, Viewer]
    request_subs: dict[str, Viewer]
    tel_subs: dict[tuple[str, str], TelemetrySub]
    renewer: asyncio.Task[None] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """channels' ``AsyncConsumer.__call__`` with a channel-layer receive that survives a quiet channel.

        channels_redis waits for messages with ``BZPOPMIN`` for 5 s (``brpop_timeout``) on a pool made with
        redis-py's defaults, whose socket timeout is also 5 s since redis-py 6: a socket that gets no
        channel-layer message for 5 s (no subscription yet, an entity without traffic) would die of the client's
        read timeout. Here a read timeout only means nothing came: the receive waits again. (The fix for every
        consumer is a ``socket_timeout`` above 5 s in ``CHANNEL_LAYERS`` hosts, e.g.
        ``{"address": url, "socket_timeout": 15}``.) On the way out, a channel receive that does not take its
        cancellation at once (channels_redis can miss it while handing its lock over) is left to end at its next
        read timeout, so the socket's end never waits for it.
        """
        self.scope = scope
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        self.base_send = send
        self._closing = False
        if self.channel_layer is not None:
            self.channel_name = await self.channel_layer.new_channel()
            self.channel_receive = self._channel_receive
        sources = [receive] if self.channel_layer is None else [receive, self._channel_receive]
        tasks = [asyncio.ensure_future(source()) for source in sources]
        try:
            while True:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for i, task in enumerate(tasks):  # the socket first, as channels does
                    if task.done():
                        message = task.result()
                        await self.dispatch(message)
                        tasks[i] = asyncio.ensure_future(sources[i]())
        except StopConsumer:
            pass
        finally:
            self._closing = True
            for task in tasks:
                task.cancel()
                task.add_done_callback(_forget)
            await asyncio.wait(tasks, timeout=1.0)

    async def _channel_receive(self) -> dict[str, Any]:
        while True:
            try:
                return await self.channel_layer.receive(self.channel_name)
            except RedisTimeoutError:
                task = asyncio.current_task()
                if self._closing or (task is not None and task.cancelling()):
                    raise asyncio.CancelledError from None

    async def dispatch(self, message: dict[str, Any]) -> None:
        """The relay's messages go straight to their handler: channels' dispatch closes stale database connections
        first, in a thread, for every message, and these handlers never touch the database."""
        kind = message.get("type")
        if kind == "mon.points":
            await self.mon_points(message)
        elif kind == "mon.batch":
            await self.mon_batch(message)
        elif kind == "tel.points":
            await self.tel_points(message)
        elif kind == "req.changed":
            await self.req_changed(message)
        else:
            await super().dispatch(message)

    async def connect(self) -> None:
        self.subs = {}
        self.cluster_subs = {}
        self.tel_subs = {}
        self.request_subs = {}
        user = self.scope.get("user")
        await self.accept()  # accepted first, so the client sees the close code (a refused handshake has none)
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            # Done: the server does not always tell an app that closed a socket that it is gone (no
            # websocket.disconnect), and this consumer would otherwise wait on its channel forever.
            raise StopConsumer
        self.user = user
        self.renewer = asyncio.create_task(self._renew())

    async def disconnect(self, code: int) -> None:
        if self.renewer is not None:
            self.renewer.cancel()
            self.renewer = None
        for cluster, tags in list(self.subs):
            try:
                await self._leave(cluster, tags)
            except Exception:  # Redis down: mon:watched entries expire on their own
                log.warning("could not leave %s/%s", cluster, tags, exc_info=True)
        for cluster in list(self.cluster_subs):
            try:
                await self.channel_layer.group_discard(cluster_group(cluster), self.channel_name)
            except Exception:
                log.warning("could not leave cluster %s", cluster, exc_info=True)
        self.cluster_subs.clear()
        for cluster in list(self.request_subs):
            try:
                await self.channel_layer.group_discard(requests_group(cluster), self.channel_name)
            except Exception:
                log.warning("could not leave the requests of %s", cluster, exc_info=True)
        self.request_subs.clear()
        for cluster, instance in list(self.tel_subs):
            try:
                await self._leave_telemetry(cluster, instance)
            except Exception:
                log.warning("could not leave telemetry %s/%s", cluster, instance, exc_info=True)

    # ---- frames from the client

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        msg: dict[str, Any] = {}
        try:
            if text_data is None:
                raise FrameError("INVALID_REQUEST", "Send JSON text frames, not binary ones.")
            if len(text_data) > MAX_FRAME_CHARS:
                raise FrameError("INVALID_REQUEST", f"A frame is at most {MAX_FRAME_CHARS} characters.")
            try:
                parsed = json.loads(text_data)
            except ValueError as e:
                raise FrameError("INVALID_REQUEST", f"Malformed JSON: {e}.") from None
            if not isinstance(parsed, dict):
                raise FrameError("INVALID_REQUEST", 'A frame is a JSON object: {"action": ..., "cluster": ...}.')
            msg = parsed
            action = msg.get("action")
            if action not in ACTIONS:
                shown = action if isinstance(action, str | int | float | None) else type(action).__name__
                raise FrameError("INVALID_REQUEST", f"Unknown action {shown!r}; use one of: {', '.join(ACTIONS)}.")
            await getattr(self, f"_{action}")(msg)
        except FrameError as e:
            await self._error(e.code, e.message, msg)
        except (RedisError, OSError, DatabaseError) as e:
            log.warning("%s failed: %s", msg.get("action"), e)
            await self._error("UNAVAILABLE", "Live data is unavailable right now; try again.", msg)

    async def _error(self, code: str, message: str, msg: dict[str, Any]) -> None:
        frame: dict[str, Any] = {"type": "error", "code": code, "message": message}
        for name in ("action", "cluster", "entity", "instance"):  # so a client can tell which request failed
            if isinstance(msg.get(name), str):
                frame[name] = msg[name]
        await self.send(text_data=_dumps(frame))

    async def _target(self, msg: dict[str, Any], with_entity: bool) -> tuple[str, str]:
        cluster = msg.get("cluster")
        problem = check_cluster_name(cluster)
        if problem:
            raise FrameError("INVALID_REQUEST", problem)
        tags = ""
        if with_entity:
            entity = msg.get("entity")
            problem = check_tags(entity)
            if problem:
                raise FrameError("INVALID_REQUEST", problem)
            tags = entity
        return cluster, tags

    async def _known_cluster(self, cluster: str) -> None:
        if not await database_sync_to_async(cluster_exists)(cluster):
            raise FrameError("NOT_FOUND", f"No cluster named {cluster!r}; GET /api/clusters/ lists them.")

    async def _subscribe(self, msg: dict[str, Any]) -> None:
        cluster, tags = await self._target(msg, with_entity=True)
        since = msg.get("since_ms")
        if since is None:
            since = now_ms() - BACKFILL_MS
        elif isinstance(since, bool) or not isinstance(since, int) or since < 0:
            raise FrameError("INVALID_REQUEST", "'since_ms' is a time in ms since the epoch (a whole number >= 0).")
        key = (cluster, tags)
        if key not in self.subs and len(self.subs) >= MAX_SUBSCRIPTIONS:
            message = f"At most {MAX_SUBSCRIPTIONS} entities per connection; unsubscribe some."
            raise FrameError("INVALID_REQUEST", message)
        await self._known_cluster(cluster)
        viewer = await database_sync_to_async(load_viewer)(self.user)
        if not viewer.may_watch(tags, cluster):
            raise FrameError(
                "PERMISSION_DENIED", f"You may not watch {tags!r}: none of your tenants owns that user and client-id."
            )
        client = monitor_redis()
        old = self.subs.get(key)
        if old is None:
            # Into the group first, then into mon:watched, then the backfill: every point is in one or the other.
            await self.channel_layer.group_add(entity_group(cluster, tags), self.channel_name)
            _local_watchers[key] += 1
            sub = self.subs[key] = Subscription(viewer)
        else:
            sub = old
            sub.viewer = viewer
        await client.zadd(WATCHED_KEY, {watched_member(cluster, tags): now_ms() + int(WATCH_TTL_S * 1000)})
        await self.send(text_data=_dumps({"type": "subscribed", "cluster": cluster, "entity": tags}))
        points = [p for p in await recent_async(client, cluster, tags, since) if viewer.may_see_type(p.get("q", ""))]
        for p in points:
            k = (p.get("b"), p.get("q"))
            t = p.get("t")
            if t is not None and (k not in sub.sent or t > sub.sent[k]):
                sub.sent[k] = t
        await self.send(text_data=_dumps({"type": "backfill", "cluster": cluster, "entity": tags, "points": points}))

    async def _unsubscribe(self, msg: dict[str, Any]) -> None:
        cluster, tags = await self._target(msg, with_entity=True)
        if (cluster, tags) not in self.subs:
            raise FrameError("NOT_FOUND", f"Not subscribed to {tags!r} of {cluster!r}.")
        await self._leave(cluster, tags)

    async def _leave(self, cluster: str, tags: str) -> None:
        key = (cluster, tags)
        if self.subs.pop(key, None) is None:
            return
        group = entity_group(cluster, tags)
        await self.channel_layer.group_discard(group, self.channel_name)
        _local_watchers[key] -= 1
        if _local_watchers[key] > 0:
            return
        del _local_watchers[key]
        if await Fanout(self.channel_layer).has_members(group):  # a consumer of another process still watches
            return
        await monitor_redis().zrem(WATCHED_KEY, watched_member(cluster, tags))

    async def _subscribe_cluster(self, msg: dict[str, Any]) -> None:
        cluster, _ = await self._target(msg, with_entity=False)
        await self._known_cluster(cluster)
        viewer = await database_sync_to_async(load_viewer)(self.user)
        if cluster not in self.cluster_subs:
            await self.channel_layer.group_add(cluster_group(cluster), self.channel_name)
        self.cluster_subs[cluster] = viewer
        await self.send(text_data=_dumps({"type": "subscribed", "cluster": cluster, "entity": None}))

    async def _unsubscribe_cluster(self, msg: dict[str, Any]) -> None:
        cluster, _ = await self._target(msg, with_entity=False)
        if self.cluster_subs.pop(cluster, None) is None:
            raise FrameError("NOT_FOUND", f"Not subscribed to the cluster {cluster!r}.")
        await self.channel_layer.group_discard(cluster_group(cluster), self.channel_name)

    # ---- requests' moves, of every kind (live.request_events sends them from whichever process committed them)

    async def _subscribe_requests(self, msg: dict[str, Any]) -> None:
        cluster, _ = await self._target(msg, with_entity=False)
        await self._known_cluster(cluster)
        viewer = await database_sync_to_async(load_viewer)(self.user)
        if cluster not in self.request_subs:
            await self.channel_layer.group_add(requests_group(cluster), self.channel_name)
        self.request_subs[cluster] = viewer
        await self.send(text_data=_dumps({"type": "subscribed_requests", "cluster": cluster}))

    async def _unsubscribe_requests(self, msg: dict[str, Any]) -> None:
        cluster, _ = await self._target(msg, with_entity=False)
        if self.request_subs.pop(cluster, None) is None:
            raise FrameError("NOT_FOUND", f"Not subscribed to the requests of {cluster!r}.")
        await self.channel_layer.group_discard(requests_group(cluster), self.channel_name)

    async def req_changed(self, event: dict[str, Any]) -> None:
        cluster = event.get("cluster")
        viewer = self.request_subs.get(cluster)  # type: ignore[arg-type]
        if viewer is None:
            return
        if not viewer.everything and event.get("tenant_id") not in {t.pk for t in viewer.tenants}:
            return  # a member sees its own tenants' requests only
        frame = {k: event.get(k) for k in ("kind", "cluster", "request_id", "state", "tenant", "at")}
        await self.send(text_data=_dumps({"type": "request", **frame}))

    # ---- client telemetry (KIP-714 pushes stored by the sink)

    async def _subscribe_telemetry(self, msg: dict[str, Any]) -> None:
        cluster, _ = await self._target(msg, with_entity=False)
        instance = msg.get("instance")
        problem = check_instance(instance)
        if problem:
            raise FrameError("INVALID_REQUEST", problem)
        since = msg.get("since_ms")
        if since is None:
            since = now_ms() - TEL_BACKFILL_MS
        elif isinstance(since, bool) or not isinstance(since, int) or since < 0:
            raise FrameError("INVALID_REQUEST", "'since_ms' is a time in ms since the epoch (a whole number >= 0).")
        key = (cluster, instance)
        if key not in self.tel_subs and len(self.tel_subs) >= MAX_SUBSCRIPTIONS:
            raise FrameError("INVALID_REQUEST", f"At most {MAX_SUBSCRIPTIONS} instances per connection.")
        await self._known_cluster(cluster)
        client = monitor_redis()
        info = parse_instance(await client.hget(tel_instances_key(cluster), instance))
        client_id = info.get("client_id") if info is not None else None
        if client_id is None:  # gone from the hash: its stream may still name it
            last = decode_entries(await client.xrevrange(tel_instance_key(cluster, instance), count=1))
            if last:
                client_id = last[0].get("client_id")
        if not isinstance(client_id, str):
            raise FrameError("NOT_FOUND", f"No client instance {instance!r} has pushed telemetry to {cluster!r}.")
        viewer = await database_sync_to_async(load_viewer)(self.user)
        if not viewer.everything and (not client_id or not viewer.may_watch(client_tags(client_id), cluster)):
            message = f"You may not watch instance {instance!r}: none of your tenants owns its client id."
            raise FrameError("PERMISSION_DENIED", message)
        sub = self.tel_subs.get(key)
        if sub is None:
            await self.channel_layer.group_add(tel_instance_group(cluster, instance), self.channel_name)
            _local_watchers[(cluster, "\x1e" + instance)] += 1
            sub = self.tel_subs[key] = TelemetrySub(client_id)
        await client.zadd(WATCHED_KEY, {tel_watched_member(cluster, instance): now_ms() + int(WATCH_TTL_S * 1000)})
        await self.send(text_data=_dumps({"type": "subscribed", "cluster": cluster, "instance": instance}))
        start = max(0, since - CLOCK_SLACK_MS)
        rows = await client.xrange(tel_instance_key(cluster, instance), min=f"{start}-0")
        entries = [e for e in decode_entries(rows) if isinstance(e.get("t"), int) and e["t"] >= since]
        entries.sort(key=lambda e: e["t"])
        if entries:
            sub.sent_t = max(sub.sent_t, entries[-1]["t"])
        frame = {"type": "backfill", "cluster": cluster, "instance": instance, "entries": entries}
        await self.send(text_data=_dumps(frame))

    async def _unsubscribe_telemetry(self, msg: dict[str, Any]) -> None:
        cluster, _ = await self._target(msg, with_entity=False)
        instance = msg.get("instance")
        problem = check_instance(instance)
        if problem:
            raise FrameError("INVALID_REQUEST", problem)
        if (cluster, instance) not in self.tel_subs:
            raise FrameError("NOT_FOUND", f"Not subscribed to instance {instance!r} of {cluster!r}.")
        await self._leave_telemetry(cluster, instance)

    async def _leave_telemetry(self, cluster: str, instance: str) -> None:
        if self.tel_subs.pop((cluster, instance), None) is None:
            return
        group = tel_instance_group(cluster, instance)
        await self.channel_layer.group_discard(group, self.channel_name)
        local = (cluster, "\x1e" + instance)
        _local_watchers[local] -= 1
        if _local_watchers[local] > 0:
            return
        del _local_watchers[local]
        if await Fanout(self.channel_layer).has_members(group):
            return
        await monitor_redis().zrem(WATCHED_KEY, tel_watched_member(cluster, instance))

    async def tel_points(self, event: dict[str, Any]) -> None:
        cluster, instance = event.get("cluster"), event.get("instance")
        sub = self.tel_subs.get((cluster, instance))  # type: ignore[arg-type]
        if sub is None:
            return
        out = []
        for e in event.get("entries", ()):
            t = e.get("t")
            if not isinstance(t, int) or t <= sub.sent_t:
                continue  # already sent (in the backfill)
            sub.sent_t = t
            out.append(e)
        if out:
            frame = {"type": "telemetry", "cluster": cluster, "instance": instance, "entries": out}
            await self.send(text_data=_dumps(frame))

    async def _renew(self) -> None:
        """Keep this connection's entities and telemetry instances in mon:watched while it is subscribed."""
        while True:
            await asyncio.sleep(RENEW_S)
            if not self.subs and not self.tel_subs:
                continue
            expiry = now_ms() + int(WATCH_TTL_S * 1000)
            members = {watched_member(c, t): expiry for c, t in self.subs}
            members.update({tel_watched_member(c, i): expiry for c, i in self.tel_subs})
            try:
                await monitor_redis().zadd(WATCHED_KEY, members)
            except (RedisError, OSError) as e:
                log.warning("could not renew %d watched entities: %s", len(members), e)

    # ---- messages from the relay (channel layer)

    async def mon_points(self, event: dict[str, Any]) -> None:
        cluster, tags = event.get("cluster"), event.get("entity")
        sub = self.subs.get((cluster, tags))  # type: ignore[arg-type]
        if sub is None:
            return
        out = []
        for p in event.get("points", ()):
            q = p.get("q")
            if not sub.viewer.may_see_type(q):
                continue
            k, t = (p.get("b"), q), p.get("t")
            last = sub.sent.get(k)
            if last is not None and (t is None or t <= last):
                continue  # already sent (in the backfill)
            sub.sent[k] = t
            out.append(p)
        if out:
            await self.send(text_data=_dumps({"type": "points", "cluster": cluster, "entity": tags, "points": out}))

    async def mon_batch(self, event: dict[str, Any]) -> None:
        cluster = event.get("cluster")
        viewer = self.cluster_subs.get(cluster)  # type: ignore[arg-type]
        if viewer is None:
            return
        if viewer.everything:
            # The layer hands the same message to every consumer of this process: encode it once for all of them.
            text = event.get("_frame")
            if text is None:
                text = event["_frame"] = _dumps({"type": "batch", "cluster": cluster, "samples": event["samples"]})
            await self.send(text_data=text)
            return
        samples = [s for s in event.get("samples", ()) if viewer.may_see(s, cluster)]
        if samples:
            await self.send(text_data=_dumps({"type": "batch", "cluster": cluster, "samples": samples}))
