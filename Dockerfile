# syntax=docker/dockerfile:1
# The Kairos server image: one image for every tier, chosen by argument.
#
#   docker build -t kairos:0.1.0 .
#   docker run kairos:0.1.0                # kairos api (the default CMD)
#   docker run kairos:0.1.0 scheduler      # or executor, or: db upgrade
#
# Stage 1 builds the kairos-sdk and kairos wheels from this checkout and installs them, with their
# dependencies (all published as binary wheels, so no compiler is needed), into a virtualenv.
# Stage 2 is a clean python slim image holding only that virtualenv, run as an unprivileged user.
# The base is pinned to a patch release; pin it to a digest too (python:3.12.12-slim-trixie@sha256:...)
# where the build can reach the registry to look it up.

FROM python:3.12.12-slim-trixie AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
# The SDK first: it changes less often than the server, so its wheel stays cached.
COPY sdk/python/ sdk/python/
COPY pyproject.toml ./
# app/sql is a symlink to ../sql (the migrations and named queries the wheel ships as package data).
COPY sql/ sql/
COPY app/ app/

# The server depends on kairos-sdk==0.1.0 from this checkout, never from an index: both wheels are
# built here and installed in one pip call with the local wheel directory first. The server comes
# with its objects extra (obstore), so KAIROS_ARCHIVE_URL and large payloads work in the image.
RUN python -m pip wheel --no-deps --wheel-dir /wheels ./sdk/python . \
    && python -m venv /opt/kairos \
    && server="$(echo /wheels/kairos-*.whl)" \
    && /opt/kairos/bin/pip install --find-links /wheels /wheels/kairos_sdk-*.whl "${server}[objects]" \
    && /opt/kairos/bin/pip uninstall --yes pip \
    && /opt/kairos/bin/kairos --version


FROM python:3.12.12-slim-trixie AS runtime

LABEL org.opencontainers.image.title="kairos" \
      org.opencontainers.image.description="Kairos distributed job scheduler: api, scheduler and executor tiers" \
      org.opencontainers.image.licenses="Proprietary"

# A fixed numeric uid/gid so Kubernetes can check runAsNonRoot without reading /etc/passwd.
RUN groupadd --system --gid 10001 kairos \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/kairos --no-create-home \
       --shell /usr/sbin/nologin kairos \
    && mkdir -p /var/lib/kairos \
    && chown 10001:10001 /var/lib/kairos

COPY --from=builder /opt/kairos /opt/kairos

# Listen on every interface inside the container (the defaults are loopback, for a laptop);
# KAIROS_HOME is the only writable path the processes need (an emptyDir under Kubernetes).
ENV PATH=/opt/kairos/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    KAIROS_HOME=/var/lib/kairos \
    KAIROS_API_HOST=0.0.0.0 \
    KAIROS_GRPC_HOST=0.0.0.0 \
    KAIROS_LOG_FORMAT=json

WORKDIR /var/lib/kairos
USER 10001:10001

# 8080: REST API (api). 50051: worker gRPC protocol (executor). 9464: metrics and health (KAIROS_METRICS_PORT).
EXPOSE 8080 50051 9464

# No HEALTHCHECK: Kubernetes probes /healthz and /readyz (see helm/kairos).
ENTRYPOINT ["kairos"]
CMD ["api"]
