# The fe-ci service: API, dashboard, runner protocol. Non-root, data on a volume.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 FE_CI_DATA_DIR=/data
RUN useradd --create-home --uid 10001 feci && mkdir /data && chown feci /data
WORKDIR /app
COPY pyproject.toml README.md ./
COPY service ./service
COPY runner ./runner
RUN pip install --no-cache-dir '.[service]'
USER feci
VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/api/builds', timeout=4)"
CMD ["fe-ci", "serve", "--host", "0.0.0.0", "--port", "8080"]
