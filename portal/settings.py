"""Django settings for the quota portal, read from the environment.

Environment variables:

- ``DATABASE_URL``: any URL dj-database-url understands; default SQLite in ``.run/db.sqlite3``.
- ``QUOTAS_REDIS_URL``: the project's Redis (Celery broker and results, Channels layer,
  quota engine); default ``redis://127.0.0.1:6390/0``, the project-local Redis that
  ``scripts/run_portal.sh`` starts.
- ``DJANGO_SECRET_KEY`` and ``QUOTAS_SECRETS_KEYS`` (or files named by ``*_FILE``): required unless
  ``DJANGO_DEBUG`` (1/true/yes/on; development only: refused with a public host in ``ALLOWED_HOSTS``);
  ``ALLOWED_HOSTS`` (comma-separated).
- HTTPS (``QUOTAS_SSL_REDIRECT``, ``QUOTAS_SECURE_COOKIES``, ``QUOTAS_HSTS_*``; on by default for a host other than
  this machine), ``QUOTAS_MAX_BODY_BYTES``, ``QUOTAS_LOGIN_*`` (sign-in throttling): see "Edge limits and security
  headers" below.
"""

import base64
import ipaddress
import os
import sys
import warnings
from pathlib import Path
from typing import NoReturn

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
# Everything the running portal writes (SQLite, Redis data, static files, logs) lives here.
RUN_DIR = BASE_DIR / ".run"
RUN_DIR.mkdir(exist_ok=True)


