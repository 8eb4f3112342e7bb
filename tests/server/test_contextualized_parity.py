"""Late chunking (POST /v1/contextualizedembeddings, the corpus CLI's --chunks-field) against the same
computation on Hugging Face transformers' AutoModel (tests/support/late_chunking_reference.py), fp32 on the
CPU, on tiny random checkpoints saved by sentence-transformers (tests/support/st_checkpoints.py).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from rose_embed.compat.quantize import int8_tanh
from rose_embed.server.cli.main import main
from tests.conftest import ServerProcess, load_texts
from tests.support.late_chunking_reference import hf_late_chunked, sentences
from tests.support.st_checkpoints import bert_tokenizer, load_reference, pplx_config, qwen_tokenizer, save_architecture, \
    save_hf_model, save_st_model
from tests.support.qwen3_checkpoints import tiny_config

pytestmark = pytest.mark.slow  # real models, transformers and a server process

MIN_COSINE = 0.99999
MAX_SEQ_LEN = 128  # small, so that documents of the workload need several windows


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def documents() -> list[list[str]]:
    """Documents of 1 to 30-odd chunks: some fit one window, some need several; one chunk is
    longer than a window by itself."""
    texts = load_texts(60)
    docs = [sentences(" ".join(texts[lo:hi])) for lo, hi in ((0, 3), (3, 7), (10, 16), (30, 40))]  # 1 to 3 windows
    docs.append(["a single short chunk"])
    docs.append(["A lead sentence.", " ".join(texts[20:30]), "A closing sentence."])  # a chunk of 306 tokens
    return docs


@pytest.fixture(scope="module")
def bert_path(tmp_path_factory) -> Path:
    """BERT, mean pooling, a Dense to 24 and a Normalize; sentence-transformers' max_seq_length 128."""
    from sentence_transformers.sentence_transformer import modules
    from transformers import BertConfig

    def config(vocab_size: int):
        return BertConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, max_position_embeddings=512)

    return save_architecture(tmp_path_factory.mktemp("late") / "bert-mean", bert_tokenizer, config, pooling="mean",
                             max_seq_length=MAX_SEQ_LEN,
                             after=[lambda width: modules.Dense(width, 24), modules.Normalize()])


def _decode(embedding: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(embedding), dtype=dtype)


def _vectors(body: dict, dtype: str = "<f4") -> np.ndarray:
    return np.stack([_decode(chunk["embedding"], dtype) for document in body["data"] for chunk in document["data"]])


@pytest.fixture(scope="module")
def server(bert_path):
    proc = ServerProcess("--dtype", "float32", "--model", str(bert_path), "--max-batch-tokens", "1024", "--max-batch-seqs", "64")
    yield proc
    proc.stop()


