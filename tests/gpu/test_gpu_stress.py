"""The server as a user starts it on a GPU, under concurrent load: every answer a 200, and right.

Default flags (every graph captured before serving), then --lazy-capture: a small random BERT
checkpoint and many concurrent clients whose requests vary in size and text length, so that
with lazy capture batches land in dozens of token buckets that warm-up never captured: each
is captured on its second batch while other requests' results are being waited on and read
back. Before captures ran in
thread-local mode, this load answered 500s, and kept answering them once a capture had
failed. Every vector is checked against Hugging Face in fp32 on the same weights (cosine
>= 0.999, bf16 engine), with the default front ends and with one.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from tests.conftest import ServerProcess
from tests.support.helpers import metric
from tests.gpu.test_gpu import _bert_config, _hf_bert, _hf_reference, _write_model_dir, cosines, needs_cuda

pytestmark = [needs_cuda, pytest.mark.gpu, pytest.mark.slow]

NUM_REQUESTS, NUM_CLIENTS = 400, 32
VARIANTS = {  # the defaults (on a many-core GPU machine: several front ends), and one front end capturing lazily
    "defaults": (),
    "one-front-end-lazy-capture": ("--frontend-workers", "1", "--lazy-capture"),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(model directory, word ids of a pool of texts, their fp32 reference vectors)."""
    path = tmp_path_factory.mktemp("bert-random")
    hf_model = _hf_bert(_bert_config(384, 12, layers=4))
    _write_model_dir(path, hf_model)
    rng = np.random.default_rng(0)
    # Short queries, paragraphs and long documents; the word-level tokenizer maps "w{i}" to id i + 4.
    lengths = np.concatenate([rng.integers(1, 16, 600), rng.integers(16, 120, 800), rng.integers(120, 500, 400)])
    words = [rng.integers(0, 1000, n) for n in lengths]
    seqs = [np.concatenate([[2], w + 4, [3]]).astype(np.int32) for w in words]
    return path, words, _hf_reference(hf_model, seqs, "mean")


def _requests(num_texts: int) -> list[list[int]]:
    """Each request's texts, as indexes into the pool: sizes 1-64, some all short, some all long."""
    rng = np.random.default_rng(1)
    requests = []
    for _ in range(NUM_REQUESTS):
        lo, hi = [(0, 600), (600, 1400), (1400, num_texts), (0, num_texts)][int(rng.integers(0, 4))]
        requests.append(rng.integers(lo, hi, int(rng.integers(1, 65))).tolist())
    return requests


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_default_flags_under_concurrent_load_answer_every_request_right(checkpoint, variant):
    path, words, reference = checkpoint
    texts = [" ".join(f"w{i}" for i in w) for w in words]
    requests = _requests(len(texts))
    server = ServerProcess("--model", str(path), *VARIANTS[variant], ready_timeout=600)
    try:
        def post(indexes: list[int]) -> tuple[list[int], httpx.Response]:
            body = {"input": [texts[i] for i in indexes], "model": path.name}
            return indexes, httpx.post(server.url + "/v1/embeddings", json=body, timeout=120)

        with ThreadPoolExecutor(NUM_CLIENTS) as pool:
            answers = list(pool.map(post, requests))
        failed = [(r.status_code, r.text[:200]) for _, r in answers if r.status_code != 200]
        assert not failed, f"{len(failed)} of {len(answers)} failed, e.g. {failed[:3]}\n{server.log()}"
        worst = 1.0
        for indexes, response in answers:
            vectors = np.array([d["embedding"] for d in response.json()["data"]], np.float32)
            worst = min(worst, float(cosines(vectors, reference[indexes]).min()))
        assert worst >= 0.999, worst
        exposed = httpx.get(server.url + "/metrics", timeout=10).text
        assert "\nrose_graph_capture_failures_total 0.0\n" in exposed, server.log()
        assert metric(server.url, "rose_graph_replays_total") > 0
        print(f"{variant}: {len(answers)} requests, {sum(len(i) for i in requests)} vectors, worst cosine {worst:.5f}")
    finally:
        server.stop()
