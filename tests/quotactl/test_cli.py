"""quotactl export / plan / apply against a live portal (uvicorn), and the docs' CI example run as written.

An admin's token plans and applies (one desired-state version); a tenant member's apply becomes a grouped request;
a stale plan, a bad file and a missing --yes end with exit 1 and the API's typed message, never a traceback.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quotas.models import Alteration, Cluster, OwnedName, PlanRequest, QuotaOp, QuotaValue, Tenant, alter_client_quotas
from tests.people import make_user
from tests.quotactl.conftest import ROOT_DIR, quotactl, token_for, unique

pytestmark = pytest.mark.django_db(transaction=True)


def head(cluster: str) -> str:
    return f"apiVersion: quotas/v1\nkind: ClusterQuotas\ncluster: {cluster}\n"


def quota(user: str, key: str, value: str) -> str:
    return f"  - entity: {{user: {user}}}\n    {key}: {value}\n"


@pytest.fixture
def world(engine_redis: Any) -> dict[str, Any]:
    cluster = Cluster.objects.create(name=unique("qctl"))
    admin, member = make_user(unique("qctl-root"), staff=True), make_user(unique("qctl-member"))
    team = Tenant.objects.create(name=unique("qctl-team"))
    team.members.add(member)
    prefix = unique("svc")
    OwnedName.objects.create(tenant=team, entity_type="user", pattern=f"{prefix}-*")
    return {"cluster": cluster, "admin": token_for(admin), "member": token_for(member, team), "prefix": prefix,
            "team": team}


def values(cluster: Cluster, user: str) -> dict[str, float]:
    rows = QuotaValue.objects.filter(entity__cluster=cluster, entity__user=user, entity__client_id=None,
                                     entity__ip=None)
    return {v.key: v.value for v in rows}


def test_export_plan_apply_round_trip(portal_url: str, world: dict[str, Any], tmp_path: Path) -> None:
    c, token, svc = world["cluster"], world["admin"], f"{world['prefix']}-1"
    alter_client_quotas(c, [Alteration([("user", svc)], [QuotaOp("producer_byte_rate", 1048576)])])

    exported = tmp_path / "state.yaml"
    r = quotactl("export", "--cluster", c.name, "-o", str(exported), portal=portal_url, token=token)
    assert r.code == 0, r
    assert f"cluster: {c.name}" in exported.read_text() and svc in exported.read_text()
    unchanged = quotactl("plan", "-f", str(exported), "--detailed-exitcode", portal=portal_url, token=token)
    assert unchanged.code == 0, unchanged
    assert "No changes" in unchanged.out

    wanted = tmp_path / "wanted.yaml"
    wanted.write_text(head(c.name) + "quotas:\n" + quota(svc, "producer_byte_rate", "2 MiB/s")
                      + quota(f"{world['prefix']}-2", "consumer_byte_rate", "1 MiB/s"))
    plan = quotactl("plan", "-f", str(wanted), "--detailed-exitcode", portal=portal_url, token=token)
    assert plan.code == 2, plan
    assert re.search(rf"^  \+ /config/users/{world['prefix']}-2  consumer_byte_rate = ", plan.out, re.M), plan.out
    assert re.search(rf"^  ~ /config/users/{svc}  producer_byte_rate: .+ -> ", plan.out, re.M), plan.out
    assert "Plan: 1 to add, 1 to change, 0 to remove." in plan.out
    assert "\033[" not in plan.out  # not a terminal: no colors

    refused = quotactl("apply", "-f", str(wanted), portal=portal_url, token=token)
    assert refused.code == 1 and "--yes" in refused.err  # no terminal to ask on

    applied = quotactl("apply", "-f", str(wanted), "--yes", portal=portal_url, token=token)
    assert applied.code == 0, applied
    assert re.search(rf"Applied plan \d+: cluster {c.name} is at desired-state version \d+\.", applied.out)
    assert values(c, svc) == {"producer_byte_rate": 2097152.0}
    again = quotactl("plan", "-f", str(wanted), "--detailed-exitcode", portal=portal_url, token=token)
    assert again.code == 0 and "No changes" in again.out

    # the entity left out of the file goes only with --prune
    pruned_file = tmp_path / "pruned.yaml"
    pruned_file.write_text(head(c.name) + "quotas:\n" + quota(svc, "producer_byte_rate", "2 MiB/s"))
    kept = quotactl("plan", "-f", str(pruned_file), "--detailed-exitcode", portal=portal_url, token=token)
    assert kept.code == 0, kept
    prune = quotactl("apply", "-f", str(pruned_file), "--prune", "--yes", "--wait", portal=portal_url, token=token)
    assert prune.code == 0 and re.search(rf"^  - /config/users/{world['prefix']}-2 ", prune.out, re.M), prune.out
    assert "Nothing to wait for" in prune.out  # an engine cluster without brokers has no push target
    assert values(c, f"{world['prefix']}-2") == {}


def test_stale_plans_bad_files_and_a_members_grouped_request(
    portal_url: str, world: dict[str, Any], tmp_path: Path
) -> None:
    c, token, svc = world["cluster"], world["admin"], f"{world['prefix']}-3"
    wanted = tmp_path / "wanted.yaml"
    wanted.write_text(head(c.name) + "quotas:\n" + quota(svc, "producer_byte_rate", "1 MiB/s"))
    plan = quotactl("plan", "-f", str(wanted), portal=portal_url, token=token)
    plan_id = re.search(r"^Plan (\d+) for cluster", plan.out, re.M).group(1)  # type: ignore[union-attr]
    alter_client_quotas(c, [Alteration([("user", unique("other"))], [QuotaOp("request_percentage", 10)])])

    stale = quotactl("apply", "--plan-id", plan_id, "--yes", portal=portal_url, token=token)
    assert stale.code == 1
    assert "STALE" in stale.out  # the plan says so when shown
    assert stale.err.startswith("Error: PLAN_STALE: ") and "Traceback" not in stale.err

    bad = tmp_path / "bad.yaml"
    bad.write_text(head(c.name) + "extra: 1\n")
    refused = quotactl("plan", "-f", str(bad), portal=portal_url, token=token)
    assert refused.code == 1
    assert refused.err.splitlines()[0].startswith("Error: INVALID_QUOTAS_FILE: ")
    assert "  line 4, extra: Unknown key 'extra'" in refused.err

    member = quotactl("apply", "-f", str(wanted), "--yes", portal=portal_url, token=world["member"])
    assert member.code == 0, member
    found = re.search(r"Submitted plan (\d+) as request (\d+)", member.out)
    assert found, member.out
    grouped = PlanRequest.objects.get(pk=int(found.group(2)))
    assert grouped.tenant == world["team"] and grouped.state == "submitted"
    assert values(c, svc) == {}  # nothing changed until an admin approves

    unknown = quotactl("plan", "-f", str(wanted), "--cluster", "no-such-cluster", portal=portal_url, token=token)
    assert unknown.code == 1 and unknown.err.startswith("Error: NOT_FOUND: No cluster named 'no-such-cluster'")


def ci_steps() -> dict[str, str]:
    """The CI example of docs/capabilities/quotas-as-code.md: each named step's ``run`` script."""
    text = (ROOT_DIR / "docs" / "capabilities" / "quotas-as-code.md").read_text()
    block = text.split("<!-- quotactl-ci-example:start -->")[1].split("<!-- quotactl-ci-example:end -->")[0]
    steps: dict[str, str] = {}
    for name, script in re.findall(r"- name: (\w+)\n(?:\s+if: .*\n)?\s+run: \|\n((?:\s{10}.*\n)+)", block):
        steps[name] = "\n".join(line[10:] for line in script.splitlines())
    return steps


