# The portal image: one image for the web process (uvicorn), the Celery worker and Celery beat.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# A Java runtime for the pipeline's Spark jobs (pipeline/, run by the pipeline-worker service).
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*

# Dependencies first, so code changes do not reinstall them.
COPY requirements.txt .
RUN pip install -r requirements.txt

COPY . .

# Static files are collected at build time (DJANGO_DEBUG=1 for that command only: the image holds no keys); whitenoise
# serves them from .run/staticfiles. /keys is where docker-compose.yml's keys volume keeps the portal's own keys.
RUN useradd --create-home --uid 1000 portal \
    && DJANGO_DEBUG=1 python manage.py collectstatic --noinput -v 0 \
    && mkdir -p /landing /keys && chown -R portal:portal /app/.run /landing /keys && chmod 700 /keys

USER portal
EXPOSE 8000

CMD ["uvicorn", "portal.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--lifespan", "off"]
