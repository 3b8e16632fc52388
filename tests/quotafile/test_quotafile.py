"""The quota file core (``quotafile``, no Django): what it writes reads back to the same state, whatever the
values and names, and the diff's order and scope.
"""

from __future__ import annotations

import random

import pytest

import quotafile as qf
from engine.config import EntityRef
from engine.units import parse_quota_value

ODD_NAMES = ["svc a", "svc:a", "#x", "- dash", "ünï", "yes", "null", "1.5", "'q'", '"dq"', "a/b", "[x]", "{y}", "*",
             "<default>x", "~", "%20", "a\tb"]


def test_every_byte_rate_is_written_in_a_form_that_reads_back_to_it() -> None:
    rng = random.Random(7)
    values = [1, 1023, 1024, 1536, 1 << 20, 1572864, 1000000, (1 << 63) - 1, 3 << 30, 5 * 1024 + 512]
    values += [rng.randrange(1, 1 << 40) for _ in range(2000)] + [rng.randrange(1, 64) << rng.randrange(0, 30)
                                                                   for _ in range(2000)]
    for value in values:
        written = qf.human_value("producer_byte_rate", float(value))
        # quotas are kept as doubles (as Kafka keeps them): the text must read back to the same double
        assert float(parse_quota_value("producer_byte_rate", written)) == float(value), (value, written)
    assert qf.human_value("consumer_byte_rate", 1572864.0) == "1.5 MiB/s"
    assert qf.human_value("consumer_byte_rate", 1000000.0) == 1000000  # 976.5625 KiB/s: whole bytes instead


def test_written_state_reads_back_equal_with_odd_names_and_every_section() -> None:
    quotas = {EntityRef(user=n): {"producer_byte_rate": 2048.0, "request_percentage": 12.5} for n in ODD_NAMES}
    quotas.update({EntityRef(client_id=n): {"controller_mutation_rate": 0.5} for n in ODD_NAMES})
    quotas[EntityRef("<default>", "<default>")] = {"consumer_byte_rate": 1.0}
    quotas[EntityRef(ip="::1")] = {"connection_creation_rate": 7.0}
    quotas[EntityRef(ip="<default>")] = {"connection_creation_rate": 70.0}
    state = qf.QuotaState(
        "prod", quotas,
        broker_configs={"<default>": {"max.connections": "100"}, "2": {"listener.name.X.max.connections": "007"}},
        topic_configs={"a topic": {"leader.replication.throttled.replicas": "0:1,1:2"}},
        client_metrics={"m:1": qf.Subscription("a.,b.", 100, "client_id=app-.*"), "m2": qf.Subscription()},
    )
    text = qf.write(state)
    back = qf.read(text)
    assert back.quotas == state.quotas
    assert back.broker_configs == state.broker_configs and back.topic_configs == state.topic_configs
    assert back.client_metrics == state.client_metrics
    assert qf.diff(state, back, prune=True) == []
    assert qf.write(back) == text  # stable: the same state is always the same text


def test_the_diff_follows_kafkas_precedence_and_leaves_absent_sections_alone() -> None:
    levels = [EntityRef(client_id="<default>"), EntityRef(client_id="c"), EntityRef(user="<default>"),
              EntityRef("<default>", "<default>"), EntityRef("<default>", "c"), EntityRef(user="u"),
              EntityRef("u", "<default>"), EntityRef("u", "c"), EntityRef(ip="<default>"), EntityRef(ip="10.0.0.1")]
    desired = qf.QuotaState("p", {r: {"connection_creation_rate" if r.ip else "request_percentage": 5.0}
                                  for r in levels})
    current = qf.QuotaState("p", {}, broker_configs={"<default>": {"max.connections": "9"}})
    paths = [c.path for c in qf.diff(current, desired, prune=True)]
    assert paths == ["/config/users/u/clients/c", "/config/users/u/clients/<default>", "/config/users/u",
                     "/config/users/<default>/clients/c", "/config/users/<default>/clients/<default>",
                     "/config/users/<default>", "/config/clients/c", "/config/clients/<default>",
                     "/config/ips/10.0.0.1", "/config/ips/<default>"]  # brokerConfigs: not in the file


@pytest.mark.parametrize(("text", "line", "key"), [
    ("apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: p\nquotas:\n  - entity: {user: a}\n"
     "    request_percentage: lots\n", 6, "request_percentage"),
    ("apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: p\ncluster: q\n", 4, "cluster"),
    ("apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: p\nquotas:\n  - entity: {user: a, ip: 1.2.3.4}\n"
     "    request_percentage: 1\n", 5, "entity"),
    ("apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: p\nclientMetrics:\n  - name: x\n"
     "    match: ['client_id=[bad']\n", 6, "match"),
])
def test_errors_name_the_line_and_the_key(text: str, line: int, key: str) -> None:
    with pytest.raises(qf.InvalidQuotaFile) as caught:
        qf.read(text)
    assert (caught.value.errors[0].line, caught.value.errors[0].key) == (line, key), caught.value.errors


def test_shadows_name_the_more_specific_levels_that_still_win_and_count_the_rest() -> None:
    after = {EntityRef(user=f"u{i}"): {"producer_byte_rate": 1024.0} for i in range(8)}
    after[EntityRef("<default>", "app-1")] = {"producer_byte_rate": 2048.0}
    after[EntityRef(client_id="app-2")] = {"producer_byte_rate": 4096.0}
    shadows = qf.Shadows(after)
    warnings = shadows.warnings(EntityRef("<default>", "app-1"), "producer_byte_rate")
    assert warnings[0] == ("/config/users/<default>/clients/app-1 producer_byte_rate does not apply to user 'u0' with "
                           "client-id 'app-1': /config/users/u0 (a more specific level in Kafka's precedence) still "
                           "wins.")
    assert len(warnings) == qf.NAMED_WINNERS + 1 and warnings[-1].startswith("... and 3 more entities")
    # a client-id quota (level 7) loses to every user quota for those users' clients, not for other users
    level7 = shadows.warnings(EntityRef(client_id="app-2"), "producer_byte_rate")
    assert "the clients of user" not in level7[0] and "user 'u0' with client-id 'app-2'" in level7[0]
    assert shadows.warnings(EntityRef(user="u0"), "producer_byte_rate") == []  # nothing more specific
    assert shadows.fallback(EntityRef("u0", "app-2"), "producer_byte_rate") == "/config/users/u0"
    assert shadows.fallback(EntityRef(client_id="app-9"), "consumer_byte_rate") is None
