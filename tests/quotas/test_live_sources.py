"""One source per Kafka cluster feeds its live samples (``QUOTAS_LIVE_SOURCES``): the setting's form, and the
Prometheus source refusing a cluster whose samples are its clients' (two publishers would overwrite each other's
newest samples and mix two kinds of figures in one chart)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from quotas.management.live_sources import CLIENT, PROMETHEUS, live_source, parse
from quotas.models import Cluster
from tests.people import make_tenant


def test_the_setting_names_the_exceptions_and_prometheus_is_the_default() -> None:
    table = parse(" prod=client , lab=prometheus,")
    assert table == {"prod": CLIENT, "lab": PROMETHEUS}
    assert live_source("prod", table) == CLIENT and live_source("other", table) == PROMETHEUS
    assert live_source("anything", {}) == PROMETHEUS


@pytest.mark.parametrize("text", ["prod", "prod=jmx", "=client", "prod=client,lab"])
def test_a_malformed_setting_says_the_accepted_form(text: str) -> None:
    with pytest.raises(ValueError, match="CLUSTER=SOURCE with SOURCE one of prometheus, client"):
        parse(text)


@pytest.mark.django_db
def test_the_prometheus_source_refuses_a_cluster_fed_by_its_clients(settings: Any) -> None:
    Cluster.objects.create(name="lsrc-prod", connector="kafka", bootstrap_servers="127.0.0.1:9")
    settings.QUOTAS_LIVE_SOURCES = "lsrc-prod=client"
    with pytest.raises(CommandError, match="come from its clients .*lsrc-prod=prometheus"):
        call_command("prometheus_source", "--cluster", "lsrc-prod", "--url", "http://127.0.0.1:9",
                     stdout=io.StringIO())
    settings.QUOTAS_LIVE_SOURCES = "lsrc-prod=jmx"
    with pytest.raises(CommandError, match="not CLUSTER=SOURCE"):
        call_command("prometheus_source", "--cluster", "lsrc-prod", "--url", "http://127.0.0.1:9",
                     stdout=io.StringIO())


@pytest.mark.django_db
def test_a_bound_is_read_again_as_soon_as_a_change_lands_on_the_brokers(settings: Any) -> None:
    """The Prometheus source keeps each sensor's bound a few seconds, but not past a push that landed: the first
    poll after it measures the rate against the new quota."""
    from observe.kafka_quotas import Entity
    from quotas.management.commands.prometheus_source import Bounds
    from quotas.models import Alteration, DesiredStateVersion, Push, PushState, QuotaOp, audited_alter

    cluster = Cluster.objects.create(name="lsrc-bounds", connector="kafka", bootstrap_servers="127.0.0.1:9")
    admin = get_user_model().objects.create_user("lsrc-admin", is_staff=True)
    audited_alter(cluster, [Alteration([("user", "svc-a")], [QuotaOp("producer_byte_rate", 1000)])], admin)
    sensor = Entity("produce", "svc-a:", "svc-a", None)
    bounds = Bounds(cluster)
    assert bounds(sensor) == 1000.0
    audited_alter(cluster, [Alteration([("user", "svc-a")], [QuotaOp("producer_byte_rate", 3000)])], admin)
    bounds._tick = 0.0  # a second later
    assert bounds(sensor) == 1000.0  # desired, not yet on the brokers: they still enforce 1000
    version = DesiredStateVersion.objects.get(cluster=cluster).version
    Push.objects.update_or_create(cluster=cluster, version=version, broker=None,
                                  defaults={"state": PushState.APPLIED})
    assert bounds(sensor) == 1000.0  # within the same second: looked at once a second
    bounds._tick = 0.0
    assert bounds(sensor) == 3000.0  # the poll after it landed


@pytest.mark.django_db
def test_a_groups_sensor_is_bounded_by_the_groups_value() -> None:
    """The brokers' quota callback puts a group's members behind one sensor tagged ``user=group@<name>``: its bound
    is the group's value (a member's own sensor keeps its own)."""
    from observe.kafka_quotas import Entity
    from quotas.management.commands.prometheus_source import Bounds
    from quotas.models import GroupKind, create_group, set_group_values

    cluster = Cluster.objects.create(name="lsrc-groups", connector="kafka", bootstrap_servers="127.0.0.1:9")
    tenant = make_tenant("lsrc-team", users=["svc-*"])
    group = create_group(None, cluster, tenant, "team", GroupKind.TENANT)
    set_group_values(None, group, {"producer_byte_rate": (4096.0, "cluster_wide")})
    bounds = Bounds(cluster)
    assert bounds(Entity("produce", "group@team:", "group@team", None)) == 4096.0
    assert bounds(Entity("fetch", "group@team:", "group@team", None)) is None, "the group holds no fetch value"
    assert bounds(Entity("produce", "group@other:", "group@other", None)) is None
