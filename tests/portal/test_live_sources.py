"""One source per Kafka cluster feeds its live samples (``QUOTAS_LIVE_SOURCES``): the setting's form, and the
Prometheus source refusing a cluster whose samples are its clients' (two publishers would overwrite each other's
newest samples and mix two kinds of figures in one chart)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from quotas.management.live_sources import CLIENT, PROMETHEUS, live_source, parse
from quotas.models import Cluster


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
