"""quotactl and budget scopes (issue 28), against a live portal: the quota file carries ``budgetScope``, a plan prints
a change of scope as a change, and ``kafka-configs`` takes ``--budget-scope`` and prints which values are cluster-wide
after Kafka's own line (which it leaves as Kafka prints it); a scope a value cannot have ends with exit 1 and the
portal's typed message."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from quotas.models import Alteration, Cluster, OwnedName, QuotaOp, QuotaRequest, QuotaValue, Tenant, alter_client_quotas
from tests.people import make_user
from tests.quotactl.conftest import quotactl, token_for, unique

pytestmark = pytest.mark.django_db(transaction=True)
PBR = "producer_byte_rate"


@pytest.fixture
def world(engine_redis: Any) -> dict[str, Any]:
    cluster = Cluster.objects.create(name=unique("qbud"))  # a per-broker engine cluster: its brokers share budgets
    admin, member = make_user(unique("qbud-root"), staff=True), make_user(unique("qbud-member"))
    team = Tenant.objects.create(name=unique("qbud-team"))
    team.members.add(member)
    prefix = unique("svc")
    OwnedName.objects.create(tenant=team, entity_type="user", pattern=f"{prefix}-*")
    return {"cluster": cluster, "admin": token_for(admin), "member": token_for(member, team), "prefix": prefix}


def scope_of(cluster: Cluster, user: str, key: str = PBR) -> str | None:
    row = QuotaValue.objects.filter(entity__cluster=cluster, entity__user=user, entity__client_id=None, key=key).first()
    return None if row is None else row.budget_scope


def test_export_plan_and_apply_carry_the_scope(portal_url: str, world: dict[str, Any], tmp_path: Path) -> None:
    c, token, svc = world["cluster"], world["admin"], f"{world['prefix']}-1"
    alter_client_quotas(c, [Alteration([("user", svc)], [QuotaOp(PBR, 1048576, scope="cluster_wide")])])
    exported = tmp_path / "state.yaml"
    assert quotactl("export", "--cluster", c.name, "-o", str(exported), portal=portal_url, token=token).code == 0
    text = exported.read_text()
    assert "producer_byte_rate: {value: 1 MiB/s, budgetScope: cluster_wide}" in text
    assert quotactl("plan", "-f", str(exported), "--detailed-exitcode", portal=portal_url, token=token).code == 0

    exported.write_text(text.replace("{value: 1 MiB/s, budgetScope: cluster_wide}", "1 MiB/s"))
    plan = quotactl("plan", "-f", str(exported), "--detailed-exitcode", portal=portal_url, token=token)
    assert plan.code == 2, plan
    assert re.search(rf"^  ~ /config/users/{svc}  producer_byte_rate: 1 MiB/s, cluster-wide -> per broker$", plan.out,
                     re.M), plan.out
    assert "Plan: 0 to add, 1 to change, 0 to remove." in plan.out
    applied = quotactl("apply", "-f", str(exported), "--yes", portal=portal_url, token=token)
    assert applied.code == 0, applied
    assert scope_of(c, svc) == "per_broker"


def test_kafka_configs_takes_and_shows_the_scope(portal_url: str, world: dict[str, Any]) -> None:
    c, token, svc = world["cluster"], world["admin"], f"{world['prefix']}-2"
    base = ("kafka-configs", "--bootstrap-server", portal_url, "--cluster", c.name)

    altered = quotactl(*base, "--alter", "--entity-type", "users", "--entity-name", svc, "--add-config",
                       f"{PBR}=3145728,consumer_byte_rate=1024", "--budget-scope", "cluster_wide",
                       portal=portal_url, token=token)
    assert altered.code == 0, altered
    assert altered.out == f"Completed updating config for user {svc}.\n"
    assert (scope_of(c, svc), scope_of(c, svc, "consumer_byte_rate")) == ("cluster_wide", "cluster_wide")

    described = quotactl(*base, "--describe", "--entity-type", "users", "--entity-name", svc,
                         portal=portal_url, token=token)
    assert described.code == 0, described
    kafka_line, budget_line = described.lines
    assert kafka_line.startswith(f"Quota configs for user-principal '{svc}' are ")  # Kafka's line, as Kafka prints it
    assert "producer_byte_rate=3145728.0" in kafka_line
    assert budget_line == (f"Cluster-wide budgets for user-principal '{svc}' are consumer_byte_rate,producer_byte_rate "
                           "(shared out between the brokers)")

    # a new number without --budget-scope keeps the value's scope
    quotactl(*base, "--alter", "--entity-type", "users", "--entity-name", svc, "--add-config", f"{PBR}=4194304",
             portal=portal_url, token=token)
    assert scope_of(c, svc) == "cluster_wide"

    refused = quotactl(*base, "--alter", "--entity-type", "users", "--entity-name", svc, "--add-config",
                       "controller_mutation_rate=5", "--budget-scope", "cluster_wide", portal=portal_url, token=token)
    assert refused.code == 1
    assert refused.err.startswith("Error from the portal: INVALID_BUDGET_SCOPE: ")
    allowed = "only producer_byte_rate, consumer_byte_rate and request_percentage values can be cluster_wide"
    assert allowed in refused.err
    assert scope_of(c, svc, "controller_mutation_rate") is None

    bare = quotactl(*base, "--alter", "--entity-type", "users", "--entity-name", svc, "--delete-config", PBR,
                    "--budget-scope", "per_broker", portal=portal_url, token=token)
    assert bare.code == 1 and "give --add-config with it" in bare.err


def test_a_members_alter_asks_for_the_scope(portal_url: str, world: dict[str, Any]) -> None:
    c, svc = world["cluster"], f"{world['prefix']}-3"
    ran = quotactl("kafka-configs", "--bootstrap-server", portal_url, "--cluster", c.name, "--alter", "--entity-type",
                   "users", "--entity-name", svc, "--add-config", f"{PBR}=2097152", "--budget-scope", "cluster_wide",
                   portal=portal_url, token=world["member"])
    assert ran.code == 0, ran
    assert "wait for an admin's approval" in ran.out
    request = QuotaRequest.objects.get(cluster=c, user=svc)
    assert (request.key, request.value, request.budget_scope) == (PBR, 2097152.0, "cluster_wide")
