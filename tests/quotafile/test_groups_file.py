"""Groups and exempt principals in a quota file (issue 32): read with their lines, refused naming the line and what
to change, written back the same, compared as group created / deleted / member change / value change and exempt
added / removed, and taken by the JSON Schema."""

from __future__ import annotations

import jsonschema
import pytest
import yaml

import quotafile as qf

HEAD = "apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: prod\n"
MiB = 1 << 20
FILE = HEAD + """groups:
  - name: payments
    tenant: payments
    members: {tenant: true}
    producer_byte_rate: {value: 3 MiB/s, budgetScope: cluster_wide}
    consumer_byte_rate: 8 MiB/s
  - name: batch
    tenant: payments
    description: nightly jobs
    members: {principals: [batch-b, batch-a]}
    request_percentage: 50
  - name: pay-apps
    tenant: payments
    members: {clientIdPrefix: pay-, principal: svc-x}
exemptPrincipals:
  - {principal: replicator, reason: MirrorMaker 2}
  - inter-broker
"""


def test_groups_and_exempt_principals_read_with_their_lines() -> None:
    state = qf.read(FILE)
    pay = state.groups["payments"]
    assert (pay.tenant, pay.kind, pay.values) == ("payments", "tenant", {"producer_byte_rate": 3 * MiB,
                                                                          "consumer_byte_rate": 8 * MiB})
    assert pay.cluster_wide == {"producer_byte_rate"}
    batch = state.groups["batch"]
    assert (batch.kind, batch.principals, batch.description) == ("principals", ("batch-b", "batch-a"), "nightly jobs")
    apps = state.groups["pay-apps"]
    assert (apps.kind, apps.client_id_prefix, apps.prefix_principal, apps.values) == ("client_prefix", "pay-",
                                                                                        "svc-x", {})
    assert state.exempt == {"replicator": "MirrorMaker 2", "inter-broker": ""}
    assert state.line("groups", "payments", "producer_byte_rate") == 8
    assert state.line("groups", "batch", "members") == 13
    assert state.line("exemptPrincipals", "inter-broker") == 20


def test_write_is_stable_and_reads_back_to_no_changes() -> None:
    state = qf.read(FILE)
    text = qf.write(state)
    doc = yaml.safe_load(text)
    assert [g["name"] for g in doc["groups"]] == ["batch", "pay-apps", "payments"]  # by name
    assert doc["groups"][0] == {"name": "batch", "tenant": "payments", "members": {"principals": ["batch-a",
                                "batch-b"]}, "description": "nightly jobs", "request_percentage": 50}
    assert doc["groups"][2]["producer_byte_rate"] == {"value": "3 MiB/s", "budgetScope": "cluster_wide"}
    assert doc["exemptPrincipals"] == [{"principal": "inter-broker"},
                                       {"principal": "replicator", "reason": "MirrorMaker 2"}]
    assert qf.write(qf.read(text)) == text
    assert qf.diff(qf.read(text), state, prune=True) == []


def by(changes: list[qf.Change]) -> dict[tuple[str, str], dict]:
    return {(c.path, c.key): c.as_dict() for c in changes}


def test_the_diff_says_created_deleted_member_value_and_scope_changes_and_exempt() -> None:
    current = qf.read(FILE)
    edited = FILE.replace("{value: 3 MiB/s, budgetScope: cluster_wide}", "4 MiB/s")
    edited = edited.replace("[batch-b, batch-a]", "[batch-a, batch-c]")
    edited = edited.replace("  - name: pay-apps\n    tenant: payments\n    members: {clientIdPrefix: pay-, principal: "
                            "svc-x}\n", "  - name: fresh\n    tenant: ops\n    members: {principals: [x]}\n"
                            "    consumer_byte_rate: 1 MiB/s\n")
    edited = edited.replace("  - inter-broker\n", "  - mm2\n")
    desired = qf.read(edited)
    assert {(c.path, c.key) for c in qf.diff(current, desired)} == {
        ("/groups/payments", "producer_byte_rate"), ("/groups/batch", "members"), ("/groups/fresh", "members"),
        ("/groups/fresh", "consumer_byte_rate"), ("/users/mm2", "exempt"),
    }  # without prune nothing listed in the cluster only is removed
    changes = by(qf.diff(current, desired, prune=True))
    value = changes[("/groups/payments", "producer_byte_rate")]
    assert (value["action"], value["old"], value["new"]) == ("change", 3 * MiB, 4 * MiB)
    assert (value["old_scope"], value["new_scope"], value["new_display"]) == ("cluster_wide", "per_broker", "4 MiB/s")
    members = changes[("/groups/batch", "members")]
    assert members["action"] == "change"
    assert (members["old_display"], members["new_display"]) == ("principals batch-a, batch-b",
                                                                "principals batch-a, batch-c")
    assert "batch-a, batch-c" in members["reach"]
    created = changes[("/groups/fresh", "members")]
    assert created["action"] == "add" and created["new"] == {"tenant": "ops", "kind": "principals",
                                                             "principals": ["x"]}
    assert changes[("/groups/fresh", "consumer_byte_rate")]["action"] == "add"
    deleted = changes[("/groups/pay-apps", "members")]
    assert deleted["action"] == "remove" and "fall back to their own quotas" in deleted["reach"]
    assert changes[("/users/mm2", "exempt")]["action"] == "add"
    gone = changes[("/users/inter-broker", "exempt")]
    assert gone["action"] == "remove" and "get their quotas again" in gone["reach"]
    assert ("/users/replicator", "exempt") not in changes


