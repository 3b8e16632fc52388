"""``quotactl kafka-configs`` prints what Kafka's own ``kafka-configs.sh`` prints, compared in the same run.

The quotas are altered through the live portal with quotactl (as an admin), pushed by the portal to the session's
Kafka cluster, then Kafka's ``org.apache.kafka.tools.ConfigCommand`` describes them on the brokers and quotactl
describes them on the portal: the same lines, in the same order (Java's HashMap order, Java's doubles). The alter
messages and a refusal are compared the same way; a tenant member's alter becomes quota requests.
"""

from __future__ import annotations

import random
import subprocess
import sys
from typing import Any

import pytest

from quotas.choices import ConnectorKind
from quotas.connectors.base import Delta, PushError
from quotas.connectors.kafka import KafkaConnector
from quotas.models import Cluster, DesiredStateVersion, OwnedName, Push, QuotaRequest, Tenant
from quotas.models.desired import desired_state
from quotas.push import address, target_push
from tests.people import make_user
from tests.quotactl.conftest import ROOT_DIR, Ran, quotactl, token_for, unique
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"  # what bin/kafka-configs.sh runs


@pytest.fixture
def kafka_target(kafka_cluster: Any) -> Cluster:
    """A portal cluster on the session's Kafka, marked as holding its current (empty) version, so the first push
    sends only what the test changes (a first full push would remove every other test's quotas from the brokers)."""
    cluster = Cluster.objects.create(
        name=unique("kcfg"), connector=ConnectorKind.KAFKA, bootstrap_servers=kafka_cluster.bootstrap()
    )
    version = DesiredStateVersion.objects.get_or_create(cluster=cluster)[0].version
    Push.objects.update_or_create(cluster=cluster, broker=None, version=version, defaults={"state": "applied"})
    return cluster


def pushed(cluster: Cluster) -> None:
    """Bring the Kafka cluster to desired state (the server may be pushing it already: then wait for that)."""
    version = DesiredStateVersion.objects.get(cluster=cluster).version
    try:
        target_push.push_target(cluster.pk, None)
    except PushError as e:
        if e.code != "CONCURRENT_TRANSACTIONS":
            raise
    wait_for(
        "the push to reach every broker",
        lambda: Push.objects.filter(cluster=cluster, broker=None, version__gte=version, state="applied").exists(),
        30,
    )


def pushed_again(cluster: Cluster) -> None:
    """Send the cluster's quotas to Kafka again, as a delta (nothing else touched): another test's full push of its
    own cluster removes every quota on the shared brokers, ours included."""
    connector = KafkaConnector()
    try:
        version = DesiredStateVersion.objects.get(cluster=cluster).version
        delta = Delta(version, version, False, desired_state(cluster, None))
        connector.apply(address.target_of(cluster, None), delta)
    finally:
        connector.close()


def kafka(kafka_cluster: Any, *args: str) -> Ran:
    r = kafka_cluster.run_tool(CONFIG_COMMAND, "--bootstrap-server", kafka_cluster.bootstrap(), *args)
    return Ran(r.returncode, r.stdout, r.stderr)


def ours(portal_url: str, token: str, cluster: Cluster, *args: str) -> Ran:
    return quotactl("kafka-configs", "--bootstrap-server", portal_url, "--cluster", cluster.name, *args,
                    portal=portal_url, token=token)