def test_server_late_chunks_as_transformers_does(server, bert_path, documents):
    reference, num_tokens, num_windows = hf_late_chunked(bert_path, documents, MAX_SEQ_LEN)
    assert num_windows == [1, 2, 2, 2, 1, 3]  # what the documents are for
    r = httpx.post(server.url + "/v1/contextualizedembeddings", timeout=120,
                   json={"input": documents, "encoding_format": "base64"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [len(d["data"]) for d in body["data"]] == [len(d) for d in documents]
    assert [d["index"] for d in body["data"]] == list(range(len(documents)))
    ours = _vectors(body)
    assert ours.shape == reference.shape == (sum(map(len, documents)), 24)
    cosines = _cosines(ours, reference)
    assert cosines.min() >= MIN_COSINE, cosines
    assert body["usage"] == {"prompt_tokens": num_tokens, "total_tokens": num_tokens}
    # In context, not alone: a long document's chunks through /v1/embeddings give other vectors.
    alone = httpx.post(server.url + "/v1/embeddings", timeout=120,
                       json={"input": documents[2], "encoding_format": "base64"}).json()
    alone = np.stack([_decode(d["embedding"], "<f4") for d in alone["data"]])
    first = sum(map(len, documents[:2]))
    assert np.median(_cosines(alone, ours[first: first + len(documents[2])])) < 0.999


def test_chunk_mode_splits_a_chunk_past_the_limit_across_windows(server, bert_path, documents):
    reference, num_tokens, _ = hf_late_chunked(bert_path, documents[-1:], MAX_SEQ_LEN, mode="chunk")
    r = httpx.post(server.url + "/v1/contextualizedembeddings", timeout=120,
                   json={"inputs": documents[-1:], "output_dtype": "float", "encoding_format": "base64",
                         "long_inputs": "chunk"})
    assert r.status_code == 200, r.text
    assert _cosines(_vectors(r.json()), reference).min() >= MIN_COSINE
    assert r.json()["usage"]["total_tokens"] == num_tokens
    truncated, _, _ = hf_late_chunked(bert_path, documents[-1:], MAX_SEQ_LEN)
    assert _cosines(truncated, reference)[1] < 0.999  # what the modes are for
    error = httpx.post(server.url + "/v1/contextualizedembeddings", timeout=120,
                       json={"input": documents[-1:], "long_inputs": "error"})
    assert error.status_code == 400 and "maximum context length is 128 tokens" in error.json()["error"]["message"]


def test_ordinary_embeddings_beside_contextualized_ones_still_match_sentence_transformers(server, bert_path,
                                                                                          documents):
    """Both routes at once, so that ordinary inputs and late-chunked windows share batches."""
    from concurrent.futures import ThreadPoolExecutor

    texts = load_texts(40)
    expected = load_reference(bert_path).encode(texts, convert_to_numpy=True)
    reference, _, _ = hf_late_chunked(bert_path, documents, MAX_SEQ_LEN)

    def ordinary(lo: int) -> np.ndarray:
        r = httpx.post(server.url + "/v1/embeddings", json={"input": texts[lo: lo + 8]}, timeout=120)
        assert r.status_code == 200, r.text
        return np.array([d["embedding"] for d in r.json()["data"]])

    def contextual(_: int) -> np.ndarray:
        r = httpx.post(server.url + "/v1/contextualizedembeddings", json={"input": documents}, timeout=120)
        assert r.status_code == 200, r.text
        return np.array([c["embedding"] for d in r.json()["data"] for c in d["data"]])

    with ThreadPoolExecutor(6) as pool:
        ordinaries = pool.map(ordinary, range(0, len(texts), 8))
        contextuals = pool.map(contextual, range(4))
        ours = np.concatenate(list(ordinaries))
        for vectors in contextuals:
            assert _cosines(vectors, reference).min() >= MIN_COSINE
    assert _cosines(ours, expected).min() >= MIN_COSINE


def test_corpus_cli_writes_one_row_per_chunk_as_the_server_embeds_it(server, bert_path, documents, tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"id": f"doc-{i}", "chunks": d}) + "\n" for i, d in enumerate(documents)),
                      encoding="utf-8")
    output = tmp_path / "chunks.parquet"
    main(["embed", str(source), "-o", str(output), "--dtype", "float32", "--model", str(bert_path), "--chunks-field", "chunks",
          "--id-field", "id", "--chunk-size", "2", "--max-batch-tokens", "512", "--quiet"])
    table = pq.read_table(output)
    assert table.column_names == ["id", "chunk", "embedding"]
    assert table.column("id").to_pylist() == [f"doc-{i}" for i, d in enumerate(documents) for _ in d]
    assert table.column("chunk").to_pylist() == [j for d in documents for j in range(len(d))]
    ours = np.array(table.column("embedding").to_pylist())
    reference, _, _ = hf_late_chunked(bert_path, documents, MAX_SEQ_LEN)
    assert _cosines(ours, reference).min() >= MIN_COSINE


def test_pplx_style_model_late_chunks_with_its_int8_default(tmp_path):
    """A bidirectional Qwen3 under pplx-embed's model_type (quantising, mean pooling; the tokenizer
    only appends <|endoftext|>), in process: the default encoding is base64_int8, Perplexity's."""
    from rose_embed.engine.contract.config import EngineConfig
    from rose_embed.engine.rose.engine import Engine
    from tests.support.fake_engine import serve
    from tests.support.qwen3_checkpoints import MAX_SEQ_LEN as QWEN_LIMIT

    hf = tmp_path / "hf"
    hf.mkdir()
    save_hf_model(hf, pplx_config(hf, tiny_config(qwen_tokenizer(hf))), trust_remote_code=True)
    path = save_st_model(tmp_path / "st", hf, pooling="mean", trust_remote_code=True, max_seq_length=MAX_SEQ_LEN)
    engine = Engine(EngineConfig(dtype="float32", model=str(path), device="cpu", max_batch_tokens=max(1024, QWEN_LIMIT)))
    assert (engine.spec.is_causal, engine.spec.quantization, engine.tokenizer.wrapping()[0]) == (False, "tanh", ())
    documents = [sentences(t) for t in load_texts(12)[8:12]]
    # The model's raw pooled vectors (no Normalize module): what int8 = round(127 tanh(x)) reads.
    reference, _, _ = hf_late_chunked(path, documents, MAX_SEQ_LEN, trust_remote_code=True)
    with serve(engine) as client:
        r = client.post("/v1/contextualizedembeddings", json={"input": documents})
        assert r.status_code == 200, r.text
        int8 = _vectors(r.json(), "i1").astype(int)
        floats = _vectors(client.post("/v1/contextualizedembeddings",
                                      json={"input": documents, "encoding_format": "base64"}).json())
    assert _cosines(floats, reference).min() >= MIN_COSINE
    expected = int8_tanh(reference.astype(np.float32)).astype(int)
    assert np.abs(int8 - expected).max() <= 1 and (int8 == expected).mean() > 0.99
