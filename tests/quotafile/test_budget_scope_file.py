"""Budget scopes in the quota file (issue 28): ``{value: ..., budgetScope: cluster_wide}`` reads and writes back to
the same state, a change of scope alone is a change, and a scope a value cannot have names its line and key."""

from __future__ import annotations

import pytest

import quotafile as qf
from engine.config import EntityRef

HEAD = "apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: prod\n"
PBR, RP = "producer_byte_rate", "request_percentage"
ALICE, BOB = EntityRef(user="alice"), EntityRef(user="bob")


def test_a_cluster_wide_value_reads_and_writes_back_the_same() -> None:
    text = HEAD + (
        "quotas:\n"
        "  - entity: {user: alice}\n"
        "    producer_byte_rate: {value: 30 MiB/s, budgetScope: cluster_wide}\n"
        "    consumer_byte_rate: 1 MiB/s\n"
        "  - entity: {user: bob}\n"
        "    request_percentage: {value: 50, budgetScope: per_broker}\n"
    )
    state = qf.read(text)
    assert state.quotas == {ALICE: {PBR: 30 * 2**20, "consumer_byte_rate": 2**20}, BOB: {RP: 50.0}}
    assert state.cluster_wide == {(ALICE, PBR)}
    assert (state.scope(ALICE, PBR), state.scope(BOB, RP), state.scope(BOB, PBR)) == ("cluster_wide", "per_broker",
                                                                                        None)
    written = qf.write(state)
    assert "producer_byte_rate: {value: 30 MiB/s, budgetScope: cluster_wide}" in written
    assert "request_percentage: 50\n" in written  # per broker: the plain form
    back = qf.read(written)
    assert (back.quotas, back.cluster_wide) == (state.quotas, state.cluster_wide)
    assert qf.diff(state, back, prune=True) == []


def test_a_change_of_scope_alone_is_a_change_and_the_plan_says_both_scopes() -> None:
    current = qf.QuotaState("prod", {ALICE: {PBR: 1000.0}, BOB: {PBR: 2000.0}}, {(BOB, PBR)})
    desired = qf.QuotaState("prod", {ALICE: {PBR: 1000.0}, BOB: {PBR: 4000.0}}, {(ALICE, PBR)})

    changes = [c.as_dict() for c in qf.diff(current, desired)]

    assert [(c["path"], c["action"], c["old"], c["new"], c["old_scope"], c["new_scope"]) for c in changes] == [
        ("/config/users/alice", "change", 1000, 1000, "per_broker", "cluster_wide"),
        ("/config/users/bob", "change", 2000, 4000, "cluster_wide", "per_broker"),
    ]
    added = qf.diff(qf.QuotaState("prod", {}), desired)[0]
    assert (added.action, added.old_scope, added.new_scope) == ("add", None, "cluster_wide")
    removed = qf.diff(current, qf.QuotaState("prod", {}), prune=True)
    assert [(c.action, c.old_scope, c.new_scope) for c in removed] == [("remove", "per_broker", None),
                                                                      ("remove", "cluster_wide", None)]


@pytest.mark.parametrize(
    ("entry", "line", "fragment"),
    [
        ("  - entity: {user: a}\n    controller_mutation_rate: {value: 5, budgetScope: cluster_wide}\n", 6,
         "A controller_mutation_rate value cannot be cluster-wide: only producer_byte_rate, consumer_byte_rate and "
         "request_percentage values can be cluster_wide."),
        ("  - entity: {ip: 10.0.0.1}\n    connection_creation_rate: {value: 5, budgetScope: cluster_wide}\n", 6,
         "An ip quota (connection_creation_rate) cannot be cluster-wide"),
        ("  - entity: {user: a}\n    producer_byte_rate: {value: 5, budgetScope: global}\n", 6,
         "budgetScope is per_broker or cluster_wide, not 'global'"),
        ("  - entity: {user: a}\n    producer_byte_rate: {budgetScope: cluster_wide}\n", 6,
         "producer_byte_rate has no value"),
        ("  - entity: {user: a}\n    producer_byte_rate: {value: 5, scope: cluster_wide}\n", 6,
         "Unknown key 'scope' in producer_byte_rate"),
    ],
)
def test_a_scope_the_value_cannot_have_names_its_line_and_key(entry: str, line: int, fragment: str) -> None:
    with pytest.raises(qf.InvalidQuotaFile) as refused:
        qf.read(HEAD + "quotas:\n" + entry)
    [error] = refused.value.errors
    assert error.line == line and fragment in error.message, error


def test_the_json_schema_takes_both_forms() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = qf.json_schema()
    ok = {"apiVersion": "quotas/v1", "kind": "ClusterQuotas", "cluster": "prod", "quotas": [
        {"entity": {"user": "a"}, "producer_byte_rate": {"value": "30 MiB/s", "budgetScope": "cluster_wide"}},
        {"entity": {"user": "b"}, "producer_byte_rate": 1024},
    ]}
    jsonschema.validate(ok, schema)
    bad = {**ok, "quotas": [{"entity": {"user": "a"}, "producer_byte_rate": {"value": 1, "budgetScope": "x"}}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
