"""Live samples of an engine on a Redis Cluster reach the relay, and through it the charts' Channels groups.

The engine's brokers live on the session's 3-master Redis Cluster; the relay, the channel layer and the charts read
the portal's own Redis (``QUOTAS_REDIS_URL``). ``manage.py loadgen`` reads the sensors on the cluster and publishes
the samples to the portal's Redis, where the relay (a real process) tails them.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from channels_redis.core import RedisChannelLayer

from engine.config import AlterOp, EntityRef, QuotaEngine, namespace_for_broker
from engine.monitor import firehose_key
from engine.redis_backend import connect
from quotas.models import Broker, Cluster
from telemetry_ui.live.monitoring import cluster_group
from tests.redis_keys import delete_matching
from tests.services import Service, service_env, start_relay
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_samples_of_an_engine_on_a_redis_cluster_reach_the_relay(
    redis_url: str, redis_cluster_url: str, tmp_path: Path
) -> None:
    name = f"mon-rc-{uuid.uuid4().hex[:8]}"
    cluster = Cluster.objects.create(name=name)
    for b in (0, 1):
        Broker.objects.create(cluster=cluster, broker_id=b, host=f"b{b}:9092", engine_url=redis_cluster_url)
    engine = connect(redis_cluster_url, 5.0)
    for b in (0, 1):  # a quota in each broker's namespace on the cluster, so its sensors are sampled
        QuotaEngine(engine, namespace_for_broker(name, b)).store.alter(
            [AlterOp(EntityRef(user="ANONYMOUS"), "producer_byte_rate", 1e9)]
        )
    env = service_env(redis_url)
    relay = start_relay(env, tmp_path / "relay.log")
    loadgen: Service | None = None
    try:
        wait_for("the relay to tail the cluster", lambda: name in relay.text())

        async def scenario() -> list[dict[str, Any]]:
            layer = RedisChannelLayer(hosts=[redis_url])
            channel = await layer.new_channel()
            await layer.group_add(cluster_group(name), channel)
            nonlocal loadgen
            cmd = [sys.executable, "manage.py", "loadgen", "--cluster", name, "--duration", "30", "--status-every", "1"]
            loadgen = Service(cmd, env, tmp_path / "loadgen.log").start()
            got: list[dict[str, Any]] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    msg = await asyncio.wait_for(layer.receive(channel), 5)
                except TimeoutError:
                    assert loadgen.alive(), loadgen.text()[-3000:]
                    continue
                assert msg["type"] == "mon.batch" and msg["cluster"] == name, msg
                got.extend(msg["samples"])
                produce = {s["b"] for s in got if s["q"] == "produce" and s["rate"] and s["e"].startswith("ANONYMOUS:")}
                if produce == {0, 1}:
                    break
            await layer.close_pools()
            return got

        samples = asyncio.run(scenario())
        produce = [s for s in samples if s["q"] == "produce" and s["rate"]]
        assert {s["b"] for s in produce} == {0, 1}, loadgen.text()[-3000:] if loadgen else samples
        # the sensors the samples measured are on the cluster; the samples are not (they are the portal's to read)
        assert all(s["c"] == name for s in samples)
        mine = [s for s in produce if s["e"].startswith("ANONYMOUS:")]
        assert mine and all(s["bound"] == 1e9 for s in mine), produce  # the quota stored on the cluster
        assert engine.exists(firehose_key(name)) == 0
        assert redis.Redis.from_url(redis_url).xlen(firehose_key(name)) > 0
    finally:
        if loadgen is not None:
            loadgen.stop()
        relay.stop()
        delete_matching(engine, f"qe:{{{name}.*}}*", f"mon:{{{name}}}*")
        engine.close()