def test_the_readme_ci_example_plans_then_applies(portal_url: str, world: dict[str, Any], tmp_path: Path) -> None:
    steps = ci_steps()
    assert set(steps) == {"Plan", "Apply"}
    c, svc = world["cluster"], f"{world['prefix']}-ci"
    repo = tmp_path / "repo"
    (repo / "quotas").mkdir(parents=True)
    (repo / "quotas" / f"{c.name}.yaml").write_text(head(c.name) + "quotas:\n" + quota(svc, "producer_byte_rate",
                                                                                         "3 MiB/s"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = shutil.which("quotactl", path=str(Path(sys.executable).parent))
    shim = bin_dir / "quotactl"  # the installed console script when bootstrap made it, else python -m quotactl
    shim.write_text(f"#!/bin/sh\nexec {script} \"$@\"\n" if script else
                    f"#!/bin/sh\nPYTHONPATH={ROOT_DIR} exec {sys.executable} -m quotactl \"$@\"\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "QUOTACTL_PORTAL": portal_url,
           "QUOTACTL_TOKEN": world["admin"]}

    def run(step: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", steps[step]], cwd=repo, env=env,
                              capture_output=True, text=True, timeout=120)

    planned = run("Plan")
    assert planned.returncode == 0, planned.stderr
    assert f"+ /config/users/{svc}" in planned.stdout and values(c, svc) == {}
    applied = run("Apply")
    assert applied.returncode == 0, applied.stderr
    assert values(c, svc) == {"producer_byte_rate": 3 * 1048576.0}

    (repo / "quotas" / f"{c.name}.yaml").write_text(head(c.name) + "quotas:\n  - entity: {user: x\n")
    broken = run("Plan")  # a bad file fails the pull request's check (exit 1 is not the "changes" code 2)
    assert broken.returncode == 1 and "INVALID_QUOTAS_FILE" in broken.stderr