def test_a_file_without_the_sections_leaves_them_alone_and_removable_limits_prune() -> None:
    current = qf.read(FILE)
    assert qf.diff(current, qf.read(HEAD + "quotas: []\n"), prune=True) == []
    emptied = qf.read(HEAD + "groups: []\nexemptPrincipals: []\n")
    kept = qf.diff(current, emptied, prune=True, removable=lambda section, name: name == "batch")
    assert {(c.path, c.key) for c in kept} == {("/groups/batch", "members"), ("/groups/batch", "request_percentage")}


@pytest.mark.parametrize(
    "section, line, key, fragment",
    [
        ("groups:\n  - name: bad name\n    tenant: t\n    members: {tenant: true}\n", 5, "name",
         "A group name is 1 to 64 letters"),
        ("groups:\n  - name: g\n    members: {tenant: true}\n", 5, "tenant", "write tenant:"),
        ("groups:\n  - name: g\n    tenant: t\n", 5, "members", "write members:"),
        ("groups:\n  - name: g\n    tenant: t\n    members: {tenant: true, principals: [a]}\n", 7, "members",
         "members is one of"),
        ("groups:\n  - name: g\n    tenant: t\n    members: {principal: a}\n", 7, "members", "members is one of"),
        ("groups:\n  - name: g\n    tenant: t\n    members: {principals: []}\n", 7, "principals", "at least one"),
        ("groups:\n  - name: g\n    tenant: t\n    members: {tenant: true}\n    connection_creation_rate: 5\n", 8,
         "connection_creation_rate", "a group has name, tenant, members, description, producer_byte_rate"),
        ("groups:\n  - name: g\n    tenant: t\n    members: {tenant: true}\n    producer_byte_rate: 0\n", 8,
         "producer_byte_rate", "producer_byte_rate"),
        ("groups:\n  - name: g\n    tenant: t\n    members: {tenant: true}\n"
         "    producer_byte_rate: {value: 1, budgetScope: global}\n", 8, "producer_byte_rate",
         "budgetScope is per_broker or cluster_wide"),
        ("groups:\n  - name: g\n    tenant: t\n    members: {tenant: true}\n"
         "    controller_mutation_rate: {value: 5, budgetScope: cluster_wide}\n", 8, "controller_mutation_rate",
         "per_broker only: Kafka's controller enforces it once"),
        ("groups:\n  - {name: g, tenant: t, members: {tenant: true}}\n  - {name: g, tenant: t, members: {tenant: "
         "true}}\n", 6, "name", "listed twice (line 5)"),
        ("groups:\n  - name: g\n    tenant: t\n    members: {tenant: true}\n    description: " + "x" * 201 + "\n", 8,
         "description", "at most 200 characters"),
        ("exemptPrincipals:\n  - {reason: x}\n", 5, "principal", "has no principal"),
        ("exemptPrincipals:\n  - a\n  - a\n", 6, "principal", "listed twice"),
    ],
)
def test_errors_name_the_line_and_what_to_change(section: str, line: int, key: str, fragment: str) -> None:
    with pytest.raises(qf.InvalidQuotaFile) as refused:
        qf.read(HEAD + section)
    [error] = refused.value.errors
    assert (error.line, error.key) == (line, key) and fragment in error.message, error


def test_the_json_schema_takes_groups_and_exempt_principals() -> None:
    schema = qf.json_schema()
    jsonschema.validate(yaml.safe_load(FILE), schema)
    for bad in ({"name": "g", "tenant": "t", "members": {"tenant": True, "principals": ["a"]}},
                {"name": "g", "tenant": "t", "members": {"tenant": True},
                 "controller_mutation_rate": {"value": 1, "budgetScope": "cluster_wide"}},
                {"name": "g g", "tenant": "t", "members": {"tenant": True}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**yaml.safe_load(HEAD), "groups": [bad]}, schema)
    per_broker = {"name": "g", "tenant": "t", "members": {"tenant": True}, "controller_mutation_rate": 10}
    jsonschema.validate({**yaml.safe_load(HEAD), "groups": [per_broker]}, schema)


def test_a_group_holds_a_per_broker_controller_mutation_rate() -> None:
    state = qf.read(HEAD + "groups:\n  - name: g\n    tenant: t\n    members: {tenant: true}\n"
                           "    controller_mutation_rate: 10 mutations/s\n")
    group = state.groups["g"]
    assert group.values == {"controller_mutation_rate": 10.0}
    assert group.scope("controller_mutation_rate") == "per_broker"
