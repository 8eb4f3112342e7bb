"""A classifier served beside an embedder by a real server process (`--model` repeated, the classifier
named by `--model NAME=PATH`): vLLM's /classify and TEI's /predict, texts and pairs, equal to
transformers' text-classification pipeline on the same tiny BERT classifier; the embedder still
embeds; a request of the wrong kind gets a 400 that names what the model serves."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.conftest import ServerProcess, load_texts
from tests.support.classifier_checkpoints import LABELS, pipeline_scores, save_classifier
from tests.support.client_support import checked_server
from tests.support.helpers import assert_envelope
from tests.support.st_checkpoints import bert_tokenizer, save_architecture, tiny_bert_config

pytestmark = pytest.mark.slow  # a real server process

CLASSIFIER = "tiny-classifier"
TOLERANCE = 1e-5  # float32 on the CPU, as tests/models/test_classify_scores.py


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> tuple:
    root = tmp_path_factory.mktemp("classify")
    return (save_architecture(root / "embedder", bert_tokenizer, tiny_bert_config),
            save_classifier(root / "classifier", "bert"))


@pytest.fixture(scope="module")
def server(checkpoints) -> Iterator[ServerProcess]:
    embedder, classifier = checkpoints
    yield from checked_server("--dtype", "float32", "--model", str(embedder),
                              "--model", f"{CLASSIFIER}={classifier}", "--max-batch-tokens", "1024")


def _post(server: ServerProcess, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


def test_classify_equals_the_pipeline(server, checkpoints):
    texts = [*load_texts(12), " ".join(load_texts(40))]  # the last is cut at the limit
    r = _post(server, "/classify", {"model": CLASSIFIER, "input": texts})
    assert r.status_code == 200, r.text
    probs, _ = pipeline_scores(checkpoints[1], texts)
    data = r.json()["data"]
    np.testing.assert_allclose([item["probs"] for item in data], probs, atol=TOLERANCE, rtol=0)
    assert [item["label"] for item in data] == [LABELS[i] for i in probs.argmax(axis=1)]


def test_predict_takes_pairs_and_gives_raw_scores(server, checkpoints):
    texts = load_texts(6)
    inputs = [[texts[0], texts[1]], [texts[2]], [texts[3], texts[4]], [texts[5]]]
    r = _post(server, "/predict", {"inputs": inputs, "raw_scores": True})  # no `model`: the classifier answers
    assert r.status_code == 200, r.text
    _, logits = pipeline_scores(checkpoints[1], [one[0] if len(one) == 1 else tuple(one) for one in inputs])
    got = [[{p["label"]: p["score"] for p in answer}[label] for label in LABELS] for answer in r.json()]
    np.testing.assert_allclose(got, logits, atol=TOLERANCE, rtol=0)


def test_the_embedder_beside_it_embeds(server):
    r = _post(server, "/v1/embeddings", {"input": ["a text", "another"]})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "embedder" and len(r.json()["data"][0]["embedding"]) == 64


def test_the_wrong_kind_and_bad_input_are_4xx_in_the_envelope(server):
    assert_envelope(_post(server, "/v1/embeddings", {"model": CLASSIFIER, "input": "a"}), 400, "model_is_classifier")
    assert_envelope(_post(server, "/classify", {"model": "embedder", "input": "a"}), 400, "model_is_embedder")
    error = assert_envelope(_post(server, "/predict", {"inputs": ["a", "b", "c"]}), 400)
    assert error["param"] == "inputs"
