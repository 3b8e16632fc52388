"""The relay on a Redis of its own: it outlives a Redis restart and stops cleanly on SIGTERM.

Its messages are read with channels_redis' own ``receive`` on a channel in the cluster's group, so what the
relay writes in bulk (telemetry_ui/live/fanout.py) is what a consumer gets from ``group_send``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from channels_redis.core import RedisChannelLayer

from devtools.redis_server import RedisServer
from engine.monitor import Sampler
from quotas.models import Cluster
from telemetry_ui.live.monitoring import WATCHED_KEY, cluster_group, entity_group, watched_member
from tests.services import sample, service_env, start_relay
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_relay_survives_a_redis_restart_and_stops_on_sigterm(redis_url: str, tmp_path: Path) -> None:
    cluster = Cluster.objects.create(name=f"mon-{uuid.uuid4().hex[:10]}").name
    server = RedisServer(name=f"relay-test-{os.getpid()}").start()
    relay = None
    try:
        relay = start_relay(service_env(server.url), tmp_path / "relay.log")
        wait_for("the relay to tail the cluster", lambda: cluster in relay.text())

        async def scenario() -> None:
            layer = RedisChannelLayer(hosts=[server.url])
            old_layers = [layer]
            client = redis.Redis.from_url(server.url)

            async def listen() -> tuple[str, str]:
                layer = old_layers[-1]
                batches = await layer.new_channel()
                points = await layer.new_channel()
                await layer.group_add(cluster_group(cluster), batches)
                await layer.group_add(entity_group(cluster, "alice:"), points)
                client.zadd(WATCHED_KEY, {watched_member(cluster, "alice:"): int(time.time() * 1000) + 60_000})
                return batches, points

            async def tick(sampler: Sampler) -> dict[str, Any]:
                s = [sample(cluster, 1, "alice:", int(time.time() * 1000)), sample(cluster, 1, "bob:", 0)]
                sampler.publish(s, s[0]["t"])
                return {"batch": s, "points": [s[0]]}

            batches, points = await listen()
            sent = await tick(Sampler(client, cluster, 1, managers={}))
            got = await asyncio.wait_for(layer.receive(batches), 3)
            assert got == {"type": "mon.batch", "cluster": cluster, "samples": sent["batch"]}
            got = await asyncio.wait_for(layer.receive(points), 3)
            assert got == {"type": "mon.points", "cluster": cluster, "entity": "alice:", "points": sent["points"]}

            server.stop()  # everything is lost: streams, groups, the watched set
            wait_for("the relay to notice", lambda: "Redis unreachable" in relay.text())
            server.start()
            wait_for("the relay to come back", lambda: "Redis is back" in relay.text())
            layer = RedisChannelLayer(hosts=[server.url])  # the old one's connections died with the server
            old_layers.append(layer)
            client.connection_pool.disconnect()
            batches, points = await listen()
            sent = await tick(Sampler(client, cluster, 1, managers={}))
            got = await asyncio.wait_for(layer.receive(batches), 3)
            assert got["samples"] == sent["batch"]
            got = await asyncio.wait_for(layer.receive(points), 3)
            assert got["points"] == sent["points"]
            await layer.close_pools()
            client.close()

        asyncio.run(scenario())
        assert relay.alive(), relay.text()[-3000:]
        t0 = time.monotonic()
        assert relay.stop() == 0, relay.text()[-3000:]
        assert time.monotonic() - t0 < 3
        assert "relay stopped" in relay.text()
        relay = None
    finally:
        if relay is not None:
            relay.stop()
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)
