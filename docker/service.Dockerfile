# The fe-ci service: API, dashboard, runner protocol. Non-root, its data on a volume.
# Two stages: `build` installs fe-ci into /opt/fe-ci; the image takes only that environment, less
# the installers (pip, setuptools, uv: the service installs nothing at run time), so no build tool
# is left in it. Layers go from what changes least to fe-ci's own source, which comes last.
FROM python:3.11-slim AS build
ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY scripts/install ./scripts/install
# The same install step as a checkout's scripts/setup: the service and Postgres extras, no torch.
# Twice: fe-ci's dependencies from pyproject.toml before the source is in, then fe-ci.
RUN ./scripts/install /opt/fe-ci service,postgres ""
COPY service ./service
COPY core ./core
COPY runner ./runner
COPY cli ./cli
RUN ./scripts/install /opt/fe-ci service,postgres "" \
 && /opt/fe-ci/bin/python -m pip uninstall -q -y uv setuptools pip

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    FE_CI_DATA_DIR=/data PATH=/opt/fe-ci/bin:$PATH
RUN useradd --create-home --uid 10001 feci && mkdir /data && chown feci /data
COPY --from=build /opt/fe-ci /opt/fe-ci
USER 10001
VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
CMD ["fe-ci", "serve", "--host", "0.0.0.0", "--port", "8080"]
