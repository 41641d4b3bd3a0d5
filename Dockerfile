# sitemap-monitor: the daemon image.
#   podman build -t sitemap-monitor .            (or docker build)
#   podman run --read-only --cap-drop=ALL -p 8080:8080 sitemap-monitor
# BASE_IMAGE must provide python3 (>= 3.11) with the venv module; CI builds from a local
# Debian base because it has no registry.
ARG BASE_IMAGE=python:3.12-slim

# ---- build: the wheel and a virtualenv with it and its dependencies --------------------------
FROM ${BASE_IMAGE} AS build
# A CA bundle for pip behind an intercepting proxy; a build argument only, never in the image.
ARG PIP_CERT=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md alembic.ini ./
COPY monitor ./monitor
COPY migrations ./migrations
# The wheel force-includes migrations/ as monitor/_migrations (see pyproject.toml).
RUN python3 -m venv /opt/sitemap-monitor \
 && PIP_CERT="${PIP_CERT}" /opt/sitemap-monitor/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && PIP_CERT="${PIP_CERT}" /opt/sitemap-monitor/bin/pip install /wheels/*.whl \
 && /opt/sitemap-monitor/bin/python -m compileall -q /opt/sitemap-monitor \
 && /opt/sitemap-monitor/bin/sitemap-monitor --version

# ---- runtime: the virtualenv, a non-root user, nothing writable but /tmp and /data ----------
FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.title="sitemap-monitor" \
      org.opencontainers.image.description="Watches XML sitemaps: snapshots, diffs, validation, alerts and Prometheus metrics" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/sitemap-monitor/sitemap-monitor"
# A fixed uid/gid so volumes and the chart's securityContext (runAsUser 10001) agree. Written
# directly: a minimal base image may have no useradd.
RUN echo 'sitemap:x:10001:10001:sitemap-monitor:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'sitemap:x:10001:' >> /etc/group \
 && mkdir -p /data \
 && chown 10001:10001 /data \
 && chmod 0750 /data
COPY --from=build /opt/sitemap-monitor /opt/sitemap-monitor
# Alembic's configuration and the migrations, for `alembic -c /opt/sitemap-monitor/alembic.ini`;
# `sitemap-monitor db upgrade` uses the copy inside the package.
COPY alembic.ini /opt/sitemap-monitor/alembic.ini
COPY migrations /opt/sitemap-monitor/migrations
ENV PATH="/opt/sitemap-monitor/bin:${PATH}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The working directory is the data directory, so the embedded default database URL
# (sqlite:///./sitemap-monitor.db) lands on the volume, never on the read-only root.
WORKDIR /data
VOLUME ["/data"]
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["sitemap-monitor"]
CMD ["run"]
