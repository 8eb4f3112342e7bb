"""/classify (vLLM's) and /predict (TEI's) on a fake classifier served beside a fake embedder and a fake
reranker, in process: the shapes of both answers, probabilities and logits equal to the fake's
one-input-at-a-time reference (tests/support/fake_classifier.py), pairs, parts, over-long inputs,
each route reaching its own kind of model, and every bad request in OpenAI's envelope with a 4xx."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import load_texts
from tests.support.fake_classifier import FAKE_CLASSIFIER, LABELS, FakeClassifier
from tests.support.fake_engine import FAKE_MODEL, FakeEngine, fake_config, serve
from tests.support.fake_reranker import FAKE_RERANKER, FakeReranker
from tests.support.helpers import assert_envelope, sample

MAX_INPUTS = 200
NUM_LABELS = len(LABELS)


@pytest.fixture(scope="module")
def models() -> tuple[FakeEngine, FakeClassifier, FakeReranker]:
    return FakeEngine(dim=48), FakeClassifier(), FakeReranker()


@pytest.fixture(scope="module")
def fake(models) -> FakeClassifier:
    return models[1]


@pytest.fixture(scope="module")
def client(models):
    with serve(list(models), fake_config(max_request_inputs=MAX_INPUTS)) as client:
        yield client


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [*load_texts(9), "", "  spaced   text  "]


def _long_text() -> str:
    return " ".join(load_texts(40))


def _probs(response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.array([item["probs"] for item in response.json()["data"]])


@pytest.mark.parametrize("path", ["/classify", "/v1/classify"])
def test_classify_answers_vllms_shape_with_every_probability(client, fake, texts, path):
    r = client.post(path, json={"model": FAKE_CLASSIFIER, "input": texts})
    expected = fake.rows_of(texts)
    np.testing.assert_allclose(_probs(r), expected[:, :NUM_LABELS], atol=1e-6)
    body = r.json()
    assert body["object"] == "list" and body["id"].startswith("classify-") and isinstance(body["created"], int)
    assert body["model"] == FAKE_CLASSIFIER
    assert [item["index"] for item in body["data"]] == list(range(len(texts)))
    assert [item["label"] for item in body["data"]] == [LABELS[i] for i in expected[:, :NUM_LABELS].argmax(axis=1)]
    assert len({item["label"] for item in body["data"]}) > 1, "every input got one label: a mix-up could hide"
    assert all(item["num_classes"] == NUM_LABELS for item in body["data"])
    num_tokens = sum(len(s) for s in fake.seqs_of(texts))
    assert body["usage"] == {"prompt_tokens": num_tokens, "total_tokens": num_tokens, "completion_tokens": 0,
                             "prompt_tokens_details": None}


def test_one_text_unnamed_reaches_the_classifier(client, fake):
    r = client.post("/classify", json={"input": "one text"})
    np.testing.assert_allclose(_probs(r), fake.rows_of(["one text"])[:, :NUM_LABELS], atol=1e-6)
    assert r.json()["model"] == FAKE_CLASSIFIER


def test_use_activation_false_gives_the_logits(client, fake, texts):
    expected = fake.rows_of(texts)[:, NUM_LABELS:]
    for off in ({"use_activation": False}, {"activation": False}, {"softmax": False}):
        np.testing.assert_allclose(_probs(client.post("/classify", json={"input": texts, **off})), expected, atol=1e-6)


def test_many_texts_cross_parts_and_keep_their_order(client, fake):
    texts = load_texts(MAX_INPUTS)
    np.testing.assert_allclose(_probs(client.post("/classify", json={"input": texts})),
                               fake.rows_of(texts)[:, :NUM_LABELS], atol=1e-6)


def test_an_over_long_text_is_cut_at_the_limit(client, fake):
    long_text = _long_text()
    assert len(fake.tokenize([long_text])[0]) == fake.spec.max_seq_len
    np.testing.assert_allclose(_probs(client.post("/classify", json={"input": [long_text, "short"]})),
                               fake.rows_of([long_text, "short"])[:, :NUM_LABELS], atol=1e-6)


def test_an_over_long_text_is_refused_under_long_inputs_error():
    with serve(FakeClassifier(), fake_config(long_inputs="error")) as client:
        error = assert_envelope(client.post("/classify", json={"input": ["short", _long_text()]}), 400)
        assert "maximum context length" in error["message"]
        assert client.post("/classify", json={"input": "short"}).status_code == 200


def _predictions(answer: list[dict]) -> tuple[list[str], np.ndarray]:
    return [p["label"] for p in answer], np.array([p["score"] for p in answer])


def _by_label(answer: list[dict]) -> np.ndarray:
    scores = {p["label"]: p["score"] for p in answer}
    return np.array([scores[label] for label in LABELS])


def test_predict_one_text_is_one_list_best_first(client, fake):
    r = client.post("/predict", json={"inputs": "one text"})
    assert r.status_code == 200, r.text
    labels, scores = _predictions(r.json())
    expected = fake.rows_of(["one text"])[0, :NUM_LABELS]
    assert labels == [LABELS[i] for i in np.argsort(-expected)]
    np.testing.assert_allclose(scores, np.sort(expected)[::-1], atol=1e-6)
    assert set(r.json()[0]) == {"score", "label"}


@pytest.mark.parametrize("inputs,expected_input", [(["one text"], "one text"), (["a query", "a document"],
                                                                                 ("a query", "a document"))],
                         ids=["one-text array", "pair"])
def test_predict_single_forms(client, fake, inputs, expected_input):
    r = client.post("/predict", json={"inputs": inputs})
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(_by_label(r.json()), fake.rows_of([expected_input])[0, :NUM_LABELS], atol=1e-6)


def test_predict_batch_of_texts_and_pairs_with_raw_scores(client, fake, texts):
    inputs = [[texts[0]], [texts[1], texts[2]], [texts[3]], ["", texts[4]]]
    sent = [one[0] if len(one) == 1 else (one[0], one[1]) for one in inputs]
    expected = fake.rows_of(sent)
    assert not np.allclose(expected[1], fake.rows_of([texts[1]])[0]), "the pair reads like its first text alone"
    for raw_scores, columns in ((False, slice(0, NUM_LABELS)), (True, slice(NUM_LABELS, None))):
        r = client.post("/predict", json={"inputs": inputs, "raw_scores": raw_scores})
        assert r.status_code == 200, r.text
        answers = r.json()
        assert len(answers) == len(inputs) and all(isinstance(answer, list) for answer in answers)
        np.testing.assert_allclose([_by_label(answer) for answer in answers], expected[:, columns], atol=1e-6)


def test_predict_refuses_an_over_long_input_unless_truncate(client, fake):
    long_text = _long_text()
    for inputs in ([["short"], [long_text]], [["short"], ["a query", long_text]]):
        error = assert_envelope(client.post("/predict", json={"inputs": inputs}), 400, "context_length_exceeded")
        assert error["param"] == "inputs" and "truncate" in error["message"]
        r = client.post("/predict", json={"inputs": inputs, "truncate": True})
        sent = [one[0] if len(one) == 1 else tuple(one) for one in inputs]
        assert r.status_code == 200, r.text
        np.testing.assert_allclose([_by_label(a) for a in r.json()], fake.rows_of(sent)[:, :NUM_LABELS], atol=1e-6)


def test_each_route_reaches_its_own_kind_of_model(client, models):
    """An embedder, a classifier and a reranker in one server: each route without `model` finds its own."""
    embedder = models[0]
    r = client.post("/v1/embeddings", json={"input": ["a text"]})
    assert r.status_code == 200 and r.json()["model"] == FAKE_MODEL
    np.testing.assert_allclose(r.json()["data"][0]["embedding"], embedder.embed(["a text"])[0], atol=1e-6)
    r = client.post("/v1/rerank", json={"query": "q", "documents": ["d"]})
    assert r.status_code == 200 and r.json()["model"] == FAKE_RERANKER
    kinds = {m["id"]: m["kind"] for m in client.get("/v1/models").json()["data"]}
    assert kinds == {FAKE_MODEL: "embedding", FAKE_CLASSIFIER: "classify", FAKE_RERANKER: "rerank"}


def test_metrics_count_classify_requests_under_the_classifier(client):
    def requests(text: str, path: str, status: int) -> float:
        return sample(text, f'rose_requests_total{{model="{FAKE_CLASSIFIER}",route="{path}",status="{status}"}}')

    before = client.get("/metrics").text
    assert client.post("/classify", json={"input": ["a", "b"]}).status_code == 200
    assert client.post("/predict", json={"inputs": [["a"], ["b", "c"]]}).status_code == 200
    assert client.post("/v1/embeddings", json={"model": FAKE_CLASSIFIER, "input": "a"}).status_code == 400
    after = client.get("/metrics").text
    for path, status in (("/classify", 200), ("/predict", 200), ("/v1/embeddings", 400)):
        assert requests(after, path, status) - requests(before, path, status) == 1, (path, status)
    inputs = f'rose_request_inputs_total{{model="{FAKE_CLASSIFIER}"}}'
    assert sample(after, inputs) - sample(before, inputs) == 4


WRONG_KIND = [
    # (name, path, body, code): the 400 names what the asked model serves
    ("a classifier asked for embeddings", "/v1/embeddings", {"model": FAKE_CLASSIFIER, "input": "a"},
     "model_is_classifier"),
    ("a classifier asked to rerank", "/v1/rerank", {"model": FAKE_CLASSIFIER, "query": "q", "documents": ["d"]},
     "model_is_classifier"),
    ("an embedder asked to classify", "/classify", {"model": FAKE_MODEL, "input": "a"}, "model_is_embedder"),
    ("a reranker asked to predict", "/predict", {"model": FAKE_RERANKER, "inputs": "a"}, "model_is_reranker"),
]


@pytest.mark.parametrize("name,path,body,code", WRONG_KIND, ids=[w[0] for w in WRONG_KIND])
def test_a_request_of_the_wrong_kind_names_what_the_model_serves(client, name, path, body, code):
    error = assert_envelope(client.post(path, json=body), 400, code)
    assert error["param"] == "model" and f"'{body['model']}'" in error["message"]


BAD = [
    # (name, path, body, status, param)
    ("input missing", "/classify", {}, 400, "input"),
    ("empty input", "/classify", {"input": []}, 400, "input"),
    ("token ids", "/classify", {"input": [1, 2, 3]}, 400, "input"),
    ("a number", "/classify", {"input": 3}, 400, "input"),
    ("too many inputs", "/classify", {"input": ["a"] * (MAX_INPUTS + 1)}, 400, "input"),
    ("truncate_prompt_tokens", "/classify", {"input": "a", "truncate_prompt_tokens": 5}, 400, "truncate_prompt_tokens"),
    ("add_special_tokens false", "/classify", {"input": "a", "add_special_tokens": False}, 400, "add_special_tokens"),
    ("use_activation not a bool", "/classify", {"input": "a", "use_activation": "no"}, 400, "use_activation"),
    ("unknown model", "/classify", {"model": "nope", "input": "a"}, 404, "model"),
    ("inputs missing", "/predict", {}, 400, "inputs"),
    ("three texts not in a batch", "/predict", {"inputs": ["a", "b", "c"]}, 400, "inputs"),
    ("a batch item of three texts", "/predict", {"inputs": [["a"], ["a", "b", "c"]]}, 400, "inputs"),
    ("a batch with a bare text", "/predict", {"inputs": [["a"], "b"]}, 400, "inputs"),
    ("an empty batch item", "/predict", {"inputs": [[]]}, 400, "inputs"),
    ("left truncation", "/predict", {"inputs": "a", "truncation_direction": "Left"}, 400, "truncation_direction"),
    ("a text of too many characters", "/predict", {"inputs": "a" * 200_001}, 400, "inputs"),
]


@pytest.mark.parametrize("name,path,body,status,param", BAD, ids=[b[0] for b in BAD])
def test_bad_requests_get_the_envelope(client, name, path, body, status, param):
    error = assert_envelope(client.post(path, json=body), status)
    assert error["param"] == param
    assert client.post("/classify", json={"input": ["one", "two"]}).status_code == 200  # nothing was harmed


def test_openapi_publishes_the_bodies_these_routes_decode(client):
    schema = client.get("/docs/openapi.json").json()
    for path, required in (("/classify", "input"), ("/v1/classify", "input"), ("/predict", "inputs")):
        body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body["required"] == [required], path
