"""Django settings for the quota portal, read from the environment.

Environment variables:

- ``DATABASE_URL``: any URL dj-database-url understands; default SQLite in ``.run/db.sqlite3``.
- ``QUOTAS_REDIS_URL``: the project's Redis (Celery broker and results, Channels layer,
  quota engine); default ``redis://127.0.0.1:6390/0``, the project-local Redis that
  ``scripts/run_portal.sh`` starts.
- ``DJANGO_SECRET_KEY``, ``DJANGO_DEBUG`` (1/true/yes/on), ``ALLOWED_HOSTS`` (comma-separated).
"""

import os
import warnings
from pathlib import Path

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


PORTAL_NAME = "Quota portal"

# The default key is for local development ONLY: it is public (it is in this file).
# Any deployment must set DJANGO_SECRET_KEY to a long random value.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "django-insecure-dev-only-key-do-not-use-in-production")

DEBUG = env_bool("DJANGO_DEBUG", default=False)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost")

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
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Right after SecurityMiddleware, as whitenoise documents: uvicorn serves no static files itself.
    "whitenoise.middleware.WhiteNoiseMiddleware",
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

# Large listings hold memory permits from the PIP-442 limiter (quotas/api/memory.py) while a page is built.
QUOTAS_LIST_HEAP_BYTES = int(os.environ.get("QUOTAS_LIST_HEAP_BYTES", 64 * 1024 * 1024))
QUOTAS_LIST_QUEUE_SIZE = int(os.environ.get("QUOTAS_LIST_QUEUE_SIZE", 1000))
QUOTAS_LIST_TIMEOUT_MS = int(os.environ.get("QUOTAS_LIST_TIMEOUT_MS", 10_000))

# KIP-714 telemetry sink (telemetry_ui/sink.py): Kafka's telemetry.max.bytes, the subscription reload period,
# and the PIP-442 limiter in-flight pushes hold (direct = raw bytes, heap = decoded estimate).
QUOTAS_TELEMETRY_MAX_BYTES = int(os.environ.get("QUOTAS_TELEMETRY_MAX_BYTES", 1024 * 1024))
QUOTAS_TELEMETRY_RELOAD_S = float(os.environ.get("QUOTAS_TELEMETRY_RELOAD_S", 2.0))
QUOTAS_TELEMETRY_HEAP_BYTES = int(os.environ.get("QUOTAS_TELEMETRY_HEAP_BYTES", 256 * 1024 * 1024))
QUOTAS_TELEMETRY_DIRECT_BYTES = int(os.environ.get("QUOTAS_TELEMETRY_DIRECT_BYTES", 64 * 1024 * 1024))
QUOTAS_TELEMETRY_QUEUE_SIZE = int(os.environ.get("QUOTAS_TELEMETRY_QUEUE_SIZE", 1000))
QUOTAS_TELEMETRY_TIMEOUT_MS = int(os.environ.get("QUOTAS_TELEMETRY_TIMEOUT_MS", 5_000))
# Where accepted pushes land as JSON lines for the pipeline.
QUOTAS_LANDING_ROOT = Path(os.environ.get("QUOTAS_LANDING_ROOT", str(RUN_DIR / "landing")))
# quotas.tasks.land: usage, samples and telemetry as Parquet under QUOTAS_LANDING_ROOT (pipeline/landing.py)
QUOTAS_LANDING_SECONDS = float(os.environ.get("QUOTAS_LANDING_SECONDS", "60"))
QUOTAS_LANDING_BATCH = int(os.environ.get("QUOTAS_LANDING_BATCH", "5000"))  # stream entries per file range
QUOTAS_LANDING_STALE_SECONDS = float(os.environ.get("QUOTAS_LANDING_STALE_SECONDS", "3600"))  # crashed writers' _ files

# The pipeline's jobs, run by the history app as `python -m pipeline.<job>` (history/jobs.py)
QUOTAS_SPARK_MASTER = os.environ.get("QUOTAS_SPARK_MASTER", "local[2]")  # or spark://..., yarn, k8s://...
QUOTAS_PIPELINE_TIMEOUT_S = float(os.environ.get("QUOTAS_PIPELINE_TIMEOUT_S", "1800"))
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
CELERY_TASK_ROUTES = {"history.tasks.*": {"queue": "pipeline"}}
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
# Reconcile compares every broker with desired state this often; "report" records drift, "heal" re-applies.
QUOTAS_RECONCILE_SECONDS = float(os.environ.get("QUOTAS_RECONCILE_SECONDS", 60.0))
QUOTAS_DRIFT_MODE = os.environ.get("QUOTAS_DRIFT_MODE", "report")
# /metrics (portal/metrics.py): open when empty, else "Authorization: Bearer <token>" is required.
QUOTAS_METRICS_TOKEN = os.environ.get("QUOTAS_METRICS_TOKEN", "")
if QUOTAS_DRIFT_MODE not in ("report", "heal"):
    raise ImproperlyConfigured(f"QUOTAS_DRIFT_MODE is 'report' or 'heal', not {QUOTAS_DRIFT_MODE!r}.")

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
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "quotas.api.pagination.DefaultCursorPagination",
    "PAGE_SIZE": 50,
    # Every error is {"code", "message", "details"} (quotas/api/errors.py).
    "EXCEPTION_HANDLER": "quotas.api.errors.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Quota portal API",
    "DESCRIPTION": "Request, approve and watch client quotas on shared Kafka-style brokers.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI assets come from drf-spectacular-sidecar, served by us: no CDN needed.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Two models have a "state": name their enums after them.
    "ENUM_NAME_OVERRIDES": {
        "RequestStateEnum": "quotas.models.requests.RequestState",
        "PushStateEnum": "quotas.models.pushes.PushState",
        "ScramMechanismEnum": "quotas.models.scram.SCRAM_MECHANISM_CHOICES",
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("DJANGO_LOG_LEVEL", "INFO")},
}
