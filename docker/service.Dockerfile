# The fe-ci service: API, dashboard, runner protocol. Non-root, its data on a volume.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    FE_CI_DATA_DIR=/data PATH=/opt/fe-ci/bin:$PATH
RUN useradd --create-home --uid 10001 feci && mkdir /data && chown feci /data
WORKDIR /app
COPY pyproject.toml README.md ./
COPY scripts/install ./scripts/install
COPY service ./service
COPY core ./core
COPY runner ./runner
# The same install step as a checkout's scripts/setup: the service and Postgres extras, no torch.
RUN ./scripts/install /opt/fe-ci service,postgres ""
USER 10001
VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
CMD ["fe-ci", "serve", "--host", "0.0.0.0", "--port", "8080"]
