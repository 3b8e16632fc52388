#!/usr/bin/env bash
# Make this checkout runnable: a Python 3.11+ virtualenv in .venv with requirements.txt
# installed, redis-server, Java 17, Maven and Prometheus on the PATH (run_tests.sh also calls ensure_chromium
# for the browser tests). Safe to run again; fast when nothing changed.
#
# Sourced by run_portal.sh and run_tests.sh (then .venv/bin is put first on their PATH),
# or run on its own: bash scripts/bootstrap.sh

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMP="$VENV/.requirements.sha256"

# Run a command as root: directly when we are root, through sudo otherwise.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    else
        sudo "$@"
    fi
}

apt_install() {
    echo "bootstrap: installing $* with apt-get" >&2
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@"
}

# The interpreter to build the venv with: python3.11 when present, else python3 if it is >= 3.11.
find_python() {
    local candidate
    for candidate in python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    echo "bootstrap: Python 3.11 or newer is required (python3.11 or python3 on the PATH)" >&2
    return 1
}

ensure_venv() {
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
        if ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
            echo "bootstrap: $VENV is not Python 3.11+; remove it (rm -rf .venv) and run again" >&2
            return 1
        fi
        return 0
    fi
    local python
    python="$(find_python)"
    # Debian/Ubuntu ship venv's ensurepip in a separate package.
    if ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        local version
        version="$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
        apt_install python3-venv "python${version}-venv" || apt_install python3-venv
    fi
    echo "bootstrap: creating $VENV with $python" >&2
    rm -rf "$VENV"  # a half-made venv (no pip) from an earlier failure
    "$python" -m venv "$VENV"
}

ensure_requirements() {
    local want
    want="$(sha256sum "$ROOT/requirements.txt" | cut -d' ' -f1)"
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
        return 0
    fi
    echo "bootstrap: installing requirements.txt into $VENV" >&2
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$ROOT/requirements.txt"
    echo "$want" >"$STAMP"
}

ensure_redis_server() {
    if ! command -v redis-server >/dev/null 2>&1; then
        apt_install redis-server
    fi
}

# The PySpark jobs (pipeline/) need a Java runtime (17): Debian's headless JRE when no java is on the PATH.
ensure_java() {
    if command -v java >/dev/null 2>&1 || { [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; }; then
        return 0
    fi
    apt_install openjdk-17-jre-headless || apt_install default-jre-headless
}

# The Kafka runner (devtools/kafka/) fetches Apache Kafka's jars from Maven Central with Maven
# (devtools/kafka/pom.xml, into .run/kafka/lib, once per pom); Maven needs a JDK, not only ensure_java's JRE.
ensure_maven() {
    local missing=()
    if ! command -v javac >/dev/null 2>&1; then
        missing+=(openjdk-17-jdk-headless)
    fi
    if ! command -v mvn >/dev/null 2>&1; then
        missing+=(maven)
    fi
    if [ "${#missing[@]}" -gt 0 ]; then
        apt_install "${missing[@]}"
    fi
}

# Kafka's own metrics: Debian's prometheus scrapes the brokers' JMX exporter (devtools/prometheus.py, the tests'
# `prometheus` fixture, benchmarks/prometheus_bench.py). Installed without its recommends (no node exporter); the
# package's own service is never used: the project starts its own Prometheus on a port of its own.
ensure_prometheus() {
    if ! command -v prometheus >/dev/null 2>&1; then
        apt_install --no-install-recommends prometheus ||
            echo "bootstrap: could not install prometheus; the tests that need it will fail saying so" >&2
    fi
}

# For run_tests.sh: the browser tests (tests/browser/) drive the system's chromium through Playwright's driver
# (the playwright pip package). Debian's chromium is installed with apt-get when none is on the PATH; no
# browser is ever downloaded by Playwright ("playwright install" is never run). Not fatal: without a chromium
# the browser tests are skipped and say why.
ensure_chromium() {
    if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
        return 0
    fi
    if [ -n "${QUOTAS_CHROMIUM:-}" ] && [ -x "$QUOTAS_CHROMIUM" ]; then
        return 0
    fi
    apt_install chromium || echo "bootstrap: could not install chromium; the browser tests will be skipped" >&2
}

# For run_tests.sh: the suite runs on PostgreSQL (devtools/postgres.py starts a project-local cluster with the server
# binaries under /usr/lib/postgresql/<major>/bin). Debian's `postgresql` is installed with apt-get when no server is
# there; the package's own cluster and service are never used.
ensure_postgresql() {
    if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null 2>&1; then
        return 0
    fi
    apt_install postgresql
}

# For run_tests.sh: tests/portal/test_compose.py has docker-compose.yml validated by a Compose client (`config`,
# which reads and checks the file and needs no docker daemon). Docker's own plugin (`docker compose`) is used when
# present; else Debian's `docker-compose` package is installed (without its recommends: no docker engine). Not
# fatal: without a client that test is skipped and says why.
ensure_compose() {
    if docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1; then
        return 0
    fi
    apt_install --no-install-recommends docker-compose ||
        echo "bootstrap: could not install docker-compose; the compose file's validation will be skipped" >&2
}

# quotactl (pyproject.toml [project.scripts]): the project installed editable into the venv, so `quotactl` is on its
# PATH and runs this checkout's code. Done again only when the script is missing or points at another checkout.
ensure_project_installed() {
    if [ -x "$VENV/bin/quotactl" ] && (cd / && "$VENV/bin/python" -c \
        'import pathlib, sys, quotactl; sys.exit(pathlib.Path(quotactl.__file__).resolve().parents[1] != pathlib.Path(sys.argv[1]).resolve())' \
        "$ROOT") 2>/dev/null; then
        return 0
    fi
    echo "bootstrap: installing the project (quotactl) editable into $VENV" >&2
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-deps -e "$ROOT"
}

# For the run scripts: stop the project-local Redis NAME on PORT and wait until the port is closed,
# so that a Redis started right after on the same port is a new one, not the one still exiting.
stop_project_redis() {
    local name="$1" port="$2" i
    "$VENV/bin/python" -m devtools.redis_server stop --name "$name" --port "$port" || true
    for ((i = 0; i < 100; i++)); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || return 0
        sleep 0.1
    done
    echo "bootstrap: Redis '$name' still listens on port $port" >&2
}

ensure_venv
ensure_requirements
ensure_project_installed
ensure_redis_server
ensure_java
ensure_maven
ensure_prometheus

export VIRTUAL_ENV="$VENV"
# Spark's Python workers run the venv's interpreter (pipeline/)
export PYSPARK_PYTHON="$VENV/bin/python"
export PATH="$VENV/bin:$PATH"
