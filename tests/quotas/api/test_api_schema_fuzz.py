"""The API fuzzed against its own published OpenAPI schema (issue 20), as an admin and as a tenant member, over HTTP.

schemathesis generates requests from ``/api/schema/`` and sends them to the portal served by uvicorn (a real server
on the test database and Redis, as clients reach it): every answer must be documented by the schema. No 5xx, a
status code the operation lists, a body of the documented shape and media type.

Two kinds of runs, each as an admin and as a member of one tenant:

- per operation: ``MAX_EXAMPLES`` generated requests for every operation;
- stateful: sequences of calls that feed one answer into the next request (a created request's id into its
  approve, a tenant's name into its update...), along the schema's OpenAPI links (each create links to the
  operations on what it created, ``portal/api/links.py``) and those schemathesis infers (its dependency analysis);
  ``test_the_stateful_run_follows_links`` requires that they exist, and each run that it followed some.
  ``SCENARIOS`` sequences of at most ``STEPS`` calls.

The portal and its world (committed: the server is another process) serve the whole module; the database is
flushed at its end. The world (``fuzz_world``) has every kind of object the API shows, each nullable field null
somewhere, so every answer's shape is checked on real rows (``test_the_world_has_every_kind`` holds it to that).
The per-operation runs leave what they made for the later ones, as use would; each stateful scenario starts from
the world again (``restore``: hypothesis replays the start of a scenario in another and must get the same answers).

Bounded so that the file stays near a minute on two cores; the changes of SCRAM credentials, which reach real Kafka,
are left out (``tests/quotas/test_scram_credentials.py`` covers them against a broker); their reads are fuzzed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from django.apps import apps
from django.core.management import call_command
from django.test import Client
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.live import TALKS_TO_LIVE_PORTAL, LivePortal, committed_world, live_portal
from tests.quotas.api import fuzz_world
from tests.quotas.api.test_schema_promises import column_says_null, serializer_components

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
schema = schemathesis.openapi.from_dict(published_schema(), config=CONFIG).exclude(
    path_regex=r"/scram-credentials/", method=["POST", "DELETE"]
)
FUZZ = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
                phases=[Phase.explicit, Phase.generate])


@dataclass
class Portal:
    live: LivePortal
    sessions: dict[str, requests.Session]  # one per role: cookies an answer sets stay with its role
    tokens: dict[str, str]
    world: Path  # the world as a fixture file, to start each stateful scenario from (``restore``)

    def kwargs(self, role: str) -> dict[str, Any]:
        """What ``case.call`` needs to reach the live portal as ``role``."""
        return {"base_url": self.live.url, "session": self.sessions[role],
                "headers": {"Authorization": f"Token {self.tokens[role]}"}}


@pytest.fixture(scope="module")
def portal(
    django_db_setup: None, django_db_blocker: Any, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Portal]:
    """uvicorn on the test database, over a world with every kind of object the API shows (``fuzz_world``)."""
    from rest_framework.authtoken.models import Token

    with committed_world(django_db_blocker, redis_url):
        people = fuzz_world.build()
        tokens = {role: Token.objects.create(user=user).key for role, user in people.items()}
        world = tmp_path_factory.mktemp("fuzz-world") / "world.json"
        call_command("dumpdata", "--natural-foreign", "--output", str(world), verbosity=0)
        sessions = {role: requests.Session() for role in tokens}
        for session in sessions.values():
            session.trust_env = False  # no proxy between the test and 127.0.0.1
        with live_portal(redis_url, tmp_path_factory.mktemp("fuzz")) as live:
            yield Portal(live, sessions, tokens, world)
            assert live.server.alive(), live.log()
        for session in sessions.values():
            session.close()


def test_the_world_has_every_kind_and_every_nullable_field_null_somewhere(portal: Portal) -> None:
    """Each model the schema shows has rows in the world, and each nullable field it shows is null in one."""
    missing: list[str] = []
    for name, serializer in serializer_components():
        model = getattr(getattr(serializer, "Meta", None), "model", None)
        if model is None:
            continue
        rows = model._default_manager.all()
        if not rows.exists():
            missing.append(f"{model.__name__} (shown as {name}): no row")
            continue
        for field_name, field in serializer.fields.items():
            if column_says_null(serializer, field) and not rows.filter(**{
                "__".join(field.source_attrs) + "__isnull": True
            }).exists():
                missing.append(f"{model.__name__}.{field.source} (shown as {name}.{field_name}): never null")
    assert not missing, "tests/quotas/api/fuzz_world.py lacks: " + "; ".join(sorted(set(missing)))


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


def restore(world: Path) -> None:
    """The database as the world was (flushed, then the world loaded: ids and sequences as they were).

    Each stateful scenario starts from it: hypothesis replays the beginning of one scenario in another, and a
    call that created something the first time must find the same world the second (else its answer differs and
    hypothesis calls the data generation flaky)."""
    # the test runs with the registry cut to TALKS_TO_LIVE_PORTAL's available_apps: flush and load need all models
    available = [config.name for config in apps.get_app_configs()]
    apps.unset_available_apps()
    try:
        call_command("flush", interactive=False, verbosity=0, inhibit_post_migrate=True)
        call_command("loaddata", str(world), verbosity=0)
    finally:
        apps.set_available_apps(available)


def run_stateful(portal: Portal, role: str) -> None:
    """``SCENARIOS`` sequences of linked calls as ``role``, each from the world, each answer checked against the
    schema."""

    known: set[str] = set()  # ids and names earlier answers gave
    linked: list[str] = []  # calls whose path parameters all came from an earlier answer

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            restore(portal.world)

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
