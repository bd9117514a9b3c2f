# syntax=docker/dockerfile:1
# volcano-injector: the mutating admission webhook and its admin UI, served by
# gunicorn over HTTPS. Build: docker build -t volcano-injector:dev .
#
# Each step here is also run, with the same commands, by tests/deploy/test_image.py
# (this machine has no Docker engine): keep the two in step.

# Pin the base by digest in your registry mirror for reproducible builds
# (python:3.11-slim-bookworm@sha256:...); the tag is the upgrade path.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: install the pinned dependencies into a venv ------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
COPY requirements.txt /tmp/requirements.txt
# Every line of requirements.txt is pinned with ==; --only-binary keeps a compiler
# out of the image (psycopg[binary] and the rest ship wheels).
RUN /opt/venv/bin/pip install --only-binary=:all: -r /tmp/requirements.txt

# --- runtime --------------------------------------------------------------------
FROM ${PYTHON_IMAGE}

# A fixed numeric uid/gid, so the Pod's runAsUser/fsGroup and runAsNonRoot can be
# checked by the kubelet without reading /etc/passwd.
RUN groupadd --system --gid 10001 injector \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin injector

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DJANGO_SETTINGS_MODULE=injector_site.settings \
    DJANGO_STATIC_ROOT=/app/staticfiles \
    GUNICORN_BIND=0.0.0.0:8443 \
    PROMETHEUS_MULTIPROC_DIR=/tmp/prometheus \
    INJECTOR_AUDIT_SPOOL_DIR=/var/lib/volcano-injector/spool

COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY . /app

# Static files are collected once here, so the read-only root filesystem in the
# cluster needs no write at start. The secret key is a placeholder that only
# exists for this command; the real one comes from a Secret at run time.
# Without PROMETHEUS_MULTIPROC_DIR: the app's metrics would otherwise be written
# as files into a directory that does not exist yet.
RUN env -u PROMETHEUS_MULTIPROC_DIR DJANGO_SECRET_KEY=build-only python manage.py collectstatic --noinput \
 && python -m compileall -q /app \
 && mkdir -p /var/lib/volcano-injector/spool /tmp/prometheus \
 && chown -R 10001:10001 /var/lib/volcano-injector /tmp/prometheus

USER 10001:10001
EXPOSE 8443 8444

# TLS_CERT_FILE / TLS_KEY_FILE (mounted from the cert-manager Secret) switch
# HTTPS on; workers, threads and timeouts come from WEB_CONCURRENCY,
# GUNICORN_THREADS, GUNICORN_TIMEOUT (see injector_site/gunicorn_conf.py).
# Migrations are not run here: the Deployment's init container runs
# `python manage.py apply_migrations` (override the entrypoint with `command`).
ENTRYPOINT ["gunicorn", "-c", "injector_site/gunicorn_conf.py", "injector_site.wsgi:application"]
