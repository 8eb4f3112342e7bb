# rose-embed: OpenAI-compatible embeddings server.
# PyPI's torch wheels for Linux x86_64 carry CUDA, so this one image serves on a GPU
# (docker run --gpus all ...) and falls back to the CPU without one.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HOME=/home/rose/.cache/huggingface

WORKDIR /app
COPY pyproject.toml README.md ./
COPY engine ./engine
COPY server ./server
COPY compat ./compat
RUN pip install --no-cache-dir . \
    && useradd --create-home --uid 10001 rose

USER 10001
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2).status != 200)"]
ENTRYPOINT ["rose-embed", "serve", "--host", "0.0.0.0", "--port", "8000"]