def env_bool(name: str, default: bool = False) -> bool:
    """Read a yes/no environment variable; unset means ``default``."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    """Read a comma-separated environment variable into a list, ignoring blanks."""
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_secret(name: str, path: str) -> str:
    """Read a secret: the environment variable ``name``, else the text of the file at ``path`` (its ``<name>_FILE``
    variable, as Docker and Kubernetes secrets are mounted); empty when neither is set."""
    value = os.environ.get(name, "").strip()
    if value or not path:
        return value
    try:
        return Path(path).read_text().strip()
    except OSError as e:
        refuse(f"{name}_FILE names {path}, which cannot be read ({e.strerror}).")


def _existing(path: Path) -> str:
    """``path`` as text when that file exists, else empty."""
    return str(path) if path.is_file() else ""


def refuse(message: str) -> NoReturn:
    """Stop at settings load with ImproperlyConfigured, printed as this sentence alone by whatever started the
    process (manage.py, uvicorn, celery): it is a setting to change, not a bug, so no traceback goes with it."""
    previous = sys.excepthook

    def one_sentence(kind: type[BaseException], error: BaseException, trace: object) -> None:
        if isinstance(error, ImproperlyConfigured):
            sys.stderr.write(f"quota portal: {error}\n")
        else:
            previous(kind, error, trace)  # type: ignore[arg-type]

    sys.excepthook = one_sentence
    raise ImproperlyConfigured(message)


PORTAL_NAME = "Quota portal"
# Where the documentation site (mkdocs build) is served; the pages link to it. Empty: they name the page in docs/.
QUOTAS_DOCS_URL = os.environ.get("QUOTAS_DOCS_URL", "")

DEBUG = env_bool("DJANGO_DEBUG", default=False)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost")

# DEBUG shows tracebacks with local variables and settings to whoever triggers an error: a development switch, so
# it is refused where the portal answers to other hosts than this machine.
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]", ".localhost", "testserver"}
if DEBUG and not set(ALLOWED_HOSTS) <= LOCAL_HOSTS:
    refuse(
        f"DJANGO_DEBUG is for local development only; ALLOWED_HOSTS names {sorted(set(ALLOWED_HOSTS) - LOCAL_HOSTS)}."
    )

# --- Keys: the portal's own, or it does not start (unless DEBUG) ------------------------------------------------
# The development key is public (it is in this file), and so is the default docker-compose.yml once had: with
# either, anyone can forge sessions and, through the sealing key derived from it, open the secrets in the database.
DEVELOPMENT_SECRET_KEY = "django-insecure-dev-only-key-do-not-use-in-production"
PUBLIC_SECRET_KEYS = {DEVELOPMENT_SECRET_KEY, "compose-dev-only-secret-change-me"}
# Unset *_FILE: the keys `python -m portal.keys .run/keys` made, if it did (scripts/run_portal.sh does on its first
# start), so manage.py in a checkout runs on the same keys as the demo.
KEYS_DIR = RUN_DIR / "keys"
SECRET_KEY = env_secret(
    "DJANGO_SECRET_KEY", os.environ.get("DJANGO_SECRET_KEY_FILE", _existing(KEYS_DIR / "django-secret-key"))
) or DEVELOPMENT_SECRET_KEY
# Secrets the portal must read back (webhook signing keys) are stored encrypted with these Fernet keys
# (quotas.models.sealed): comma-separated, the first seals, all open (rotation: new key first, then
# `manage.py reseal`). Unset (DEBUG only): one key derived from SECRET_KEY.
QUOTAS_SECRETS_KEYS = [
    key.strip()
    for key in env_secret(
        "QUOTAS_SECRETS_KEYS", os.environ.get("QUOTAS_SECRETS_KEYS_FILE", _existing(KEYS_DIR / "quotas-secrets-keys"))
    ).split(",")
    if key.strip()
]
for _key in QUOTAS_SECRETS_KEYS:
    try:
        _raw = base64.urlsafe_b64decode(_key.encode())
    except (ValueError, TypeError):
        _raw = b""
    if len(_raw) != 32:
        refuse(
            "QUOTAS_SECRETS_KEYS holds a value that is not a Fernet key (32 bytes, URL-safe base64); make one with "
            "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
        )
_missing = [
    *(["DJANGO_SECRET_KEY (Django's signing key; the built-in one is public)"] if SECRET_KEY in PUBLIC_SECRET_KEYS
      else []),
    *(["QUOTAS_SECRETS_KEYS (the Fernet keys that seal the credentials the portal stores)"]
      if not QUOTAS_SECRETS_KEYS else []),
]
if _missing and not DEBUG:
    refuse(
        f"The portal does not start without keys of its own (DJANGO_DEBUG is off): set {' and '.join(_missing)}, "
        "in the environment or in files named by "
        "DJANGO_SECRET_KEY_FILE and QUOTAS_SECRETS_KEYS_FILE (`python -m portal.keys DIR` writes both to DIR). "
        "DJANGO_DEBUG=1 runs on development keys, on this machine only."
    )

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "quotas",
    "telemetry_ui",
    "history",
    "frontend",
    "access_tokens",
    "demo",  # the demo's world and traffic (demo_data, loadgen, kafka_traffic)
    "portal",  # the project's own management commands (backup_db, restore_db)
]

MIDDLEWARE = [
    "portal.security.ContentSecurityPolicyMiddleware",  # QUOTAS_CSP on every response
    "django.middleware.security.SecurityMiddleware",
    # Right after SecurityMiddleware, as whitenoise documents: uvicorn serves no static files itself.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # /api/: oversized bodies are 413 before anything reads them, and every error is JSON (portal/errors.py).
    "portal.errors.ApiErrorMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "portal.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "portal.wsgi.application"
ASGI_APPLICATION = "portal.asgi.application"

# SQL database: the source of truth for the quotas that *should* be applied.
DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{RUN_DIR / 'db.sqlite3'}",
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "0")),
    )
}

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # BEGIN IMMEDIATE: a transaction takes SQLite's write lock up front, so concurrent writers wait (busy
    # timeout) instead of failing with "database is locked" when a read lock would have to be upgraded.
    DATABASES["default"].setdefault("OPTIONS", {})["transaction_mode"] = "IMMEDIATE"
    # WAL: the push worker's reads do not wait for a writer (nor block one); commits stay durable (synchronous=FULL).
    DATABASES["default"]["OPTIONS"].setdefault("init_command", "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# The default finders, plus one that serves vendor/plotly.min.js from the plotly package (frontend/finders.py).
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "frontend.finders.PlotlyFinder",
]
STATIC_ROOT = RUN_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Compressed but not manifest-hashed: templates render even before collectstatic (tests, DEBUG).
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# whitenoise streams files with a sync iterator; under ASGI Django reads it whole before sending and
# warns on every static response. Our static files are small (largest: swagger-ui, ~1.5 MB), so that is fine.
warnings.filterwarnings(
    "ignore",
    message="StreamingHttpResponse must consume synchronous iterators",
    module="django.core.handlers.asgi",
)

LOGIN_URL = "/login/"

# --- Redis: one URL for Celery, Channels and the quota engine -------------------------------
QUOTAS_REDIS_URL = os.environ.get("QUOTAS_REDIS_URL", "redis://127.0.0.1:6390/0")
# The quota engine's Redis for engine brokers without an engine_url of their own; empty = QUOTAS_REDIS_URL.
# A Redis Cluster is named redis+cluster://host:port[,host:port...] (Celery and Channels stay on QUOTAS_REDIS_URL).
QUOTAS_ENGINE_REDIS_URL = os.environ.get("QUOTAS_ENGINE_REDIS_URL", "")
# Cluster-wide budgets of Kafka clusters: the Redis holding each cluster's budget scope (which quota values are
# cluster-wide, written by pushes) and its brokers' shares and rounds (written by the brokers' budget plugin, whose
# redis setting must name the same Redis); empty = the engine's Redis (QUOTAS_ENGINE_REDIS_URL, else QUOTAS_REDIS_URL).
QUOTAS_BUDGET_REDIS_URL = os.environ.get("QUOTAS_BUDGET_REDIS_URL", "")

# Large listings hold memory permits from the PIP-442 limiter (quotas/api/memory.py) while a page is built.
QUOTAS_LIST_HEAP_BYTES = int(os.environ.get("QUOTAS_LIST_HEAP_BYTES", 64 * 1024 * 1024))
QUOTAS_LIST_QUEUE_SIZE = int(os.environ.get("QUOTAS_LIST_QUEUE_SIZE", 1000))
QUOTAS_LIST_TIMEOUT_MS = int(os.environ.get("QUOTAS_LIST_TIMEOUT_MS", 10_000))

# KIP-714 telemetry sink (telemetry_ui/ingest/sink.py): Kafka's telemetry.max.bytes, the subscription reload period,
# and the PIP-442 limiter in-flight pushes hold (direct = raw bytes, heap = decoded estimate).
QUOTAS_TELEMETRY_MAX_BYTES = int(os.environ.get("QUOTAS_TELEMETRY_MAX_BYTES", 1024 * 1024))
QUOTAS_TELEMETRY_RELOAD_S = float(os.environ.get("QUOTAS_TELEMETRY_RELOAD_S", 2.0))
QUOTAS_TELEMETRY_HEAP_BYTES = int(os.environ.get("QUOTAS_TELEMETRY_HEAP_BYTES", 256 * 1024 * 1024))
QUOTAS_TELEMETRY_DIRECT_BYTES = int(os.environ.get("QUOTAS_TELEMETRY_DIRECT_BYTES", 64 * 1024 * 1024))
QUOTAS_TELEMETRY_QUEUE_SIZE = int(os.environ.get("QUOTAS_TELEMETRY_QUEUE_SIZE", 1000))
QUOTAS_TELEMETRY_TIMEOUT_MS = int(os.environ.get("QUOTAS_TELEMETRY_TIMEOUT_MS", 5_000))
# OTLP/HTTP metrics receiver (telemetry_ui/ingest/otlp_receiver.py, POST /v1/metrics): what the KIP-714 broker plugin
# and OpenTelemetry Collectors send to. A bearer token is required when QUOTAS_OTLP_TOKEN is set; the cluster comes
# from the X-Quotas-Cluster header, else QUOTAS_OTLP_DEFAULT_CLUSTER.
QUOTAS_OTLP_TOKEN = os.environ.get("QUOTAS_OTLP_TOKEN", "")
QUOTAS_OTLP_DEFAULT_CLUSTER = os.environ.get("QUOTAS_OTLP_DEFAULT_CLUSTER", "")
QUOTAS_OTLP_MAX_BYTES = int(os.environ.get("QUOTAS_OTLP_MAX_BYTES", 4 * 1024 * 1024))
QUOTAS_OTLP_MAX_DECODED_BYTES = int(os.environ.get("QUOTAS_OTLP_MAX_DECODED_BYTES", 64 * 1024 * 1024))
# Where accepted pushes land as JSON lines for the pipeline.
QUOTAS_LANDING_ROOT = Path(os.environ.get("QUOTAS_LANDING_ROOT", str(RUN_DIR / "landing")))
# quotas.tasks.land: usage, samples and telemetry as Parquet under QUOTAS_LANDING_ROOT (pipeline/landing.py)
QUOTAS_LANDING_SECONDS = float(os.environ.get("QUOTAS_LANDING_SECONDS", "60"))
QUOTAS_LANDING_BATCH = int(os.environ.get("QUOTAS_LANDING_BATCH", "5000"))  # stream entries per file range
QUOTAS_LANDING_STALE_SECONDS = float(os.environ.get("QUOTAS_LANDING_STALE_SECONDS", "3600"))  # crashed writers' _ files

# The pipeline's jobs, run by the history app as `python -m pipeline.<job>` (history/jobs.py)
QUOTAS_SPARK_MASTER = os.environ.get("QUOTAS_SPARK_MASTER", "local[2]")  # or spark://..., yarn, k8s://...
QUOTAS_PIPELINE_TIMEOUT_S = float(os.environ.get("QUOTAS_PIPELINE_TIMEOUT_S", "1800"))
# Previews run in the pipeline worker's long-lived Spark session (pipeline/warm.py); 0: a subprocess each
QUOTAS_SPARK_WARM = os.environ.get("QUOTAS_SPARK_WARM", "1") not in ("0", "false", "no")
# ...started as each pipeline worker process starts (history.tasks.prewarm_spark), not at the first preview
QUOTAS_SPARK_PREWARM = os.environ.get("QUOTAS_SPARK_PREWARM", "0") not in ("0", "false", "no")
QUOTAS_ADVICE_TARGET = float(os.environ.get("QUOTAS_ADVICE_TARGET", "0.01"))  # throttled fraction the advice keeps
# A request's page shows a finished preview this long before computing one on newer data
QUOTAS_PREVIEW_MAX_AGE_S = float(os.environ.get("QUOTAS_PREVIEW_MAX_AGE_S", "3600"))
QUOTAS_ROLLUPS_ROOT = Path(os.environ.get("QUOTAS_ROLLUPS_ROOT", str(RUN_DIR / "rollups")))
QUOTAS_ROLLUPS_SECONDS = float(os.environ.get("QUOTAS_ROLLUPS_SECONDS", "600"))
# Each run recomputes the hours from this many before the newest loaded one (samples may land late)
QUOTAS_ROLLUPS_LOOKBACK_HOURS = int(os.environ.get("QUOTAS_ROLLUPS_LOOKBACK_HOURS", "3"))

CELERY_BROKER_URL = QUOTAS_REDIS_URL
CELERY_RESULT_BACKEND = QUOTAS_REDIS_URL
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = TIME_ZONE
# Pushes to brokers must survive a worker crash: acknowledge only after the task ran.
CELERY_TASK_ACKS_LATE = True
# Spark jobs (minutes) have their own queue, so pushes never wait behind them: run_portal.sh starts a worker for it.
# Impact previews (seconds, a person waiting) have one of their own, so they never wait behind the rollups either.
CELERY_TASK_ROUTES = {"history.tasks.preview": {"queue": "previews"}, "history.tasks.*": {"queue": "pipeline"}}
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# With Redis as the broker, a message a killed worker held comes back after visibility_timeout seconds,
# found by a sweep every unacked_restore_interval seconds (kombu's default sweeps only every 100 s).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": int(os.environ.get("QUOTAS_VISIBILITY_TIMEOUT_S", 300)),
    "unacked_restore_interval": int(os.environ.get("QUOTAS_UNACKED_RESTORE_S", 10)),
    "unacked_restore_throttle": 1,
}

# --- Pushes to brokers and drift --------------------------------------------------------------
# A failed push to a broker that is down is retried after base * 2**n seconds (jittered), at most this cap.
QUOTAS_PUSH_RETRY_BASE_S = float(os.environ.get("QUOTAS_PUSH_RETRY_BASE_S", 1.0))
QUOTAS_PUSH_RETRY_MAX_S = float(os.environ.get("QUOTAS_PUSH_RETRY_MAX_S", 60.0))
# A broker's engine (Redis) that does not answer within this many seconds counts as down for this attempt.
QUOTAS_ENGINE_TIMEOUT_S = float(os.environ.get("QUOTAS_ENGINE_TIMEOUT_S", 2.0))
# Kafka cannot check our versions: one push per broker at a time, under a Redis lock held at most this long.
QUOTAS_PUSH_LOCK_S = float(os.environ.get("QUOTAS_PUSH_LOCK_S", 60.0))
# Connectors whose targets the committing process pushes itself (a thread, when the target's lock is free) instead
# of a Celery task: Kafka, whose push time is its round trips. Comma-separated ("kafka,engine"); empty: none.
QUOTAS_PUSH_DIRECT = [k for k in os.environ.get("QUOTAS_PUSH_DIRECT", "kafka").split(",") if k.strip()]
# The brokers a commit left behind go to the worker in one message (quotas.tasks.push_group). Off ("0") during a
# rolling upgrade from a version without that task, until every worker runs this one: one message per broker.
QUOTAS_PUSH_GROUPS = env_bool("QUOTAS_PUSH_GROUPS", default=True)
# A group push to engine brokers keeps pushing the cluster's new commits for up to this many seconds (its drain
# lease: those commits send no message of their own); 0: one round per message.
QUOTAS_PUSH_DRAIN_S = float(os.environ.get("QUOTAS_PUSH_DRAIN_S", 1.0))
# Reconcile compares every broker with desired state this often; "report" records drift, "heal" re-applies.
QUOTAS_RECONCILE_SECONDS = float(os.environ.get("QUOTAS_RECONCILE_SECONDS", 60.0))
QUOTAS_DRIFT_MODE = os.environ.get("QUOTAS_DRIFT_MODE", "report")
# /metrics (portal/metrics.py): open when empty, else "Authorization: Bearer <token>" is required.
QUOTAS_METRICS_TOKEN = os.environ.get("QUOTAS_METRICS_TOKEN", "")
# Which source feeds each Kafka cluster's live samples (quotas/management/live_sources.py): "prod=client" for a
# cluster without Prometheus; an unlisted Kafka cluster's come from Prometheus (manage.py prometheus_source).
QUOTAS_LIVE_SOURCES = os.environ.get("QUOTAS_LIVE_SOURCES", "")
if QUOTAS_DRIFT_MODE not in ("report", "heal"):
    refuse(f"QUOTAS_DRIFT_MODE is 'report' or 'heal', not {QUOTAS_DRIFT_MODE!r}.")

# --- Notifications (quotas/notify.py): email and tenants' webhooks ----------------------------
# Links in mails and webhook bodies point here.
PORTAL_BASE_URL = os.environ.get("PORTAL_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
# Mail is logged at INFO by the worker (portal/mail.py) unless EMAIL_HOST names an SMTP server or EMAIL_BACKEND says
# else.
EMAIL_BACKEND = os.environ.get(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if os.environ.get("EMAIL_HOST")
    else "portal.mail.LoggingEmailBackend",
)
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", 25))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS")
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL")
EMAIL_TIMEOUT = float(os.environ.get("EMAIL_TIMEOUT", 10))
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "quota-portal@localhost")
# Webhook deliveries: each attempt waits this long for an answer; at most this many attempts, retried after
# base * 2**n seconds (jittered, capped); 4xx other than 408/429 are not retried.
QUOTAS_WEBHOOK_TIMEOUT_S = float(os.environ.get("QUOTAS_WEBHOOK_TIMEOUT_S", 5.0))
QUOTAS_WEBHOOK_MAX_ATTEMPTS = int(os.environ.get("QUOTAS_WEBHOOK_MAX_ATTEMPTS", 8))
QUOTAS_WEBHOOK_RETRY_BASE_S = float(os.environ.get("QUOTAS_WEBHOOK_RETRY_BASE_S", 2.0))
QUOTAS_WEBHOOK_RETRY_MAX_S = float(os.environ.get("QUOTAS_WEBHOOK_RETRY_MAX_S", 600.0))
# Webhooks never go to loopback, link-local or private addresses (quotas.models.webhook_destinations) but in these
# networks (CIDR, comma-separated), e.g. a chat bot of the company's network.
QUOTAS_WEBHOOK_ALLOWED_NETWORKS = env_list("QUOTAS_WEBHOOK_ALLOWED_NETWORKS", "")
for _network in QUOTAS_WEBHOOK_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError:
        refuse(f"QUOTAS_WEBHOOK_ALLOWED_NETWORKS holds {_network!r}, which is not a network (e.g. 10.20.0.0/16).")

# Run by the `beat` service (docker-compose.yml) or `celery -A portal beat`.
CELERY_BEAT_SCHEDULE = {
    # Time-boxed boosts end on time (within a minute) without anyone acting: the previous value comes back.
    "expire-boosts": {"task": "quotas.tasks.expire_boosts", "schedule": 60.0},
    # Brokers behind desired state catch up; brokers changed behind the portal's back show up as drift.
    "reconcile": {"task": "quotas.tasks.reconcile", "schedule": QUOTAS_RECONCILE_SECONDS},
    # Usage, samples and telemetry land as Parquet for the pipeline; a run that overruns is not piled up.
    "land": {"task": "quotas.tasks.land", "schedule": QUOTAS_LANDING_SECONDS,
             "options": {"expires": QUOTAS_LANDING_SECONDS}},
    # Hourly history for the entity pages: pipeline.rollups over the new samples, loaded into the database.
    "rollups": {"task": "history.tasks.rollups", "schedule": QUOTAS_ROLLUPS_SECONDS,
                "options": {"expires": QUOTAS_ROLLUPS_SECONDS}},
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # channels_redis waits for messages in 5 s blocking reads: its socket must wait longer than that
            "hosts": [{"address": QUOTAS_REDIS_URL, "socket_timeout": 15}],
            # one uvicorn process's consumers share a queue; a relay tick is a batch plus a message per watched entity
            "capacity": 1000,
        },
    }
}

# --- API ------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first, so an anonymous API call gets 401 with WWW-Authenticate, not 403.
        "rest_framework.authentication.TokenAuthentication",
        # personal access tokens, "Authorization: Bearer qpt_..." (access_tokens/): revocable, scoped to a tenant
        "access_tokens.authentication.AccessTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "quotas.api.schema.PortalAutoSchema",  # nullability from the models
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.DefaultCursorPagination",
    "PAGE_SIZE": 50,
    # Every error is {"code", "message", "details"} (portal/errors.py, portal/api/errors.py).
    "EXCEPTION_HANDLER": "portal.errors.api_exception_handler",
}

# --- Edge limits and security headers ---------------------------------------------------------
# Bodies over this are refused before they are parsed: 413 REQUEST_TOO_LARGE under /api/ (portal/errors.py). The
# telemetry sink's own limit (Kafka's telemetry.max.bytes) stays the one that decides for pushes.
QUOTAS_MAX_BODY_BYTES = int(os.environ.get("QUOTAS_MAX_BODY_BYTES", 1024 * 1024))
DATA_UPLOAD_MAX_MEMORY_SIZE = max(QUOTAS_MAX_BODY_BYTES, QUOTAS_TELEMETRY_MAX_BYTES)
# Sign-in throttling (portal/login.py): failures per account and per address within the window, counted in Redis.
QUOTAS_LOGIN_MAX_FAILURES = int(os.environ.get("QUOTAS_LOGIN_MAX_FAILURES", 5))
QUOTAS_LOGIN_MAX_FAILURES_PER_ADDRESS = int(os.environ.get("QUOTAS_LOGIN_MAX_FAILURES_PER_ADDRESS", 20))
QUOTAS_LOGIN_WINDOW_S = int(os.environ.get("QUOTAS_LOGIN_WINDOW_S", 300))
# HTTPS by default wherever the portal answers to a host other than this machine (DEBUG off): http:// is for
# 127.0.0.1 and localhost (the demo, the tests, a compose stack tried on this machine). Each part can be set alone.
HTTPS_BY_DEFAULT = not DEBUG and not set(ALLOWED_HOSTS) <= LOCAL_HOSTS
SECURE_SSL_REDIRECT = env_bool("QUOTAS_SSL_REDIRECT", default=HTTPS_BY_DEFAULT)
# Reached inside the network in plain HTTP: the container healthcheck, Prometheus, the brokers' KIP-714 plugin.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$", r"^v1/metrics$"]
# Cookies: never readable by scripts (the pages send the CSRF token from their forms), sent cross-site only on
# top-level navigations, and Secure over HTTPS.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("QUOTAS_SECURE_COOKIES", default=HTTPS_BY_DEFAULT)
SESSION_COOKIE_HTTPONLY = CSRF_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = CSRF_COOKIE_SAMESITE = "Lax"
# Headers set by SecurityMiddleware and XFrameOptionsMiddleware (Django's defaults, said here so they stay).
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Strict-Transport-Security (sent on HTTPS answers only): a year, subdomains and preload by default with HTTPS.
SECURE_HSTS_SECONDS = int(os.environ.get("QUOTAS_HSTS_SECONDS", 31_536_000 if HTTPS_BY_DEFAULT else 0))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("QUOTAS_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env_bool("QUOTAS_HSTS_PRELOAD", default=True)
# Content-Security-Policy (portal/security.py): the pages have no inline script or style; the exceptions, precisely:
QUOTAS_CSP: dict[str, list[str]] = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": [
        "'self'",
        "'sha256-MMpT0iDxyjALd9PdfepImGX3DBfJPXZ4IlDWdPAgtn0='",  # Swagger UI's page (drf-spectacular's <style>)
        # plotly.js (the charts) adds its rules through the CSSOM to <style> elements it creates empty: an empty
        # <style> is allowed (no content can be injected that way), and so is the one with maplibre's CSS it bundles.
        "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='",  # "" (an empty <style>)
        "'sha256-ji27qzEtxXZW+7dun6UwjHXJ18e6WAin1VvNtkzIE/o='",  # plotly.js 4.1.1's bundled maplibre-gl CSS
    ],
    # plotly.js sets two style attributes by setAttribute: style="" (colorbars) and the image-rendering probe of its
    # heatmaps; 'unsafe-hashes' lets exactly these two through, no other style attribute.
    "style-src-attr": [
        "'unsafe-hashes'",
        "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='",  # style=""
        "'sha256-AR/cKIZjWPcPmBUPDA6oti9XBiTbJvz0Cro2J1VzzS8='",  # style="image-rendering: optimizeSpeed; ..."
    ],
    "img-src": ["'self'", "data:"],  # Swagger UI's icons and plotly's PNG exports are data: URLs
    "connect-src": ["'self'"],  # the API and /ws/monitor/ (CSP 3: 'self' covers ws:/wss: on the same host)
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Quota portal API",
    "DESCRIPTION": "Request, approve and watch client quotas on shared Kafka-style brokers.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI assets come from drf-spectacular-sidecar, served by us: no CDN needed.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # Every operation lists the errors any call may answer (portal/api/errors.py), after the enum post-processing.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "portal.api.errors.document_error_responses",
        "portal.api.links.document_links",  # create -> the operations on what it created (stateful clients)
    ],
    "REDOC_DIST": "SIDECAR",
    # Two models have a "state": name their enums after them.
    "ENUM_NAME_OVERRIDES": {
        "RequestStateEnum": "quotas.models.requests.RequestState",
        "PushStateEnum": "quotas.models.pushes.PushState",
        "ScramMechanismEnum": "quotas.models.scram.SCRAM_MECHANISM_CHOICES",
        "DeliveryStateEnum": "quotas.models.webhooks.DeliveryState",
        "WebhookEventEnum": "quotas.models.webhooks.WebhookEvent",
        # two fields named "kind": what a push carries, and which kind of request a delivery tells about
        "PushKindEnum": "quotas.models.pushes.KIND_CHOICES",
        "RequestKindEnum": "quotas.models.webhooks.REQUEST_FIELDS",
        # a quotas file's sections, named by the plan's changes and their filters alike
        "QuotasFileSectionEnum": ["quota", "broker", "topic", "client-metrics"],
        # the same two values, two meanings: a cluster's namespaces ("scope") and one quota value's budget scope
        "ScopeEnum": "quotas.choices.QuotaScope",
        "BudgetScopeEnum": "quotas.choices.BudgetScope",
        # a quota group's kind (beside a push's and a delivery's "kind"), and the quota keys a group holds
        "GroupKindEnum": "quotas.models.groups.GroupKind",
        "GroupKeyEnum": "engine.groups.GROUP_KEYS",
        "KeyEnum": "quotas.choices.QuotaKey",  # Kafka's five, as before groups added a second choice of keys
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("DJANGO_LOG_LEVEL", "INFO")},
}
# LOGGING, then the answered /metrics scrapes and /healthz probes out of uvicorn's access log (portal/logs.py);
# QUOTAS_LOG_PROBES=1 keeps them there.
LOGGING_CONFIG = "portal.logs.configure"
QUOTAS_LOG_PROBES = env_bool("QUOTAS_LOG_PROBES", default=False)
