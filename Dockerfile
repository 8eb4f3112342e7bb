# rose-embed: OpenAI-compatible embeddings server.
# PyPI's torch wheels for Linux x86_64 bundle CUDA (as nvidia-* wheels), so a slim Python
# base makes a CUDA image: the host needs only the NVIDIA driver and container toolkit
# (docker run --gpus all ..., or nvidia.com/gpu on Kubernetes: deploy/). Without a GPU the
# same image serves on the CPU.
FROM python:3.11-slim

# The torch that CI tests (.ci/run).
ARG TORCH_VERSION=2.13.0

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HOME=/home/rose/.cache/huggingface

# Triton, which runs the fused kernels on CUDA, compiles a small C launcher with the system
# compiler the first time a kernel runs: without gcc and libc headers the GPU warm-up fails.
# Unpinned: Debian's stable suite only takes fixes, and a pin breaks once one lands.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY rose_embed ./rose_embed
COPY engine ./engine
COPY server ./server
COPY compat ./compat
COPY corpus ./corpus
# Numeric ids, so that Kubernetes' runAsNonRoot can check them (deploy/deployment.yaml).
RUN pip install --no-cache-dir "torch==${TORCH_VERSION}" . \
    && groupadd --gid 10001 rose \
    && useradd --create-home --uid 10001 --gid 10001 rose

USER 10001:10001
# The port, read by the server (where no --port is given) and by the health check alike: set it
# with `docker run -e ROSE_EMBED_PORT=...`, so that the two agree.
ENV ROSE_EMBED_PORT=8000
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:' + os.environ['ROSE_EMBED_PORT'] + '/health', timeout=2).status != 200)"]
ENTRYPOINT ["rose-embed", "serve", "--host", "0.0.0.0"]
