"""A BGE-M3 model served by a real server process beside a dense embedder (`--model` repeated): a tiny
checkpoint in BAAI/bge-m3's layout (tests/support/bge_m3_checkpoints.py), every subset of `outputs` on
/v1/embeddings equal to FlagEmbedding's encode (the transcription) within 1e-4 in float32, float and
base64, a large request over several parts and batches; without `outputs` OpenAI's answer, the dense
vector; `outputs` sent to the dense model is a 400 naming the field; serve refuses a --max-batch-seqs
below one text's token rows."""

from __future__ import annotations

import base64
import itertools
import subprocess
import sys
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.conftest import REPO, ServerProcess, texts_with_edges
from tests.support.bge_m3_checkpoints import HIDDEN, as_pairs, reference_outputs, save_bge_m3
from tests.support.client_support import checked_server
from tests.support.helpers import MODEL, assert_envelope

pytestmark = pytest.mark.slow  # a real server process

M3 = "tiny-m3"
TOLERANCE = 1e-4
MAX_SEQ_LEN = 96
SUBSETS = [list(s) for n in (1, 2, 3) for s in itertools.combinations(("dense", "sparse", "colbert"), n)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return save_bge_m3(tmp_path_factory.mktemp("bge-m3") / "m3", max_seq_length=MAX_SEQ_LEN)


@pytest.fixture(scope="module")
def server(saved) -> Iterator[ServerProcess]:
    # --long-inputs chunk is the embedders': the BGE-M3 model truncates its long texts as FlagEmbedding does.
    yield from checked_server("--dtype", "float32", "--model", MODEL, "--model", f"{M3}={saved}",
                              "--max-batch-tokens", "512", "--max-batch-seqs", "128", "--long-inputs", "chunk")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return texts_with_edges(20, 10)


def _post(server, body: dict) -> httpx.Response:
    return httpx.post(server.url + "/v1/embeddings", json={"model": M3, **body}, timeout=60)


def _decoded(value, encoding: str, width: int | None = None) -> np.ndarray:
    if encoding == "base64":
        value = np.frombuffer(base64.b64decode(value), dtype="<f4")
    value = np.asarray(value, dtype=np.float32)
    return value.reshape(-1, width) if width else value


def _assert_outputs(data: list[dict], reference: dict, asked: list[str], encoding: str = "float") -> None:
    assert len(data) == len(reference["dense_vecs"])
    for i, item in enumerate(data):
        assert item["index"] == i and item["object"] == "multi_output_embedding"
        assert set(item) == {"index", "object", *asked}
        if "dense" in asked:
            np.testing.assert_allclose(_decoded(item["dense"], encoding), reference["dense_vecs"][i], atol=TOLERANCE,
                                       rtol=0, err_msg=f"text {i}")
        if "sparse" in asked:
            ids, weights = as_pairs(reference["lexical_weights"][i])
            assert item["sparse"]["indices"] == ids.tolist(), f"text {i}"
            np.testing.assert_allclose(item["sparse"]["values"], weights, atol=TOLERANCE, rtol=0)
        if "colbert" in asked:
            np.testing.assert_allclose(_decoded(item["colbert"], encoding, HIDDEN), reference["colbert_vecs"][i],
                                       atol=TOLERANCE, rtol=0, err_msg=f"text {i}")


@pytest.mark.parametrize("asked", SUBSETS, ids="+".join)
def test_every_subset_of_outputs_equals_flagembedding(server, saved, texts, asked):
    r = _post(server, {"input": texts, "outputs": asked})
    assert r.status_code == 200, r.text
    _assert_outputs(r.json()["data"], reference_outputs(saved, texts, max_length=MAX_SEQ_LEN), asked)


def test_a_large_request_in_base64_over_several_parts_and_batches(server, saved, texts):
    many = texts * 4  # parts of 16, 32 and 64 texts; batches of at most 128 token rows
    r = _post(server, {"input": many, "outputs": ["dense", "sparse", "colbert"], "encoding_format": "base64"})
    assert r.status_code == 200, r.text
    reference = reference_outputs(saved, many, max_length=MAX_SEQ_LEN)
    _assert_outputs(r.json()["data"], reference, ["dense", "sparse", "colbert"], "base64")


def test_without_outputs_openais_sdk_gets_the_dense_vector(server, saved, texts):
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="unused")
    got = client.embeddings.create(model=M3, input=texts)  # base64 on the wire, as the SDK asks
    expected = reference_outputs(saved, texts, max_length=MAX_SEQ_LEN)["dense_vecs"]
    np.testing.assert_allclose([d.embedding for d in got.data], expected, atol=TOLERANCE, rtol=0)


def test_outputs_sent_to_the_dense_model_is_a_400(server):
    r = httpx.post(server.url + "/v1/embeddings", json={"input": "a", "outputs": ["dense"]}, timeout=10)
    assert assert_envelope(r, 400)["param"] == "outputs"


def test_models_lists_its_kind(server):
    kinds = {m["id"]: m["kind"] for m in httpx.get(server.url + "/v1/models", timeout=10).json()["data"]}
    assert kinds[M3] == "multi_output_embedding" and kinds[MODEL] == "embedding"


def test_serve_refuses_too_few_batch_seqs_for_one_texts_token_rows(saved):
    done = subprocess.run([sys.executable, "-m", "rose_embed", "serve", "--model", str(saved), "--max-batch-seqs",
                           "32"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "--max-batch-seqs" in done.stderr and "BGE-M3" in done.stderr, done.stderr
