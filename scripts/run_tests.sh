#!/usr/bin/env bash
# Lint and test: ruff over the whole tree, the import contracts (lint-imports), then pytest against a real project-local Redis
# (127.0.0.1:${QUOTAS_TEST_REDIS_PORT:-6391}, no persistence), stopped on exit. The browser tests use the
# system's chromium, installed with apt-get when missing (never "playwright install"); screenshots of the
# pages they visit are left in test-artifacts/screenshots/.
# Arguments go to pytest, e.g.  bash scripts/run_tests.sh -q tests/portal
# Exits non-zero when ruff or pytest fails (pytest's own status when pytest fails).

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/bootstrap.sh
source scripts/bootstrap.sh
ensure_chromium
export PYSPARK_PYTHON="$ROOT/.venv/bin/python"  # the pipeline tests' Spark workers

REDIS_PORT="${QUOTAS_TEST_REDIS_PORT:-6391}"
REDIS_STARTED=""

cleanup() {
    trap - EXIT INT TERM
    if [ -n "$REDIS_STARTED" ]; then
        stop_project_redis test "$REDIS_PORT"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

REDIS_STARTED=1
QUOTAS_REDIS_URL="$(python -m devtools.redis_server start --name test --port "$REDIS_PORT")"
export QUOTAS_REDIS_URL

ruff_status=0
echo "run_tests: ruff check ." >&2
ruff check . || ruff_status=$?

# The import contracts of pyproject.toml ([tool.importlinter]): which package may import which.
contracts_status=0
echo "run_tests: lint-imports" >&2
lint-imports --no-cache --no-logo || contracts_status=$?

pytest_status=0
python -m pytest "$@" || pytest_status=$?

if [ "$pytest_status" -ne 0 ]; then
    exit "$pytest_status"
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
