# The partition-proxy image: the same install as the README (`pip install .` of this repository), nothing else.
#
# No image build engine (docker, buildah, kaniko) runs on the development machine, so this file
# is not built in CI; the chart tests check the manifests and the rendered config instead.
# Build elsewhere with:  docker build -t partition-proxy:0.1.0 .
FROM python:3.11-slim

# No .pyc files on the read-only root filesystem; logs straight to the container's stdout.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml ./
COPY config ./config
COPY routing ./routing
COPY proxy ./proxy
RUN pip install . && rm -rf /src

# A fixed numeric uid/gid, matching the chart's runAsUser/runAsGroup/fsGroup (10001), so
# runAsNonRoot can verify it without a passwd lookup.
RUN groupadd --system --gid 10001 proxy \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin proxy
USER 10001:10001
WORKDIR /

EXPOSE 6443
# The chart mounts the rendered config (ConfigMap) at this path and passes the same command.
ENTRYPOINT ["partition-proxy", "serve", "--config", "/etc/partition-proxy/config/config.yaml"]
