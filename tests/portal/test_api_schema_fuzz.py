"""The API fuzzed against its own published OpenAPI schema (issue 20), as an admin and as a tenant member, over HTTP.

schemathesis generates requests from ``/api/schema/`` and sends them to the portal served by uvicorn (a real server
on the test database and Redis, as clients reach it): every answer must be documented by the schema. No 5xx, a
status code the operation lists, a body of the documented shape and media type.

Two kinds of runs, each as an admin and as a member of one tenant:

- per operation: ``MAX_EXAMPLES`` generated requests for every operation;
- stateful: sequences of calls that feed one answer into the next request (a created request's id into its
  approve, a tenant's name into its update...), along the schema's OpenAPI links (each create links to the
  operations on what it created, ``quotas/api/links.py``) and those schemathesis infers (its dependency analysis);
  ``test_the_stateful_run_follows_links`` requires that they exist, and each run that it followed some.
  ``SCENARIOS`` sequences of at most ``STEPS`` calls.

The portal and its world (committed: the server is another process) serve the whole module; the database is
flushed at its end. Whatever the fuzzing created stays for the later tests of the module, as it would in use.

Bounded so that the file stays near a minute on two cores; the operations that reach real Kafka (SCRAM credentials)
are left out (``tests/portal/test_scram_credentials.py`` covers them against a broker).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
import schemathesis
from django.test import Client
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from quotas import workflow
from quotas.choices import EntityType
from quotas.models import Alteration, Cluster, OwnedName, QuotaOp, Tenant, alter_client_quotas
from tests.portal.live import TALKS_TO_LIVE_PORTAL, LivePortal, committed_world, live_portal
from tests.portal.people import make_user

pytestmark = TALKS_TO_LIVE_PORTAL

MAX_EXAMPLES = 5
SCENARIOS = 12
STEPS = 6
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def published_schema() -> dict[str, Any]:
    """The schema as the portal publishes it (``/api/schema/``; no database needed), read at collection time."""
    response = Client(HTTP_HOST="127.0.0.1").get("/api/schema/?format=json")
    assert response.status_code == 200, response.content[:500]
    return json.loads(response.content)


# The coverage phase (every boundary value of every parameter) is left out: on 2 cores it takes minutes.
CONFIG = SchemathesisConfig.from_dict({"phases": {"coverage": {"enabled": False}}})
schema = schemathesis.openapi.from_dict(published_schema(), config=CONFIG).exclude(path_regex=r"/scram-credentials/")
FUZZ = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
                phases=[Phase.explicit, Phase.generate])


@dataclass
class Portal:
    live: LivePortal
    sessions: dict[str, requests.Session]  # one per role: cookies an answer sets stay with its role
    tokens: dict[str, str]

    def kwargs(self, role: str) -> dict[str, Any]:
        """What ``case.call`` needs to reach the live portal as ``role``."""
        return {"base_url": self.live.url, "session": self.sessions[role],
                "headers": {"Authorization": f"Token {self.tokens[role]}"}}


@pytest.fixture(scope="module")
def portal(
    django_db_setup: None, django_db_blocker: Any, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Portal]:
    """uvicorn on the test database, with an admin, a member of team-a and cluster prod with a few quotas."""
    from rest_framework.authtoken.models import Token

    with committed_world(django_db_blocker, redis_url):
        cluster = Cluster.objects.create(name="prod")
        alter_client_quotas(cluster, [Alteration([("user", "svc-a-1")], [QuotaOp("producer_byte_rate", 1024)])])
        member = make_user("alice")
        tenant = Tenant.objects.create(name="team-a")
        tenant.members.add(member)
        OwnedName.objects.create(tenant=tenant, entity_type=EntityType.USER, pattern="svc-a-*")
        admin = make_user("root", staff=True)
        workflow.submit(member, None, cluster, user="svc-a-2", client_id=None, reason="fuzz",
                        key="producer_byte_rate", value=2048)  # one of the member's own to find, read and withdraw
        tokens = {who: Token.objects.create(user=user).key for who, user in (("admin", admin), ("member", member))}
        sessions = {role: requests.Session() for role in tokens}
        for session in sessions.values():
            session.trust_env = False  # no proxy between the test and 127.0.0.1
        with live_portal(redis_url, tmp_path_factory.mktemp("fuzz")) as live:
            yield Portal(live, sessions, tokens)
            assert live.server.alive(), live.log()
        for session in sessions.values():
            session.close()


@schema.parametrize()
@FUZZ
def test_every_answer_to_an_admin_is_documented(case: Any, portal: Portal) -> None:
    case.call_and_validate(**portal.kwargs("admin"), checks=CHECKS)


@schema.parametrize()
@FUZZ
def test_every_answer_to_a_tenant_member_is_documented(case: Any, portal: Portal) -> None:
    case.call_and_validate(**portal.kwargs("member"), checks=CHECKS)


@pytest.mark.parametrize("path", ["/api/clusters/{cluster}/client-metrics/", "/api/clusters/{cluster}/state.yaml"])
@pytest.mark.parametrize("role", ["admin", "member"])
def test_answers_the_fuzz_found_undocumented_match_the_schema(path: str, role: str, portal: Portal) -> None:
    """What this file's first live run found: a cursor-paginated list documented as a bare array, and a YAML quota
    file documented as a string (a YAML client reads a mapping)."""
    case = schema[path]["GET"].Case(path_parameters={"cluster": "prod"})
    response = case.call_and_validate(**portal.kwargs(role), checks=CHECKS)
    assert response.status_code == 200, response.text[:500]


def test_the_stateful_run_follows_links() -> None:
    """The stateful runs below chain calls only along links: without them they would test nothing more."""
    transitions = schema.as_state_machine()._transitions
    targets = {link.target.label for entry in transitions.operations.values() for link in entry.outgoing}
    for target in ("POST /api/requests/{id}/approve/", "PATCH /api/tenants/{name}/", "GET /api/previews/{id}/"):
        assert target in targets, f"no link leads to {target}: the stateful runs never reach it with a real id"
    assert len(targets) >= 30, f"links lead to only {len(targets)} operations"


def run_stateful(portal: Portal, role: str) -> None:
    """``SCENARIOS`` sequences of linked calls as ``role``, each answer checked against the schema."""

    known: set[str] = set()  # ids and names earlier answers gave
    linked: list[str] = []  # calls whose path parameters all came from an earlier answer

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return portal.kwargs(role)

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any) -> None:
            values = {str(v) for v in (case.path_parameters or {}).values()}
            if values and values <= known:
                linked.append(case.operation.label)
            known.update(_ids_and_names(response))
            case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs or None, recorder=self.recorder)

    Workflow.run(settings=settings(
        max_examples=SCENARIOS, stateful_step_count=STEPS, deadline=None, derandomize=True,
        suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate],
    ))
    # the sequences did feed answers into later calls (else the run checked single calls only)
    assert linked, "no call took its path parameters from an earlier answer: the links were never followed"


def _ids_and_names(response: Any) -> set[str]:
    """The ``id`` and ``name`` values of a JSON answer (an object, a list, or a page of ``results``)."""
    try:
        body = response.json()
    except ValueError:
        return set()
    items = body.get("results", [body]) if isinstance(body, dict) else body if isinstance(body, list) else []
    return {str(item[k]) for item in items if isinstance(item, dict) for k in ("id", "name") if k in item}


def test_linked_calls_as_an_admin_are_documented(portal: Portal) -> None:
    run_stateful(portal, "admin")


def test_linked_calls_as_a_tenant_member_are_documented(portal: Portal) -> None:
    run_stateful(portal, "member")
