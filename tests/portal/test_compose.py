"""docker-compose.yml describes the topology the tests prove, with settings the portal actually reads.

Structural checks run everywhere (no docker needed): the services, what each runs, the environment against
``portal/settings.py``, the references between services. ``docker compose config`` runs where the docker client and
its compose plugin are installed, else by Debian's standalone ``docker-compose`` (scripts/run_tests.sh installs it),
and the test says why it is skipped when neither is there.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"

PORTAL_IMAGE = {"portal-a", "portal-b", "worker-1", "worker-2", "pipeline-worker", "preview-worker", "beat", "relay"}
TOPOLOGY = PORTAL_IMAGE | {"keys", "postgres", "redis", "spark-master", "spark-worker", "kafka-1", "kafka-2", "kafka-3"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def settings_names() -> set[str]:
    """The environment variables portal/settings.py reads."""
    text = (ROOT / "portal" / "settings.py").read_text()
    found = re.findall(r"""(?:os\.environ(?:\.get)?|env_\w+|os\.getenv)\(\s*["']([A-Z][A-Z0-9_]*)["']""", text)
    found += re.findall(r"""os\.environ\[\s*["']([A-Z][A-Z0-9_]*)["']\s*\]""", text)
    if "dj_database_url.config(" in text:
        found.append("DATABASE_URL")  # dj-database-url's own variable
    return set(found)


def test_every_service_of_the_proven_topology_is_there(compose: dict) -> None:
    services = compose["services"]
    assert set(services) == TOPOLOGY
    commands = {name: str(s.get("command", "")) for name, s in services.items()}
    for replica in ("portal-a", "portal-b"):
        assert "uvicorn portal.asgi:application" in commands[replica]
    assert {p for r in ("portal-a", "portal-b") for p in services[r]["ports"]} == {"8000:8000", "8001:8000"}
    for worker in ("worker-1", "worker-2"):
        assert re.search(r"celery -A portal worker -Q celery\b", commands[worker])
    assert len({re.search(r"-n (\S+)", commands[w]).group(1) for w in ("worker-1", "worker-2")}) == 2  # type: ignore[union-attr]
    assert "-Q pipeline" in commands["pipeline-worker"]
    assert "-Q previews" in commands["preview-worker"]  # previews never wait behind a rollup
    assert "celery -A portal beat" in commands["beat"]
    assert "manage.py relay" in commands["relay"]
    assert "deploy.master.Master" in commands["spark-master"]
    assert "deploy.worker.Worker" in commands["spark-worker"]
    assert "spark://spark-master:7077" in commands["spark-worker"]


def test_the_portal_services_read_only_settings_the_portal_knows(compose: dict) -> None:
    known = settings_names()
    assert {"DATABASE_URL", "QUOTAS_REDIS_URL", "QUOTAS_SPARK_MASTER", "DJANGO_SECRET_KEY"} <= known
    for name in PORTAL_IMAGE:
        env = compose["services"][name]["environment"]
        unknown = set(env) - known
        assert not unknown, f"{name} sets {sorted(unknown)}, which portal/settings.py never reads"


def test_the_portal_services_point_at_the_services_that_exist(compose: dict) -> None:
    services = compose["services"]
    env = services["portal-a"]["environment"]
    assert all(services[n]["environment"] == env for n in PORTAL_IMAGE)  # one configuration for every process
    db = urlsplit(env["DATABASE_URL"])
    pg = services["postgres"]["environment"]
    assert (db.scheme, db.hostname, db.username, db.password, db.path.lstrip("/")) == (
        "postgres", "postgres", pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"]
    )
    assert urlsplit(env["QUOTAS_REDIS_URL"]).hostname == "redis"
    master = urlsplit(env["QUOTAS_SPARK_MASTER"])
    assert (master.scheme, master.hostname) == ("spark", "spark-master")
    assert f"--port {master.port}" in services["spark-master"]["command"]
    # the executors read the landed data and write the rollups where the portal's processes have them
    mounts = {m.split(":")[1] for m in services["spark-worker"]["volumes"]}
    assert {env["QUOTAS_LANDING_ROOT"], env["QUOTAS_ROLLUPS_ROOT"]} <= mounts
    for name, service in services.items():
        for dep in service.get("depends_on", {}):
            assert dep in services, f"{name} depends on {dep}, which is not a service"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert source.startswith((".", "/")) or source in compose["volumes"], (name, volume)


def test_no_secret_ships_the_keys_service_makes_them_once(compose: dict) -> None:
    """The portal refuses public keys: compose's own are made on the first start and kept in a volume."""
    services = compose["services"]
    env = services["portal-a"]["environment"]
    for name in ("DJANGO_SECRET_KEY", "QUOTAS_SECRETS_KEYS"):
        assert env[name] == f"${{{name}:-}}", f"{name} has a default: it would ship in this file"
        assert env[f"{name}_FILE"].startswith("/keys/")
    assert services["keys"]["command"] == "python -m portal.keys /keys"
    assert services["keys"]["volumes"] == ["keys:/keys"]
    for name in PORTAL_IMAGE:
        assert "keys:/keys:ro" in services[name]["volumes"], name
        assert services[name]["depends_on"]["keys"] == {"condition": "service_completed_successfully"}, name
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "chown -R portal:portal /app/.run /landing /keys" in dockerfile  # the volume is the portal user's


def test_the_kafka_nodes_form_one_quorum_built_from_the_maven_project(compose: dict) -> None:
    services = compose["services"]
    nodes = {n: services[n] for n in ("kafka-1", "kafka-2", "kafka-3")}
    dockerfile = ROOT / nodes["kafka-1"]["build"]["dockerfile"]
    text = dockerfile.read_text()
    assert "devtools/kafka/pom.xml" in text and "broker-plugins" in text
    assert (ROOT / "devtools" / "kafka" / "docker" / "entrypoint.sh").exists()
    voters = {}
    for name, node in nodes.items():
        env = node["environment"]
        voters = dict(v.split("@") for v in env["KAFKA_VOTERS"].split(","))
        assert voters[env["KAFKA_NODE_ID"]] == f"{name}:9093" and env["KAFKA_ADVERTISED_HOST"] == name
        cluster_id = env["KAFKA_CLUSTER_ID"].split(":-")[-1].rstrip("}")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16  # Kafka's Uuid, as kafka-storage makes it
        assert urlsplit(env["KAFKA_TELEMETRY_ENDPOINT"]).hostname in services
    assert set(voters.values()) == {f"{n}:9093" for n in nodes}


def compose_client() -> tuple[list[str] | None, str]:
    """The Compose client to validate with: Docker's plugin (``docker compose``) when installed, else the standalone
    ``docker-compose`` (Debian's package, which scripts/run_tests.sh installs when neither is there); or None and why.
    """
    docker = shutil.which("docker")
    said = "the docker client is not installed"
    if docker is not None:
        plugin = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, check=False, timeout=60)
        if plugin.returncode == 0:
            return [docker, "compose"], ""
        said = "docker is installed, its compose plugin is not ({})".format(
            " ".join((plugin.stderr.strip() or plugin.stdout.strip()).splitlines()[:1])
        )
    standalone = shutil.which("docker-compose")
    if standalone is not None:
        return [standalone], ""
    return None, f"{said}, nor is docker-compose: no Compose client reads the file (its structure is checked above)"


def validate(client: list[str], path: Path) -> subprocess.CompletedProcess[str]:
    """``<client> -f <path> config --quiet``: the client reads and checks the file (no daemon needed)."""
    command = [*client, "-f", str(path), "config", "--quiet"]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False, timeout=120)


def test_docker_compose_accepts_the_file() -> None:
    client, reason = compose_client()
    if client is None:
        print(f"SKIP: {reason}", file=sys.stderr)
        pytest.skip(reason)
    proc = validate(client, COMPOSE)
    assert proc.returncode == 0, proc.stderr


def test_a_compose_client_rejects_a_broken_file(tmp_path: Path, compose: dict) -> None:
    """The validation above can fail: a service depending on one that does not exist is refused."""
    client, reason = compose_client()
    if client is None:
        print(f"SKIP: {reason}", file=sys.stderr)
        pytest.skip(reason)
    broken = {**compose, "services": {**compose["services"]}}
    broken["services"]["portal-a"] = {**compose["services"]["portal-a"], "depends_on": ["no-such-service"]}
    path = tmp_path / "docker-compose.yml"
    path.write_text(yaml.safe_dump(broken))
    proc = validate(client, path)
    assert proc.returncode != 0
    assert "no-such-service" in proc.stderr
