#!/usr/bin/env bash
# Lint and test: ruff over the whole tree, the import contracts (lint-imports), the docs (mkdocs build --strict), then
# pytest against a real project-local Redis
# (127.0.0.1:${QUOTAS_TEST_REDIS_PORT:-6391}, no persistence) and a project-local PostgreSQL (devtools/postgres.py:
# initdb under .run/postgres-test/, a free port of 127.0.0.1, DATABASE_URL exported; `postgresql` installed with
# apt-get when missing; a DATABASE_URL already set is used instead), both stopped on exit. A full run (no
# arguments) then runs a few tests again on SQLite, the quick start's database (QUOTAS_SQLITE_TESTS=0 skips it).
# The browser tests use the system's chromium, installed with apt-get when missing (never "playwright install");
# screenshots of the pages they visit are left in test-artifacts/screenshots/. docker-compose.yml is validated by a
# Compose client (Debian's docker-compose installed when no docker compose plugin is there).
# Arguments go to pytest, e.g.  bash scripts/run_tests.sh -q tests/portal
# --fast (first argument) runs only the tests that need no Kafka, Spark, browser or extra servers (the markers of
# tests/tiers.py) on one pytest-xdist worker per core: a few minutes, for the edit-test loop; CI runs everything.
# Exits non-zero when ruff, the contracts, the docs or pytest fail (pytest's own status when pytest fails).

set -euo pipefail

FAST=0
if [ "${1:-}" = "--fast" ]; then
    FAST=1
    shift
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/bootstrap.sh
source scripts/bootstrap.sh
ensure_chromium
ensure_postgresql
ensure_compose
export PYSPARK_PYTHON="$ROOT/.venv/bin/python"  # the pipeline tests' Spark workers

REDIS_PORT="${QUOTAS_TEST_REDIS_PORT:-6391}"
REDIS_STARTED=""
PG_STARTED=""

cleanup() {
    trap - EXIT INT TERM
    if [ -n "$REDIS_STARTED" ]; then
        stop_project_redis test "$REDIS_PORT"
    fi
    if [ -n "$PG_STARTED" ]; then
        python -m devtools.postgres stop --name test || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

REDIS_STARTED=1
QUOTAS_REDIS_URL="$(python -m devtools.redis_server start --name test --port "$REDIS_PORT")"
export QUOTAS_REDIS_URL

# PostgreSQL, as production runs: pytest-django makes its test database (test_quotas) on this server.
if [ -z "${DATABASE_URL:-}" ]; then
    PG_STARTED=1
    DATABASE_URL="$(python -m devtools.postgres start --name test)"
    export DATABASE_URL
fi

ruff_status=0
echo "run_tests: ruff check ." >&2
ruff check . || ruff_status=$?

# The import contracts of pyproject.toml ([tool.importlinter]): which package may import which.
contracts_status=0
echo "run_tests: lint-imports" >&2
lint-imports --no-cache --no-logo || contracts_status=$?

# The documentation (mkdocs.yml, docs/): --strict turns a broken link or anchor, or a page left out of the nav, into
# a failure. Not --quiet: mkdocs then drops its warnings and --strict has nothing to count; its INFO lines are dropped
# here instead.
docs_status=0
echo "run_tests: mkdocs build --strict" >&2
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --site-dir .run/site 2>&1 | { grep -v '^INFO ' >&2 || true; } ||
    docs_status=$?

# A named selection (options such as -q do not count) runs as given; otherwise the fast tier runs first on one
# pytest-xdist worker per core (a test file kept on one worker, its module fixtures built once), and a full run then
# runs the Kafka, Spark, browser and server tests one at a time: they start clusters and time what they see.
whole_suite=1
for arg in "$@"; do
    case "$arg" in -*) ;; *) whole_suite=0 ;; esac
done
FAST_TIER="not kafka and not spark and not browser and not slow"
pytest_status=0
if [ "$whole_suite" -eq 0 ] && [ "$FAST" -eq 0 ]; then
    python -m pytest --durations=30 "$@" || pytest_status=$?
else
    python -m pytest --durations=30 -n auto --dist loadfile -m "$FAST_TIER" "$@" || pytest_status=$?
    if [ "$FAST" -eq 0 ]; then
        python -m pytest --durations=30 -m "kafka or spark or browser or slow" "$@" || pytest_status=$?
    fi
fi

# The quick start's embedded database keeps working: the quota API (migrations, versioned writes, a batch of
# thousands), a real worker's pushes and a backup restored once more on SQLite, after a full run.
if [ "$whole_suite" -eq 1 ] && [ "$FAST" -eq 0 ] && [ "${QUOTAS_SQLITE_TESTS:-1}" != "0" ] && [ "$pytest_status" -eq 0 ]; then
    echo "run_tests: a short run on SQLite" >&2
    env -u DATABASE_URL python -m pytest -q -p no:cacheprovider tests/quotas/api/test_quota_api.py \
        tests/push/test_worker_pushes.py tests/portal/test_backup_restore.py || pytest_status=$?
fi

if [ "$pytest_status" -ne 0 ]; then
    exit "$pytest_status"
fi
if [ "$docs_status" -ne 0 ]; then
    echo "run_tests: the documentation does not build (see mkdocs above)" >&2
    exit "$docs_status"
fi
if [ "$contracts_status" -ne 0 ]; then
    echo "run_tests: an import contract is broken (see lint-imports above)" >&2
    exit "$contracts_status"
fi
if [ "$ruff_status" -ne 0 ]; then
    echo "run_tests: ruff found problems (see above)" >&2
    exit "$ruff_status"
fi
exit 0
