"""Fixtures and helpers of the client compatibility suite (imported by the test_client_* modules).

Each client runs against a real server process on loopback; its vectors are compared with
the ones the same server returns for the same texts through plain httpx.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Iterator
from importlib import resources

import httpx
import numpy as np
import pytest
from tests.conftest import ServerProcess

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
ALIAS = "text-embedding-3-small"
API_KEYS = ("sk-rose-test-one", "sk-rose-test-two")

# The clients' servers run default flags, so on a CPU with native bf16 they compute in bf16, where
# batches of different composition round differently (other matmul shapes): the same text's
# vector through two requests agrees to this cosine.
MIN_COSINE = 0.9995

# The float32 server (the `server` fixture) against sentence-transformers in float32: test_parity.py's tolerance.
ST_MIN_COSINE = 0.99999

# The URL tiktoken downloads cl100k_base from; tiktoken's cache file is named by its sha1.
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"

# The flags docs/clients.md tells users to start the server with (test_docs_clients checks it):
# none, since OpenAI's model names are answered by default.
DOCS_SERVER_FLAGS: tuple[str, ...] = ()


def reference_vectors(url: str, texts: list[str], api_key: str | None = None, dimensions: int | None = None
                      ) -> np.ndarray:
    """The server's own answer for `texts`, through plain httpx and float JSON: [N, D]."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"model": MODEL, "input": texts, "encoding_format": "float"}
    if dimensions is not None:
        body["dimensions"] = dimensions
    r = httpx.post(url + "/v1/embeddings", json=body, headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert [d["index"] for d in data] == list(range(len(texts)))
    return np.asarray([d["embedding"] for d in data], dtype=np.float32)


def assert_same_vectors(got, expected: np.ndarray) -> None:
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == expected.shape
    cosines = (got * expected).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1))
    assert cosines.min() >= MIN_COSINE, f"worst cosine {cosines.min()} at input {cosines.argmin()}"


def assert_close_to_st(got, expected: np.ndarray) -> None:
    """`got` against sentence-transformers' vectors for the same texts: direction and length."""
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == expected.shape
    cosines = (got * expected).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1))
    assert cosines.min() >= ST_MIN_COSINE, f"worst cosine {cosines.min()} at text {cosines.argmin()}"
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), np.linalg.norm(expected, axis=1), atol=1e-5)


@pytest.fixture(scope="session")
def st_reference(server):
    """SentenceTransformer on the embedded default model that the `server` fixture serves, as
    test_parity.py loads it."""
    from sentence_transformers import SentenceTransformer

    from rose_embed.engine.model_files.loader import resolve_model_dir

    return SentenceTransformer(str(resolve_model_dir(None)[0]), device="cpu")


def stop_and_check_no_server_error(proc: ServerProcess) -> None:
    """No request of the suite may have hit a 5xx: server/http/errors.py logs each one it answers."""
    proc.stop()
    log = proc.log_path.read_text(errors="replace")
    for marker in ("unhandled error", "batch failed"):
        assert marker not in log, f"the server answered a 5xx:\n{log[-5000:]}"


def checked_server(*args: str) -> Iterator[ServerProcess]:
    """A real server for a module's tests (a fixture yields from it): stopped after them, its log then
    checked for any 5xx it answered."""
    proc = ServerProcess(*args)
    yield proc
    stop_and_check_no_server_error(proc)


@pytest.fixture(scope="session")
def docs_server() -> Iterator[ServerProcess]:
    """The server as docs/clients.md starts it: default flags."""
    yield from checked_server(*DOCS_SERVER_FLAGS, "--max-batch-tokens", "2048")


@pytest.fixture(scope="session")
def strict_server() -> Iterator[ServerProcess]:
    """--strict-model-names: OpenAI's model names are 404s, as an operator who wants them may ask."""
    yield from checked_server("--strict-model-names", "--max-batch-tokens", "2048")


@pytest.fixture(scope="session")
def model_ids_server() -> Iterator[ServerProcess]:
    """Token-id input read as the served model's own ids (--token-ids model)."""
    yield from checked_server("--token-ids", "model", "--max-batch-tokens", "2048")


@pytest.fixture(scope="session")
def locked_server() -> Iterator[ServerProcess]:
    """API keys (one by flag, one from the environment), --long-inputs error, a small request cap."""
    env_before = os.environ.get("ROSE_EMBED_API_KEY")
    os.environ["ROSE_EMBED_API_KEY"] = API_KEYS[1]
    try:
        proc = ServerProcess("--api-key", API_KEYS[0], "--long-inputs", "error", "--max-request-tokens", "2000",
                             "--max-batch-tokens", "512")
    finally:
        if env_before is None:
            del os.environ["ROSE_EMBED_API_KEY"]
        else:
            os.environ["ROSE_EMBED_API_KEY"] = env_before
    yield proc
    stop_and_check_no_server_error(proc)


@pytest.fixture(scope="session")
def tiktoken_offline(tmp_path_factory) -> Iterator[str]:
    """Let tiktoken find cl100k_base without a network: bpe-openai's copy, under tiktoken's cache key."""
    cache_dir = tmp_path_factory.mktemp("tiktoken-cache")
    data = gzip.decompress(resources.files("bpe_openai.data").joinpath("cl100k_base.tiktoken.gz").read_bytes())
    (cache_dir / hashlib.sha1(CL100K_URL.encode()).hexdigest()).write_bytes(data)
    before = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache_dir)
    yield str(cache_dir)
    if before is None:
        os.environ.pop("TIKTOKEN_CACHE_DIR", None)
    else:
        os.environ["TIKTOKEN_CACHE_DIR"] = before