@pytest.mark.timeout(400)
def test_describe_and_alter_print_what_kafka_configs_prints(
    portal_url: str, kafka_cluster: Any, kafka_target: Cluster
) -> None:
    admin = make_user(unique("kcfg-root"), staff=True)
    token = token_for(admin)
    user, c1, c2, c3, c4 = unique("kc-u"), unique("kc-c"), unique("kc-c"), unique("kc-c"), unique("kc-c")
    ip = f"10.{random.randrange(256)}.{random.randrange(256)}.{random.randrange(1, 255)}"
    alters = [
        ["--entity-type", "users", "--entity-name", user,
         "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=10485760,request_percentage=50.5"],
        ["--entity-type", "users", "--entity-default", "--entity-type", "clients", "--entity-name", c1,
         "--add-config", "producer_byte_rate=2048,controller_mutation_rate=2.5"],
        ["--entity-type", "users", "--entity-name", user, "--entity-type", "clients", "--entity-name", c2,
         "--add-config", "consumer_byte_rate=4096,producer_byte_rate=8192,request_percentage=12.25"],
        ["--entity-type", "users", "--entity-name", user, "--entity-type", "clients", "--entity-name", c4,
         "--add-config", "request_percentage=200"],
        ["--entity-type", "clients", "--entity-name", c3, "--add-config", "consumer_byte_rate=123456789"],
        ["--entity-type", "ips", "--entity-name", ip, "--add-config", "connection_creation_rate=12"],
    ]
    done = [ours(portal_url, token, kafka_target, "--alter", *a) for a in alters]
    for a, r in zip(alters, done, strict=True):
        assert r.code == 0, (a, r)
    assert done[0].lines == [f"Completed updating config for user {user}."]
    assert done[1].lines == ["Completed updating default config for users in the cluster."]

    pushed(kafka_target)

    describes = [
        ["--entity-type", "users", "--entity-name", user],
        ["--entity-type", "users", "--entity-default", "--entity-type", "clients", "--entity-name", c1],
        ["--entity-type", "users", "--entity-name", user, "--entity-type", "clients", "--entity-name", c2],
        ["--entity-type", "users", "--entity-name", user, "--entity-type", "clients"],  # every client of the user
        ["--entity-type", "clients", "--entity-name", c3],
        ["--entity-type", "ips", "--entity-name", ip],
        ["--user", user, "--client", c2],  # the entity flags
    ]
    for args in describes:
        theirs, mine = kafka(kafka_cluster, "--describe", *args), ours(portal_url, token, kafka_target, "--describe",
                                                                        *args)
        assert theirs.code == 0, theirs.err
        if not theirs.lines:
            print(f"Kafka describes nothing for {args}: another test's full push removed them; pushing again")
            pushed_again(kafka_target)
            theirs = kafka(kafka_cluster, "--describe", *args)
        assert theirs.lines, f"Kafka describes nothing for {args}"
        if args[-1] == "clients":
            # several entities: the order within one bucket of the client's HashMap is the broker's answer order,
            # which follows its map of every entity on the cluster (other tests' too): compared as a set here
            assert sorted(mine.lines) == sorted(theirs.lines), args
        else:
            assert mine.lines == theirs.lines, args

    # the same alters on Kafka itself (same values: nothing changes) print what quotactl printed
    for a, r in zip(alters[:2] + alters[4:], done[:2] + done[4:], strict=True):
        assert kafka(kafka_cluster, "--alter", *a).lines == r.lines

    # deleting a key: the same message; deleting one that is not set: Kafka's refusal, exit 1
    delete = ["--alter", "--entity-type", "users", "--entity-name", user, "--delete-config", "request_percentage"]
    on_kafka = kafka(kafka_cluster, *delete)  # first: the portal pushes its own delete at once
    assert ours(portal_url, token, kafka_target, *delete).lines == on_kafka.lines
    refusal_kafka, refusal_ours = kafka(kafka_cluster, *delete), ours(portal_url, token, kafka_target, *delete)
    assert (refusal_ours.code, refusal_ours.err.strip()) == (refusal_kafka.code, refusal_kafka.err.strip())
    assert refusal_ours.code == 1 and "Invalid config(s): request_percentage" in refusal_ours.err
    pushed(kafka_target)
    args = ["--describe", "--entity-type", "users", "--entity-name", user]
    assert ours(portal_url, token, kafka_target, *args).lines == kafka(kafka_cluster, *args).lines

    # a bad value and an unknown key: Kafka's messages, nothing sent
    for bad in (["--add-config", "producer_byte_rate=fast"], ["--add-config", "acks=all"]):
        mine = ours(portal_url, token, kafka_target, "--alter", "--entity-type", "clients", "--entity-name", c3, *bad)
        theirs = kafka(kafka_cluster, "--alter", "--entity-type", "clients", "--entity-name", c3, *bad)
        assert (mine.code, mine.err.strip()) == (theirs.code, theirs.err.strip()) and mine.code == 1


def test_a_members_alter_becomes_requests_and_the_module_entry_point_runs(
    portal_url: str, kafka_target: Cluster
) -> None:
    member = make_user(unique("kcfg-member"))
    team = Tenant.objects.create(name=unique("kcfg-team"))
    team.members.add(member)
    OwnedName.objects.create(tenant=team, entity_type="user", pattern="kcm-*")
    token = token_for(member, team)
    principal = unique("kcm")

    r = ours(portal_url, token, kafka_target, "--alter", "--entity-type", "users", "--entity-name", principal,
             "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")

    assert r.code == 0, r
    requests = QuotaRequest.objects.filter(cluster=kafka_target, user=principal).order_by("key")
    assert [(q.key, q.value, q.state) for q in requests] == [
        ("consumer_byte_rate", 2048.0, "submitted"), ("producer_byte_rate", 1024.0, "submitted")]
    ids = sorted(str(q.pk) for q in requests)
    assert r.lines[0].startswith(f"Requested config update for user {principal}: request(s) ")
    assert sorted(r.lines[0].split("request(s) ")[1].split(" wait")[0].split(", ")) == ids

    refused = ours(portal_url, token, kafka_target, "--alter", "--entity-type", "users", "--entity-name", "not-ours",
                   "--add-config", "producer_byte_rate=1024")
    assert refused.code == 1 and "PERMISSION_DENIED" in refused.err and "Traceback" not in refused.err

    # python -m quotactl, a real process: an unknown cluster is the API's typed message, never a traceback
    proc = subprocess.run(
        [sys.executable, "-m", "quotactl", "kafka-configs", "--bootstrap-server", portal_url, "--cluster", "nope",
         "--token", token, "--describe", "--entity-type", "users"],
        capture_output=True, text=True, timeout=60, cwd=ROOT_DIR,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip() == "Error from the portal: NOT_FOUND: No cluster named 'nope'; GET /api/clusters/ " \
        "lists them."
