# The karpy controller image: `karpy run` as a non-root user, from the locked environment.
#
#   docker build -t karpy .                 # with a Docker engine
#   make image                              # without one: buildah, on a locally built Debian base
#
# Two stages on the same base. The builder installs the pinned uv and makes /app/.venv from
# uv.lock (--locked: a lock that no longer matches pyproject.toml fails the build instead of
# being re-resolved; --no-dev: no test tools; --no-editable: karpy itself is installed into
# the venv, so the runtime stage needs no source tree). The runtime stage copies only that
# venv. Both stages use one base so that the venv's interpreter link (the base's python3)
# points at the same interpreter at run time.
#
# The chart runs the container with runAsNonRoot, runAsUser 65532 and a read-only root
# filesystem, so the image is built for that: the user is numeric (Kubernetes can check a
# numeric USER against runAsNonRoot without resolving names), every module is compiled in the
# builder and PYTHONDONTWRITEBYTECODE keeps Python from trying to write .pyc files at start,
# and karpy writes nothing else to disk. See docs/image.md.

# Any Debian bookworm image with python3 (3.11) and its venv module; CI builds one locally
# (scripts/image base), since no container registry may be reachable there.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS builder
# The same uv as the Makefile's (UV_VERSION there), so the lock is read the same way.
ARG UV_VERSION=0.13.9
# The builder trusts the system CA bundle, for pip and uv alike (uv's own default is its
# built-in roots), so a build behind a TLS-inspecting proxy works once that proxy's bundle
# is mounted there (scripts/image does). Only this stage sees these settings.
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    UV_PYTHON_DOWNLOADS=never \
    UV_PYTHON=python3 \
    UV_PROJECT_ENVIRONMENT=/app/.venv \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy
RUN python3 -m venv /opt/uv \
    && /opt/uv/bin/pip install --no-cache-dir --quiet uv==${UV_VERSION}
WORKDIR /src
# The dependencies first, in their own layer: it is rebuilt only when the lock changes.
COPY pyproject.toml uv.lock ./
RUN --mount=type=cache,target=/root/.cache/uv \
    /opt/uv/bin/uv sync --locked --no-dev --no-install-project
COPY README.md ./
COPY src ./src
RUN --mount=type=cache,target=/root/.cache/uv \
    /opt/uv/bin/uv sync --locked --no-dev --no-editable

FROM ${BASE_IMAGE}
# The version in pyproject.toml (scripts/image passes it; a unit test keeps this default equal).
ARG KARPY_VERSION=0.1.0
ARG BASE_IMAGE
LABEL org.opencontainers.image.title="karpy" \
      org.opencontainers.image.description="A Kubernetes node autoscaler that speaks Karpenter's API" \
      org.opencontainers.image.version="${KARPY_VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
# uid/gid 65532, as distroless's nonroot: the chart's securityContext names that uid.
# --no-log-init: no lastlog/faillog record, which for a uid this high is a file of megabytes.
RUN groupadd --gid 65532 nonroot \
    && useradd --uid 65532 --gid 65532 --home-dir /home/nonroot --create-home --no-log-init \
       --shell /usr/sbin/nologin nonroot
COPY --from=builder /app/.venv /app/.venv
ENV PATH=/app/.venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/home/nonroot
USER 65532:65532
WORKDIR /home/nonroot
ENTRYPOINT ["karpy"]
CMD ["run"]
