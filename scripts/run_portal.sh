#!/usr/bin/env bash
# Run the portal locally: a project-local Redis (data in .run/redis-portal), the database
# migrated, static files collected, the demo data (python manage.py demo_data), a Celery worker
# (with beat), the live-monitoring relay and the demo load generator in the background, and
# uvicorn in the foreground. Ctrl-C (or SIGTERM to this script) stops all of them.
#
#   PORTAL_PORT (default 8000)   QUOTAS_REDIS_PORT (default 6390)
#   PORTAL_BASE_URL (default http://127.0.0.1:$PORTAL_PORT): the portal's address in the mails it sends
#   DEMO=0: no demo data and no load generator (default 1)
#   KAFKA=0: no Apache Kafka cluster; the demo's prod is then an engine cluster too (default 1)
#   PROMETHEUS_INTERVAL_S (default 5): how often the project's Prometheus (.run/prometheus/dev/) scrapes the brokers'
#     JMX exporters and the portal's /metrics; prod's live samples come from it (manage.py prometheus_source).
#     PROMETHEUS=0 (or no prometheus installed): none, and prod's live samples are its demo clients' instead.
#   Keys: .run/keys/ (python -m portal.keys), made on the first start; DJANGO_SECRET_KEY / QUOTAS_SECRETS_KEYS or
#     their *_FILE variables in the environment take precedence.
#   Logs: .run/celery-worker.log, .run/pipeline-worker.log, .run/preview-worker.log, .run/relay.log, .run/loadgen.log,
#         .run/demo-data.log, .run/kafka-traffic.log, .run/prometheus-source.log, the brokers' under .run/kafka/dev/

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/bootstrap.sh
source scripts/bootstrap.sh

PORTAL_PORT="${PORTAL_PORT:-8000}"
# The links in the mails the worker sends (PORTAL_BASE_URL) point at this portal, on whatever port it serves.
export PORTAL_BASE_URL="${PORTAL_BASE_URL:-http://127.0.0.1:$PORTAL_PORT}"
REDIS_PORT="${QUOTAS_REDIS_PORT:-6390}"
DEMO="${DEMO:-1}"
KAFKA="${KAFKA:-1}"
PROMETHEUS="${PROMETHEUS:-1}"
PROMETHEUS_INTERVAL_S="${PROMETHEUS_INTERVAL_S:-5}"
RUN="$ROOT/.run"
mkdir -p "$RUN"

# The portal's own keys (it refuses to start on public ones): made on the first start in .run/keys and kept, so
# what it sealed stays readable; every process started below reads them through the *_FILE variables.
python -m portal.keys "$RUN/keys" >/dev/null
export DJANGO_SECRET_KEY_FILE="${DJANGO_SECRET_KEY_FILE:-$RUN/keys/django-secret-key}"
export QUOTAS_SECRETS_KEYS_FILE="${QUOTAS_SECRETS_KEYS_FILE:-$RUN/keys/quotas-secrets-keys}"

WORKER_PID=""
PIPELINE_PID=""
PREVIEW_PID=""
RELAY_PID=""
LOADGEN_PID=""
KAFKA_TRAFFIC_PID=""
PROM_SOURCE_PID=""
PROMETHEUS_STARTED=""
UVICORN_PID=""
REDIS_STARTED=""
KAFKA_STARTED=""

