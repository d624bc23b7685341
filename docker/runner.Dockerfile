# fe-ci runners. Two targets:
#   runner   a GPU runner: CUDA with cuDNN, Python and torch; each job's candidate installs into
#            its own venv that reuses this torch (pinned by constraint)
#   builder  the runner plus the toolchain commit builds need (nvcc, cuDNN headers, CMake, a C++
#            compiler, git) and, supplied here at image build time so a build needs no network:
#            the frontend's build requirements in a wheelhouse and dlpack's sources
# Candidates run in bubblewrap's namespaces as a uid of their job (setpriv, from util-linux;
# unshare where bwrap cannot start); that needs CAP_SYS_ADMIN and more, which docker-compose.yml
# grants (see there).
#
# The bases are build arguments: CUDA with cuDNN for GPU hosts (the defaults); for a runner
# without a GPU, Debian 12 (whose python3 is 3.11) with a CPU build of torch, as
# docker-compose.cpu.yml builds it:
#   --build-arg RUNNER_BASE_IMAGE=debian:bookworm-slim --build-arg TORCH_SPEC=torch==2.13.0+cpu
# The default package index serves only CUDA builds of torch (several GB with their CUDA
# wheels); give the build a folder holding the CPU wheel as the build context `wheels`:
#   --build-context wheels=DIR    (scripts/container-smoke fills DIR with the host's pip)
# It is mounted only while torch installs: nothing of it stays in the image.
ARG RUNNER_BASE_IMAGE=nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04
ARG BUILDER_BASE_IMAGE=nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04

# Empty unless the build is given a `wheels` context (above).
FROM scratch AS wheels

FROM ${RUNNER_BASE_IMAGE} AS runner
ARG TORCH_SPEC=torch==2.13.0
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    FE_CI_CACHE_DIR=/cache PATH=/opt/fe-ci/bin:$PATH
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv util-linux bubblewrap \
      ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY scripts/install ./scripts/install
# The same install step as a checkout's scripts/setup: the runner alone, with torch beside it.
# In three layers, each changing more often than the one before: torch; fe-ci's dependencies
# (from pyproject.toml, before the source is in); fe-ci.
RUN --mount=type=bind,from=wheels,target=/wheels \
    PIP_FIND_LINKS=/wheels TORCH_ONLY=1 ./scripts/install /opt/fe-ci "" "${TORCH_SPEC}"
COPY pyproject.toml README.md ./
RUN ./scripts/install /opt/fe-ci "" ""
COPY core ./core
COPY runner ./runner
COPY cli ./cli
RUN ./scripts/install /opt/fe-ci "" ""
VOLUME /cache
CMD ["fe-ci", "runner"]

FROM ${BUILDER_BASE_IMAGE} AS builder
ARG TORCH_SPEC=torch==2.13.0
ARG DLPACK_REF=v1.1
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    FE_CI_CACHE_DIR=/cache PATH=/opt/fe-ci/bin:/usr/local/cuda/bin:$PATH \
    CUDAToolkit_ROOT=/usr/local/cuda FETCHCONTENT_SOURCE_DIR_DLPACK=/opt/dlpack \
    PIP_FIND_LINKS=/opt/wheelhouse FE_CI_RUNNER_LABELS=builder=1
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev util-linux \
      bubblewrap ca-certificates git g++ make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY scripts/install ./scripts/install
RUN --mount=type=bind,from=wheels,target=/wheels \
    PIP_FIND_LINKS=/wheels TORCH_ONLY=1 ./scripts/install /opt/fe-ci "" "${TORCH_SPEC}"
# The frontend's declared build requirements (pyproject.toml [build-system]), and dlpack, which
# its CMake would otherwise clone at configure time.
RUN /opt/fe-ci/bin/python -m pip download -d /opt/wheelhouse \
      "setuptools>=64" "cmake>=3.18" "ninja==1.11.1.1" "pybind11[global]>=2.13,<3" wheel \
 && git clone --depth 1 --branch "${DLPACK_REF}" https://github.com/dmlc/dlpack /opt/dlpack
COPY pyproject.toml README.md ./
RUN ./scripts/install /opt/fe-ci "" ""
COPY core ./core
COPY runner ./runner
COPY cli ./cli
RUN ./scripts/install /opt/fe-ci "" ""
VOLUME /cache
CMD ["fe-ci", "runner"]
