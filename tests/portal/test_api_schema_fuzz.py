"""The API fuzzed against its own published OpenAPI schema (issue 20), as an admin and as a tenant member.

schemathesis generates requests for every operation from ``/api/schema/`` and sends them to the portal in-process
(WSGI, on the test database and Redis): every answer must be documented by the schema. No 5xx, a status code the
operation lists, a body of the documented shape and media type. Bounded (``MAX_EXAMPLES`` per operation and role)
to stay well under two minutes; the operations that reach real Kafka (SCRAM credentials) are left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from portal.wsgi import application
from quotas.choices import EntityType
from quotas.models import Alteration, Cluster, OwnedName, QuotaOp, Tenant, alter_client_quotas
from tests.celery_worker import celery_queue_clean  # noqa: F401 (a fixture)
from tests.portal.people import make_user

pytestmark = pytest.mark.usefixtures("celery_queue_clean")  # a re-apply queues a heal task: none is left behind

MAX_EXAMPLES = 8
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(autouse=True)
def in_the_test_transaction(db: None, redis_url: str) -> Iterator[None]:
    """The portal's requests stay in the test's transaction, as with Django's test client."""
    request_started.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)


@pytest.fixture
def tokens(db: None) -> dict[str, str]:
    """An admin and a tenant member, and something for them to find: cluster prod with a few quotas."""
    from rest_framework.authtoken.models import Token

    cluster = Cluster.objects.create(name="prod")
    alter_client_quotas(cluster, [Alteration([("user", "svc-a-1")], [QuotaOp("producer_byte_rate", 1024)])])
    member = make_user("alice")
    tenant = Tenant.objects.create(name="team-a")
    tenant.members.add(member)
    OwnedName.objects.create(tenant=tenant, entity_type=EntityType.USER, pattern="svc-a-*")
    admin = make_user("root", staff=True)
    return {who: Token.objects.create(user=user).key for who, user in (("admin", admin), ("member", member))}


# Loaded from the portal itself (no database needed); schemathesis' lazy fixture loader does not run on pytest 9.
# The coverage phase (every boundary value of every parameter) is left out: on 2 cores it takes minutes.
CONFIG = SchemathesisConfig.from_dict({"phases": {"coverage": {"enabled": False}}})
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application, config=CONFIG).exclude(
    path_regex=r"/scram-credentials/"
)
FUZZ = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


@schema.parametrize()
@FUZZ
def test_every_answer_to_an_admin_is_documented(case: Any, tokens: dict[str, str]) -> None:
    case.call_and_validate(headers={"Authorization": f"Token {tokens['admin']}"}, checks=CHECKS)


@schema.parametrize()
@FUZZ
def test_every_answer_to_a_tenant_member_is_documented(case: Any, tokens: dict[str, str]) -> None:
    case.call_and_validate(headers={"Authorization": f"Token {tokens['member']}"}, checks=CHECKS)