# Stop a child we started: TERM, then KILL if it has not gone after $2 seconds.
stop_pid() {
    local pid="$1" grace="$2" i
    [ -n "$pid" ] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < grace * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "run_portal: pid $pid did not stop in ${grace}s, killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    trap - EXIT INT TERM
    echo "run_portal: stopping" >&2
    stop_pid "$UVICORN_PID" 10
    stop_pid "$LOADGEN_PID" 10  # before Redis: it releases the connections it holds
    stop_pid "$KAFKA_TRAFFIC_PID" 20
    stop_pid "$PROM_SOURCE_PID" 10
    stop_pid "$RELAY_PID" 10
    stop_pid "$WORKER_PID" 30
    stop_pid "$PIPELINE_PID" 30
    stop_pid "$PREVIEW_PID" 30
    if [ -n "$REDIS_STARTED" ]; then
        stop_project_redis portal "$REDIS_PORT"
    fi
    if [ -n "$PROMETHEUS_STARTED" ]; then
        python -m devtools.prometheus stop --name dev || true
    fi
    if [ -n "$KAFKA_STARTED" ]; then
        python -m devtools.kafka stop --name dev || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

REDIS_STARTED=1
QUOTAS_REDIS_URL="$(python -m devtools.redis_server start --name portal --port "$REDIS_PORT" --persist)"
export QUOTAS_REDIS_URL
echo "run_portal: Redis at $QUOTAS_REDIS_URL (data in .run/redis-portal)"

# A real Apache Kafka 4.4 cluster (3 KRaft nodes, jars from Maven Central; devtools/kafka/): the demo's
# prod. The portal pushes to it as the super user over SASL/SCRAM; its password only lives in the environment.
if [ "$KAFKA" != "0" ]; then
    KAFKA_STARTED=1
    # every broker runs the portal's quota callback, coordinating prod's cluster-wide budgets through the portal's
    # Redis (where pushes write the budgets' scope: QUOTAS_BUDGET_REDIS_URL, by default the engine's Redis), and the
    # KIP-714 exporter, posting the demo clients' own metrics (queue time: the previews' demand estimate) to the portal
    KAFKA_FACTS="$(python -m devtools.kafka start --name dev \
        --budget-redis-url "${QUOTAS_BUDGET_REDIS_URL:-${QUOTAS_ENGINE_REDIS_URL:-$QUOTAS_REDIS_URL}}" --budget-cluster prod \
        --telemetry-endpoint "http://127.0.0.1:$PORTAL_PORT/v1/metrics" --telemetry-cluster prod)"
    QUOTAS_DEMO_KAFKA="$(python -c 'import json,sys; print(json.load(sys.stdin)["bootstrap"]["SASL_PLAINTEXT"])' <<<"$KAFKA_FACTS")"
    QUOTAS_KAFKA_PASSWORD_PROD="$(python -c 'import json,sys; print(json.load(open(json.load(sys.stdin)["credentials_file"]))["password"])' <<<"$KAFKA_FACTS")"
    export QUOTAS_DEMO_KAFKA QUOTAS_KAFKA_PASSWORD_PROD
    echo "run_portal: Apache Kafka at $QUOTAS_DEMO_KAFKA (SASL_PLAINTEXT; logs in .run/kafka/dev/node-*/logs)"
    # Prometheus (Debian's package, devtools/prometheus.py) scraping the brokers' JMX exporters and the portal's own
    # /metrics (it answers once uvicorn is up). One source feeds prod's live samples: Kafka's own sensors from it,
    # else (no Prometheus) what the demo's clients see (QUOTAS_LIVE_SOURCES, quotas/management/live_sources.py).
    if [ "$PROMETHEUS" != "0" ] && command -v prometheus >/dev/null 2>&1; then
        PROMETHEUS_STARTED=1
        PROM_FACTS="$(python -m devtools.prometheus start --name dev --cluster dev --interval "${PROMETHEUS_INTERVAL_S}s" \
            --target "portal=127.0.0.1:$PORTAL_PORT/metrics")"
        QUOTAS_PROMETHEUS_URL="$(python -c 'import json,sys; print(json.load(sys.stdin)["url"])' <<<"$PROM_FACTS")"
        export QUOTAS_PROMETHEUS_URL
        echo "run_portal: Prometheus at $QUOTAS_PROMETHEUS_URL (every ${PROMETHEUS_INTERVAL_S}s; .run/prometheus/dev/)"
    else
        export QUOTAS_LIVE_SOURCES="${QUOTAS_LIVE_SOURCES:+$QUOTAS_LIVE_SOURCES,}prod=client"
        echo "run_portal: no Prometheus (PROMETHEUS=0 or not installed): prod's live samples are its clients' view" >&2
    fi
fi

python manage.py migrate --noinput

# collectstatic only when a project static file or the installed packages changed since last time.
STATIC_STAMP="$RUN/staticfiles/.collected"
if [ ! -f "$STATIC_STAMP" ] || [ requirements.txt -nt "$STATIC_STAMP" ] ||
    [ -n "$(find ./*/static -newer "$STATIC_STAMP" -print -quit 2>/dev/null)" ]; then
    python manage.py collectstatic --noinput -v 0
    touch "$STATIC_STAMP"
fi

# Demo data before the worker starts: the pushes it queues are the worker's first work.
if [ "$DEMO" != "0" ]; then
    python manage.py demo_data | tee "$RUN/demo-data.log"
fi

# The demo's hourly history fills sooner than production's 10 minutes (the Spark rollups job, history app), and its
# traffic is landed every 20 s, so the first impact preview has history within the first minute.
export QUOTAS_ROLLUPS_SECONDS="${QUOTAS_ROLLUPS_SECONDS:-120}"
export QUOTAS_LANDING_SECONDS="${QUOTAS_LANDING_SECONDS:-20}"
celery -A portal worker -Q celery -B -s "$RUN/celerybeat-schedule" -l info --logfile "$RUN/celery-worker.log" >>"$RUN/celery-worker.log" 2>&1 &
WORKER_PID=$!
echo "run_portal: Celery worker pid $WORKER_PID, log in .run/celery-worker.log"
# The Spark jobs on workers of their own: pushes never wait behind them. The rollups (batch work, at a lower CPU
# priority) on the pipeline queue; the impact previews on their own queue and worker, which starts its long-lived Spark
# session at once (QUOTAS_SPARK_PREWARM): a preview never waits behind a rollup, and the first one finds Spark warm.
celery -A portal worker -Q pipeline -c 1 -n "pipeline@%h" -l info --logfile "$RUN/pipeline-worker.log" \
    >>"$RUN/pipeline-worker.log" 2>&1 &
PIPELINE_PID=$!
echo "run_portal: pipeline worker pid $PIPELINE_PID, log in .run/pipeline-worker.log"
QUOTAS_SPARK_PREWARM=1 celery -A portal worker -Q previews -c 1 -n "previews@%h" -l info \
    --logfile "$RUN/preview-worker.log" >>"$RUN/preview-worker.log" 2>&1 &
PREVIEW_PID=$!
echo "run_portal: preview worker pid $PREVIEW_PID, log in .run/preview-worker.log"

# The relay tails the monitor streams into the Channels groups the live pages listen to.
python manage.py relay >>"$RUN/relay.log" 2>&1 &
RELAY_PID=$!
echo "run_portal: relay pid $RELAY_PID, log in .run/relay.log"

if [ "$DEMO" != "0" ]; then
    python manage.py loadgen >>"$RUN/loadgen.log" 2>&1 &
    LOADGEN_PID=$!
    echo "run_portal: load generator pid $LOADGEN_PID, log in .run/loadgen.log"
    if [ "$KAFKA" != "0" ]; then
        # real clients on the real prod, signed in as the demo principals; Kafka throttles those above quota
        python manage.py kafka_traffic >>"$RUN/kafka-traffic.log" 2>&1 &
        KAFKA_TRAFFIC_PID=$!
        echo "run_portal: Kafka clients pid $KAFKA_TRAFFIC_PID, log in .run/kafka-traffic.log"
        if [ -n "$PROMETHEUS_STARTED" ]; then
            # Kafka's own quota sensors of prod, read from Prometheus each second, as its live samples; a series may
            # be three scrapes old before it counts as gone
            python manage.py prometheus_source --cluster prod --url "$QUOTAS_PROMETHEUS_URL" --match cluster=dev \
                --window "$((PROMETHEUS_INTERVAL_S * 3))" >>"$RUN/prometheus-source.log" 2>&1 &
            PROM_SOURCE_PID=$!
            echo "run_portal: Prometheus source pid $PROM_SOURCE_PID, log in .run/prometheus-source.log"
        fi
    fi
fi

# In the background + wait, so that a signal to this script runs the trap at once.
uvicorn portal.asgi:application --host 127.0.0.1 --port "$PORTAL_PORT" --lifespan off &
UVICORN_PID=$!

# Say where it is, once it answers (or once uvicorn gave up).
for ((i = 0; i < 300; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORTAL_PORT") 2>/dev/null && break
    kill -0 "$UVICORN_PID" 2>/dev/null || break
    sleep 0.1
done
if ! kill -0 "$RELAY_PID" 2>/dev/null; then
    echo "run_portal: WARNING: the relay exited; see .run/relay.log (live pages get no updates)" >&2
fi
if [ -n "$LOADGEN_PID" ] && ! kill -0 "$LOADGEN_PID" 2>/dev/null; then
    echo "run_portal: WARNING: the load generator exited; see .run/loadgen.log" >&2
fi
echo
echo "run_portal: portal at http://127.0.0.1:$PORTAL_PORT/ (Ctrl-C to stop)"
if [ "$DEMO" != "0" ] && [ -f "$RUN/demo-data.log" ]; then
    sed -n '/^Demo logins/,$p' "$RUN/demo-data.log"
fi
wait "$UVICORN_PID"
