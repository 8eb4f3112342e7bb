"""A BGE-M3 model on the in-process app with a real CPU engine in float32, beside a fake dense embedder:
every subset of `outputs` on /v1/embeddings equals FlagEmbedding's encode (tests/support/bge_m3_checkpoints.py's
transcription) within 1e-4, in float and base64, across parts; without `outputs` the answer is OpenAI's, the
dense vector; every bad `outputs` and what cannot go with it is a 400 naming the field; the other routes
and the other model refuse by name."""

from __future__ import annotations

import base64
import itertools

import jsonschema
import numpy as np
import pytest

from rose_embed.engine.contract.config import EngineConfig
from rose_embed.engine.rose.engine import Engine
from tests.conftest import load_texts, texts_with_edges
from tests.support.bge_m3_checkpoints import HIDDEN, as_pairs, reference_outputs, save_bge_m3
from tests.support.fake_engine import FAKE_MODEL, FakeEngine, fake_config, serve
from tests.support.helpers import assert_envelope

pytestmark = pytest.mark.slow  # builds a checkpoint and its reference, loads a real engine

TOLERANCE = 1e-4
M3 = "m3"
MAX_SEQ_LEN = 128
# Per-token rows: a batch must hold one whole text's (the server's --max-batch-seqs check).
ENGINE = EngineConfig(device="cpu", dtype="float32", max_batch_tokens=1024, max_batch_seqs=256)
SUBSETS = [list(s) for n in (1, 2, 3) for s in itertools.combinations(("dense", "sparse", "colbert"), n)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return save_bge_m3(tmp_path_factory.mktemp("bge-m3") / M3, max_seq_length=MAX_SEQ_LEN)


@pytest.fixture(scope="module")
def client(saved):
    engine = Engine(EngineConfig(model=str(saved), device="cpu", dtype="float32", max_batch_tokens=1024,
                                 max_batch_seqs=256))
    with serve([engine, FakeEngine()], fake_config(engine=ENGINE)) as client:
        yield client


@pytest.fixture(scope="module")
def texts() -> list[str]:
    # A text past the limit (cut, as FlagEmbedding's truncation cuts it), an empty one, punctuation.
    return texts_with_edges(12, 20)


@pytest.fixture(scope="module")
def reference(saved, texts):
    return reference_outputs(saved, texts, max_length=MAX_SEQ_LEN)


def _post(client, body: dict):
    return client.post("/v1/embeddings", json={"model": M3, **body})


def _assert_outputs(data: list[dict], reference: dict, asked: list[str], encoding: str = "float") -> None:
    assert [d["index"] for d in data] == list(range(len(reference["dense_vecs"])))
    for i, item in enumerate(data):
        assert item["object"] == "multi_output_embedding"
        assert set(item) == {"index", "object", *asked}, item.keys()
        if "dense" in asked:
            dense = item["dense"]
            if encoding == "base64":
                dense = np.frombuffer(base64.b64decode(dense), dtype="<f4")
            np.testing.assert_allclose(dense, reference["dense_vecs"][i], atol=TOLERANCE, rtol=0, err_msg=f"text {i}")
        if "sparse" in asked:
            ids, weights = as_pairs(reference["lexical_weights"][i])
            assert item["sparse"]["indices"] == ids.tolist(), f"text {i}"
            np.testing.assert_allclose(item["sparse"]["values"], weights, atol=TOLERANCE, rtol=0, err_msg=f"text {i}")
        if "colbert" in asked:
            colbert = item["colbert"]
            if encoding == "base64":
                colbert = np.frombuffer(base64.b64decode(colbert), dtype="<f4").reshape(-1, HIDDEN)
            colbert = np.asarray(colbert, dtype=np.float32).reshape(-1, HIDDEN)
            np.testing.assert_allclose(colbert, reference["colbert_vecs"][i], atol=TOLERANCE, rtol=0,
                                       err_msg=f"text {i}")


@pytest.mark.parametrize("asked", SUBSETS, ids="+".join)
def test_every_subset_of_outputs_equals_flagembedding(client, texts, reference, asked):
    r = _post(client, {"input": texts, "outputs": asked})
    assert r.status_code == 200, r.text
    _assert_outputs(r.json()["data"], reference, asked)
    assert r.json()["usage"]["prompt_tokens"] == sum(len(v) + 1 for v in reference["colbert_vecs"])


def test_base64_packs_dense_and_colbert_vectors(client, texts, reference):
    r = _post(client, {"input": texts, "outputs": ["dense", "sparse", "colbert"], "encoding_format": "base64"})
    assert r.status_code == 200, r.text
    _assert_outputs(r.json()["data"], reference, ["dense", "sparse", "colbert"], "base64")


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_the_openapi_document_describes_both_answers(client, texts, encoding):
    """The 200 answer published for /v1/embeddings takes a multi-output answer and OpenAI's; an item of
    neither shape does not pass (the schema is not vacuous)."""
    document = client.get("/docs/openapi.json").json()
    answer = document["paths"]["/v1/embeddings"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    validator = jsonschema.Draft202012Validator(answer)
    for body in ({"outputs": ["dense", "sparse", "colbert"]}, {"outputs": ["sparse"]}, {}):
        r = _post(client, {"input": texts[:4], "encoding_format": encoding, **body})
        assert r.status_code == 200, r.text
        validator.validate(r.json())
    neither = {**r.json(), "data": [{"index": 0, "sparse": "not an object"}]}
    assert not validator.is_valid(neither)


def test_without_outputs_the_answer_is_openais_dense_vector(client, texts, reference):
    r = _post(client, {"input": texts})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert {d["object"] for d in data} == {"embedding"}
    np.testing.assert_allclose([d["embedding"] for d in data], reference["dense_vecs"], atol=TOLERANCE, rtol=0)
    cut = _post(client, {"input": texts[:3], "dimensions": 8}).json()["data"]
    expected = np.stack(reference["dense_vecs"][:3])[:, :8]
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose([d["embedding"] for d in cut], expected, atol=TOLERANCE, rtol=0)


def test_many_texts_cross_parts_and_keep_their_order(client, saved):
    texts = [text for text in load_texts(200) if len(text) < 300][:100]
    r = _post(client, {"input": texts, "outputs": ["sparse", "colbert"]})
    assert r.status_code == 200, r.text
    _assert_outputs(r.json()["data"], reference_outputs(saved, texts, max_length=MAX_SEQ_LEN), ["sparse", "colbert"])


@pytest.mark.parametrize("body,param", [
    ({"outputs": ["dense", "lexical"]}, "outputs"),
    ({"outputs": []}, "outputs"),
    ({"outputs": ["sparse", "sparse"]}, "outputs"),
    ({"outputs": "dense"}, "outputs"),
    ({"outputs": ["colbert"], "dimensions": 8}, "dimensions"),
    ({"dimensions": HIDDEN + 1}, "dimensions"),
    ({"outputs": ["sparse"], "long_inputs": "chunk"}, "long_inputs"),
    ({"outputs": ["dense"], "encoding_format": "int8"}, "encoding_format"),
])
def test_a_bad_outputs_request_is_a_400_naming_the_field(client, body, param):
    error = assert_envelope(_post(client, {"input": ["a text"], **body}), 400)
    assert error["param"] == param, error


def test_token_ids_are_taken_for_the_dense_output_only(client):
    assert _post(client, {"input": [[5, 6, 7]]}).status_code == 200
    error = assert_envelope(_post(client, {"input": [[5, 6, 7]], "outputs": ["sparse"]}), 400)
    assert error["param"] == "input"


def test_another_model_given_outputs_is_a_400(client):
    error = assert_envelope(client.post("/v1/embeddings", json={"model": FAKE_MODEL, "input": "a",
                                                                 "outputs": ["dense"]}), 400)
    assert error["param"] == "outputs" and "BGE-M3" in error["message"]


@pytest.mark.parametrize("path,body", [("/embed", {"inputs": "a"}), ("/v2/embed", {"texts": ["a"]}),
                                       ("/embed_sparse", {"inputs": "a"})])
def test_other_routes_refuse_it_by_name(client, path, body):
    error = assert_envelope(client.post(path, json={"model": M3, **body}), 400)
    assert "BGE-M3" in error["message"] and "/v1/embeddings" in error["message"]


def test_models_lists_its_kind(client):
    kinds = {m["id"]: m["kind"] for m in client.get("/v1/models").json()["data"]}
    assert kinds == {M3: "multi_output_embedding", FAKE_MODEL: "embedding"}
