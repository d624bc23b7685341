# A GPU runner: CUDA with cuDNN, Python and torch; candidates install into per-job venvs that
# reuse this torch. Needs the service URL and the registration token in the environment.
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04
FROM ${CUDA_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 FE_CI_CACHE_DIR=/cache
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv python3-pip \
      util-linux && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/fe-ci && /opt/fe-ci/bin/pip install --no-cache-dir torch
WORKDIR /app
COPY pyproject.toml README.md ./
COPY runner ./runner
RUN /opt/fe-ci/bin/pip install --no-cache-dir .
ENV PATH=/opt/fe-ci/bin:$PATH
VOLUME /cache
CMD ["fe-ci", "runner"]
