"""quotactl and group quotas (issue 32), against a live portal: export, plan and apply carry groups and exempt
principals and print them in words (created, deleted, members, values with their scope, exempt, what each reaches);
``quotactl groups`` and ``quotactl exempt`` change one thing at a time through the portal's group API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from quotactl.groups import Usage, ops_of
from quotas.choices import ConnectorKind
from quotas.models import (
    Cluster,
    ExemptPrincipal,
    GroupValue,
    OwnedName,
    QuotaGroup,
    QuotaRequest,
    Tenant,
    create_group,
    set_exempt,
    set_group_values,
)
from tests.people import make_user
from tests.quotactl.conftest import quotactl, token_for, unique

PBR, CBR = "producer_byte_rate", "consumer_byte_rate"
MiB = 1 << 20


@pytest.fixture
def world(engine_redis: Any) -> dict[str, Any]:
    cluster = Cluster.objects.create(name=unique("qgrp"), connector=ConnectorKind.KAFKA)
    admin, member = make_user(unique("qgrp-root"), staff=True), make_user(unique("qgrp-member"))
    team = Tenant.objects.create(name=unique("qgrp-team"))
    team.members.add(member)
    prefix = unique("svc")
    OwnedName.objects.create(tenant=team, entity_type="user", pattern=f"{prefix}-*")
    group = create_group(admin, cluster, team, unique("grp"), "tenant")
    set_group_values(admin, group, {PBR: (3 * MiB, "cluster_wide")})
    set_exempt(admin, cluster, "replicator", True, "MirrorMaker 2")
    return {"cluster": cluster, "admin": token_for(admin), "member": token_for(member, team), "prefix": prefix,
            "team": team, "group": group}


@pytest.mark.django_db(transaction=True)
def test_export_plan_and_apply_print_groups_and_exempt_principals(portal_url: str, world: dict[str, Any],
                                                                   tmp_path: Path) -> None:
    c, token, group = world["cluster"], world["admin"], world["group"]
    exported = tmp_path / "state.yaml"
    assert quotactl("export", "--cluster", c.name, "-o", str(exported), portal=portal_url, token=token).code == 0
    text = exported.read_text()
    assert f"- name: {group.name}\n  tenant: {world['team'].name}\n  members: {{tenant: true}}\n" \
           "  producer_byte_rate: {value: 3 MiB/s, budgetScope: cluster_wide}\n" in text
    assert "exemptPrincipals:\n- {principal: replicator, reason: MirrorMaker 2}\n" in text
    assert quotactl("plan", "-f", str(exported), "--prune", "--detailed-exitcode", portal=portal_url,
                    token=token).code == 0

    extra = (f"- name: extra\n  tenant: {world['team'].name}\n  members: {{principals: [{world['prefix']}-1]}}\n"
             "  consumer_byte_rate: 1 MiB/s\n")
    exported.write_text(
        text.replace("{value: 3 MiB/s, budgetScope: cluster_wide}", "4 MiB/s")
        .replace("- {principal: replicator, reason: MirrorMaker 2}", "- {principal: mm2, reason: new replicator}")
        .replace("exemptPrincipals:", extra + "exemptPrincipals:")
    )
    plan = quotactl("plan", "-f", str(exported), "--prune", "--detailed-exitcode", portal=portal_url, token=token)
    assert plan.code == 2, plan
    lines = plan.lines
    assert f"  ~ /groups/{group.name}  producer_byte_rate: 3 MiB/s -> 4 MiB/s, cluster-wide -> per broker" in lines
    assert f"  + /groups/extra  group created: principals {world['prefix']}-1" in lines
    assert "  + /groups/extra  consumer_byte_rate = 1 MiB/s" in lines
    assert "  + /users/mm2  exempt from every quota (new replicator)" in lines
    assert "  - /users/replicator  no longer exempt (MirrorMaker 2)" in lines
    assert any(line.startswith(f"      > Reaches the clients of every principal tenant {world['team'].name} owns")
               for line in lines), plan.out
    assert any("get their quotas again" in line for line in lines), plan.out

    applied = quotactl("apply", "-f", str(exported), "--prune", "--yes", portal=portal_url, token=token)
    assert applied.code == 0, applied
    assert GroupValue.objects.get(group=group, key=PBR).budget_scope == "per_broker"
    assert QuotaGroup.objects.filter(cluster=c, name="extra").exists()
    assert list(ExemptPrincipal.objects.filter(cluster=c).values_list("principal", flat=True)) == ["mm2"]


def test_a_group_value_takes_units_and_a_scope_and_refuses_other_keys() -> None:
    assert ops_of(["producer_byte_rate=3MiB/s:cluster_wide", "request_percentage=50"], ["consumer_byte_rate"]) == [
        {"key": PBR, "value": 3 * MiB, "budget_scope": "cluster_wide"},
        {"key": "request_percentage", "value": 50, "budget_scope": None},
        {"key": CBR, "value": None, "budget_scope": None},
    ]
    for bad, said in ((["controller_mutation_rate=1"], "a group holds"), (["producer_byte_rate"], "KEY=VALUE"),
                      (["producer_byte_rate=1:global"], "per_broker or cluster_wide"),
                      (["producer_byte_rate=3 MB/s"], "with a unit such as 3MiB/s"),
                      (["request_percentage=5MiB"], "takes a number, not")):
        with pytest.raises(Usage, match=said):
            ops_of(bad)
    with pytest.raises(Usage, match="name a change"):
        ops_of([])


@pytest.mark.django_db(transaction=True)
def test_the_group_form_lists_creates_sets_and_deletes(portal_url: str, world: dict[str, Any]) -> None:
    c, token, team = world["cluster"], world["admin"], world["team"]
    made = quotactl("groups", "create", "--cluster", c.name, "batch", "--tenant", team.name, "--principals",
                    f"{world['prefix']}-b", portal=portal_url, token=token)
    assert made.code == 0, made
    assert QuotaGroup.objects.get(cluster=c, name="batch").principals == [f"{world['prefix']}-b"]
    set_ = quotactl("groups", "set", "--cluster", c.name, "batch", "--set", "consumer_byte_rate=2MiB/s:cluster_wide",
                    portal=portal_url, token=token)
    assert set_.code == 0, set_
    value = GroupValue.objects.get(group__cluster=c, group__name="batch", key=CBR)
    assert (value.value, value.budget_scope) == (2 * MiB, "cluster_wide")
    listed = quotactl("groups", "list", "--cluster", c.name, portal=portal_url, token=token)
    assert listed.code == 0 and "batch" in listed.out and world["group"].name in listed.out, listed
    described = quotactl("groups", "describe", "--cluster", c.name, "batch", portal=portal_url, token=token)
    assert described.code == 0 and "cluster-wide" in described.out, described
    asked = quotactl("groups", "request", "--cluster", c.name, "batch", "--set", "producer_byte_rate=1MiB/s",
                     "--reason", "peak", portal=portal_url, token=world["member"])
    assert asked.code == 0 and "an admin approves or rejects it" in asked.out, asked
    request = QuotaRequest.objects.get(cluster=c, group__name="batch")
    assert (request.key, request.value, request.state) == (PBR, MiB, "submitted")
    request.state = "withdrawn"  # the group's open request would keep it from being deleted
    request.save(update_fields=["state"])
    prefixed = quotactl("groups", "create", "--cluster", c.name, "apps", "--tenant", team.name, "--client-id-prefix",
                        "app-", "--principal", f"{world['prefix']}-b", portal=portal_url, token=token)
    assert prefixed.code == 0, prefixed
    assert QuotaGroup.objects.filter(cluster=c, name="apps", kind="client_prefix", client_id_prefix="app-").exists()
    gone = quotactl("groups", "delete", "--cluster", c.name, "batch", portal=portal_url, token=token)
    assert gone.code == 0 and not QuotaGroup.objects.filter(cluster=c, name="batch").exists(), gone


@pytest.mark.django_db(transaction=True)
def test_the_exempt_form_lists_adds_and_removes(portal_url: str, world: dict[str, Any]) -> None:
    c, token = world["cluster"], world["admin"]
    added = quotactl("exempt", "add", "--cluster", c.name, "inter-broker", "--reason", "the brokers",
                     portal=portal_url, token=token)
    assert added.code == 0, added
    listed = quotactl("exempt", "list", "--cluster", c.name, portal=portal_url, token=token)
    assert "inter-broker" in listed.out and "the brokers" in listed.out, listed
    removed = quotactl("exempt", "remove", "--cluster", c.name, "inter-broker", portal=portal_url, token=token)
    assert removed.code == 0, removed
    assert list(ExemptPrincipal.objects.filter(cluster=c).values_list("principal", flat=True)) == ["replicator"]
    refused = quotactl("groups", "set", "--cluster", c.name, "nope", "--set", "producer_byte_rate=1",
                       portal=portal_url, token=token)
    assert refused.code == 1 and refused.err.startswith("Error: "), refused
