"""The engine on a 3-master Redis Cluster (``devtools.redis_cluster``, started once per session).

The whole engine suite runs on the cluster with ``QUOTAS_TEST_REDIS_CLUSTER=1``; CI runs this representative subset
on it every time: two conformance files through the replay command, the differential tests (batches of many sensors,
so many slots), the managers' batches, the sweep, a connection-quota batch, the sampler and its index, and what is
particular to a cluster (a batch really spans the masters and answers in order; the namespace's config and desired
state stay in one slot).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from devtools.redis_cluster import RedisCluster
from engine.config import AlterOp, EntityRef, QuotaEngine, namespace_for_broker
from engine.decisions import Decision, Kind, Op
from engine.desired import NamespaceState
from engine.entities import DEFAULT, QuotaType
from engine.managers import ClientQuotaManager, UsageRecord
from engine.model import ModelBackend
from engine.redis_backend import RedisBackend, connect, is_cluster
from tests.engine.test_config import test_the_sweep_leaves_other_structures_of_the_namespace_alone  # noqa: F401
from tests.engine.test_conformance import ROOT
from tests.engine.test_conformance import test_replay_reproduces_file_exactly as _replay_test
from tests.engine.test_connections import test_large_batches_are_split_and_answered_whole  # noqa: F401
from tests.engine.test_differential import (  # noqa: F401
    test_many_sensors_batched_with_a_clock_that_steps_back,
    test_the_hot_path_columns_equal_the_model,
)
from tests.engine.test_managers import (  # noqa: F401
    test_all_keys_of_a_sensor_share_one_hash_slot,
    test_batches_answer_in_order_and_equal_single_calls,
    test_namespaces_keep_brokers_apart_and_a_cluster_namespace_is_shared,
)
from tests.engine.test_monitor import (  # noqa: F401
    test_a_tick_publishes_rate_bound_throttle_and_tokens_of_active_clients,
    test_the_index_holds_one_member_per_field_of_the_latest_hash_as_sensors_come_and_go,
)

T0 = 1_700_000_000_000


@pytest.fixture(scope="session")
def engine_redis_url(redis_cluster_url: str) -> str:
    """Here the engine's Redis is always the session's Redis Cluster."""
    return redis_cluster_url


@pytest.fixture(scope="module")
def redis_client(redis_cluster_url: str) -> Iterator[redis.Redis]:
    client = connect(redis_cluster_url, timeout_s=5.0)
    yield client
    client.close()


@pytest.mark.parametrize("name", ["kafka_vectors.json", "rate_traces.json"])
def test_the_replay_reproduces_conformance_on_the_cluster(name: str, redis_cluster_url: str) -> None:
    _replay_test(ROOT / "conformance" / name, "redis", redis_cluster_url)


def test_a_batch_spans_the_masters_and_answers_as_the_model_in_order(redis_client: redis.Redis, namespace: str) -> None:
    assert is_cluster(redis_client)
    keys = [f"qe:{{{namespace}|Produce-u{i}:}}" for i in range(60)]
    decisions = [
        Decision(keys[(7 * j) % 60], Kind.RATE, Op.RECORD, 900.0 + j, T0 + 13 * j, 5_000.0)
        for j in range(600)
    ]
    backend = RedisBackend(redis_client)
    assert len(backend.by_slot(keys)) > 40  # one group per slot: the batch really is split
    got = backend.execute(decisions)
    want = ModelBackend().execute(decisions)
    assert [(o.violated, o.value, o.throttle_raw) for o in got] == [(o.violated, o.value, o.throttle_raw) for o in want]
    held_by = {redis_client.get_node_from_key(k).name for k in keys}
    assert len(held_by) == 3  # every master holds some of the sensors
    assert all(redis_client.exists(k) for k in keys)


def test_a_batch_of_many_entities_is_one_script_call_per_bucket_spread_evenly_over_the_masters(
    redis_client: redis.Redis, namespace: str
) -> None:
    backend = RedisBackend(redis_client)
    m = ClientQuotaManager(QuotaType.PRODUCE, backend, namespace=namespace)
    m.update_quota(None, DEFAULT, 5_000.0)
    model = ClientQuotaManager(QuotaType.PRODUCE, ModelBackend(), namespace=namespace)
    model.update_quota(None, DEFAULT, 5_000.0)
    usages = [UsageRecord("u", f"c{j % 600}", 100.0 * (j % 7), T0 + j) for j in range(900)]
    masters = [n.redis_connection for n in redis_client.get_primaries()]
    for node in masters:
        node.config_resetstat()
    assert m.record_many(usages) == model.record_many(usages)
    calls = [int(node.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)) for node in masters]
    assert sum(calls) == 12  # one script call per bucket of the namespace, not one per entity
    assert sorted(calls) == [4, 4, 4]  # the buckets' slots spread evenly over the three masters
    keys = [m.sensor_key(f":c{i}") for i in range(600)]
    assert len({redis_client.keyslot(k) for k in keys}) == 12
    redis_client.delete(*keys)


def test_a_namespace_keeps_config_and_desired_state_in_one_slot(redis_client: redis.Redis, namespace: str) -> None:
    engine = QuotaEngine(redis_client, namespace)
    engine.store.alter([AlterOp(EntityRef(user="alice"), "producer_byte_rate", 1000)])
    engine.refresh()
    assert engine.effective("alice", "app")["producer_byte_rate"]["value"] == 1000
    state = NamespaceState(redis_client, namespace_for_broker(namespace, 1), 1)
    keys = state._keys()
    assert len({redis_client.keyslot(k) for k in keys}) == 1
    item = ("quota", EntityRef(user="bob").field(), "producer_byte_rate")
    changed, held = state.apply(3, {item: "500"}, mode="full")
    assert changed and state.read() == (3, {item: "500.0"})
    redis_client.delete(*keys)


def test_the_cluster_tool_reaches_ok_and_cleans_up() -> None:
    cluster = RedisCluster(name="pytest-tool-check", masters=3).start()
    try:
        status = cluster.status()
        assert status["running"] is True and len(status["nodes"]) == 3  # type: ignore[arg-type]
        assert cluster.url.startswith("redis+cluster://")
    finally:
        cluster.stop()
    assert not cluster.dir.exists()
    assert cluster.status()["running"] is False
