# fe-ci runners. Two targets:
#   runner   a GPU runner: CUDA with cuDNN, Python and torch; each job's candidate installs into
#            its own venv that reuses this torch (pinned by constraint)
#   builder  the runner plus the toolchain commit builds need (nvcc, cuDNN headers, CMake, a C++
#            compiler, git) and, supplied here at image build time so a build needs no network:
#            the frontend's build requirements in a wheelhouse and dlpack's sources
# Candidates run in a network namespace (unshare, from util-linux) as `nobody` (setpriv); the
# namespace needs CAP_SYS_ADMIN, which docker-compose.yml grants (see there).
ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04
ARG CUDA_DEVEL_IMAGE=nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04

FROM ${CUDA_RUNTIME_IMAGE} AS runner
ARG TORCH_SPEC=torch==2.13.0
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    FE_CI_CACHE_DIR=/cache PATH=/opt/fe-ci/bin:$PATH
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv util-linux ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY scripts/install ./scripts/install
COPY core ./core
COPY runner ./runner
# The same install step as a checkout's scripts/setup: the runner alone, with torch beside it.
RUN ./scripts/install /opt/fe-ci "" "${TORCH_SPEC}"
VOLUME /cache
CMD ["fe-ci", "runner"]

FROM ${CUDA_DEVEL_IMAGE} AS builder
ARG TORCH_SPEC=torch==2.13.0
ARG DLPACK_REF=v1.1
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    FE_CI_CACHE_DIR=/cache PATH=/opt/fe-ci/bin:/usr/local/cuda/bin:$PATH \
    CUDAToolkit_ROOT=/usr/local/cuda FETCHCONTENT_SOURCE_DIR_DLPACK=/opt/dlpack \
    PIP_FIND_LINKS=/opt/wheelhouse FE_CI_RUNNER_LABELS=builder=1
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev util-linux \
      ca-certificates git g++ make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY scripts/install ./scripts/install
COPY core ./core
COPY runner ./runner
RUN ./scripts/install /opt/fe-ci "" "${TORCH_SPEC}"
# The frontend's declared build requirements (pyproject.toml [build-system]), and dlpack, which
# its CMake would otherwise clone at configure time.
RUN /opt/fe-ci/bin/python -m pip download -d /opt/wheelhouse \
      "setuptools>=64" "cmake>=3.18" "ninja==1.11.1.1" "pybind11[global]>=2.13,<3" wheel \
 && git clone --depth 1 --branch "${DLPACK_REF}" https://github.com/dmlc/dlpack /opt/dlpack
VOLUME /cache
CMD ["fe-ci", "runner"]
